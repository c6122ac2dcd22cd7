//! Live workers (`Client::workers`) on real processes: each `fault-worker` lists itself with
//! its heartbeat; a SIGKILLed one drops out once its heartbeat expires, and a gracefully
//! stopped one at once.

use std::collections::BTreeSet;
use std::time::Duration;

use dq_faults::{Scenario, WORK_TOPIC};
use dq_testkit::{ServerOptions, eventually_some};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Generous for a loaded 2-core machine: a heartbeat of 200 ms expires after 600 ms.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_workers_then_one_after_a_sigkill() {
    let mut s = Scenario::start("live-workers", BIN, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.concurrency = 3;
    spec.heartbeat = Some(Duration::from_millis(200));
    let a = s.spawn(&spec);
    // The survivor's heartbeat lasts 30 s: its entry can only be gone right after its
    // graceful stop if the stop removed it.
    let mut long = spec.clone();
    long.heartbeat = Some(Duration::from_secs(10));
    let b = s.spawn(&long);
    let (pid_a, pid_b) = (s.workers[a].pid(), s.workers[b].pid());

    let client = s.client.clone();
    let live = eventually_some("both workers listed", WAIT, || {
        let client = client.clone();
        async move {
            let w = client.workers().await.unwrap();
            (w.len() == 2).then_some(w)
        }
    })
    .await;
    let pids: BTreeSet<u32> = live.iter().map(|w| w.pid).collect();
    assert_eq!(pids, BTreeSet::from([pid_a, pid_b]), "{live:?}");
    for w in &live {
        assert_eq!(w.topics, vec![WORK_TOPIC.to_string()], "{w:?}");
        assert_eq!(w.concurrency, 3, "{w:?}");
        assert_eq!(w.version, env!("CARGO_PKG_VERSION"), "{w:?}");
        assert_eq!(w.running, 0, "{w:?}");
        assert!(!w.host.is_empty(), "{w:?}");
        assert!(w.id.contains(&w.pid.to_string()), "{w:?}");
        assert!(w.started_ms > 0 && w.beat_ms > 0, "{w:?}");
        // Three beats.
        let ttl = if w.pid == pid_a { 600 } else { 30_000 };
        assert_eq!(w.expires_ms - w.beat_ms, ttl, "{w:?}");
    }

    s.kill(a);
    let left = eventually_some("the killed worker's heartbeat expired", WAIT, || {
        let client = client.clone();
        async move {
            let w = client.workers().await.unwrap();
            (w.len() == 1).then_some(w)
        }
    })
    .await;
    assert_eq!(left[0].pid, pid_b, "the survivor is listed: {left:?}");

    // A graceful stop removes the entry at once (long before its 30 s expiry).
    s.workers[b].terminate(WAIT);
    let after = client.workers().await.unwrap();
    assert!(after.is_empty(), "{after:?}");
}
