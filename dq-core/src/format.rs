//! Stored formats: the version a job record says it was written in, the versions this dq
//! reads, and the one a process writes while a rolling upgrade runs (ARCHITECTURE.md §4).
//!
//! Format 1 is what dq wrote before records carried a version (the header starts with the
//! state letter); every later format starts its record with its version byte. A process
//! reads every format up to [`Formats::reads`] and writes [`Formats::write`], which starts
//! at the oldest format a live process of the namespace may still need and rises only once
//! every live process reads the newer one.

use std::sync::atomic::{AtomicU8, Ordering};

/// The format of records written before dq versioned them: no version byte.
pub const LEGACY_FORMAT: u8 = 1;

/// The newest record format this dq reads and writes.
pub const NEWEST_FORMAT: u8 = 2;

/// Which record formats a store reads, and which one it writes now.
///
/// Shared by a client, its store and its workers: the namespace's registry of live
/// processes raises [`write`](Formats::write) during a rolling upgrade; every new record is
/// written in it, and a record moved from one state to another keeps the format it has.
#[derive(Debug)]
pub struct Formats {
    reads: u8,
    write: AtomicU8,
}

impl Formats {
    /// A process that reads formats up to `reads` (clamped to `LEGACY_FORMAT..=NEWEST_FORMAT`)
    /// and writes `write` (clamped to `LEGACY_FORMAT..=reads`).
    pub fn new(reads: u8, write: u8) -> Formats {
        let reads = reads.clamp(LEGACY_FORMAT, NEWEST_FORMAT);
        Formats {
            reads,
            write: AtomicU8::new(write.clamp(LEGACY_FORMAT, reads)),
        }
    }

    /// A store no other process shares (the embedded one): it writes the newest it reads.
    pub fn single_process(reads: u8) -> Formats {
        Formats::new(reads, reads)
    }

    /// A store shared with other processes: it writes the legacy format until the
    /// namespace's registry says every live process reads a newer one.
    pub fn shared(reads: u8) -> Formats {
        Formats::new(reads, LEGACY_FORMAT)
    }

    /// The newest format this process reads (it reads every older one too).
    pub fn reads(&self) -> u8 {
        self.reads
    }

    /// The format new records are written in now.
    pub fn write(&self) -> u8 {
        self.write.load(Ordering::Acquire)
    }

    /// Sets the format new records are written in, clamped to `LEGACY_FORMAT..=reads`;
    /// returns the format now written.
    pub fn set_write(&self, format: u8) -> u8 {
        let f = format.clamp(LEGACY_FORMAT, self.reads);
        self.write.store(f, Ordering::Release);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_never_passes_what_the_process_reads() {
        let f = Formats::shared(NEWEST_FORMAT);
        assert_eq!((f.reads(), f.write()), (NEWEST_FORMAT, LEGACY_FORMAT));
        assert_eq!(f.set_write(9), NEWEST_FORMAT);
        let old = Formats::single_process(LEGACY_FORMAT);
        assert_eq!(old.set_write(NEWEST_FORMAT), LEGACY_FORMAT);
        assert_eq!(Formats::new(0, 0).reads(), LEGACY_FORMAT);
    }
}
