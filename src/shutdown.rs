//! Graceful shutdown: the two cancellation tokens every component watches, the tracker of
//! their tasks, and the signal handling that starts it all.
//!
//! Phase one (`draining`): components stop accepting new work and let running work finish.
//! Phase two (`stop`, after `shutdownGraceMs` or when everything drained): whatever still runs
//! is cancelled. Cancelling `stop` also cancels `draining`.
//!
//! Services that running work depends on (the Skill API the agents call) are tracked apart
//! ([`Shutdown::spawn_service`]) and stopped only after the work is done.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long cancelled tasks get to wind down after the grace period before we give up.
const HARD_STOP_WAIT: Duration = Duration::from_secs(5);

/// Shutdown coordination shared by the composition root and the components it builds.
#[derive(Debug, Clone)]
pub struct Shutdown {
    stop: CancellationToken,
    draining: CancellationToken,
    tasks: TaskTracker,
    services_stop: CancellationToken,
    services: TaskTracker,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// Fresh tokens and an empty tracker.
    pub fn new() -> Self {
        let stop = CancellationToken::new();
        let draining = stop.child_token();
        Self {
            stop,
            draining,
            tasks: TaskTracker::new(),
            services_stop: CancellationToken::new(),
            services: TaskTracker::new(),
        }
    }

    /// Cancelled when new work must no longer be accepted.
    pub fn draining(&self) -> CancellationToken {
        self.draining.clone()
    }

    /// Cancelled when running work must stop now.
    pub fn stop(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// The tracker itself, for components that spawn their own tasks (shutdown waits for
    /// them too).
    pub fn tracker(&self) -> TaskTracker {
        self.tasks.clone()
    }

    /// Runs a component task under the tracker; shutdown waits for it.
    pub fn spawn<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.tasks.spawn(async move {
            if let Err(e) = task.await {
                tracing::error!(task = name, error = format!("{e:#}"), "task failed");
            }
        });
    }

    /// Runs a service that work depends on; it gets a token that is cancelled only after all
    /// work tasks have finished (or were cancelled).
    pub fn spawn_service<F, Fut>(&self, name: &'static str, service: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let task = service(self.services_stop.clone());
        self.services.spawn(async move {
            if let Err(e) = task.await {
                tracing::error!(task = name, error = format!("{e:#}"), "service failed");
            }
        });
    }

    /// Drains: cancels `draining`, waits up to `grace` for tracked tasks, then cancels `stop`
    /// and waits a little more; finally stops the services. Returns false if anything was
    /// still running at the end.
    pub async fn drain(&self, grace: Duration) -> bool {
        let work_done = self.drain_work(grace).await;
        self.services_stop.cancel();
        self.services.close();
        let services_done = tokio::time::timeout(HARD_STOP_WAIT, self.services.wait())
            .await
            .is_ok();
        if !services_done {
            tracing::error!(running = self.services.len(), "services did not stop");
        }
        work_done && services_done
    }

    async fn drain_work(&self, grace: Duration) -> bool {
        self.draining.cancel();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_ok() {
            self.stop.cancel();
            return true;
        }
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            running = self.tasks.len(),
            "grace period over; cancelling running work"
        );
        self.stop.cancel();
        let finished = tokio::time::timeout(HARD_STOP_WAIT, self.tasks.wait())
            .await
            .is_ok();
        if !finished {
            tracing::error!(
                running = self.tasks.len(),
                "tasks did not stop after cancellation"
            );
        }
        finished
    }
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn wait_for_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_tasks_that_finish_on_draining() {
        let s = Shutdown::new();
        let draining = s.draining();
        let (tx, rx) = tokio::sync::oneshot::channel();
        s.spawn("worker", async move {
            draining.cancelled().await;
            tx.send(()).ok();
            Ok(())
        });
        assert!(s.drain(Duration::from_secs(5)).await);
        assert!(rx.await.is_ok());
        assert!(s.stop().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn drain_cancels_stop_after_the_grace_period() {
        let s = Shutdown::new();
        let stop = s.stop();
        s.spawn("stubborn", async move {
            stop.cancelled().await;
            Ok(())
        });
        let started = tokio::time::Instant::now();
        assert!(s.drain(Duration::from_secs(2)).await);
        assert!(started.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test]
    async fn services_outlive_the_work() {
        let s = Shutdown::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let draining = s.draining();
        s.spawn("work", async move {
            draining.cancelled().await;
            // The service must still be up while the work finishes.
            rx.await.ok();
            Ok(())
        });
        let service_stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = service_stopped.clone();
        s.spawn_service("api", move |stop| async move {
            tx.send(()).ok();
            stop.cancelled().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        });
        assert!(s.drain(Duration::from_secs(5)).await);
        assert!(service_stopped.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn stop_implies_draining() {
        let s = Shutdown::new();
        s.stop().cancel();
        assert!(s.draining().is_cancelled());
    }
}
