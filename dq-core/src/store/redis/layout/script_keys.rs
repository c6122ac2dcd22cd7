//! Every Lua script, declared once: its name (its file is `lua/<name>.lua`), its flags and the
//! keys it takes, in the order it takes them. The store's loaded scripts (`scripts.rs`) and
//! the public KEYS table that tools read (the benchmark's slow-log classes) both come from
//! this list; a unit test checks every entry against the `-- KEYS[i]` lines of its script's
//! header.

use super::KeyName::{self, *};

/// The one list of scripts: hands `$then!` one entry per script,
/// `/// doc` `name (Flags): [KeyName, …];`. Flags: `Writes` (refused at `maxmemory`, like an
/// enqueue), `AllowOom` (runs at `maxmemory`: it only moves, shrinks or rewrites), `NoWrites`
/// (reads only; also runs at `maxmemory`).
///
/// Adding a script: its `.lua` file with the contract header, one entry here, one method in
/// one role file per store, one conformance body (ARCHITECTURE.md §5).
macro_rules! script_table {
    ($then:ident) => {
        $then! {
            /// Stores one job or a bulk chunk; leaves the call's receipt. Refused at `maxmemory`
            /// (with a typed `OutOfMemory`, before it writes): it adds jobs.
            enqueue (Writes): [
                Scheduled, Retry, Ready, Dead, Jobs, Hist, Stats, Wake, Calls, Receipts,
                OldReceipts, Leases, Control, Events, Uniq, UniqAt, Pready, Gready, Groups,
            ];
            /// Recovers expired leases, promotes due jobs, leases ready ones. May take further
            /// fetch receipts (to delete) after its own keys.
            fetch (AllowOom): [
                Scheduled, Retry, Ready, Active, Dead, Jobs, Hist, Stats, Wake, Control,
                Leases, Kept, KeptAt, Progress, Events, Uniq, UniqAt, Pready, Gready, Groups,
                Gwait, Gactive, Gctl, Outbox, FetchReceipt,
            ];
            /// Deletes succeeded jobs whose token still owns them.
            ack (AllowOom): [
                Active, Jobs, Hist, Stats, Control, Wake, Leases, Kept, KeptAt, Progress,
                Events, Uniq, UniqAt, Gactive, Groups, Gwait, Outbox,
            ];
            /// Records failed attempts: retry, defer, bury, cancel or throttle each.
            fail (AllowOom): [
                Scheduled, Retry, Ready, Active, Dead, Jobs, Hist, Stats, Wake, Control, Leases,
                Kept, KeptAt, Progress, Events, Uniq, UniqAt, Pready, Gready, Groups, Gwait,
                Gactive, Gctl, Outbox,
            ];
            /// Renews leases; reports which are still owned.
            extend (AllowOom): [Active, Jobs, Control, Leases];
            /// Hands running jobs back to the front of `ready`.
            release (AllowOom): [
                Active, Ready, Jobs, Wake, Hist, Stats, Control, Leases, Kept, KeptAt, Progress,
                Events, Uniq, UniqAt, Pready, Gready, Groups, Gwait, Gactive, Outbox,
            ];
            /// Cancels a waiting job, or asks a running one to stop.
            cancel (AllowOom): [
                Scheduled, Retry, Jobs, Hist, Stats, Control, Leases, Kept, KeptAt, Events,
                Uniq, UniqAt, Outbox,
            ];
            /// Gives a waiting job a new due time.
            reschedule (AllowOom): [
                Scheduled, Retry, Ready, Jobs, Wake, Leases, Control, Stats, Pready, Gready,
                Groups,
            ];
            /// Buries a waiting job without running it (an operator's kill, a flow's failed
            /// parent): to the dead queue as a failed attempt's burial, its end noted for its
            /// batch. Runs at `maxmemory`: it only moves a job (its history grows by one entry).
            bury (AllowOom): [
                Scheduled, Retry, Dead, Jobs, Hist, Stats, Control, Leases, Events, Uniq, UniqAt,
                Outbox,
            ];
            /// Gives a waiting job a new payload, keeping its due time, attempts and history.
            /// Refused at `maxmemory` like an enqueue: a payload may grow.
            update (Writes): [Jobs, Leases];
            /// Moves dead jobs back to `ready`.
            requeue_dead (AllowOom): [Dead, Ready, Jobs, Wake, Stats, Pready, Gready, Groups];
            /// Deletes dead jobs by key, or the oldest n.
            purge_dead (AllowOom): [Dead, Jobs, Hist];
            /// Requeues or deletes dead jobs still dead with the time of death listed.
            dead_act (AllowOom): [Dead, Ready, Jobs, Hist, Wake, Stats, Pready, Gready, Groups];
            /// Depths and counters of a partition.
            stats (NoWrites): [
                Scheduled, Retry, Ready, Active, Dead, Jobs, Stats, Control, KeptAt,
            ];
            /// Pause, rate, concurrency share and throttle: must work when the server is full.
            control (AllowOom): [Control, Wake];
            /// A partition's group settings and state: a group's limits, the default limits,
            /// a hold. Must work when the server is full, like `control`.
            group (AllowOom): [Gctl, Groups, Gwait, Gactive, Gready, Wake];
            /// One job's record, history, lease deadline or time of death.
            job (NoWrites): [Active, Dead, Jobs, Hist, Leases, Progress];
            /// A running job's progress or log line, under its lease. Refused at `maxmemory`
            /// like an enqueue: it adds data.
            progress (Writes): [Jobs, Leases, Progress];
            /// One kept (finished) job, by key.
            kept (NoWrites): [Kept, KeptAt];
            /// A page of one state.
            list (NoWrites): [
                Scheduled, Retry, Ready, Active, Dead, Jobs, Hist, Leases, Kept, KeptAt, Pready,
                Gready,
            ];
            /// Namespace-wide: the topic registry. An existing topic is only read, which works
            /// at `maxmemory`; recording a new one there fails like an enqueue.
            topic (Writes): [Topics];
            /// Namespace-wide: the live workers' heartbeats. A beat replaces a value of the
            /// same size: it must go on at `maxmemory`, or every worker would look dead exactly
            /// when the server is full.
            workers (AllowOom): [Workers];
            /// Namespace-wide: the periodic schedules. Moving a cursor rewrites a value of the
            /// same size: schedules keep ticking at `maxmemory` (their enqueues are refused
            /// there, as any enqueue).
            schedules (AllowOom): [Schedules];
            /// Namespace-wide: the record-format registry (the level new records are written
            /// in, a hold, the formats each live process reads). A beat rewrites a value of the
            /// same size: processes must keep registering at `maxmemory`.
            formats (AllowOom): [Formats];
            /// One batch's record: apply its members' ends, close, mark done, read. Runs at
            /// `maxmemory`: the ends of members must apply there.
            batch (AllowOom): [Batch];
            /// One batch's record, growing: open it, reserve members. Refused at `maxmemory`,
            /// like an enqueue.
            batch_grow (Writes): [Batch];
        }
    };
}
pub(crate) use script_table;

/// Builds [`SCRIPT_KEYS`] from the list.
macro_rules! key_table {
    ($($(#[doc = $doc:literal])* $name:ident ($flag:ident): [$($key:ident),* $(,)?];)*) => {
        /// Every script by name (its file is `lua/<name>.lua`), with its KEYS in order. `fetch`
        /// may take further fetch receipts (to delete) after its own keys. Keys that
        /// [`PartitionKeys::get`](super::PartitionKeys::get) does not give (a fetch receipt,
        /// the enqueue receipts of the call's bucket) are passed per call.
        pub const SCRIPT_KEYS: &[(&str, &[KeyName])] = &[$((stringify!($name), &[$($key),*])),*];
    };
}
script_table!(key_table);

/// The KEYS of script `name`, in order, or `None` for a name that is not a script.
pub fn script_keys(name: &str) -> Option<&'static [KeyName]> {
    SCRIPT_KEYS
        .iter()
        .find(|(script, _)| *script == name)
        .map(|(_, keys)| *keys)
}
