//! The charts' sampler: a background task reads every registered topic's stats at a fixed
//! interval into the dashboard's history (`history.rs`), so throughput needs no metrics from
//! the workers.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Instant;

use crate::history::Sample;
use crate::state::Shared;

/// Starts the sampler of `shared` once, on the current runtime.
pub(crate) fn ensure(shared: &Arc<Shared>) {
    if !shared.sampling.swap(true, Ordering::AcqRel) {
        tokio::spawn(run(Arc::downgrade(shared)));
    }
}

/// Samples until the dashboard's shared state is gone.
pub(crate) async fn run(shared: Weak<Shared>) {
    let every = match shared.upgrade() {
        Some(s) => s.opts.sample_every,
        None => return,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match sample(&shared).await {
            Ok(sample) => {
                failing = false;
                shared
                    .history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sample);
            }
            Err(e) => {
                // Once per outage, not once per tick.
                if !failing {
                    tracing::warn!(error = %e, "dq dashboard: sampling stats failed");
                }
                failing = true;
            }
        }
    }
}

/// One sample of every registered topic.
async fn sample(shared: &Shared) -> dq_core::Result<Sample> {
    let topics: BTreeMap<String, _> = shared
        .client
        .admin()
        .stats()
        .await?
        .into_iter()
        .map(|(meta, stats)| (meta.topic.to_string(), stats))
        .collect();
    Ok(Sample {
        at: Instant::now(),
        topics,
    })
}
