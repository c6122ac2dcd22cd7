//! # dq — delayed and retried jobs on Redis
//!
//! Typed, on time to the millisecond, never losing a job. See the README for a tour.
//!
//! This facade re-exports everything an application needs; depend on `dq` only.

pub use dq_core::*;
