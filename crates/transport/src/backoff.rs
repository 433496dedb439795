//! The reconnect policy every transport uses: capped exponential backoff with jitter, as a
//! pure value (tests check the delay sequence without sleeping).

use std::time::Duration;

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{Diagnostic, Options};

/// Delays between reconnection attempts: attempt `n` (1-based, counted since the last
/// success) waits `min(initial·2^(n−1), max)`, plus up to a quarter of that as jitter
/// so that many clients of one restarted peer do not reconnect in lockstep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    max_attempts: Option<u32>,
    attempts: u32,
}

impl Backoff {
    /// A policy starting at `initial`, capped at `max`, giving up after `max_attempts`
    /// failed attempts in a row (`None`: never).
    pub fn new(initial: Duration, max: Duration, max_attempts: Option<u32>) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            max_attempts,
            attempts: 0,
        }
    }

    /// Records a failed attempt and returns the delay before the next one (without
    /// jitter), or `None` when the attempts are used up.
    pub fn next_delay(&mut self) -> Option<Duration> {
        if self.max_attempts.is_some_and(|max| self.attempts >= max) {
            return None;
        }
        self.attempts = self.attempts.saturating_add(1);
        let exponent = (self.attempts - 1).min(31);
        let delay = self.initial.saturating_mul(1u32 << exponent);
        Some(delay.min(self.max))
    }

    /// [`Backoff::next_delay`] with jitter ([`with_jitter`]).
    pub fn next_jittered(&mut self) -> Option<Duration> {
        self.next_delay().map(|d| with_jitter(d, jitter_unit()))
    }

    /// Changes the first delay (an SSE server's `retry:`), clamped to the cap: a peer
    /// cannot push the delay past the configured `backoff_max_ms`.
    pub fn set_initial(&mut self, initial: Duration) {
        self.initial = initial.clamp(Duration::from_millis(1), self.max);
    }

    /// How many attempts failed since the last success.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// A connection succeeded: the next failure starts from `initial` again.
    pub fn reset(&mut self) {
        self.attempts = 0;
    }
}

/// Checks a transport's `backoff_initial_ms` and `backoff_max_ms` options: the first
/// delay at least 1 ms, the cap at least the first delay. The error points at the key.
pub fn check_delays(options: &Options<'_>, initial_ms: u64, max_ms: u64) -> Result<(), Diagnostic> {
    options.check_range("backoff_initial_ms", initial_ms, 1..=MAX_DURATION_MS)?;
    options.check_range("backoff_max_ms", max_ms, 1..=MAX_DURATION_MS)?;
    if max_ms < initial_ms {
        return Err(options.error_at("backoff_max_ms", "must be at least `backoff_initial_ms`"));
    }
    Ok(())
}

/// The health detail of a source waiting to reconnect: `retrying in 4 s: <reason>`.
pub fn retry_detail(delay: Duration, reason: &str) -> String {
    let secs = delay.as_secs_f64();
    let shown = if secs < 1.0 {
        format!("{secs:.1}")
    } else {
        format!("{}", secs.ceil() as u64)
    };
    format!("retrying in {shown} s: {reason}")
}

/// `delay` plus jitter: `unit` in `[0, 1)` picks a point in `[delay, delay·1.25)`.
pub fn with_jitter(delay: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    };
    delay + delay.mul_f64(unit * 0.25)
}

/// A fresh number in `[0, 1)` for [`with_jitter`], from the standard library's randomly
/// seeded hasher (no random-number crate for one number per reconnect).
pub fn jitter_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_retry_is_clamped_to_the_cap() {
        let mut b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(30_000),
            None,
        );
        b.set_initial(Duration::from_millis(99_999_999_999));
        assert_eq!(b.next_delay(), Some(Duration::from_millis(30_000)));
        b.set_initial(Duration::from_millis(500));
        b.reset();
        assert_eq!(b.next_delay(), Some(Duration::from_millis(500)));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_up_to_the_cap() {
        let mut b = Backoff::new(ms(1000), ms(30_000), None);
        let delays: Vec<u64> = (0..8)
            .map(|_| b.next_delay().map(|d| d.as_millis() as u64).unwrap_or(0))
            .collect();
        assert_eq!(
            delays,
            [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]
        );
        assert_eq!(b.attempts(), 8);
    }

    #[test]
    fn gives_up_after_max_attempts_and_resets_on_success() {
        let mut b = Backoff::new(ms(100), ms(1000), Some(3));
        assert_eq!(b.next_delay(), Some(ms(100)));
        assert_eq!(b.next_delay(), Some(ms(200)));
        assert_eq!(b.next_delay(), Some(ms(400)));
        assert_eq!(b.next_delay(), None);
        assert_eq!(b.next_delay(), None);
        b.reset();
        assert_eq!(b.next_delay(), Some(ms(100)));
    }

    #[test]
    fn unlimited_never_overflows() {
        let mut b = Backoff::new(ms(1000), ms(30_000), None);
        for _ in 0..100 {
            assert!(b.next_delay().is_some_and(|d| d <= ms(30_000)));
        }
    }

    #[test]
    fn a_max_below_initial_is_raised() {
        let mut b = Backoff::new(ms(500), ms(100), None);
        assert_eq!(b.next_delay(), Some(ms(500)));
        assert_eq!(b.next_delay(), Some(ms(500)));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        assert_eq!(with_jitter(ms(1000), 0.0), ms(1000));
        assert_eq!(with_jitter(ms(1000), 0.5), ms(1125));
        assert!(with_jitter(ms(1000), 0.999) < ms(1250));
        assert_eq!(with_jitter(ms(1000), f64::NAN), ms(1000));
        assert_eq!(with_jitter(ms(1000), 7.0), ms(1250));
        for _ in 0..100 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
