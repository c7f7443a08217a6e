//! Per-user sliding-window rate limit with a cooldown.
//!
//! A user may send `max_messages` answered messages per `window`; the message that would exceed
//! it starts a cooldown during which everything from that user is dropped. The first rejection
//! of a cooldown is reported as [`RateDecision::StartedCooldown`] so the caller can tell the
//! user once instead of on every message.

use crate::sync::Recover;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The limiter's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    /// Go ahead.
    Allowed,
    /// Over the limit: a cooldown of this length starts now.
    StartedCooldown(Duration),
    /// Still cooling down.
    InCooldown,
}

#[derive(Debug, Default)]
struct UserWindow {
    hits: VecDeque<Instant>,
    cooldown_until: Option<Instant>,
}

/// Where a user stands with the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    /// Messages counted in the current window.
    pub recent: usize,
    /// Messages allowed per window.
    pub max: usize,
    /// How long their cooldown still lasts, when they are in one.
    pub cooling_for: Option<Duration>,
}

/// The limiter (keyed by `platform:userId`).
#[derive(Debug)]
pub struct UserRateLimiter {
    max: usize,
    window: Duration,
    cooldown: Duration,
    users: Mutex<HashMap<String, UserWindow>>,
}

impl UserRateLimiter {
    /// A limiter allowing `max` messages per `window`, then `cooldown` of silence.
    pub fn new(max: u32, window: Duration, cooldown: Duration) -> Self {
        Self {
            max: max.max(1) as usize,
            window,
            cooldown,
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Records a message from `key` at `now` and decides.
    pub fn check(&self, key: &str, now: Instant) -> RateDecision {
        let mut users = self.users.locked();
        let user = users.entry(key.to_owned()).or_default();
        if let Some(until) = user.cooldown_until {
            if now < until {
                return RateDecision::InCooldown;
            }
            user.cooldown_until = None;
            user.hits.clear();
        }
        while user
            .hits
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            user.hits.pop_front();
        }
        if user.hits.len() >= self.max {
            user.cooldown_until = Some(now + self.cooldown);
            return RateDecision::StartedCooldown(self.cooldown);
        }
        user.hits.push_back(now);
        RateDecision::Allowed
    }

    /// Where `key` stands at `now`, without counting a message.
    pub fn state(&self, key: &str, now: Instant) -> RateState {
        let users = self.users.locked();
        let user = users.get(key);
        let cooling_for = user
            .and_then(|u| u.cooldown_until)
            .filter(|until| *until > now)
            .map(|until| until - now);
        let recent = user.map_or(0, |u| {
            u.hits
                .iter()
                .filter(|t| now.duration_since(**t) < self.window)
                .count()
        });
        RateState {
            recent,
            max: self.max,
            cooling_for,
        }
    }

    /// Forgets users with no recent activity (call periodically).
    pub fn prune(&self, now: Instant) {
        let mut users = self.users.locked();
        users.retain(|_, u| {
            u.cooldown_until.is_some_and(|t| t > now)
                || u.hits
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < self.window)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_reads_without_counting() {
        let l = UserRateLimiter::new(2, Duration::from_secs(60), Duration::from_secs(300));
        let t0 = Instant::now();
        assert_eq!(l.state("u", t0).recent, 0);
        l.check("u", t0);
        let state = l.state("u", t0 + Duration::from_secs(1));
        assert_eq!((state.recent, state.max, state.cooling_for), (1, 2, None));
        assert_eq!(l.state("u", t0 + Duration::from_secs(2)).recent, 1);
        l.check("u", t0);
        l.check("u", t0);
        let cooling = l.state("u", t0 + Duration::from_secs(100)).cooling_for;
        assert_eq!(cooling, Some(Duration::from_secs(200)));
        assert_eq!(
            l.state("u", t0 + Duration::from_secs(400)).cooling_for,
            None
        );
    }

    #[test]
    fn window_then_cooldown_then_recovery() {
        let l = UserRateLimiter::new(3, Duration::from_secs(60), Duration::from_secs(300));
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(
                l.check("u", t0 + Duration::from_secs(i)),
                RateDecision::Allowed
            );
        }
        assert_eq!(
            l.check("u", t0 + Duration::from_secs(4)),
            RateDecision::StartedCooldown(Duration::from_secs(300))
        );
        assert_eq!(
            l.check("u", t0 + Duration::from_secs(100)),
            RateDecision::InCooldown
        );
        // Other users are unaffected.
        assert_eq!(
            l.check("v", t0 + Duration::from_secs(100)),
            RateDecision::Allowed
        );
        assert_eq!(
            l.check("u", t0 + Duration::from_secs(305)),
            RateDecision::Allowed
        );
    }

    #[test]
    fn the_window_slides() {
        let l = UserRateLimiter::new(2, Duration::from_secs(10), Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(l.check("u", t0), RateDecision::Allowed);
        assert_eq!(
            l.check("u", t0 + Duration::from_secs(5)),
            RateDecision::Allowed
        );
        assert_eq!(
            l.check("u", t0 + Duration::from_secs(11)),
            RateDecision::Allowed
        );
        assert!(matches!(
            l.check("u", t0 + Duration::from_secs(12)),
            RateDecision::StartedCooldown(_)
        ));
        l.prune(t0 + Duration::from_secs(1000));
        assert!(l.users.lock().unwrap().is_empty());
    }
}
