//! The batches role in memory: not built yet (a later commit mirrors `batch.lua` and the
//! outbox notes here); every call says so.

use async_trait::async_trait;

use super::MemoryStore;
use crate::batch::{BatchId, BatchInfo, BatchSpec, MemberId, MemberPage, MemberState, OutboxNote};
use crate::error::{Error, Result};
use crate::job::Queue;
use crate::store::batches::Batches;

fn not_yet() -> Error {
    Error::InvalidConfig("batches are not in the embedded store yet".into())
}

#[async_trait]
impl Batches for MemoryStore {
    async fn batch_open(&self, _: &BatchId, _: &BatchSpec) -> Result<(bool, BatchInfo)> {
        Err(not_yet())
    }
    async fn batch_reserve(&self, _: &BatchId, _: &[MemberId]) -> Result<BatchInfo> {
        Err(not_yet())
    }
    async fn batch_apply(
        &self,
        _: &BatchId,
        _: &[(MemberId, MemberState)],
    ) -> Result<Option<BatchInfo>> {
        Err(not_yet())
    }
    async fn batch_close(&self, _: &BatchId) -> Result<BatchInfo> {
        Err(not_yet())
    }
    async fn batch_mark_done(&self, _: &BatchId) -> Result<BatchInfo> {
        Err(not_yet())
    }
    async fn batch(&self, _: &BatchId) -> Result<Option<BatchInfo>> {
        Err(not_yet())
    }
    async fn batch_members(&self, _: &BatchId, _: u64, _: usize) -> Result<MemberPage> {
        Err(not_yet())
    }
    async fn open_batches(&self, _: Option<&BatchId>, _: usize) -> Result<Vec<BatchId>> {
        Ok(Vec::new())
    }
    async fn forget_batch(&self, _: &BatchId) -> Result<()> {
        Ok(())
    }
    async fn outbox(&self, _: &Queue, _: usize) -> Result<Vec<OutboxNote>> {
        Ok(Vec::new())
    }
    async fn outbox_done(&self, _: &Queue, _: &[String]) -> Result<()> {
        Ok(())
    }
}
