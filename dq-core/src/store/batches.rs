//! The batches role: a batch's own record (settings, counts, members by state) in a slot of
//! its own, the namespace's index of batches not done, and the partitions' outboxes where the
//! ends of members are noted (ARCHITECTURE.md §16). Called by the client (open, add, close,
//! read, cancel) and by the workers' relay (read and delete notes, apply them, mark done).

use async_trait::async_trait;

use crate::batch::{
    BatchId, BatchInfo, BatchSpec, IndexEntry, MemberId, MemberPage, MemberState, OutboxNote,
    Reservation,
};
use crate::error::Result;
use crate::job::Queue;

/// A batch's record, its index, and the partitions' outboxes.
#[async_trait]
pub trait Batches: Send + Sync + 'static {
    /// Opens batch `id` with `spec` and lists it in the namespace's index of batches not
    /// done; a batch of this id already stored is left as it is and returned (`false`: not
    /// created by this call).
    async fn batch_open(&self, id: &BatchId, spec: &BatchSpec) -> Result<(bool, BatchInfo)>;

    /// Reserves `members` in batch `id` (a member already there is left as it is: a repeated
    /// add reserves nothing twice) and stamps the batch's last reservation; returns each
    /// member's state before the call. Refuses a closed batch ([`Error::BatchClosed`]) and an
    /// unknown one ([`Error::BatchNotFound`]) before any write; on Redis, refused at
    /// `maxmemory` ([`Error::OutOfMemory`]) as an enqueue is.
    ///
    /// [`Error::BatchClosed`]: crate::Error::BatchClosed
    /// [`Error::BatchNotFound`]: crate::Error::BatchNotFound
    /// [`Error::OutOfMemory`]: crate::Error::OutOfMemory
    async fn batch_reserve(&self, id: &BatchId, members: &[MemberId]) -> Result<Reservation>;

    /// Moves members of batch `id` forward (reserved → enqueued → an end; a member already
    /// ended keeps its first end, and is counted once), adding a member not reserved yet.
    /// Returns the batch as it is after; `None` for a batch not stored (its notes are
    /// dropped: it was kept past its retention). A Redis store built with durable enqueue
    /// ([`RedisOptions::durable_enqueue`](crate::RedisOptions::durable_enqueue)) waits for as
    /// many replicas to have the apply before it answers, and fails with
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) otherwise: the relay deletes a
    /// note only after its apply is acknowledged, so a failover cannot lose an apply whose
    /// note is gone.
    async fn batch_apply(
        &self,
        id: &BatchId,
        notes: &[(MemberId, MemberState)],
    ) -> Result<Option<BatchInfo>>;

    /// Closes batch `id` to new members (closing twice changes nothing).
    async fn batch_close(&self, id: &BatchId) -> Result<BatchInfo>;

    /// Marks batch `id` done (its callback enqueued or its parent released), starts its
    /// retention and takes it out of the index of batches not done.
    async fn batch_mark_done(&self, id: &BatchId) -> Result<BatchInfo>;

    /// Batch `id` as stored, or `None`.
    async fn batch(&self, id: &BatchId) -> Result<Option<BatchInfo>>;

    /// About `limit` members of batch `id` from `cursor` (0: the start), each with its state,
    /// in no particular order (a member moved during the listing may be listed twice).
    async fn batch_members(&self, id: &BatchId, cursor: u64, limit: usize) -> Result<MemberPage>;

    /// Up to `limit` batches not done, oldest first (by when each was opened, then by id),
    /// strictly after `after` (`None`: from the first) — whether or not `after` is still
    /// listed, so a walk of the index never starts again because a batch was done meanwhile.
    async fn open_batches(
        &self,
        after: Option<&IndexEntry>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>>;

    /// How many batches are not done (the index's size: one `ZCARD` on Redis).
    async fn open_batch_count(&self) -> Result<u64>;

    /// Takes `id` out of the index of batches not done (a batch whose record is gone).
    async fn forget_batch(&self, id: &BatchId) -> Result<()>;

    /// Up to `limit` notes of `queue`'s outbox, oldest first, strictly after the note `after`
    /// (`None`: from the first); reads only. Always a contiguous run of the outbox: it stops
    /// before a note this dq cannot read (one a newer dq wrote, left for it). A malformed
    /// `after` is an error before anything is read.
    async fn outbox(
        &self,
        queue: &Queue,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutboxNote>>;

    /// Deletes notes from `queue`'s outbox by id, once applied.
    async fn outbox_done(&self, queue: &Queue, ids: &[String]) -> Result<()>;

    /// Deletes every note of `queue`'s outbox up to and including the note `through`, for a
    /// relay that applied every note it read ([`Batches::outbox`] reads a prefix of the
    /// outbox): one `XTRIM MINID` on Redis instead of an `XDEL` of every id, a fifth of what a
    /// member costs the relay. Notes written since are after it and stay.
    async fn outbox_trim(&self, queue: &Queue, through: &str) -> Result<()>;
}
