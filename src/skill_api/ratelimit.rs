//! Per-(skill, user) rate limiting from a manifest's `rate_limit`.
//!
//! Each key has a sliding-window log (at most `max_requests` calls in any `window_ms`) and a
//! token bucket (capacity `burst`, default `max_requests`, refilled at `max_requests` per window)
//! that paces bursts. A call is admitted when both allow it; otherwise the caller learns exactly
//! how long to wait. Idle keys are dropped by [`RateLimiter::prune`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::handler::RateLimit;
use crate::sync::lock;

struct Bucket {
    hits: VecDeque<Instant>,
    tokens: f64,
    last_refill: Instant,
    /// When this key can be forgotten: the window has passed and the bucket is full again.
    idle_after: Instant,
}

/// The shared rate limiter. Cloning shares it.
#[derive(Clone, Default)]
pub struct RateLimiter {
    buckets: Arc<Mutex<HashMap<String, Bucket>>>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("keys", &self.len())
            .finish()
    }
}

impl RateLimiter {
    /// An empty limiter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits one call of `skill` by the user (`platform`, `user_id`) under `spec`, or returns
    /// how long until a call would be admitted. A rejected call does not consume capacity.
    pub fn check(
        &self,
        skill: &str,
        platform: &str,
        user_id: &str,
        spec: &RateLimit,
    ) -> Result<(), Duration> {
        let now = Instant::now();
        let window = Duration::from_millis(spec.window_ms.max(1));
        let max = spec.max_requests.max(1);
        let capacity = f64::from(spec.burst.unwrap_or(max).max(1));
        let rate_per_sec = f64::from(max) / window.as_secs_f64();
        let key = format!("{skill}\n{platform}\n{user_id}");

        let mut buckets = lock(&self.buckets);
        let bucket = buckets.entry(key).or_insert_with(|| Bucket {
            hits: VecDeque::new(),
            tokens: capacity,
            last_refill: now,
            idle_after: now,
        });
        while bucket
            .hits
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= window)
        {
            bucket.hits.pop_front();
        }
        let elapsed = now
            .saturating_duration_since(bucket.last_refill)
            .as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate_per_sec).min(capacity);
        bucket.last_refill = now;

        let mut wait = Duration::ZERO;
        if bucket.hits.len() >= max as usize
            && let Some(oldest) = bucket.hits.front()
        {
            wait = wait.max((*oldest + window).saturating_duration_since(now));
        }
        if bucket.tokens < 1.0 {
            wait = wait.max(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / rate_per_sec,
            ));
        }
        if !wait.is_zero() {
            return Err(wait.max(Duration::from_millis(1)));
        }
        bucket.hits.push_back(now);
        bucket.tokens -= 1.0;
        let refill_time = Duration::from_secs_f64(capacity / rate_per_sec);
        bucket.idle_after = now + window.max(refill_time);
        Ok(())
    }

    /// Forgets keys that are idle (their state equals a fresh key's); returns how many.
    pub fn prune(&self) -> usize {
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        let before = buckets.len();
        buckets.retain(|_, b| b.idle_after > now);
        before - buckets.len()
    }

    /// Number of tracked keys.
    pub fn len(&self) -> usize {
        lock(&self.buckets).len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(window_ms: u64, max_requests: u32, burst: Option<u32>) -> RateLimit {
        RateLimit {
            window_ms,
            max_requests,
            burst,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn window_cap_applies_per_skill_and_user() {
        let rl = RateLimiter::new();
        let s = spec(10_000, 2, None);
        assert!(rl.check("a", "discord", "u1", &s).is_ok());
        assert!(rl.check("a", "discord", "u1", &s).is_ok());
        let wait = rl
            .check("a", "discord", "u1", &s)
            .expect_err("third call limited");
        assert!(
            wait > Duration::from_secs(4) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        assert!(rl.check("a", "discord", "u2", &s).is_ok(), "other user");
        assert!(rl.check("b", "discord", "u1", &s).is_ok(), "other skill");
        assert!(rl.check("a", "misskey", "u1", &s).is_ok(), "other platform");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(rl.check("a", "discord", "u1", &s).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn burst_paces_back_to_back_calls() {
        let rl = RateLimiter::new();
        let s = spec(60_000, 30, Some(2)); // one token per 2 s, two back to back
        assert!(rl.check("a", "p", "u", &s).is_ok());
        assert!(rl.check("a", "p", "u", &s).is_ok());
        let wait = rl.check("a", "p", "u", &s).expect_err("burst used up");
        assert!(
            wait <= Duration::from_secs(2) && wait > Duration::from_millis(1900),
            "{wait:?}"
        );
        tokio::time::advance(wait).await;
        assert!(rl.check("a", "p", "u", &s).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_pruned() {
        let rl = RateLimiter::new();
        let s = spec(1_000, 5, None);
        assert!(rl.check("a", "p", "u", &s).is_ok());
        assert_eq!(rl.prune(), 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(rl.prune(), 1);
        assert!(rl.is_empty());
    }
}
