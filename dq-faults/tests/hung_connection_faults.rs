//! Hung connections: every socket a worker has open stops forwarding while staying open (the
//! half-open connections a NAT timeout or a partition leaves), and new connections work. The
//! worker must notice by its response timeout, replace its connections, and go on working.

use std::time::Duration;

use dq_faults::check::runs;
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::proxy::FaultProxy;
use dq_testkit::{ServerOptions, eventually_some};
use tokio::task::block_in_place;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// The worker's response timeout: the time a call on a frozen socket takes to fail.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the test gives the worker to start a job enqueued after the freeze: many response
/// timeouts, so a loaded machine cannot fail it, and still far below "never" (before the fix
/// the job had not started after 30 s, and would never have).
const RESUME_DEADLINE: Duration = Duration::from_secs(20);

/// Issue 9, violation 3: the worker talks to Redis through a proxy that freezes every open
/// socket. A job then enqueued directly on Redis must start: the worker's calls time out,
/// the timed-out connection is replaced by a new one, and the new one works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_replaces_hung_connections() {
    let mut s = Scenario::start("hung-connection", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let mut w = s.spec();
    w.redis_url = proxy.url();
    w.concurrency = 4;
    w.lease = Duration::from_secs(3);
    w.response_timeout = Some(RESPONSE_TIMEOUT);
    let victim = s.spawn(&w);
    let pid = s.workers[victim].pid();
    // One job first, so the worker's connections are open and in use when they freeze.
    s.enqueue_one::<WorkJob>("warm-up", FaultPayload::new(0, 10))
        .await
        .unwrap();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;

    let frozen_at = now_ms();
    let before = proxy.accepted_connections();
    proxy.freeze_open();
    // Directly on Redis: the enqueue does not depend on the fault.
    s.enqueue_one::<WorkJob>("after-freeze", FaultPayload::new(1, 10))
        .await
        .unwrap();
    let started = eventually_some(
        "the worker started the job enqueued after the freeze",
        RESUME_DEADLINE,
        || {
            let at = s
                .ledger()
                .iter()
                .find(|e| e.kind == Kind::Start && e.key == "after-freeze")
                .map(|e| e.ms);
            async move { at }
        },
    )
    .await;
    s.faults.push(dq_faults::Fault {
        what: "every open socket frozen".into(),
        pid: Some(pid),
        start_ms: frozen_at,
        end_ms: now_ms(),
    });
    s.wait_settled(WORK_TOPIC, Duration::from_secs(15)).await;
    println!(
        "hung connection: job started {} ms after the freeze; {} new connections",
        started.saturating_sub(frozen_at),
        proxy.accepted_connections() - before
    );
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.succeeded, stats.buried), (2, 0), "{stats:?}");
    assert_eq!(runs(&s.ledger())["after-freeze"].len(), 1);
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    block_in_place(|| s.stop_workers());
}
