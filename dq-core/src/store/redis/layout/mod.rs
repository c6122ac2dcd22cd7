//! For tools and tests: the key layout and record format of the Redis store.
//!
//! This module is the one definition of what the Redis store writes (ARCHITECTURE.md §4): the
//! key names of a partition and their Redis types ([`KeyName`]), how a key is built and read
//! back ([`PartitionKeys`], [`parse_key`]), which keys each Lua script takes and in what order
//! ([`SCRIPT_KEYS`], the table the store's own script calls are built from), the names of
//! dq's Redis Functions library and functions ([`script_of_function`]), the record header
//! ([`RecordHeader`]) in each record format and the rule that tells them apart
//! ([`record_format`]), the namespace's topic registry ([`topics_key`], [`TopicRecord`]) and the
//! invariants that tie them together ([`check_invariants`]).
//! Tests, the fault scenarios and the benchmark import it; nothing else spells a key.
//!
//! The layout is not a stable interface: it may change in any release before 1.0.

mod functions;
mod header;
mod invariants;
mod keys;
mod script_keys;
mod topic_record;

pub use functions::{HASH_LEN, LIBRARY_PREFIX, is_library, script_of_function};
pub(crate) use functions::{function_name, library_name};
pub use header::{
    HEADER_LEN, LEAN_HEADER_LEN, MAX_FORMAT, RecordFormat, RecordHeader, header_len, record_format,
};
pub use invariants::{
    CONTROL_FIELDS, KeySeen, PartitionSnapshot, STATS_FIELDS, Snapshot, Violation, check_invariants,
};
pub use keys::{
    KeyName, ParsedKey, PartitionKeys, RECEIPT_ENTRY_LEN, batch_index_key, batch_key, formats_key,
    parse_key, receipt_bucket, receipt_entry, schedules_key, shapes_key, topics_key, workers_key,
};
pub(crate) use script_keys::script_table;
pub use script_keys::{SCRIPT_KEYS, script_keys};
pub use topic_record::{TOPIC_RECORD_VERSION, TopicRecord};
