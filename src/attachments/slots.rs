//! The daemon-wide bound on attachment preparation: each picture may take up to its memory
//! budget while it is decoded (`picture.rs`, 512 MiB), so at most [`MAX_CONCURRENT_PICTURES`]
//! are prepared at once, whatever the number of conversations. One [`PreparationSlots`] is
//! shared by every clone of the daemon's [`Attachments`](super::Attachments).
//!
//! The permit travels into the blocking job and is released when the job ends, not when the
//! caller stops waiting: a turn that is cancelled mid-decode still holds its slot until the
//! decoding thread is done, so cancelled turns cannot pile up decoders.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Pictures prepared at once across the daemon: the worst case is this many times the
/// per-picture budget (1 GiB with the defaults).
pub const MAX_CONCURRENT_PICTURES: usize = 2;

/// A blocking preparation job could not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The job panicked or its thread was lost.
    #[error("the preparation job did not finish")]
    JobFailed,
}

/// At most `n` blocking preparation jobs at once (see the module documentation).
#[derive(Debug, Clone)]
pub struct PreparationSlots {
    semaphore: Arc<Semaphore>,
}

impl Default for PreparationSlots {
    fn default() -> Self {
        Self::new(MAX_CONCURRENT_PICTURES)
    }
}

impl PreparationSlots {
    /// Room for `n` jobs at once (at least one).
    pub fn new(n: usize) -> Self {
        PreparationSlots {
            semaphore: Arc::new(Semaphore::new(n.max(1))),
        }
    }

    /// Slots free right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for a slot, then runs `job` on the blocking pool holding it until `job` returns.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, SlotError> {
        let permit = self
            .semaphore
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| SlotError::JobFailed)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(|_| SlotError::JobFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AttachmentMetrics, AttachmentSettings, Attachments, Content, SystemLookup};
    use super::*;
    use crate::config::AttachmentsConfig;
    use crate::platform::Attachment;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// Jobs that count themselves in and wait until the test opens the gate.
    #[derive(Default)]
    struct Gate {
        open: Mutex<bool>,
        opened: Condvar,
        running: AtomicUsize,
        started: AtomicUsize,
        peak: AtomicUsize,
    }

    impl Gate {
        fn job(self: &Arc<Self>) -> impl FnOnce() + Send + 'static {
            let gate = self.clone();
            move || {
                gate.started.fetch_add(1, Ordering::SeqCst);
                let now = gate.running.fetch_add(1, Ordering::SeqCst) + 1;
                gate.peak.fetch_max(now, Ordering::SeqCst);
                let mut open = gate.open.lock().unwrap_or_else(|p| p.into_inner());
                while !*open {
                    open = gate.opened.wait(open).unwrap_or_else(|p| p.into_inner());
                }
                drop(open);
                gate.running.fetch_sub(1, Ordering::SeqCst);
            }
        }

        fn open(&self) {
            *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.opened.notify_all();
        }

        async fn wait_started(&self, n: usize) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while self.started.load(Ordering::SeqCst) < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{n} jobs never started"
                );
                tokio::task::yield_now().await;
            }
        }
    }

    /// Opens the gate when dropped, so a failing test does not leave jobs (and the runtime
    /// waiting for them) blocked.
    struct OpenOnDrop(Arc<Gate>);

    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_jobs_run_at_once_than_there_are_slots() {
        let slots = PreparationSlots::new(2);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let jobs: Vec<_> = (0..6)
            .map(|_| {
                let (slots, job) = (slots.clone(), gate.job());
                tokio::spawn(async move { slots.run(job).await })
            })
            .collect();
        gate.wait_started(2).await;
        // While two jobs hold the slots, no third starts (without the slots all six would).
        let window = tokio::time::Instant::now() + Duration::from_millis(200);
        while tokio::time::Instant::now() < window {
            assert_eq!(gate.started.load(Ordering::SeqCst), 2);
            tokio::task::yield_now().await;
        }
        gate.open();
        for job in jobs {
            assert_eq!(job.await.ok(), Some(Ok(())));
        }
        assert_eq!(gate.started.load(Ordering::SeqCst), 6);
        assert_eq!(gate.peak.load(Ordering::SeqCst), 2);
        assert_eq!(slots.available(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_caller_keeps_the_slot_until_its_job_ends() {
        let slots = PreparationSlots::new(1);
        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(gate.clone());
        let caller = {
            let (slots, job) = (slots.clone(), gate.job());
            tokio::spawn(async move { slots.run(job).await })
        };
        gate.wait_started(1).await;
        caller.abort();
        assert!(caller.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(
            slots.available(),
            0,
            "the job still runs and holds the slot"
        );
        gate.open();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while slots.available() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the slot was never released"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_frees_its_slot() {
        let slots = PreparationSlots::new(1);
        let result: Result<(), _> = slots.run(|| panic!("bad picture")).await;
        assert_eq!(result, Err(SlotError::JobFailed));
        assert_eq!(slots.available(), 1);
    }

    /// A small PNG.
    fn png() -> Vec<u8> {
        let mut out = Vec::new();
        image::DynamicImage::ImageRgb8(image::RgbImage::new(8, 8))
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        out
    }

    fn file(name: &str) -> Attachment {
        Attachment {
            id: name.into(),
            url: format!("https://files.example.net/{name}"),
            mime: Some("image/png".into()),
            filename: name.into(),
            size: 0,
        }
    }

    /// The picture of the message being answered waits while every preparation slot of the
    /// daemon is taken (by other conversations' pictures), and is prepared once one frees up;
    /// an earlier message's file, never decoded, does not wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_current_messages_pictures_wait_for_a_free_preparation_slot() {
        let fetcher = Attachments::new(
            AttachmentSettings::from(&AttachmentsConfig::default()),
            HashMap::new(),
            Arc::new(SystemLookup),
            AttachmentMetrics::unregistered(),
        )
        .unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let holders: Vec<_> = (0..MAX_CONCURRENT_PICTURES)
            .map(|_| {
                let (slots, held) = (fetcher.clone().slots, held.clone());
                tokio::spawn(async move {
                    slots
                        .run(move || {
                            let _ = held.lock().map(|rx| rx.recv());
                        })
                        .await
                })
            })
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while fetcher.slots.available() > 0 {
            assert!(tokio::time::Instant::now() < deadline, "slots never taken");
            tokio::task::yield_now().await;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let pending = {
            let (fetcher, root) = (fetcher.clone(), root.clone());
            tokio::spawn(async move {
                fetcher
                    .prepare_downloaded(png(), &file("now.png"), true, &root, &root)
                    .await
            })
        };
        let earlier = fetcher
            .prepare_downloaded(png(), &file("earlier.png"), false, &root, &root)
            .await
            .0
            .unwrap();
        assert!(matches!(earlier.content, Content::File));
        let window = tokio::time::Instant::now() + Duration::from_millis(200);
        while tokio::time::Instant::now() < window {
            assert!(!pending.is_finished(), "prepared without a free slot");
            tokio::task::yield_now().await;
        }
        for _ in &holders {
            release.send(()).unwrap();
        }
        let now = pending.await.unwrap().0.unwrap();
        assert!(matches!(now.content, Content::Picture(_)));
        for holder in holders {
            assert_eq!(holder.await.ok(), Some(Ok(())));
        }
    }
}
