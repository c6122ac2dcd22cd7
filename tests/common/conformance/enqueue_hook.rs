//! Conformance bodies: enqueue hooks (`ClientBuilder::enqueue_hook`) see every job before it
//! is written, and a refusal writes nothing and reaches the caller as the hook's own error.

use std::sync::{Arc, Mutex};

use super::*;
use dq::middleware::{EnqueueHook, EnqueueRequest};

/// The hook's own error: the caller gets it back typed.
#[derive(Debug, PartialEq)]
pub struct NoEntry {
    /// The refused key.
    pub key: String,
}

impl std::fmt::Display for NoEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no entry for {}", self.key)
    }
}

impl std::error::Error for NoEntry {}

/// One job as the hook saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub topic: String,
    pub key: String,
    pub due: Due,
    pub payload: Vec<u8>,
}

/// Records every job it is asked about; refuses keys starting with `no-`.
#[derive(Clone, Default)]
pub struct Doorman(pub Arc<Mutex<Vec<Seen>>>);

impl Doorman {
    pub fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    pub fn keys(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.key).collect()
    }
}

#[dq::middleware::async_trait]
impl EnqueueHook for Doorman {
    async fn check(&self, job: &EnqueueRequest<'_>) -> Result<(), dq::BoxError> {
        self.0.lock().unwrap().push(Seen {
            topic: job.topic().to_string(),
            key: job.key().to_string(),
            due: job.due(),
            payload: job.payload().to_vec(),
        });
        if job.key().as_str().starts_with("no-") {
            return Err(Box::new(NoEntry {
                key: job.key().to_string(),
            }));
        }
        Ok(())
    }
}

/// A refused enqueue — typed, raw or repeatable — writes nothing, and the caller gets the
/// hook's error typed; an enqueue let through is stored, the hook having seen its topic, key,
/// due time and payload.
pub async fn a_refused_enqueue_writes_nothing<H: Harness>(h: &H) {
    let doorman = Doorman::default();
    let c = h
        .client_with(|b| b.enqueue_hook(doorman.clone()))
        .await
        .unwrap();
    let refused = |r: dq::Result<dq::Enqueued>, key: &str| match r {
        Err(e) => {
            assert_eq!(
                e.refused_with::<NoEntry>(),
                Some(&NoEntry {
                    key: key.to_string()
                }),
                "{e:?}"
            );
            assert!(
                matches!(&e, Error::EnqueueRefused { topic, key: k, .. }
                    if k == key && topic == close_order::TOPIC),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!("enqueue of orders.close/{key} refused: no entry for {key}")
            );
        }
        Ok(e) => panic!("{key} was let through: {e:?}"),
    };
    refused(c.enqueue::<close_order>(order(1)).key("no-1").await, "no-1");
    let t = c.topic(close_order::TOPIC).unwrap();
    refused(t.enqueue(raw(2)).key("no-2").delay(HOUR).await, "no-2");
    refused(
        t.enqueue_repeatable(JobSpec::new(raw(3)).key("no-3"), 7)
            .await,
        "no-3",
    );
    h.assert_untouched().await;
    assert_eq!(doorman.keys(), ["no-1", "no-2", "no-3"]);
    let seen = doorman.seen();
    assert_eq!(seen[1].due, Due::After(HOUR));
    assert_eq!(unraw(&seen[1].payload), 2);

    let ok = c
        .enqueue::<close_order>(order(4))
        .key("yes-4")
        .await
        .unwrap();
    assert_eq!(ok.outcome, EnqueueOutcome::Created);
    let last = doorman.seen().pop().unwrap();
    assert_eq!(
        (last.topic.as_str(), last.key.as_str(), last.due),
        (close_order::TOPIC, "yes-4", Due::Now)
    );
    assert_eq!(
        dq::payload::decode::<Order>(&last.payload).unwrap(),
        order(4),
        "the hook sees the payload as enqueued"
    );
    // A generated key is generated before the hook sees the job.
    let generated = t.enqueue(raw(5)).await.unwrap();
    assert_eq!(doorman.keys().last(), Some(&generated.key.to_string()));
    let st = t.stats().await.unwrap();
    assert_eq!(st.ready, 2, "{st:?}");
}

/// A bulk enqueue asks the hook about each job before any of the bulk is written: one
/// refusal is `BulkItem` naming the job (its `source` the refusal) and nothing is written;
/// a bulk let through is stored whole.
pub async fn bulk_enqueue_asks_the_hook_per_job<H: Harness>(h: &H) {
    let doorman = Doorman::default();
    let c = h
        .client_with(|b| {
            b.enqueue_hook(doorman.clone())
                .partitions(close_order::TOPIC, 3)
                .bulk_chunk(2)
        })
        .await
        .unwrap();
    let keys = |refused: Option<usize>| -> Vec<JobSpec<Order>> {
        (0..10)
            .map(|i| {
                let key = match refused {
                    Some(r) if r == i => format!("no-{i}"),
                    _ => format!("job-{i}"),
                };
                JobSpec::new(order(i as u64)).key(key)
            })
            .collect()
    };
    let err = c
        .enqueue_bulk::<close_order>(keys(Some(6)))
        .await
        .unwrap_err();
    match &err {
        Error::BulkItem { index, key, source } => {
            assert_eq!((*index, key.as_deref()), (6, Some("no-6")));
            assert!(
                matches!(**source, Error::EnqueueRefused { .. }),
                "{source:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.refused_with::<NoEntry>(),
        Some(&NoEntry { key: "no-6".into() })
    );
    h.assert_untouched().await;
    let asked: Vec<String> = (0..6)
        .map(|i| format!("job-{i}"))
        .chain(["no-6".to_string()])
        .collect();
    assert_eq!(doorman.keys(), asked, "asked job by job, up to the refusal");

    let out = c.enqueue_bulk::<close_order>(keys(None)).await.unwrap();
    assert_eq!(out.len(), 10);
    let asked: Vec<String> = (0..10).map(|i| format!("job-{i}")).collect();
    assert_eq!(doorman.keys()[7..], asked[..], "each job once");
    let st = c.stats::<close_order>().await.unwrap();
    assert_eq!((st.ready, st.enqueued), (10, 10), "{st:?}");
}
