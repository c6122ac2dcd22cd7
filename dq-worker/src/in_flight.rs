//! The set of running jobs, shared by the runner (adds), the completer (removes after the
//! outcome is stored) and the lease keeper (extends, and cancels those whose lease is lost).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dq_core::{JobKey, LeaseDeadline, Queue};
use tokio_util::sync::CancellationToken;

/// One leased job.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub queue: Queue,
    pub key: JobKey,
    pub token: u64,
    /// Which attempt this delivery is.
    pub attempt: u32,
    /// The job's group, if it has one (a throttle holds only it).
    pub group: Option<dq_core::GroupName>,
    /// Fired when the lease is lost or the worker stops for good.
    pub cancel: CancellationToken,
    /// Set once the handler has returned (its outcome may still be in flight to the store).
    pub finished: Arc<AtomicBool>,
    /// Set when the store reports that a client cancelled the running job (`extend` said
    /// so); `cancel` fires with it, and the runner ends the job as cancelled.
    pub cancel_requested: Arc<AtomicBool>,
    /// By this process's clock, when the lease surely ends unless extended: measured from
    /// *before* the call that granted it, so it errs early. Shared with the handler's
    /// `JobContext`, which reads as cancelled once it has passed.
    pub expires: LeaseDeadline,
}

impl Lease {
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub fn expires(&self) -> tokio::time::Instant {
        self.expires.get()
    }

    /// Whether the lease has surely run out (or was lost) by this process's clock.
    pub fn has_expired(&self) -> bool {
        self.expires.has_passed()
    }

    /// Records an extension granted by a call sent at `sent`. Never revives a lease whose
    /// deadline has passed: its handler has been told to stop.
    pub fn extended(&self, sent: tokio::time::Instant, lease: std::time::Duration) {
        self.expires.extend(sent + lease);
    }

    /// A client cancelled the running job: its handler is told to stop, and the job ends as
    /// cancelled (the lease still holds until then).
    pub fn request_cancel(&self) {
        self.cancel_requested.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    pub fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::Acquire)
    }

    /// The lease is lost: its deadline is now, and its handler is told to stop.
    pub fn revoke(&self) {
        self.expires.set(tokio::time::Instant::now());
        self.cancel.cancel();
    }
}

/// Running jobs by delivery token.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    jobs: Arc<Mutex<HashMap<(Queue, u64), Lease>>>,
    /// Bumped whenever a job starts or finishes, for those who wait for that without polling.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            jobs: Arc::default(),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl InFlight {
    pub fn insert(&self, lease: Lease) {
        self.lock()
            .insert((lease.queue.clone(), lease.token), lease);
        self.changed();
    }

    pub fn remove(&self, queue: &Queue, token: u64) -> Option<Lease> {
        let removed = self.lock().remove(&(queue.clone(), token));
        if removed.is_some() {
            self.changed();
        }
        removed
    }

    pub fn snapshot(&self) -> Vec<Lease> {
        self.lock().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Completes at the first start or finish of a job after this call.
    pub fn next_change(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut changes = self.changes.subscribe();
        changes.mark_unchanged();
        async move {
            // The sender lives as long as any InFlight clone; an error means the worker is
            // gone, and nothing will change any more.
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Queue, u64), Lease>> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
