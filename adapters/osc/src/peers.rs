//! `allowed_peers`: the addresses and networks a source takes packets from.

use std::net::IpAddr;

/// One entry of `allowed_peers`: an address, or a network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

/// Why an `allowed_peers` entry cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// Not an IP address (host names are not resolved: a peer is known by its address).
    #[error("`{0}` is not an IP address or a network like `192.168.1.0/24`")]
    NotAnAddress(String),
    /// A prefix length past the address's bits.
    #[error("`{text}`: the prefix length must be at most {max}")]
    BadPrefix {
        /// The entry.
        text: String,
        /// 32 or 128.
        max: u8,
    },
}

impl Network {
    /// Reads `192.168.1.23`, `192.168.1.0/24`, `::1` or `fd00::/8`.
    pub fn parse(text: &str) -> Result<Network, NetworkError> {
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| NetworkError::NotAnAddress(text.to_owned()))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let p: u8 = p
                    .parse()
                    .map_err(|_| NetworkError::NotAnAddress(text.to_owned()))?;
                if p > max {
                    return Err(NetworkError::BadPrefix {
                        text: text.to_owned(),
                        max,
                    });
                }
                p
            }
        };
        Ok(Network { addr, prefix })
    }

    /// Whether `ip` is in this network (an IPv4 peer seen on an IPv6 socket as
    /// `::ffff:a.b.c.d` is its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The peers a source takes packets from; `None` in a source: anyone who can reach its
/// (loopback) address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedPeers(pub Vec<Network>);

impl AllowedPeers {
    /// Whether `ip` may send.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_and_networks() {
        let one = Network::parse("192.168.1.23").unwrap();
        assert!(one.contains(ip("192.168.1.23")));
        assert!(!one.contains(ip("192.168.1.24")));
        assert!(one.contains(ip("::ffff:192.168.1.23")), "IPv4-mapped");
        let lan = Network::parse("192.168.1.0/24").unwrap();
        assert!(lan.contains(ip("192.168.1.200")));
        assert!(!lan.contains(ip("192.168.2.1")));
        assert!(!lan.contains(ip("::1")));
        let any = Network::parse("0.0.0.0/0").unwrap();
        assert!(any.contains(ip("8.8.8.8")));
        let v6 = Network::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        assert!(Network::parse("::1").unwrap().contains(ip("::1")));
        assert_eq!(lan.to_string(), "192.168.1.0/24");
        let peers = AllowedPeers(vec![one, v6]);
        assert!(peers.allows(ip("fd00::5")));
        assert!(!peers.allows(ip("10.0.0.1")));
    }

    #[test]
    fn bad_entries_are_named() {
        assert_eq!(
            Network::parse("phone.local"),
            Err(NetworkError::NotAnAddress("phone.local".into()))
        );
        assert_eq!(
            Network::parse("10.0.0.0/33").unwrap_err().to_string(),
            "`10.0.0.0/33`: the prefix length must be at most 32"
        );
        assert!(Network::parse("10.0.0.0/x").is_err());
        assert!(Network::parse("::/129").is_err());
    }
}
