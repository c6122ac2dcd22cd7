//! Receipts of applied calls, as the Redis store keeps them: an enqueue call's (so that its
//! retry writes nothing, §6.1) and a fetch call's (so that its retry gets the same jobs back,
//! §6.2).

use std::collections::{HashMap, VecDeque};

use super::clock::ms;
use crate::names::JobKey;
use crate::store::produce::{ENQUEUE_RECEIPT_LIFE, EnqueueOutcome};

/// Receipts of applied enqueue calls, like the Redis store's `receipts:<b>` strings: each is
/// kept `ENQUEUE_RECEIPT_LIFE`. (Redis keeps each between one and two lives, by generation; a
/// receipt found late is as true as one found early.)
#[derive(Default)]
pub(super) struct Receipts {
    /// Call id → the last ms it is kept.
    pub(super) until: HashMap<u64, u64>,
    /// Call id → when it was applied (ms), and its outcomes unless it created every job (as
    /// `enqueue.lua` stores them). Pruned with `until`.
    pub(super) applied: HashMap<u64, (u64, Option<Vec<EnqueueOutcome>>)>,
    /// (last ms kept, call id), oldest first, for pruning.
    pub(super) order: VecDeque<(u64, u64)>,
}

impl Receipts {
    pub(super) fn life_ms() -> u64 {
        ms(ENQUEUE_RECEIPT_LIFE)
    }

    pub(super) fn prune(&mut self, now: u64) {
        while let Some(&(until, id)) = self.order.front() {
            if until >= now {
                break;
            }
            self.order.pop_front();
            if self.until.get(&id) == Some(&until) {
                self.until.remove(&id);
                self.applied.remove(&id);
            }
        }
    }

    pub(super) fn insert(&mut self, id: u64, now: u64, outcomes: &[EnqueueOutcome]) {
        let until = now + Self::life_ms();
        self.until.insert(id, until);
        self.order.push_back((until, id));
        let all_created = outcomes.iter().all(|o| *o == EnqueueOutcome::Created);
        self.applied
            .insert(id, (now, (!all_created).then(|| outcomes.to_vec())));
    }

    /// When `id` was applied and its outcomes if stored (`None`: it created every job), if
    /// it has a receipt (call after [`prune`](Self::prune), which drops the stale).
    pub(super) fn get(&self, id: u64) -> Option<(u64, Option<&[EnqueueOutcome]>)> {
        self.applied
            .get(&id)
            .map(|(at, outcomes)| (*at, outcomes.as_deref()))
    }
}

/// The receipt of one fetch call: what `fetch:<id>` holds in Redis.
pub(super) struct FetchReceipt {
    /// The try that wrote it.
    pub(super) try_no: u32,
    /// (key, token) of each job it leased.
    pub(super) leases: Vec<(JobKey, u64)>,
    /// The last ms it is kept.
    pub(super) until: u64,
}

/// Receipts of fetch calls, like the `fetch:<id>` keys, each kept
/// [`FetchCall::receipt_life`] of its lease. (Redis also deletes a receipt once its reply has
/// arrived; here no reply is ever lost.)
#[derive(Default)]
pub(super) struct FetchReceipts {
    pub(super) by_call: HashMap<u64, FetchReceipt>,
    /// (last ms kept, call id), in the order written, for pruning.
    pub(super) order: VecDeque<(u64, u64)>,
}

impl FetchReceipts {
    /// Drops receipts past their life while the oldest written is one. (Lives differ with
    /// the lease, so a stale receipt may wait behind a fresh one; `get` never returns it.)
    pub(super) fn prune(&mut self, now: u64) {
        while let Some(&(until, id)) = self.order.front() {
            if until >= now {
                break;
            }
            self.order.pop_front();
            if self.by_call.get(&id).is_some_and(|r| r.until == until) {
                self.by_call.remove(&id);
            }
        }
    }

    pub(super) fn get(&self, id: u64, now: u64) -> Option<&FetchReceipt> {
        self.by_call.get(&id).filter(|r| r.until >= now)
    }

    pub(super) fn insert(&mut self, id: u64, receipt: FetchReceipt) {
        self.order.push_back((receipt.until, id));
        self.by_call.insert(id, receipt);
    }
}
