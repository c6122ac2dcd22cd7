//! Dead letters: the one place a job that this worker moved to the dead queue is reported — an
//! ERROR log line, and the application's `on_dead` hook (the alert), run on a task of its own.
//!
//! A job reaches the dead queue through this worker in two ways: a failed attempt with none
//! left (or a permanent error), written by the completer; or a lease that expired on the last
//! attempt, recovered by one of this worker's fetches. Both report here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use dq_core::JobKey;
use tokio_util::task::TaskTracker;

/// A job that has just been moved to the dead queue, as given to the `on_dead` hook.
#[derive(Clone, Debug)]
pub struct DeadJob {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: JobKey,
    /// How many attempts it had.
    pub attempts: u32,
    /// Why it died (the last error).
    pub error: String,
}

/// The `on_dead` hook, boxed.
pub(crate) type OnDead =
    Arc<dyn Fn(DeadJob) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Reports jobs moved to the dead queue: logs each at ERROR, and runs the `on_dead` hook if one
/// is set, on tasks that shutdown waits for.
#[derive(Clone)]
pub(crate) struct DeadLetters {
    hook: Option<OnDead>,
    tasks: TaskTracker,
}

impl DeadLetters {
    pub fn new(hook: Option<OnDead>) -> Self {
        DeadLetters {
            hook,
            tasks: TaskTracker::new(),
        }
    }

    /// Reports one buried job.
    pub fn report(&self, job: DeadJob) {
        self.report_when(async move { job });
    }

    /// Reports one buried job once `job` has found out what it knows of it (e.g. by reading
    /// the job's history from the store). Neither that nor the hook delays the caller.
    pub fn report_when(&self, job: impl Future<Output = DeadJob> + Send + 'static) {
        let hook = self.hook.clone();
        self.tasks.spawn(async move {
            let job = job.await;
            tracing::error!(
                topic = %job.topic,
                key = %job.key,
                attempts = job.attempts,
                error = %job.error,
                "moved to the dead queue"
            );
            if let Some(hook) = hook {
                hook(job).await;
            }
        });
    }

    /// Waits for every report (and hook) started so far; for shutdown, after the last outcome
    /// has been written.
    pub async fn finish(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
