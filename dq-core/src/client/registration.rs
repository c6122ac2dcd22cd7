//! A client's registration in the namespace's registry of record formats (`<ns>:formats`,
//! docs/UPGRADING.md): it says which formats this process reads, and learns which one to
//! write.
//!
//! 1. At connect, the first beat: a process that reads less than the namespace's level is
//!    refused ([`Error::FormatTooOld`](crate::Error::FormatTooOld)) before it writes anything.
//!    A first beat that fails otherwise (a Redis user that may not run scripts) is logged at
//!    WARN: the client connects, writes format 1 (which every dq reads) and keeps trying.
//! 2. Then a task beats every [`DEFAULT_FORMAT_BEAT`] (30 s), each registration lasting
//!    [`BEATS_PER_TTL`] beats, and after each beat writes new records in the level the
//!    registry returned (`store.formats().set_write`). The task holds only a `Weak` to the
//!    registration, which the client and its clones hold: dropping the last client stops it.
//! 3. While the level is below what this process reads, each beat first lists the live
//!    workers (`<ns>:workers`) and passes the lowest format they read: a worker of a dq from
//!    before the registry registers only there (its record has no `reads_format`, so it
//!    reads format 1), and it must hold the level too.
//! 4. A failed beat (Redis down) keeps the format written now — the level only rises, so
//!    the format written is never one a live process cannot read — and is retried at the next
//!    beat. Dropping the client removes the registration (best effort; otherwise it expires).

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::{FormatLevel, ProcessInfo, ProcessRole};
use crate::store::Store;

/// How often a registered client beats unless told otherwise: a process gone without a
/// clean shutdown stops holding the level back within [`BEATS_PER_TTL`] beats (90 s).
pub const DEFAULT_FORMAT_BEAT: Duration = Duration::from_secs(30);

/// How many beats a registration lasts: one lost beat does not drop a live process.
pub const BEATS_PER_TTL: u32 = 3;

/// The longest a dropped client's removal of its registration may take before it is left to
/// expire.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// This process's registration, shared by a client and its clones; the beat task holds only
/// a `Weak` to it.
pub(crate) struct Registration {
    store: Arc<dyn Store>,
    info: Mutex<ProcessInfo>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("info", &*self.info())
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// Registers this process as `role` with its first beat (refused with
    /// [`Error::FormatTooOld`] when it reads less than the namespace's level), then starts the
    /// beat task, every `every`.
    pub(crate) async fn start(
        store: Arc<dyn Store>,
        role: ProcessRole,
        every: Duration,
    ) -> Result<Arc<Registration>> {
        let info = ProcessInfo::new(role, store.formats().reads());
        let ttl = every * BEATS_PER_TTL;
        match beat(&*store, &info, ttl).await {
            Ok(level) => tracing::debug!(
                id = %info.id,
                level = level.level,
                reads = info.reads,
                "registered in the namespace's format registry"
            ),
            Err(e @ Error::FormatTooOld { .. }) => return Err(e),
            // Anything else (a user that may not run scripts, Redis gone again) must not
            // stop a client that worked before the registry existed: it writes format 1,
            // which every dq reads, and the beat task tries again.
            Err(e) => tracing::warn!(
                error = %e,
                "could not register in the namespace's format registry; writing format 1 \
                 until it succeeds"
            ),
        }
        let registration = Arc::new(Registration {
            store,
            info: Mutex::new(info),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&registration), every));
        *registration
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(registration)
    }

    /// The process as it registers now.
    pub(crate) fn info(&self) -> std::sync::MutexGuard<'_, ProcessInfo> {
        self.info.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers as `role` from the next beat on (a client whose worker started).
    pub(crate) fn set_role(&self, role: ProcessRole) {
        self.info().role = role;
    }
}

impl Drop for Registration {
    /// Stops the beat task and removes the registration (best effort: in a runtime only, and
    /// bounded; otherwise the registration expires after [`BEATS_PER_TTL`] beats).
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let id = self.info().id.clone();
        runtime.spawn(async move {
            match tokio::time::timeout(REMOVE_TIMEOUT, store.remove_process(&id)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "could not remove the format registration; it expires");
                }
                Err(_) => tracing::debug!("removing the format registration timed out; it expires"),
            }
        });
    }
}

/// The check of a client that does not register (a one-shot tool): refused with
/// [`Error::FormatTooOld`] when the namespace's level is newer than this process reads;
/// otherwise it writes the level's format. A registry it cannot read (a user that may not run
/// scripts, a key of another type) does not stop it, as it does not stop a registering
/// client: it writes format 1, which every dq reads.
pub(crate) async fn check_unregistered(store: &dyn Store) -> Result<()> {
    let level = match store.format_registry().await {
        Ok(registry) => registry.level,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "could not read the namespace's format registry; writing format 1"
            );
            return Ok(());
        }
    };
    let reads = store.formats().reads();
    if level.level > reads {
        return Err(Error::FormatTooOld {
            level: level.level,
            reads,
        });
    }
    store.formats().set_write(level.level);
    Ok(())
}

/// One beat: (while the level is below what this process reads) the lowest format a live
/// worker reads, then the registration, then the format written follows the level.
async fn beat(store: &dyn Store, info: &ProcessInfo, ttl: Duration) -> Result<FormatLevel> {
    let formats = store.formats();
    let workers_read = if formats.write() < formats.reads() {
        store
            .workers()
            .await?
            .iter()
            .map(|w| w.reads_format)
            .min()
            .unwrap_or(formats.reads())
            .clamp(crate::format::LEGACY_FORMAT, formats.reads())
    } else {
        formats.reads()
    };
    let level = store.beat_process(info, ttl, workers_read).await?;
    let before = formats.write();
    let now = formats.set_write(level.level);
    if now != before {
        tracing::info!(
            format = now,
            "every live process reads record format {now}: new jobs are written in it"
        );
    }
    Ok(level)
}

/// Beats every `every` until the registration is dropped.
async fn run(registration: Weak<Registration>, every: Duration) {
    let ttl = every * BEATS_PER_TTL;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let Some((store, info)) = registration
            .upgrade()
            .map(|r| (r.store.clone(), r.info().clone()))
        else {
            return;
        };
        let result = tokio::time::timeout(every, beat(&*store, &info, ttl))
            .await
            .unwrap_or(Err(Error::Timeout(every)));
        match result {
            Ok(_) => failing = false,
            Err(e @ Error::FormatTooOld { .. }) => {
                if !failing {
                    tracing::error!(error = %e, "this process was refused by the namespace's format registry");
                }
                failing = true;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        error = %e,
                        "format registration failed; writing the current format until it succeeds"
                    );
                }
                failing = true;
            }
        }
    }
}
