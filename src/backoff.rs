//! Exponential back-off, the one schedule of the daemon's retries: Misskey's REST client (429
//! retries) and streaming connection (reconnects) with "equal jitter", and, by its ceiling
//! alone, Discord's 429 retries without a hint, the embedding job's retries and a reminder's
//! next delivery attempt.
//!
//! Attempt `n` (from 0) has a ceiling of `initial × 2ⁿ`, capped at `max`; the delay is half the
//! ceiling plus a random share of the other half, so retries spread out but never come sooner
//! than half the ceiling.

use std::time::Duration;

/// An exponential back-off schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first delay.
    pub initial: Duration,
    /// Largest ceiling.
    pub max: Duration,
}

impl Backoff {
    /// A schedule from `initial` up to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max }
    }

    /// The ceiling of attempt `attempt` (0-based): `initial × 2^attempt`, at most `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.min(20);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay for `attempt` with `jitter` in `[0, 1]` (clamped): half the ceiling plus
    /// `jitter` times the other half.
    pub fn delay_with(&self, attempt: u32, jitter: f64) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// The delay for `attempt` with a random jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with(attempt, rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let ceilings: Vec<u64> = (0..8).map(|n| backoff.ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_between_half_and_the_ceiling() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(backoff.delay_with(2, 0.0), Duration::from_secs(2));
        assert_eq!(backoff.delay_with(2, 1.0), Duration::from_secs(4));
        assert_eq!(backoff.delay_with(2, 7.0), Duration::from_secs(4));
        assert_eq!(backoff.delay_with(0, 0.5), Duration::from_millis(750));
        for attempt in 0..10 {
            let delay = backoff.delay(attempt);
            let ceiling = backoff.ceiling(attempt);
            assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
        }
    }
}
