//! Request de-duplication: agents retry, and a retried `send-reply` must not post
//! twice.
//!
//! The key is skill + session + canonical JSON of the parameters (object keys sorted). The first
//! caller of a key becomes the *leader* and runs the call; identical calls arriving while it runs
//! *join* it and receive the same outcome; identical calls arriving within `window` after it
//! finished get the *cached* outcome. 401/403-class outcomes are handed to joiners but never
//! stored. Expired entries are pruned on use (at most once per window) and by
//! [`DedupCache::prune`]; the number of entries is capped, and beyond the cap calls bypass the
//! cache rather than grow memory.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::error::SkillError;
use crate::session::SessionId;
use crate::sync::lock;

/// The outcome of one executed call, shared between the leader, joiners and the cache.
pub type SharedOutcome = Arc<Result<Value, SkillError>>;

/// Default cap on live entries.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;

enum Slot {
    InFlight {
        tx: watch::Sender<Option<SharedOutcome>>,
        generation: u64,
    },
    Ready {
        outcome: SharedOutcome,
        expires_at: Instant,
    },
}

struct State {
    entries: HashMap<String, Slot>,
    next_generation: u64,
    next_prune: Instant,
}

struct Inner {
    state: Mutex<State>,
    window: Duration,
    max_entries: usize,
}

/// The de-duplication cache. Cloning shares it.
#[derive(Clone)]
pub struct DedupCache {
    inner: Arc<Inner>,
}

impl fmt::Debug for DedupCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupCache")
            .field("window", &self.inner.window)
            .field("entries", &self.len())
            .finish()
    }
}

/// What [`DedupCache::claim`] tells the caller to do.
#[derive(Debug)]
pub enum Claim {
    /// Run the call, then hand the outcome to [`LeaderGuard::complete`].
    Leader(LeaderGuard),
    /// An identical call is running: wait for its outcome.
    Join(Joiner),
    /// An identical call finished within the window: here is its outcome.
    Cached(SharedOutcome),
    /// The cache is full: run the call without de-duplication.
    Bypass,
}

/// Held by the caller that runs a call. Dropping it without [`complete`](Self::complete)
/// (cancellation, panic) removes the entry so joiners retry instead of waiting forever.
pub struct LeaderGuard {
    cache: DedupCache,
    key: String,
    generation: u64,
    done: bool,
}

impl fmt::Debug for LeaderGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderGuard")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// Waits for the outcome of an identical in-flight call.
#[derive(Debug)]
pub struct Joiner {
    rx: watch::Receiver<Option<SharedOutcome>>,
}

impl Joiner {
    /// The leader's outcome, or `None` when the leader gave up (claim again).
    pub async fn wait(mut self) -> Option<SharedOutcome> {
        let result = self.rx.wait_for(Option::is_some).await;
        result.ok().and_then(|value| value.clone())
    }
}

impl DedupCache {
    /// A cache sharing outcomes for `window` after completion, with at most `max_entries` live
    /// entries.
    pub fn new(window: Duration, max_entries: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    entries: HashMap::new(),
                    next_generation: 0,
                    next_prune: Instant::now(),
                }),
                window,
                max_entries,
            }),
        }
    }

    /// The de-duplication key of a call: the same call in another turn of a session whose
    /// agent is kept across turns is a new call.
    pub fn key(
        skill: &str,
        session_id: &SessionId,
        turn: u64,
        params: &Map<String, Value>,
    ) -> String {
        let mut key = format!("{skill}\n{session_id}\n{turn}\n");
        write_object(params, &mut key);
        key
    }

    /// Claims `key`: become its leader, join the in-flight call, or take the cached outcome.
    pub fn claim(&self, key: String) -> Claim {
        let now = Instant::now();
        let mut state = lock(&self.inner.state);
        if now >= state.next_prune {
            state.entries.retain(
                |_, slot| !matches!(slot, Slot::Ready { expires_at, .. } if *expires_at <= now),
            );
            state.next_prune = now + self.inner.window;
        }
        match state.entries.get(&key) {
            Some(Slot::Ready {
                outcome,
                expires_at,
            }) if *expires_at > now => return Claim::Cached(Arc::clone(outcome)),
            Some(Slot::InFlight { tx, .. }) => {
                return Claim::Join(Joiner { rx: tx.subscribe() });
            }
            Some(Slot::Ready { .. }) => {}
            None => {
                if state.entries.len() >= self.inner.max_entries {
                    return Claim::Bypass;
                }
            }
        }
        let generation = state.next_generation;
        state.next_generation += 1;
        let (tx, _rx) = watch::channel(None);
        state
            .entries
            .insert(key.clone(), Slot::InFlight { tx, generation });
        Claim::Leader(LeaderGuard {
            cache: self.clone(),
            key,
            generation,
            done: false,
        })
    }

    /// Removes expired entries now; returns how many were removed.
    pub fn prune(&self) -> usize {
        let now = Instant::now();
        let mut state = lock(&self.inner.state);
        let before = state.entries.len();
        state.entries.retain(
            |_, slot| !matches!(slot, Slot::Ready { expires_at, .. } if *expires_at <= now),
        );
        before - state.entries.len()
    }

    /// Number of entries (in flight or cached, possibly expired but not yet pruned).
    pub fn len(&self) -> usize {
        lock(&self.inner.state).entries.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LeaderGuard {
    /// Publishes the outcome to joiners and caches it for the window (unless it is a 401/403).
    pub fn complete(mut self, outcome: SharedOutcome) {
        self.done = true;
        let cacheable = match outcome.as_ref() {
            Ok(_) => true,
            Err(error) => !error.is_auth_class(),
        };
        let now = Instant::now();
        let mut state = lock(&self.cache.inner.state);
        let ours = matches!(
            state.entries.get(&self.key),
            Some(Slot::InFlight { generation, .. }) if *generation == self.generation
        );
        if !ours {
            return;
        }
        if let Some(Slot::InFlight { tx, .. }) = state.entries.remove(&self.key) {
            tx.send_replace(Some(Arc::clone(&outcome)));
        }
        if cacheable {
            state.entries.insert(
                std::mem::take(&mut self.key),
                Slot::Ready {
                    outcome,
                    expires_at: now + self.cache.inner.window,
                },
            );
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(&self.cache.inner.state);
        let ours = matches!(
            state.entries.get(&self.key),
            Some(Slot::InFlight { generation, .. }) if *generation == self.generation
        );
        if ours {
            // Dropping the sender wakes joiners with "closed"; they claim again.
            state.entries.remove(&self.key);
        }
    }
}

/// Canonical JSON: object keys sorted (by Unicode code points), no insignificant whitespace.
/// Independent of serde_json's `preserve_order` feature.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_scalar(&Value::String(key.clone()), out);
        out.push(':');
        write_canonical(value, out);
    }
    out.push('}');
}

fn write_scalar(value: &Value, out: &mut String) {
    // Display of a scalar `Value` is its compact JSON text (strings quoted and escaped).
    let _ = write!(out, "{value}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_recursively_and_keeps_arrays_in_order() {
        let a = json!({"b": 1, "a": {"z": [3, {"y": 1, "x": "q\"uote"}], "c": null}});
        let b: Value =
            serde_json::from_str(r#"{"a":{"c":null,"z":[3,{"x":"q\"uote","y":1}]},"b":1}"#)
                .expect("json");
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"z":[3,{"x":"q\"uote","y":1}]},"b":1}"#
        );
        assert_ne!(
            canonical_json(&json!([1, 2])),
            canonical_json(&json!([2, 1]))
        );
        let empty = Map::new();
        let (x, y) = (SessionId::for_test("x"), SessionId::for_test("y"));
        assert_ne!(
            DedupCache::key("s", &x, 1, &empty),
            DedupCache::key("s", &y, 1, &empty)
        );
        assert_ne!(
            DedupCache::key("s", &x, 1, &empty),
            DedupCache::key("s", &x, 2, &empty),
            "the same call in the next turn is a new call"
        );
    }

    fn ok(v: Value) -> SharedOutcome {
        Arc::new(Ok(v))
    }

    #[tokio::test(start_paused = true)]
    async fn leader_joiner_cache_and_expiry() {
        let cache = DedupCache::new(Duration::from_secs(1), 100);
        let Claim::Leader(leader) = cache.claim("k".into()) else {
            panic!("first claim leads");
        };
        let Claim::Join(joiner) = cache.claim("k".into()) else {
            panic!("second claim joins");
        };
        let waiting = tokio::spawn(joiner.wait());
        leader.complete(ok(json!(1)));
        let joined = waiting.await.expect("join").expect("outcome");
        assert_eq!(joined.as_ref().as_ref().ok(), Some(&json!(1)));
        assert!(matches!(cache.claim("k".into()), Claim::Cached(_)));
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(matches!(cache.claim("k".into()), Claim::Leader(_)));
    }

    #[tokio::test]
    async fn abandoned_leader_releases_joiners() {
        let cache = DedupCache::new(Duration::from_secs(1), 100);
        let leader = cache.claim("k".into());
        let Claim::Join(joiner) = cache.claim("k".into()) else {
            panic!("joins");
        };
        drop(leader);
        assert!(joiner.wait().await.is_none());
        assert!(matches!(cache.claim("k".into()), Claim::Leader(_)));
    }

    #[tokio::test]
    async fn auth_class_outcomes_are_shared_but_not_cached() {
        let cache = DedupCache::new(Duration::from_secs(1), 100);
        let Claim::Leader(leader) = cache.claim("k".into()) else {
            panic!("leads");
        };
        leader.complete(Arc::new(Err(SkillError::ForbiddenContext(
            "dm only".into(),
        ))));
        assert!(matches!(cache.claim("k".into()), Claim::Leader(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded() {
        let cache = DedupCache::new(Duration::from_secs(1), 3);
        for i in 0..3 {
            let Claim::Leader(l) = cache.claim(format!("k{i}")) else {
                panic!("leads");
            };
            l.complete(ok(json!(i)));
        }
        assert!(matches!(cache.claim("k9".into()), Claim::Bypass));
        tokio::time::advance(Duration::from_secs(2)).await;
        let claim = cache.claim("k9".into());
        assert!(matches!(claim, Claim::Leader(_)));
        assert_eq!(cache.len(), 1, "expired entries pruned on use");
    }
}
