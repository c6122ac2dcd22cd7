//! The charts' data: the sampled stats of every topic, an hour of them in a ring buffer, and
//! the per-minute rates taken from the difference of counters between samples.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use dq_core::TopicStats;

/// How far back the charts reach.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);

/// Every topic's stats at one moment.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// Each topic's stats, by name.
    pub topics: BTreeMap<String, TopicStats>,
}

impl Sample {
    /// The stats of `topic`, or of every topic summed (`None`).
    pub fn of(&self, topic: Option<&str>) -> TopicStats {
        match topic {
            Some(t) => self.topics.get(t).cloned().unwrap_or_default(),
            None => self.topics.values().sum(),
        }
    }
}

/// The last hour of samples, oldest first.
#[derive(Debug)]
pub(crate) struct History {
    /// The samples.
    pub samples: VecDeque<Sample>,
    /// Most samples kept: an hour's worth.
    cap: usize,
}

impl History {
    /// An empty history for samples taken every `every`.
    pub fn new(every: Duration) -> History {
        let every = every.max(Duration::from_millis(100));
        let cap = (WINDOW.as_millis() / every.as_millis()).max(2) as usize + 1;
        History {
            samples: VecDeque::with_capacity(cap.min(4096)),
            cap,
        }
    }

    /// Adds a sample, dropping the oldest past the cap.
    pub fn push(&mut self, sample: Sample) {
        while self.samples.len() >= self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// Per-minute rates of `topic` (or all) over the last minute or so: (succeeded, failed
    /// attempts = retried + buried). `None` until two samples at least a second apart exist.
    pub fn rates(&self, topic: Option<&str>) -> Option<(f64, f64)> {
        let last = self.samples.back()?;
        let since = last.at.checked_sub(Duration::from_secs(60));
        // The newest sample at least a minute older than the last, else the oldest.
        let first = since
            .and_then(|since| self.samples.iter().rev().find(|s| s.at <= since))
            .or_else(|| self.samples.front())?;
        let secs = last.at.duration_since(first.at).as_secs_f64();
        if secs < 1.0 {
            return None;
        }
        let (a, b) = (first.of(topic), last.of(topic));
        let per_min = |x: u64, y: u64| y.saturating_sub(x) as f64 * 60.0 / secs;
        Some((
            per_min(a.succeeded, b.succeeded),
            per_min(a.retried + a.buried, b.retried + b.buried),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, succeeded: u64, retried: u64) -> Sample {
        let stats = TopicStats {
            succeeded,
            retried,
            ..TopicStats::default()
        };
        Sample {
            at,
            topics: BTreeMap::from([("t".to_owned(), stats)]),
        }
    }

    #[test]
    fn keeps_an_hour_of_samples() {
        let mut h = History::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for i in 0..1000 {
            h.push(sample(t0 + Duration::from_secs(10 * i), i, 0));
        }
        assert_eq!(h.samples.len(), 361);
        assert_eq!(h.samples.back().unwrap().of(Some("t")).succeeded, 999);
    }

    #[test]
    fn rates_are_per_minute_over_the_last_minute() {
        let mut h = History::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(h.rates(None), None);
        h.push(sample(t0, 0, 0));
        assert_eq!(h.rates(None), None, "one sample has no rate");
        // 2 jobs/s for two minutes; failures only in the last minute.
        for i in 1..=12 {
            let failed = if i > 6 { (i - 6) * 5 } else { 0 };
            h.push(sample(t0 + Duration::from_secs(10 * i), 20 * i, failed));
        }
        let (ok, failed) = h.rates(Some("t")).unwrap();
        assert!((ok - 120.0).abs() < 1e-9, "{ok}");
        assert!((failed - 30.0).abs() < 1e-9, "{failed}");
        assert_eq!(h.rates(Some("other")), Some((0.0, 0.0)));
    }
}
