//! Conformance bodies: a running job's progress and log lines (`Lease::report`). Written only
//! under the job's lease, bounded (one value, the last `MAX_LOG_LINES` lines, the others
//! counted), shown on the running job, kept with the finished job when its topic keeps it,
//! and cleared by every other end of the run so a retry starts afresh.

use super::*;
use dq::store::Success;
use dq::{MAX_LOG_LINES, Report, Retention};

fn value(n: u64) -> Report {
    Report::Progress(dq::payload::encode(&n, 1 << 16).unwrap())
}

async fn report<H: Harness>(h: &H, q: &Queue, d: &Delivery, r: Report) -> bool {
    h.store()
        .report(q, &d.key, d.token, &r)
        .await
        .expect("report")
}

/// Progress and log lines of a running job: the last value, the last lines (older ones
/// counted), refused for another lease or too large, kept with the succeeded job.
pub async fn a_running_job_reports_progress_and_log_lines<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("progress.run").unwrap();
    let q = queue("progress.run");
    t.set_retention(Some(
        Retention::default().succeeded(Duration::from_secs(3600)),
    ))
    .await
    .unwrap();
    t.enqueue(raw(1)).key("p").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert!(report(h, &q, &d, value(10)).await);
    assert!(report(h, &q, &d, value(50)).await);
    for n in 0..MAX_LOG_LINES + 5 {
        assert!(report(h, &q, &d, Report::Log(format!("line {n}"))).await);
    }
    let stale = Delivery {
        token: d.token + 1000,
        ..d.clone()
    };
    assert!(!report(h, &q, &stale, value(99)).await, "another lease");
    let big = Report::Progress(vec![0; dq::MAX_PROGRESS_LEN + 1]);
    let err = h
        .store()
        .report(&q, &d.key, d.token, &big)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");

    let running = info(&t, "p").await;
    let p = running.progress.expect("progress while running");
    assert_eq!(p.value_as::<u64>().unwrap().unwrap(), 50);
    assert_eq!(p.log.len(), MAX_LOG_LINES);
    assert_eq!(p.dropped_lines, 5);
    assert_eq!(p.log[0].text, "line 5");
    assert!(p.log[0].at_ms >= d.leased_ms);

    let out = h
        .store()
        .ack(&q, "w", &[Success::new(d.key.clone(), d.token)])
        .await
        .unwrap();
    assert_eq!(out, vec![AckOutcome::Acked]);
    let kept = t.finished("p").await.unwrap().expect("kept");
    let p = kept.progress.expect("kept with its progress");
    assert_eq!(p.value_as::<u64>().unwrap().unwrap(), 50);
    assert_eq!((p.log.len(), p.dropped_lines), (MAX_LOG_LINES, 5));
    assert!(!report(h, &q, &d, value(1)).await, "the run has ended");
}

/// A failed run's progress goes with it (a retry starts afresh), as does a released one's,
/// and a job whose topic keeps nothing leaves none behind.
pub async fn every_other_end_of_a_run_clears_its_progress<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("progress.ends").unwrap();
    let q = queue("progress.ends");
    t.enqueue(raw(1)).key("f").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert!(report(h, &q, &d, Report::Log("first try".into())).await);
    fail(h, &d, FailAction::Retry(ms(0)), "boom").await.unwrap();
    assert!(info(&t, "f").await.progress.is_none());
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.attempt, 2);
    assert!(
        info(&t, "f").await.progress.is_none(),
        "the retry starts afresh"
    );
    assert!(report(h, &q, &d, value(1)).await);
    let released = h
        .store()
        .release(&q, &[dq::store::lease_of(&d)])
        .await
        .unwrap();
    assert_eq!(released, vec![true]);
    assert!(info(&t, "f").await.progress.is_none());
    let d = fetch_one(h, &q, &req()).await;
    assert!(report(h, &q, &d, value(2)).await);
    ack_all(h, &q, std::slice::from_ref(&d)).await;
    assert!(t.finished("f").await.unwrap().is_none(), "not kept");
}
