//! Reconnect delays: capped exponential backoff with jitter, reset on success (the same
//! API as the other adapters' copies, to be consolidated in `patchbay-graph`).

use std::time::Duration;

/// Delay before attempt `n` (1-based) is `min(initial·2^(n−1), max)`, scaled by a jitter
/// factor in `[0.5, 1.0]` so that many clients do not reconnect in lockstep.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
    seed: u64,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
        Backoff::with_seed(initial, max, seed)
    }

    /// A backoff with a fixed jitter seed (deterministic, for tests).
    pub fn with_seed(initial: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            failures: 0,
            seed: seed | 1,
        }
    }

    /// Changes the first delay (an SSE server's `retry:`), keeping the cap above it.
    pub fn set_initial(&mut self, initial: Duration) {
        self.initial = initial;
        self.max = self.max.max(initial);
    }

    /// The delay before attempt `n` (1-based), without jitter.
    pub fn base_delay(&self, n: u32) -> Duration {
        let shift = n.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1u32 << shift)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// Counts one more failure and returns how long to wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let unit = self.next_unit();
        jittered(self.base_delay(self.failures), unit)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether `max_attempts` failures in a row have happened (`None`: never).
    pub fn exhausted(&self, max_attempts: Option<u32>) -> bool {
        max_attempts.is_some_and(|max| self.failures >= max)
    }

    /// A connection succeeded: the next failure starts from `initial` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// xorshift64: a uniform number in `[0, 1)`.
    fn next_unit(&mut self) -> f64 {
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `delay` scaled into `[delay/2, delay]` by `unit` in `[0, 1)`.
pub fn jittered(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

/// "retrying in N s" (rounded up, at least 1 s shown as a fraction when below).
pub fn retry_detail(delay: Duration, reason: &str) -> String {
    let secs = delay.as_secs_f64();
    let shown = if secs < 1.0 {
        format!("{secs:.1}")
    } else {
        format!("{}", secs.ceil() as u64)
    };
    format!("retrying in {shown} s: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(1000), Duration::from_secs(30));
        let delays: Vec<u64> = (1..=8)
            .map(|n| b.base_delay(n).as_millis() as u64)
            .collect();
        assert_eq!(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        assert_eq!(b.base_delay(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_half_to_full_and_reset_restarts() {
        let mut b = Backoff::with_seed(Duration::from_secs(1), Duration::from_secs(30), 7);
        for n in 1..=12u32 {
            let d = b.next_delay();
            let base = b.base_delay(n);
            assert!(d >= base / 2 && d <= base, "attempt {n}: {d:?} vs {base:?}");
        }
        assert_eq!(b.failures(), 12);
        assert!(b.exhausted(Some(12)));
        assert!(!b.exhausted(Some(13)));
        assert!(!b.exhausted(None));
        b.reset();
        assert_eq!(b.failures(), 0);
        assert!(b.next_delay() <= Duration::from_secs(1));
        assert_eq!(
            jittered(Duration::from_secs(2), 0.0),
            Duration::from_secs(1)
        );
        assert_eq!(
            jittered(Duration::from_secs(2), 1.0),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn same_seed_same_delays_and_retry_changes_the_start() {
        let mut a = Backoff::with_seed(Duration::from_millis(100), Duration::from_secs(1), 42);
        let mut b = a.clone();
        let da: Vec<Duration> = (0..5).map(|_| a.next_delay()).collect();
        let db: Vec<Duration> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(da, db);
        let mut c = Backoff::with_seed(Duration::from_secs(1), Duration::from_secs(2), 1);
        c.set_initial(Duration::from_secs(5));
        assert_eq!(c.base_delay(1), Duration::from_secs(5));
        assert_eq!(c.base_delay(3), Duration::from_secs(5));
    }

    #[test]
    fn details_say_when() {
        assert_eq!(
            retry_detail(Duration::from_millis(2500), "closed"),
            "retrying in 3 s: closed"
        );
        assert_eq!(
            retry_detail(Duration::from_millis(200), "x"),
            "retrying in 0.2 s: x"
        );
    }
}
