//! Conformance bodies: periodic schedules. They are stored, listed, kept, replaced and
//! removed by name; a schedule's cursor moves only by compare-and-set; and scheduler passes
//! racing in several clients store each tick's job exactly once, due at its tick.

use dq::store::{ScheduleRecord, tick_key};
use dq::{Missed, Schedule, ScheduleOutcome};

use super::*;

/// Store, list, keep, replace, move and remove schedules; bad input writes nothing.
pub async fn schedules_are_stored_listed_and_removed<H: Harness>(h: &H) {
    let c = h.client().await;
    let store = h.store();
    let every = Schedule::every(Duration::from_secs(60)).unwrap();
    let before = now(h).await;
    let put = |name: &'static str, s: Schedule, p: u64| {
        let c = c.clone();
        async move { c.schedule_raw(name, "sched.topic", s, raw(p)).await }
    };
    assert_eq!(
        put("sched.a", every.clone(), 1).await.unwrap(),
        ScheduleOutcome::Created
    );
    assert_eq!(
        put("sched.a", every.clone(), 1).await.unwrap(),
        ScheduleOutcome::Unchanged,
        "the same definition again keeps the schedule"
    );
    let listed = c.schedules().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let a = &listed[0];
    assert_eq!(
        (a.name.as_str(), a.topic.as_str()),
        ("sched.a", "sched.topic")
    );
    assert_eq!(unraw(&a.payload), 1);
    assert_eq!(a.schedule.interval(), Some(Duration::from_secs(60)));
    assert_eq!(a.schedule.missed_policy(), Missed::RunOnce);
    let next = a.next_ms.unwrap();
    assert_eq!(next % 60_000, 0, "on a multiple of the interval");
    assert!(
        next >= before + 5_000 && next <= now(h).await + 5_000 + 60_000,
        "the first tick at least the look-ahead away: {next} from {before}"
    );

    let cron = Schedule::cron("0 30 2 * * *")
        .unwrap()
        .tz("Europe/Berlin")
        .unwrap()
        .missed(Missed::Skip);
    assert_eq!(
        put("sched.b", cron, 2).await.unwrap(),
        ScheduleOutcome::Created
    );
    let listed = c.schedules().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["sched.a", "sched.b"]);
    let b = &listed[1];
    assert_eq!(b.schedule.cron_expr(), Some("0 30 2 * * *"));
    assert_eq!(b.schedule.time_zone(), Some("Europe/Berlin"));
    assert_eq!(b.schedule.missed_policy(), Missed::Skip);

    // Compare-and-set: only from the current cursor.
    assert!(
        !store
            .advance_schedule("sched.a", next + 1, next + 60_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .advance_schedule("sched.a", next, next + 60_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .advance_schedule("sched.a", next, next + 120_000)
            .await
            .unwrap(),
        "a second scheduler holding the old cursor loses"
    );
    assert!(!store.advance_schedule("sched.none", 1, 2).await.unwrap());
    let moved = c.schedules().await.unwrap()[0].next_ms;
    assert_eq!(moved, Some(next + 60_000));
    // Another definition under the name replaces it, cursor and all.
    assert_eq!(
        put("sched.a", every, 3).await.unwrap(),
        ScheduleOutcome::Updated
    );
    let a = c.schedules().await.unwrap().remove(0);
    assert_eq!(unraw(&a.payload), 3);
    assert!(a.next_ms.unwrap() <= now(h).await + 5_000 + 60_000);

    // Bad input: a typed error, nothing written.
    let ok = Schedule::every(Duration::from_secs(60)).unwrap();
    for bad in ["", "has space", "a{b}", &"x".repeat(129)] {
        assert!(
            matches!(
                c.schedule_raw(bad, "sched.topic", ok.clone(), raw(1)).await,
                Err(Error::InvalidSchedule(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        c.schedule_raw("sched.c", "bad topic", ok.clone(), raw(1))
            .await,
        Err(Error::InvalidTopic { .. })
    ));
    let empty = ScheduleRecord {
        name: "sched.c".into(),
        next_ms: 1,
        definition: Vec::new(),
    };
    assert!(matches!(
        store.put_schedule(&empty).await,
        Err(Error::InvalidSchedule(_))
    ));
    assert_eq!(c.schedules().await.unwrap().len(), 2);

    assert!(c.unschedule("sched.a").await.unwrap());
    assert!(!c.unschedule("sched.a").await.unwrap());
    assert!(c.unschedule("sched.b").await.unwrap());
    assert!(c.schedules().await.unwrap().is_empty());
}

/// Three clients run scheduler passes at once, over and over, on a 1 s schedule: every tick's
/// job is stored once (the topic's `enqueued` counter equals the number of ticks), under its
/// key, due exactly at its tick, and no tick is skipped.
pub async fn racing_scheduler_passes_store_each_tick_once<H: Harness>(h: &H) {
    let clients = [
        h.client_with(|b| b).await.unwrap(),
        h.client_with(|b| b).await.unwrap(),
        h.client_with(|b| b).await.unwrap(),
    ];
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    clients[0]
        .schedule_raw("sched.race", "sched.race", every, raw(7))
        .await
        .unwrap();
    let first = clients[0].schedules().await.unwrap()[0].next_ms.unwrap();
    let started = Instant::now();
    let cursor = loop {
        let passes = futures_join3(
            clients[0].run_schedules(|t| t == "sched.race"),
            clients[1].run_schedules(|t| t == "sched.race"),
            clients[2].run_schedules(|t| t == "sched.race"),
        )
        .await;
        for pass in passes {
            pass.unwrap();
        }
        let cursor = clients[0].schedules().await.unwrap()[0].next_ms.unwrap();
        if cursor > first + 3_000 {
            break cursor;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cursor never passed 3 ticks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let topic = clients[0].topic("sched.race").unwrap();
    let ticks: Vec<u64> = (first..cursor).step_by(1_000).collect();
    for tick in &ticks {
        let job = info(&topic, &tick_key("sched.race", *tick)).await;
        assert_eq!(job.due_ms, *tick, "due at its tick");
        assert_eq!(unraw(&job.payload), 7);
    }
    let stats = topic.stats().await.unwrap();
    assert_eq!(
        stats.enqueued,
        ticks.len() as u64,
        "one job per tick, however many schedulers ran"
    );
    clients[0].unschedule("sched.race").await.unwrap();
}

/// Awaits three futures concurrently.
async fn futures_join3<A, B, C>(a: A, b: B, c: C) -> [A::Output; 3]
where
    A: std::future::Future,
    B: std::future::Future<Output = A::Output>,
    C: std::future::Future<Output = A::Output>,
{
    let (a, b, c) = tokio::join!(a, b, c);
    [a, b, c]
}
