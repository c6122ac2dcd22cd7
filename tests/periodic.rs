//! Periodic jobs in virtual time, on the embedded store: the tick computation over a year of
//! 5-minute ticks across both daylight-saving changes, the two DST days driven through a real
//! worker, and the missed-tick policies after all workers were down for an hour.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::testing::TestQueue;
use dq::{Client, JobContext, JobError, Missed, Schedule};
use jiff::Timestamp;
use jiff::tz::TimeZone;

const BERLIN: &str = "Europe/Berlin";
const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Every handler run: topic, job key, due ms, how late it started.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

/// One handler run: topic, job key, due ms, how late it started.
type Run = (&'static str, String, u64, Duration);

impl Runs {
    fn of(&self, topic: &str) -> Vec<(String, u64, Duration)> {
        let mut runs: Vec<_> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == topic)
            .map(|r| (r.1.clone(), r.2, r.3))
            .collect();
        runs.sort_by_key(|r| r.1);
        runs
    }
}

fn record(ctx: &JobContext) -> Result<(), JobError> {
    ctx.data::<Runs>()?.0.lock().unwrap().push((
        ctx.topic,
        ctx.key.to_string(),
        ctx.due_ms,
        ctx.late,
    ));
    Ok(())
}

#[dq::delayed_job(topic = "test.periodic.daily", retry = "none")]
async fn daily_report(_label: String, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx)
}

#[dq::delayed_job(topic = "test.periodic.five", retry = "none")]
async fn every_five_minutes(_n: u32, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx)
}

/// Declared on the handler: every hour on the hour, Berlin time; missed hours skipped. The
/// payload is its type's `Default` (here `()`).
#[dq::delayed_job(
    topic = "test.periodic.hourly",
    retry = "none",
    cron = "0 0 * * * *",
    tz = "Europe/Berlin",
    missed = "skip"
)]
async fn hourly(_unit: (), ctx: JobContext) -> Result<(), JobError> {
    record(&ctx)
}

/// Every minute; a tick not started 30 s after its time is dropped (the handler's expiry).
#[dq::delayed_job(
    topic = "test.periodic.expiring",
    retry = "none",
    every = "1m",
    expires_after = "30s"
)]
async fn expiring_tick(_unit: (), ctx: JobContext) -> Result<(), JobError> {
    record(&ctx)
}

fn berlin() -> TimeZone {
    TimeZone::get(BERLIN).unwrap()
}

fn local(ms: u64) -> jiff::Zoned {
    Timestamp::from_millisecond(ms as i64)
        .unwrap()
        .to_zoned(berlin())
}

/// The next two DST changes in Berlin after `ms`: (spring forward, fall back) in some order.
fn next_two_transitions(ms: u64) -> Vec<u64> {
    let tz = berlin();
    tz.following(Timestamp::from_millisecond(ms as i64).unwrap())
        .take(2)
        .map(|t| t.timestamp().as_millisecond() as u64)
        .collect()
}

fn ms(text: &str) -> u64 {
    text.parse::<Timestamp>().unwrap().as_millisecond() as u64
}

/// A year of `0 */5 * * * *` in Berlin (2026): 105,120 ticks, every one exactly 300 s after
/// the one before — across the spring-forward gap (no wall-clock time in it exists) and the
/// fall-back overlap (both passes of the repeated hour tick) — and the daily 02:30 once per
/// local day, computed in about a second of wall time (a debug build).
#[test]
fn a_year_of_five_minute_ticks_across_both_dst_changes() {
    let wall = Instant::now();
    let schedule = Schedule::cron("0 */5 * * * *").unwrap().tz(BERLIN).unwrap();
    let (start, end) = (ms("2026-01-01T00:00:00Z"), ms("2027-01-01T00:00:00Z"));
    assert_eq!(
        next_two_transitions(start),
        vec![ms("2026-03-29T01:00:00Z"), ms("2026-10-25T01:00:00Z")],
        "the year holds both changes"
    );
    let mut tick = schedule.next_after(start).unwrap();
    let mut count = 1;
    while let Some(next) = schedule.next_after(tick).filter(|n| *n <= end) {
        assert_eq!(next - tick, 5 * MINUTE, "after {}", local(tick));
        tick = next;
        count += 1;
    }
    assert_eq!(count, 365 * 24 * 12, "every 5 minutes of the year, once");
    // The daily 02:30 over the same year: once per local day, 03:00 on spring-forward day.
    let daily = Schedule::cron("0 30 2 * * *").unwrap().tz(BERLIN).unwrap();
    let mut tick = daily.next_after(start).unwrap();
    let mut days = Vec::new();
    while tick <= end {
        let at = local(tick);
        let hm = (at.hour(), at.minute());
        if at.date() == jiff::civil::date(2026, 3, 29) {
            assert_eq!(hm, (3, 0), "spring forward: {at}");
        } else {
            assert_eq!(hm, (2, 30), "{at}");
        }
        days.push(at.date());
        tick = daily.next_after(tick).unwrap();
    }
    let distinct: std::collections::BTreeSet<_> = days.iter().collect();
    assert_eq!(distinct.len(), days.len(), "never twice on one day");
    assert_eq!(days.len(), 365);
    println!("a year of ticks in {:?} of wall time", wall.elapsed());
}

/// A worker on an embedded store whose clock starts at `start`.
fn queue_at(start: &str, runs: &Runs) -> TestQueue {
    let store = dq::store::MemoryStore::starting_at(dq::store::from_unix_ms(ms(start)));
    let client = Client::from_store(Arc::new(store), dq::ClientConfig::default());
    TestQueue::start_on(client, |w| {
        w.topics(["test.periodic.daily", "test.periodic.five"])
            .data(runs.clone())
    })
    .unwrap()
}

/// One DST day driven through a worker on the embedded store, in virtual time, from noon UTC
/// the day before for two days: the daily 02:30 runs once, at `expected_daily`; the 5-minute
/// schedule runs every 300 s of real time, no tick doubled or lost; every run starts exactly
/// at its tick.
async fn dst_day_through_the_worker(start: &str, expected_daily: &str) {
    let runs = Runs::default();
    let queue = queue_at(start, &runs);
    let client = queue.client().clone();
    let daily = Schedule::cron("0 30 2 * * *").unwrap().tz(BERLIN).unwrap();
    assert_eq!(
        client
            .schedule::<daily_report>("report", daily.clone(), "nightly".into())
            .await
            .unwrap(),
        dq::ScheduleOutcome::Created
    );
    // Declared again at a restart: kept as it is.
    assert_eq!(
        client
            .schedule::<daily_report>("report", daily, "nightly".into())
            .await
            .unwrap(),
        dq::ScheduleOutcome::Unchanged
    );
    let five = Schedule::cron("0 */5 * * * *").unwrap().tz(BERLIN).unwrap();
    client
        .schedule::<every_five_minutes>("five", five, 5)
        .await
        .unwrap();
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let from = queue.now_ms().await;
    queue.advance(Duration::from_millis(2 * DAY)).await;
    let to = queue.now_ms().await;
    assert!(client.unschedule("five").await.unwrap());
    // Ticks already enqueued (the look-ahead) still run.
    queue.advance(Duration::from_secs(10)).await;

    for (_, due, late) in runs.0.lock().unwrap().iter().map(|r| (&r.1, r.2, r.3)) {
        assert_eq!(
            late,
            Duration::ZERO,
            "the run due {} started late",
            local(due)
        );
    }
    // Every 5 minutes of real time, none twice, none missing.
    let five = runs.of("test.periodic.five");
    let dues: Vec<u64> = five.iter().map(|r| r.1).collect();
    assert_eq!(from, ms(start));
    assert_eq!(
        dues[0],
        from + 5 * MINUTE,
        "the first tick at least 5 s away"
    );
    assert!(
        *dues.last().unwrap() >= to,
        "{}",
        local(*dues.last().unwrap())
    );
    for pair in dues.windows(2) {
        assert_eq!(pair[1] - pair[0], 5 * MINUTE, "after {}", local(pair[0]));
    }
    assert_eq!(
        dues.len() as u64,
        (dues.last().unwrap() - dues[0]) / (5 * MINUTE) + 1
    );
    let keys: std::collections::HashSet<_> = five.iter().map(|r| &r.0).collect();
    assert_eq!(keys.len(), five.len(), "every tick's job has its own key");
    // The daily report: once per local day, at the expected instant on the DST day.
    let daily: Vec<u64> = runs.of("test.periodic.daily").iter().map(|r| r.1).collect();
    assert_eq!(
        daily.len(),
        2,
        "{:?}",
        daily.iter().map(|d| local(*d)).collect::<Vec<_>>()
    );
    assert_eq!(
        local(daily[0]).to_string(),
        local(ms(expected_daily)).to_string()
    );
    assert_eq!(daily[0], ms(expected_daily));
    assert_eq!(
        local(daily[1]).date(),
        local(daily[0]).date().tomorrow().unwrap()
    );
    queue.shutdown().await;
}

/// Spring forward (2026-03-29, 02:00 CET → 03:00 CEST): 02:30 does not exist; the daily job
/// runs once, at 03:00 CEST (croner's rule for fixed-time expressions).
#[tokio::test(start_paused = true)]
async fn spring_forward_day_through_the_worker_each_tick_once_and_on_time() {
    dst_day_through_the_worker("2026-03-28T12:00:00Z", "2026-03-29T01:00:00Z").await;
}

/// Fall back (2026-10-25, 03:00 CEST → 02:00 CET): 02:30 happens twice; the daily job runs
/// once, at the first (CEST), and the 5-minute schedule runs through both passes.
#[tokio::test(start_paused = true)]
async fn fall_back_day_through_the_worker_each_tick_once_and_on_time() {
    dst_day_through_the_worker("2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z").await;
}

/// All workers down for an hour: with the default policy the last missed tick runs once when
/// a worker is back, then the schedule goes on; with `Missed::Skip` none of them runs. The
/// schedule is stored at 00:00:30 (first tick 00:05), no worker runs until 01:02:30, then one
/// runs for 9 minutes. Returns the keys of the jobs that ran.
async fn down_for_an_hour(policy: Missed) -> Vec<String> {
    let runs = Runs::default();
    let store =
        dq::store::MemoryStore::starting_at(dq::store::from_unix_ms(ms("2026-06-01T00:00:30Z")));
    let client = Client::from_store(Arc::new(store), dq::ClientConfig::default());
    let every = Schedule::every(Duration::from_secs(300))
        .unwrap()
        .missed(policy);
    client
        .schedule::<every_five_minutes>("five", every, 5)
        .await
        .unwrap();
    let stored = client.schedules().await.unwrap()[0].next_ms;
    assert_eq!(stored, Some(ms("2026-06-01T00:05:00Z")));
    // No worker for an hour and two minutes.
    tokio::time::sleep(Duration::from_millis(HOUR + 2 * MINUTE)).await;
    let queue = TestQueue::start_on(client, |w| {
        w.topics(["test.periodic.five"]).data(runs.clone())
    })
    .unwrap();
    queue.advance(Duration::from_millis(9 * MINUTE)).await;
    queue.shutdown().await;
    runs.of("test.periodic.five")
        .into_iter()
        .map(|r| r.0)
        .collect()
}

fn keys(times: &[&str]) -> Vec<String> {
    times.iter().map(|t| format!("five@{}", ms(t))).collect()
}

#[tokio::test(start_paused = true)]
async fn missed_ticks_run_once_by_default() {
    // 00:05 … 01:00 were missed: 01:00 runs once at 01:02:30, then 01:05 and 01:10 on time.
    assert_eq!(
        down_for_an_hour(Missed::RunOnce).await,
        keys(&[
            "2026-06-01T01:00:00Z",
            "2026-06-01T01:05:00Z",
            "2026-06-01T01:10:00Z"
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn missed_ticks_are_skipped_when_asked() {
    assert_eq!(
        down_for_an_hour(Missed::Skip).await,
        keys(&["2026-06-01T01:05:00Z", "2026-06-01T01:10:00Z"])
    );
}

/// A schedule declared on the handler is stored by the worker when it starts (named after the
/// topic) and runs on every tick.
#[tokio::test(start_paused = true)]
async fn a_schedule_declared_on_the_handler_is_stored_and_runs() {
    let runs = Runs::default();
    let store =
        dq::store::MemoryStore::starting_at(dq::store::from_unix_ms(ms("2026-06-01T00:10:00Z")));
    let client = Client::from_store(Arc::new(store), dq::ClientConfig::default());
    let queue = TestQueue::start_on(client.clone(), |w| {
        w.topics(["test.periodic.hourly"]).data(runs.clone())
    })
    .unwrap();
    queue.advance(Duration::from_millis(3 * HOUR)).await;
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "test.periodic.hourly");
    assert_eq!(listed[0].schedule.cron_expr(), Some("0 0 * * * *"));
    assert_eq!(listed[0].schedule.time_zone(), Some(BERLIN));
    assert_eq!(listed[0].schedule.missed_policy(), Missed::Skip);
    let keys: Vec<String> = runs
        .of("test.periodic.hourly")
        .into_iter()
        .map(|r| r.0)
        .collect();
    let expected: Vec<String> = ["01", "02", "03"]
        .iter()
        .map(|h| {
            format!(
                "test.periodic.hourly@{}",
                ms(&format!("2026-06-01T{h}:00:00Z"))
            )
        })
        .collect();
    assert_eq!(keys, expected);
    queue.shutdown().await;
}

/// The handler's `expires_after` reaches its periodic ticks: each tick job carries it, ticks
/// that waited past it (the topic paused) are dropped and counted, never run, and what runs
/// once the topic resumes started within 30 s of its tick.
#[tokio::test(start_paused = true)]
async fn periodic_ticks_carry_the_handlers_expiry() {
    let runs = Runs::default();
    let store =
        dq::store::MemoryStore::starting_at(dq::store::from_unix_ms(ms("2026-06-01T00:10:00Z")));
    let client = Client::from_store(Arc::new(store), dq::ClientConfig::default());
    let topic = client.topic("test.periodic.expiring").unwrap();
    topic.pause().await.unwrap();
    let queue = TestQueue::start_on(client.clone(), |w| {
        w.topics(["test.periodic.expiring"]).data(runs.clone())
    })
    .unwrap();
    // (the paused topic never settles: time passes by a plain sleep on the paused clock)
    tokio::time::sleep(Duration::from_millis(3 * MINUTE + 5_000)).await;
    let mut waiting = Vec::new();
    for state in [dq::JobState::Scheduled, dq::JobState::Ready] {
        let page = topic.list(state, dq::Page::first(100)).await.unwrap();
        waiting.extend(page.jobs);
    }
    assert!(!waiting.is_empty(), "a tick waits while paused");
    for t in &waiting {
        assert_eq!(t.expires_ms, Some(t.due_ms + 30_000), "{t:?}");
    }
    topic.resume().await.unwrap();
    queue.advance(Duration::from_millis(1_000)).await;
    let ran = runs.of("test.periodic.expiring");
    assert!(!ran.is_empty(), "the tick still in time ran");
    for (key, _, late) in &ran {
        assert!(*late < Duration::from_secs(30), "{key} ran {late:?} late");
    }
    let st = topic.stats().await.unwrap();
    assert!(st.expired_before_start >= 2, "{st:?}");
    assert_eq!(st.succeeded, ran.len() as u64);
    queue.shutdown().await;
}

/// Bad schedules are typed errors before anything is written.
#[tokio::test]
async fn invalid_schedules_are_typed_errors() {
    let client = Client::in_memory();
    assert!(matches!(
        Schedule::cron("0 */5 * * *  * *"),
        Err(dq::Error::InvalidSchedule(_))
    ));
    assert!(matches!(
        Schedule::cron("0 0 * * *").unwrap().tz("Europe/Atlantis"),
        Err(dq::Error::InvalidSchedule(_))
    ));
    let never = Schedule::cron("0 0 0 30 2 *").unwrap();
    assert!(matches!(
        client
            .schedule::<every_five_minutes>("never", never, 1)
            .await,
        Err(dq::Error::InvalidSchedule(_))
    ));
    let ok = Schedule::every(Duration::from_secs(60)).unwrap();
    assert!(matches!(
        client
            .schedule::<every_five_minutes>("bad name", ok, 1)
            .await,
        Err(dq::Error::InvalidSchedule(_))
    ));
    assert!(client.schedules().await.unwrap().is_empty());
}
