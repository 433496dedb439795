//! The datagrams the kernel dropped for a socket because its receive buffer was full.
//!
//! A UDP sender cannot be slowed down: while the graph is full the source waits, packets
//! wait in the socket's receive buffer, and past its size the kernel drops them. Linux
//! counts those drops per socket (the `drops` column of `/proc/net/udp` and
//! `/proc/net/udp6`); the source shows the count as its `osc_kernel_drops` gauge, so that
//! the one queue it does not hold itself is counted too. Elsewhere there is no count.

/// Reads the kernel's drop counter of a UDP socket; `None` where it cannot be read.
#[cfg(target_os = "linux")]
pub fn kernel_drops(socket: &impl std::os::fd::AsRawFd) -> Option<u64> {
    let fd = socket.as_raw_fd();
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let inode = link
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .to_owned();
    ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .find_map(|table| drops_of(&std::fs::read_to_string(table).ok()?, &inode))
}

/// Elsewhere: no count.
#[cfg(not(target_os = "linux"))]
pub fn kernel_drops<S>(_socket: &S) -> Option<u64> {
    None
}

/// The `drops` column of the row of socket `inode` in a `/proc/net/udp` table.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn drops_of(table: &str, inode: &str) -> Option<u64> {
    table.lines().skip(1).find_map(|row| {
        let columns: Vec<&str> = row.split_whitespace().collect();
        (columns.get(9) == Some(&inode)).then(|| columns.last()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drops_column_of_the_socket_row() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
          338: 0100007F:1F40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17\n\
          339: 00000000:0044 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 0\n";
        assert_eq!(drops_of(table, "4242"), Some(17));
        assert_eq!(drops_of(table, "99"), Some(0));
        assert_eq!(drops_of(table, "7"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_socket_has_a_count() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(kernel_drops(&socket), Some(0));
    }
}
