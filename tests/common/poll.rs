//! Waiting for something another task or process does: poll a condition every [`INTERVAL`]
//! until it holds or a deadline passes. Every integration test waits this way (nothing sleeps a
//! fixed time hoping it is enough). Test binaries that need nothing else of `common` include
//! this file alone (`#[path = "common/poll.rs"] mod poll;`).
#![allow(dead_code)]

use std::time::Duration;

/// How often a condition is checked.
pub const INTERVAL: Duration = Duration::from_millis(20);

/// Polls `check` until it yields a value; `None` once `timeout` has passed (so the caller can
/// panic with what it saw).
pub async fn poll<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

/// Polls `check` until it yields a value and returns it; panics with `what` after `timeout`.
pub async fn eventually_some<T>(
    timeout: Duration,
    what: &str,
    check: impl FnMut() -> Option<T>,
) -> T {
    match poll(timeout, check).await {
        Some(value) => value,
        None => panic!("{what}: not within {timeout:?}"),
    }
}

/// Polls `condition` until it holds; panics with `what` after `timeout`.
pub async fn eventually(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    eventually_some(timeout, what, || condition().then_some(())).await
}

/// [`poll`] for a check that must itself await (a store query, an HTTP call).
pub async fn poll_async<T>(
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

/// [`eventually_some`] for a check that must itself await.
pub async fn eventually_async<T>(
    timeout: Duration,
    what: &str,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    match poll_async(timeout, check).await {
        Some(value) => value,
        None => panic!("{what}: not within {timeout:?}"),
    }
}

/// The blocking twin of [`poll`], for code without a runtime (or that must not yield).
pub fn blocking_poll<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(INTERVAL);
    }
}

/// Whether `condition` held within `timeout` (blocking; see [`blocking_poll`]).
pub fn blocking_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    blocking_poll(timeout, || condition().then_some(())).is_some()
}
