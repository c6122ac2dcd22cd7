//! Which keys each Lua script takes, in the order it takes them: the one table the store's
//! script calls are built from, and that tools read to tell script calls apart (the
//! benchmark's slow-log classes). A unit test checks every entry against the `-- KEYS[i]`
//! lines of its script's header.

use super::KeyName::{self, *};

/// Every script by name (its file is `lua/<name>.lua`), with its KEYS in order. `fetch` may
/// take further fetch receipts (to delete) after its own keys. Keys that
/// [`PartitionKeys::get`](super::PartitionKeys::get) does not give (a fetch receipt, the
/// enqueue receipts of the call's bucket) are passed per call.
pub const SCRIPT_KEYS: &[(&str, &[KeyName])] = &[
    (
        "enqueue",
        &[
            Scheduled,
            Retry,
            Ready,
            Dead,
            Jobs,
            Hist,
            Stats,
            Wake,
            Calls,
            Receipts,
            OldReceipts,
        ],
    ),
    (
        "fetch",
        &[
            Scheduled,
            Retry,
            Ready,
            Active,
            Dead,
            Jobs,
            Hist,
            Stats,
            Wake,
            Control,
            FetchReceipt,
        ],
    ),
    ("ack", &[Active, Jobs, Hist, Stats, Control, Wake]),
    (
        "fail",
        &[
            Scheduled, Retry, Ready, Active, Dead, Jobs, Hist, Stats, Wake, Control,
        ],
    ),
    ("extend", &[Active, Jobs, Control]),
    (
        "release",
        &[Active, Ready, Jobs, Wake, Hist, Stats, Control],
    ),
    ("cancel", &[Scheduled, Retry, Jobs, Hist, Stats, Control]),
    ("reschedule", &[Scheduled, Retry, Ready, Jobs, Wake]),
    ("requeue_dead", &[Dead, Ready, Jobs, Wake]),
    ("purge_dead", &[Dead, Jobs, Hist]),
    ("dead_act", &[Dead, Ready, Jobs, Hist, Wake]),
    (
        "stats",
        &[Scheduled, Retry, Ready, Active, Dead, Jobs, Stats, Control],
    ),
    ("control", &[Control, Wake]),
    ("job", &[Active, Dead, Jobs, Hist]),
    ("dead_page", &[Dead, Jobs, Hist]),
    ("list", &[Scheduled, Retry, Ready, Active, Dead, Jobs, Hist]),
    // Namespace-wide, never with a partition's keys (another slot on a cluster).
    ("topic", &[Topics]),
    ("workers", &[Workers]),
    ("schedules", &[Schedules]),
];

/// The KEYS of script `name`, in order, or `None` for a name that is not a script.
pub fn script_keys(name: &str) -> Option<&'static [KeyName]> {
    SCRIPT_KEYS
        .iter()
        .find(|(script, _)| *script == name)
        .map(|(_, keys)| *keys)
}
