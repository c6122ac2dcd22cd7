//! Groups with a real worker on a real Redis: a handler declaring `group = tenant` puts each
//! typed enqueue in its payload's tenant, and its `group_concurrency` is written as the
//! topic's default group limits when the worker starts; no tenant runs more than its cap; a
//! handler's `rate_limited` on one tenant's job holds that tenant, in every partition, and
//! no other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_testkit::eventually;
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(30);
/// How long partner's refusal holds the tenant.
const HOLD: Duration = Duration::from_secs(2);

/// A tenant's order.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    tenant: String,
    n: u32,
}

/// Running jobs per tenant now and at most, and the runs' starts, shared with the test.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Runs>>);

/// What the handler saw.
#[derive(Default)]
struct Runs {
    /// Per tenant: running now, the most at once.
    running: HashMap<String, (u32, u32)>,
    /// Each run: tenant, order, when it started.
    starts: Vec<(String, u32, std::time::Instant)>,
    /// When partner's order 0 was refused (a throttle gives the attempt back: once only).
    refused: Option<std::time::Instant>,
}

/// One order: counts its tenant's running jobs while it works; the first run of tenant
/// `partner`'s order 0 is refused by the partner for [`HOLD`] (a throttle: not an attempt).
#[dq::delayed_job(topic = "wgroups.orders", group = tenant, group_concurrency = 2, data(Seen))]
async fn place_order(order: Order, ctx: JobContext) -> Result<(), JobError> {
    let seen = ctx.data::<Seen>()?.clone();
    // (the payload's tenant, but for the order enqueued in another group)
    let group = ctx.group().expect("every order has a group").to_string();
    assert_eq!(group == order.tenant, order.n != 99, "{group} {order:?}");
    {
        let mut s = seen.0.lock().unwrap();
        if order.tenant == "partner" && order.n == 0 && s.refused.is_none() {
            s.refused = Some(std::time::Instant::now());
            return Err(JobError::rate_limited(HOLD));
        }
        let e = s.running.entry(group.clone()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
        s.starts
            .push((group.clone(), order.n, std::time::Instant::now()));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut s = seen.0.lock().unwrap();
    s.running.get_mut(&group).unwrap().0 -= 1;
    Ok(())
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("wgroups"))
        .default_partitions(2)
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

#[tokio::test]
async fn tenants_are_groups_within_their_limits_and_a_throttle_holds_one() {
    let client = client().await;
    let seen = Seen::default();
    for tenant in ["acme", "globex", "partner"] {
        for n in 0..6 {
            client
                .enqueue::<place_order>(Order {
                    tenant: tenant.into(),
                    n,
                })
                .key(format!("{tenant}-{n}"))
                .await
                .unwrap();
        }
    }
    let job = client
        .job::<place_order>("globex-3")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.group.map(|g| g.to_string()), Some("globex".into()));
    // an enqueue may name another group than the payload's
    client
        .enqueue::<place_order>(Order {
            tenant: "acme".into(),
            n: 99,
        })
        .key("moved")
        .group("elsewhere")
        .await
        .unwrap();
    let topic = client.topic("wgroups.orders").unwrap();
    assert_eq!(
        topic
            .job("moved")
            .await
            .unwrap()
            .unwrap()
            .group
            .map(|g| g.to_string()),
        Some("elsewhere".into())
    );

    let handle = Worker::builder(client.clone())
        .topics(["wgroups.orders"])
        .concurrency("wgroups.orders", 8)
        .data(seen.clone())
        .idle_wait(Duration::from_millis(50))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    // the worker wrote the handler's default group limits
    let defaults = topic.group_state(None).await.unwrap().default_limits;
    assert_eq!(
        defaults.and_then(|l| l.concurrency),
        Some(2),
        "{defaults:?}"
    );
    eventually("every order placed", WAIT, || async {
        topic.stats().await.unwrap().succeeded == 19
    })
    .await;
    handle.shutdown().await;
    // one throttle, of partner's group only: the topic was never throttled
    assert_eq!(topic.stats().await.unwrap().throttles, 1);
    assert!(topic.control().await.unwrap().throttled_until_ms.is_none());

    let s = seen.0.lock().unwrap();
    for (tenant, (_, most)) in &s.running {
        assert!(*most <= 2, "{tenant} ran {most} at once");
    }
    // partner's order 0 was refused and held partner for HOLD: none of partner's runs started
    // well inside the hold (runs leased with order 0 start with it), while the other tenants
    // ran on meanwhile: most of theirs before partner's first run after the hold
    let runs = &s.starts;
    let refused = s.refused.expect("partner's order 0 was refused");
    let inside = |t: std::time::Instant| {
        t > refused + Duration::from_millis(200) && t < refused + HOLD - Duration::from_millis(200)
    };
    let partner: Vec<_> = runs.iter().filter(|r| r.0 == "partner").collect();
    assert_eq!(partner.len(), 6);
    assert!(
        partner.iter().all(|r| !inside(r.2)),
        "partner ran while held: {runs:?}"
    );
    let resumed = partner
        .iter()
        .map(|r| r.2)
        .filter(|t| *t >= refused + HOLD - Duration::from_millis(200))
        .min()
        .expect("partner ran after its hold");
    let others_before = runs
        .iter()
        .filter(|r| r.0 != "partner" && r.2 < resumed)
        .count();
    assert!(others_before >= 10, "others held too: {runs:?}");
}
