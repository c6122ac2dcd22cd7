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
    /// Fired when the lease is lost or the worker stops for good.
    pub cancel: CancellationToken,
    /// Set once the handler has returned (its outcome may still be in flight to the store).
    pub finished: Arc<AtomicBool>,
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

    /// The lease is lost: its deadline is now, and its handler is told to stop.
    pub fn revoke(&self) {
        self.expires.set(tokio::time::Instant::now());
        self.cancel.cancel();
    }
}

/// Running jobs by delivery token.
#[derive(Clone, Debug, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashMap<(Queue, u64), Lease>>>);

impl InFlight {
    pub fn insert(&self, lease: Lease) {
        self.lock()
            .insert((lease.queue.clone(), lease.token), lease);
    }

    pub fn remove(&self, queue: &Queue, token: u64) -> Option<Lease> {
        self.lock().remove(&(queue.clone(), token))
    }

    pub fn snapshot(&self) -> Vec<Lease> {
        self.lock().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Queue, u64), Lease>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
