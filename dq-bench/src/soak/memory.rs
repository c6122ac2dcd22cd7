//! Flat memory: the samples the soak takes (the long-lived worker's RSS, Redis `used_memory`
//! and the pending job count) and their drift from a reference sample.

use std::time::Duration;

use serde::Serialize;

/// One sample, taken while the load runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub at_s: f64,
    /// `VmRSS` of the long-lived worker, KiB (`None` if `/proc` could not be read).
    pub worker_rss_kib: Option<u64>,
    /// Redis `INFO memory` `used_memory`, bytes.
    pub used_memory: u64,
    /// `used_memory` of the empty server before the load, bytes.
    #[serde(skip)]
    pub used_memory_empty: u64,
    /// Jobs in the store (scheduled, ready, active, retry and dead, over every topic).
    pub pending: u64,
}

impl Sample {
    /// The long-lived worker's RSS, KiB.
    pub fn worker_rss(&self) -> Option<f64> {
        self.worker_rss_kib.map(|k| k as f64)
    }

    /// Redis `used_memory` per pending job, bytes (`None` with nothing pending).
    pub fn redis_per_pending(&self) -> Option<f64> {
        (self.pending > 0).then(|| self.used_memory as f64 / self.pending as f64)
    }

    /// Redis `used_memory` above the empty server's, per pending job, bytes: what the jobs
    /// cost without the server's own fixed memory (which dominates while few jobs wait).
    pub fn redis_above_empty_per_pending(&self) -> Option<f64> {
        (self.pending > 0).then(|| {
            self.used_memory.saturating_sub(self.used_memory_empty) as f64 / self.pending as f64
        })
    }
}

/// `VmRSS` of process `pid`, KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A figure at the reference and at the end of the load, and how far it moved.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Drift {
    /// When the reference sample was taken (seconds into the load).
    pub reference_at_s: f64,
    /// The figure then.
    pub reference: f64,
    /// When the last sample was taken.
    pub end_at_s: f64,
    /// The figure then.
    pub end: f64,
    /// `(end - reference) / reference`, in %.
    pub drift_pct: f64,
}

/// The drift of `figure` from the first sample at or after `reference_at` to the last sample;
/// `None` without two such samples.
pub fn drift(
    samples: &[Sample],
    reference_at: Duration,
    figure: fn(&Sample) -> Option<f64>,
) -> Option<Drift> {
    let from = reference_at.as_secs_f64();
    let (ref_at, reference) = samples
        .iter()
        .filter(|s| s.at_s >= from)
        .find_map(|s| Some((s.at_s, figure(s)?)))?;
    let (end_at, end) = samples
        .iter()
        .rev()
        .find_map(|s| Some((s.at_s, figure(s)?)))?;
    if end_at <= ref_at || reference <= 0.0 {
        return None;
    }
    Some(Drift {
        reference_at_s: ref_at,
        reference,
        end_at_s: end_at,
        end,
        drift_pct: 100.0 * (end - reference) / reference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_s: f64, rss: u64, used: u64, pending: u64) -> Sample {
        Sample {
            at_s,
            worker_rss_kib: Some(rss),
            used_memory: used,
            used_memory_empty: 0,
            pending,
        }
    }

    #[test]
    fn drift_runs_from_the_reference_to_the_last_sample() {
        let samples = [
            s(60.0, 9_000, 1_000, 10),
            s(300.0, 10_000, 4_000, 10),
            s(600.0, 10_500, 3_000, 0),
            s(900.0, 10_200, 3_600, 9),
        ];
        let rss = drift(&samples, Duration::from_secs(300), Sample::worker_rss).unwrap();
        assert_eq!((rss.reference, rss.end), (10_000.0, 10_200.0));
        assert!((rss.drift_pct - 2.0).abs() < 1e-9);
        let redis = drift(
            &samples,
            Duration::from_secs(300),
            Sample::redis_per_pending,
        )
        .unwrap();
        assert_eq!((redis.reference, redis.end), (400.0, 400.0));
        assert!(drift(&samples, Duration::from_secs(901), Sample::worker_rss).is_none());
        let net = Sample {
            used_memory_empty: 1_000,
            ..samples[1]
        };
        assert_eq!(net.redis_above_empty_per_pending(), Some(300.0));
    }

    #[test]
    fn rss_of_this_process_is_read() {
        assert!(rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }
}
