//! Conformance body: the registry of record formats (docs/UPGRADING.md). A store of this
//! release writes the newest format once every live process reads it — at once on the embedded
//! store (one process) and on a fresh Redis namespace whose only process is the harness's
//! client — and refuses a process that reads less, by the typed error.

use std::time::Duration;

use dq::store::{LEGACY_FORMAT, NEWEST_FORMAT, ProcessInfo, ProcessRole};

use super::*;

/// The level is the newest format, new records are written in it, a process reading less is
/// refused with `FormatTooOld` (and not listed), one reading it is accepted.
pub async fn a_process_reading_less_than_the_level_is_refused<H: Harness>(h: &H) {
    let store = h.store();
    let registry = store.format_registry().await.unwrap();
    assert_eq!(registry.level.level, NEWEST_FORMAT);
    assert_eq!(registry.level.hold, None);
    assert_eq!(store.formats().write(), NEWEST_FORMAT);

    let old = ProcessInfo::new(ProcessRole::Producer, LEGACY_FORMAT);
    match store
        .beat_process(&old, Duration::from_secs(60), NEWEST_FORMAT)
        .await
    {
        Err(Error::FormatTooOld { level, reads }) => {
            assert_eq!((level, reads), (NEWEST_FORMAT, LEGACY_FORMAT));
        }
        other => panic!("a process reading format 1 only is refused: {other:?}"),
    }
    let new = ProcessInfo::new(ProcessRole::Worker, NEWEST_FORMAT);
    let level = store
        .beat_process(&new, Duration::from_secs(60), NEWEST_FORMAT)
        .await
        .unwrap();
    assert_eq!(level.level, NEWEST_FORMAT);
    let listed = store.format_registry().await.unwrap().processes;
    assert!(listed.iter().all(|p| p.id != old.id), "{listed:?}");
    store.remove_process(&new.id).await.unwrap();
}
