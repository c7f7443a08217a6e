//! systemd integration (`Type=notify`): `READY=1` once serving, `WATCHDOG=1` pings at half the
//! `WatchdogSec` interval, `STOPPING=1` when shutdown begins. Every call is a no-op when the
//! daemon is not run by systemd (`NOTIFY_SOCKET` unset).

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// Tells systemd the daemon is ready.
pub fn notify_ready() {
    send(&[NotifyState::Ready], "READY");
}

/// Tells systemd the daemon is stopping.
pub fn notify_stopping() {
    send(&[NotifyState::Stopping], "STOPPING");
}

/// The ping interval when systemd's watchdog is enabled for this process (half of
/// `WATCHDOG_USEC`).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|timeout| timeout / 2)
}

/// Pings the watchdog every `interval` until `stop` is cancelled.
pub async fn run_watchdog(interval: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticker.tick() => send(&[NotifyState::Watchdog], "WATCHDOG"),
        }
    }
}

fn send(state: &[NotifyState<'_>], what: &str) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, state = what, "systemd notification failed");
    }
}
