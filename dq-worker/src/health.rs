//! What a running worker can say about itself without a store call: each fetcher's last store
//! call and the jobs running. Written by the fetchers, read through `WorkerHandle::health`.

/// A snapshot of a running worker's health, from [`WorkerHandle::health`](crate::WorkerHandle::health): enough for a
/// liveness or readiness probe. Cheap to take (no store call).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerHealth {
    /// One entry per fetcher (topic partition), in start order.
    pub fetchers: Vec<FetcherHealth>,
    /// Jobs running now (handlers, and outcomes not yet written).
    pub running: usize,
}

impl WorkerHealth {
    /// Whether every fetcher's last store call succeeded (false for a fetcher that has not
    /// completed a call yet).
    pub fn is_healthy(&self) -> bool {
        self.fetchers.iter().all(|f| f.last_call_ok)
    }

    /// The fetchers whose last call failed with an error retrying cannot fix (a missing
    /// permission, a key of the wrong type): an operator has to act.
    pub fn permanent_errors(&self) -> impl Iterator<Item = &FetcherHealth> {
        self.fetchers
            .iter()
            .filter(|f| !f.last_call_ok && f.last_error_permanent)
    }
}

/// How one fetcher's (one topic partition's) store calls have gone.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FetcherHealth {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u16,
    /// Whether its last `fetch` call succeeded (false until one completes).
    pub last_call_ok: bool,
    /// When its last `fetch` call completed, successful or not (`None` before the first).
    pub last_call_at: Option<std::time::Instant>,
    /// When its last successful `fetch` call completed.
    pub last_success_at: Option<std::time::Instant>,
    /// The text of its most recent error (kept after a later success; see `last_call_ok`).
    pub last_error: Option<String>,
    /// Whether that error is one retrying cannot fix (a missing permission, a key of the
    /// wrong type, a reply dq cannot read), as opposed to connection trouble or a timeout.
    /// Such errors are logged at ERROR; the fetcher keeps retrying them.
    pub last_error_permanent: bool,
    /// Calls that have failed since the last success.
    pub failures_in_a_row: u32,
}

impl FetcherHealth {
    pub(crate) fn new(topic: &str, partition: u16) -> Self {
        FetcherHealth {
            topic: topic.to_string(),
            partition,
            last_call_ok: false,
            last_call_at: None,
            last_success_at: None,
            last_error: None,
            last_error_permanent: false,
            failures_in_a_row: 0,
        }
    }
}
