//! `dq events`: follows (or replays) the event stream of the topics that record events, one
//! line per event, and prints the cursor to resume from on stderr when it stops.

use std::future::Future;

use dq_core::{Client, Event, EventCursor, EventsFrom, EventsOptions};

use crate::cli::EventsArgs;
use crate::fail::{Exit, Failure, Outcome};
use crate::view::rfc3339;

/// Prints events as they come until `stop` (Ctrl-C) or `--limit` events.
pub async fn follow(client: &Client, a: EventsArgs, stop: impl Future<Output = ()>) -> Outcome {
    let from = match a.from.as_str() {
        "now" => EventsFrom::Now,
        "start" => EventsFrom::Start,
        text => EventsFrom::Cursor(text.parse::<EventCursor>().map_err(|e| {
            Failure::new(
                Exit::BadInput,
                format!("--from {text:?} is not now, start or a cursor: {e}"),
            )
        })?),
    };
    let mut options = EventsOptions::default().from(from);
    if !a.topics.is_empty() {
        options = options.topics(a.topics.clone());
    }
    let mut stream = client.events_with(options).await?;
    let mut printed = 0u64;
    tokio::pin!(stop);
    while a.limit.is_none_or(|n| printed < n) {
        let item = tokio::select! {
            item = stream.next() => item,
            () = &mut stop => break,
        };
        match item {
            Some(Ok(event)) => {
                print_event(&event, a.json);
                printed += 1;
            }
            Some(Err(e)) => eprintln!("dq: reading events: {e}"),
            None => break,
        }
    }
    eprintln!("cursor: {}", stream.cursor());
    Ok(())
}

fn print_event(e: &Event, json: bool) {
    if json {
        println!("{}", serde_json::to_string(e).unwrap_or_default());
        return;
    }
    let mut line = format!(
        "{}  {}#{}  {:<9}  {}",
        rfc3339(e.at_ms),
        e.topic,
        e.partition,
        e.kind,
        e.key
    );
    if let Some(a) = e.attempt {
        line.push_str(&format!("  attempt={a}"));
    }
    if let Some(w) = &e.worker {
        line.push_str(&format!("  worker={w}"));
    }
    if let Some(d) = e.due_ms {
        line.push_str(&format!("  due={}", rfc3339(d)));
    }
    if let Some(err) = &e.error {
        line.push_str(&format!("  error={err:?}"));
    }
    println!("{line}");
}
