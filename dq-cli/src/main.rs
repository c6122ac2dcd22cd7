//! `dq`, the command line for operating dq: connects to the Redis the applications use, reads
//! the topic registry for each topic's partition count, and runs one command — inspection,
//! cancel, bury and reschedule, the dead queue, a manual enqueue. Exit codes are in `fail.rs` and
//! `dq --help`.

mod batches;
mod cli;
mod events;
mod fail;
mod finished;
mod formats;
mod view;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Parser;
use dq_core::format::ProcessRole;
use dq_core::{
    BuryOutcome, CancelOutcome, Client, Cursor, DeadAction, DeadFilter, EnqueueOutcome, JobPage,
    NewDue, Page, RescheduleOutcome, Topic, TopicClient, TopicMeta,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use cli::{
    BuryArgs, Cli, Command, DashboardArgs, DeadBulkArgs, DeadCommand, DeadListArgs, EnqueueArgs,
    GroupArgs, JobArgs, LimitsArgs, RescheduleArgs, ServeArgs, StatsArgs, TopicArgs,
};
use fail::{Exit, Failure, Outcome};
use view::{JobOut, StatsView, TopicRow};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dq: cannot start: {e}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("dq: {f}");
            f.code()
        }
    }
}

async fn run(cli: Cli) -> Outcome {
    // Only the dashboard stays up: it registers in the namespace's registry of record formats
    // like an application. The other commands run a moment and do not register (a
    // registration would hold the format level for 90 s after they exit); connecting still
    // refuses a namespace that writes a format newer than this dq reads.
    if matches!(cli.command, Command::AclRule) {
        // needed before dq can connect at all: nothing to connect to
        println!("{}", dq_core::store::redis::acl_rule(&cli.namespace));
        return Ok(());
    }
    let role = match cli.command {
        Command::Dashboard(_) => Some(ProcessRole::Dashboard),
        Command::Serve(_) => Some(ProcessRole::Producer),
        _ => None,
    };
    let tls = dq_core::TlsConfig::from_files(
        cli.tls_ca.as_deref(),
        cli.tls_cert.as_deref(),
        cli.tls_key.as_deref(),
    )?;
    let ctx = Ctx::connect(&cli.url, &cli.namespace, cli.connect_timeout, role, tls).await?;
    match cli.command {
        Command::Topics(a) => ctx.topics(a.json),
        Command::Stats(a) => ctx.stats(a).await,
        Command::Job(a) => ctx.job(a).await,
        Command::Cancel(a) => ctx.cancel(a).await,
        Command::Bury(a) => ctx.bury(a).await,
        Command::Pause(a) => ctx.pause(a, true).await,
        Command::Resume(a) => ctx.pause(a, false).await,
        Command::Limits(a) => ctx.limits(a).await,
        Command::Group(a) => ctx.group(a).await,
        Command::Batches(a) => print(batches::batches(&ctx.client, &ctx.namespace, &a).await?),
        Command::Batch(a) => print(batches::batch(&ctx.client, &a).await?),
        Command::Events(a) => events::follow(&ctx.client, a, ctrl_c()).await,
        Command::List(a) => {
            let t = ctx.topic(&a.topic)?;
            print(finished::list(&t, &a.topic, &a, ctx.now_ms().await?).await?)
        }
        Command::Reschedule(a) => ctx.reschedule(a).await,
        Command::Dead(DeadCommand::List(a)) => ctx.dead_list(a).await,
        Command::Dead(DeadCommand::Requeue(a)) => ctx.dead_bulk(a, DeadAction::Requeue).await,
        Command::Dead(DeadCommand::Purge(a)) => ctx.dead_bulk(a, DeadAction::Purge).await,
        Command::Enqueue(a) => ctx.enqueue(a).await,
        Command::Schedules(a) => ctx.schedules(a.json).await,
        Command::Dashboard(a) => ctx.dashboard(a).await,
        Command::Serve(a) => ctx.serve(a).await,
        Command::Formats(a) => print(formats::formats(&ctx.client, a.action, a.json).await?),
        Command::Workers(a) => print(formats::workers(&ctx.client, &ctx.namespace, a.json).await?),
        Command::AclRule => Ok(()), // answered above, without a connection
    }
}

/// Prints what a command returned.
fn print(printed: formats::Printed) -> Outcome {
    match printed {
        formats::Printed::Json(value) => print_json(&value),
        formats::Printed::Text(text) => {
            print!("{text}");
            Ok(())
        }
        formats::Printed::Note(note) => {
            eprintln!("{note}");
            Ok(())
        }
    }
}

/// How long past `--connect-timeout` a connection try already under way may take before the
/// command gives up regardless (a server that accepts and never answers).
const CONNECT_GRACE: Duration = Duration::from_secs(2);

/// A connection, and the namespace's topics as recorded.
struct Ctx {
    client: Client,
    namespace: String,
    topics: Vec<TopicMeta>,
}

/// Prints `value` as one line of JSON.
fn print_json<T: Serialize>(value: &T) -> Outcome {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

impl Ctx {
    /// Connects and reads the topic registry, giving up after `timeout` (plus
    /// [`CONNECT_GRACE`] for a try under way) with exit code 4 and a message naming the
    /// address, never its password. The server checks an application makes on connect
    /// (eviction policy, persistence) are skipped: an operator must be able to look at a
    /// badly configured server too.
    async fn connect(
        url: &str,
        namespace: &str,
        timeout: Duration,
        role: Option<ProcessRole>,
        tls: Option<dq_core::TlsConfig>,
    ) -> Outcome<Ctx> {
        let unreachable = |why: &str| {
            Failure::new(
                Exit::Connection,
                format!(
                    "cannot reach Redis at {} (gave up after {}; --connect-timeout waits \
                     longer): {why}",
                    dq_core::store::redis::redacted_url(url),
                    humantime::format_duration(timeout)
                ),
            )
        };
        let connect = async {
            let builder = Client::builder()
                .namespace(namespace)
                .skip_server_checks()
                .connect_timeout(timeout);
            let builder = match role {
                Some(role) => builder.role(role),
                None => builder.unregistered(),
            };
            let builder = match tls {
                Some(tls) => builder.tls(tls),
                None => builder,
            };
            let client = builder.connect(url).await?;
            let topics = client.topics().await?;
            Ok::<_, dq_core::Error>((client, topics))
        };
        let (client, topics) = match tokio::time::timeout(timeout + CONNECT_GRACE, connect).await {
            Err(_) => return Err(unreachable("no answer")),
            // A certificate refused is no matter of waiting longer: said as it is.
            Ok(Err(e @ dq_core::Error::Tls(_))) => {
                return Err(Failure::new(
                    Exit::Connection,
                    format!(
                        "cannot connect to Redis at {}: {e}",
                        dq_core::store::redis::redacted_url(url)
                    ),
                ));
            }
            Ok(Err(e)) => {
                let failure = Failure::from(e);
                return Err(match failure.exit {
                    Exit::Connection => unreachable(&failure.message),
                    _ => failure,
                });
            }
            Ok(Ok(connected)) => connected,
        };
        Ok(Ctx {
            client,
            namespace: namespace.to_owned(),
            topics,
        })
    }

    /// The recorded metadata of topic `name`.
    fn meta(&self, name: &str) -> Outcome<Option<&TopicMeta>> {
        Topic::new(name)?;
        Ok(self.topics.iter().find(|m| m.topic.as_str() == name))
    }

    /// A client of recorded topic `name`, with its recorded partition count; not found if
    /// the namespace has no record of it.
    fn topic(&self, name: &str) -> Outcome<TopicClient> {
        match self.meta(name)? {
            Some(m) => Ok(self.client.admin().topic(m)),
            None => Err(self.no_topic(name)),
        }
    }

    fn no_topic(&self, name: &str) -> Failure {
        Failure::new(
            Exit::NotFound,
            format!(
                "no topic {name:?} in namespace {:?} (`dq topics` lists them)",
                self.namespace
            ),
        )
    }

    async fn now_ms(&self) -> Outcome<u64> {
        Ok(self.client.store().now_ms().await?)
    }

    fn topics(&self, json: bool) -> Outcome {
        let rows: Vec<TopicRow> = self.topics.iter().map(TopicRow::from).collect();
        if json {
            return print_json(&rows);
        }
        if rows.is_empty() {
            eprintln!("no topics in namespace {:?}", self.namespace);
            return Ok(());
        }
        let width = rows.iter().map(|r| r.topic.len()).max().unwrap_or(0).max(5);
        println!("{:width$}  {:>10}  CREATED", "TOPIC", "PARTITIONS");
        for r in rows {
            println!("{:width$}  {:>10}  {}", r.topic, r.partitions, r.created);
        }
        Ok(())
    }

    /// The stored periodic schedules, by name.
    async fn schedules(&self, json: bool) -> Outcome {
        let rows: Vec<view::ScheduleRow> = self
            .client
            .schedules()
            .await?
            .iter()
            .map(view::ScheduleRow::from)
            .collect();
        if json {
            return print_json(&rows);
        }
        if rows.is_empty() {
            eprintln!("no schedules in namespace {:?}", self.namespace);
            return Ok(());
        }
        print!("{}", view::schedules_table(&rows, self.now_ms().await?));
        Ok(())
    }

    /// The stats of one topic or all, once or (with --watch) every interval.
    async fn stats(&self, a: StatsArgs) -> Outcome {
        let clients = match &a.topic {
            Some(name) => vec![self.topic(name)?],
            None => {
                let admin = self.client.admin();
                self.topics.iter().map(|m| admin.topic(m)).collect()
            }
        };
        let clear = a.watch && !a.json && std::io::stdout().is_terminal();
        let rounds = if a.watch {
            a.count.unwrap_or(u64::MAX)
        } else {
            1
        };
        for round in 0..rounds {
            if round > 0 {
                tokio::select! {
                    () = tokio::time::sleep(a.interval) => {}
                    _ = tokio::signal::ctrl_c() => return Ok(()),
                }
            }
            let live = self.client.workers().await?;
            let mut rows = Vec::with_capacity(clients.len());
            for t in &clients {
                let s = t.stats().await?;
                let mut row = StatsView::new(t.topic().as_str(), t.partitions(), &s);
                let serving = live
                    .iter()
                    .filter(|w| w.topics.iter().any(|n| n == t.topic().as_str()));
                row.workers = Some(serving.count() as u64);
                rows.push(row);
            }
            if a.json {
                if a.topic.is_some() {
                    print_json(&rows[0])?;
                } else {
                    print_json(&rows)?;
                }
                continue;
            }
            let mut text = String::new();
            if clear {
                // Clear the screen and home the cursor, as `watch` does.
                text.push_str("\x1b[2J\x1b[H");
            }
            if a.watch {
                text.push_str(&format!(
                    "{}  (every {})\n\n",
                    view::rfc3339(self.now_ms().await?),
                    humantime::format_duration(a.interval)
                ));
            }
            match (&a.topic, rows.as_slice()) {
                (Some(_), [one]) => text.push_str(&view::stats_detail(one)),
                (None, []) => {
                    text.push_str(&format!("no topics in namespace {:?}\n", self.namespace));
                }
                _ => text.push_str(&view::stats_table(&rows)),
            }
            print!("{text}");
            std::io::stdout().flush()?;
        }
        Ok(())
    }

    async fn job(&self, a: JobArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let Some(info) = t.job(&a.key).await? else {
            // a finished job the topic keeps
            if let Some(job) = t.finished(&a.key).await? {
                let out = finished::FinishedOut::new(&a.topic, &job);
                if a.json {
                    return print_json(&out);
                }
                print!(
                    "{}",
                    finished::finished_detail(&out, &job, self.now_ms().await?)
                );
                return Ok(());
            }
            return Err(Failure::new(
                Exit::NotFound,
                format!("no job {:?} in topic {:?}", a.key, a.topic),
            ));
        };
        let out = JobOut::new(&a.topic, &info);
        if a.json {
            return print_json(&out);
        }
        print!("{}", view::job_detail(&out, &info, self.now_ms().await?));
        Ok(())
    }

    async fn cancel(&self, a: JobArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let outcome = t.cancel(&a.key).await?;
        let (word, failure) = match outcome {
            CancelOutcome::Cancelled => ("cancelled", None),
            CancelOutcome::Gone => ("gone", None),
            CancelOutcome::NotFound => ("not_found", Some(Exit::NotFound)),
            CancelOutcome::CancelRequested => ("cancel_requested", None),
            CancelOutcome::Dead => ("dead", Some(Exit::Failed)),
        };
        let message = match outcome {
            CancelOutcome::Cancelled => format!("cancelled {}", a.key),
            CancelOutcome::Gone => format!("{} is gone (it will not run)", a.key),
            CancelOutcome::NotFound => format!("no job {:?} in topic {:?}", a.key, a.topic),
            CancelOutcome::CancelRequested => format!(
                "{} is running: asked its worker to stop it (it ends as cancelled)",
                a.key
            ),
            CancelOutcome::Dead => {
                format!("{} is in the dead queue; not cancelled (purge it)", a.key)
            }
        };
        report_outcome(&a.key, a.json, word, message, failure)
    }

    async fn bury(&self, a: BuryArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let outcome = t.bury(&a.key, &a.reason).await?;
        let (word, failure) = match outcome {
            BuryOutcome::Buried => ("buried", None),
            BuryOutcome::Running => ("running", Some(Exit::Failed)),
            BuryOutcome::Dead => ("dead", Some(Exit::Failed)),
            BuryOutcome::NotFound => ("not_found", Some(Exit::NotFound)),
        };
        let message = match outcome {
            BuryOutcome::Buried => format!("buried {}", a.key),
            BuryOutcome::Running => {
                format!("{} is running; not buried (cancel it instead)", a.key)
            }
            BuryOutcome::Dead => format!("{} is already in the dead queue; not buried", a.key),
            BuryOutcome::NotFound => format!("no job {:?} in topic {:?}", a.key, a.topic),
        };
        report_outcome(&a.key, a.json, word, message, failure)
    }

    async fn pause(&self, a: TopicArgs, pause: bool) -> Outcome {
        let t = self.topic(&a.topic)?;
        let ctl = if pause {
            t.pause().await?
        } else {
            t.resume().await?
        };
        self.print_control(&a.topic, &ctl, a.json)
    }

    async fn limits(&self, a: LimitsArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let bad = |what: String| Failure::new(Exit::BadInput, what);
        // every flag is checked before anything is written
        let current = t.control().await?.retention;
        let retention = finished::retention_change(&a, current)?;
        let events = match a.events.as_deref() {
            None => None,
            Some("off") => Some(None),
            Some("on") => Some(Some(dq_core::EventsPolicy::default())),
            Some(text) => Some(Some(
                text.parse::<u64>()
                    .map_err(|_| bad(format!("--events {text:?} is not a number, `on` or `off`")))
                    .and_then(|n| dq_core::EventsPolicy::keep(n).map_err(|e| bad(e.to_string())))?,
            )),
        };
        let max_delay = match a.max_delay.as_deref() {
            None => None,
            Some("off") => Some(None),
            Some(text) => {
                let d = humantime::parse_duration(text).map_err(|e| {
                    bad(format!(
                        "--max-delay {text:?}: {e} (write e.g. 90d, 12h, or `off`)"
                    ))
                })?;
                dq_core::control::check_max_delay(d).map_err(|e| bad(e.to_string()))?;
                Some(Some(d))
            }
        };
        let rate = match a.rate.as_deref() {
            None => None,
            Some("none") => Some(None),
            Some(text) => Some(Some(
                text.parse::<dq_core::Rate>()
                    .map_err(|e| bad(e.to_string()))?,
            )),
        };
        let cap = match a.concurrency.as_deref() {
            None => None,
            Some("none") => Some(None),
            Some(text) => Some(Some(text.parse::<u32>().map_err(|_| {
                bad(format!("--concurrency {text:?} is not a number or `none`"))
            })?)),
        };
        if let Some(rate) = rate {
            t.set_rate(rate).await?;
        }
        if let Some(cap) = cap {
            t.set_concurrency(cap).await?;
        }
        if let Some(change) = retention {
            t.set_retention(change).await?;
        }
        if let Some(change) = events {
            t.set_events(change).await?;
        }
        if let Some(change) = max_delay {
            t.set_max_delay(change).await?;
        }
        let ctl = t.control().await?;
        self.print_control(&a.topic, &ctl, a.json)
    }

    /// `dq group`: every flag is checked (name, limits, hold) before anything is written; a
    /// flag changes one setting of the limits that apply now (the group's own, else the
    /// default), the others kept.
    async fn group(&self, a: GroupArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let bad = |what: String| Failure::new(Exit::BadInput, what);
        let group = a
            .group
            .as_deref()
            .map(dq_core::GroupName::new)
            .transpose()?;
        let rate = match a.rate.as_deref() {
            None => None,
            Some("none") => Some(None),
            Some(text) => Some(Some(
                text.parse::<dq_core::Rate>()
                    .map_err(|e| bad(format!("--rate {text:?}: {e}")))?,
            )),
        };
        let cap = match a.concurrency.as_deref() {
            None => None,
            Some("none") => Some(None),
            Some(text) => Some(Some(text.parse::<u32>().map_err(|_| {
                bad(format!("--concurrency {text:?} is not a number or `none`"))
            })?)),
        };
        if let Some(hold) = a.hold {
            dq_core::group::check_change(&dq_core::GroupChange {
                group: group.clone(),
                limits: None,
                hold: Some(hold),
            })?;
        }
        let name = group.as_ref().map(dq_core::GroupName::as_str);
        let mut state = t.group_state(name).await?;
        let change = if a.clear {
            Some(None)
        } else if rate.is_some() || cap.is_some() || a.weight.is_some() {
            let mut l = state.limits.or(state.default_limits).unwrap_or_default();
            if let Some(rate) = rate {
                l.rate = rate;
            }
            if let Some(cap) = cap {
                l.concurrency = cap;
            }
            if let Some(w) = a.weight {
                l.weight = w;
            }
            l.check(t.partitions())?;
            Some(Some(l))
        } else {
            None
        };
        if let Some(limits) = change {
            state = t.set_group_limits(name, limits).await?;
        }
        if let (Some(hold), Some(g)) = (a.hold, name) {
            state = t.hold_group(g, hold).await?;
        }
        let now = self.now_ms().await?;
        print(view::group_state(&a.topic, name, &state, now, a.json))
    }

    fn print_control(&self, topic: &str, ctl: &dq_core::TopicControl, json: bool) -> Outcome {
        let rate = ctl.rate.map(|r| r.to_string());
        if json {
            return print_json(&serde_json::json!({
                "topic": topic,
                "paused": ctl.paused,
                "rate": rate,
                "concurrency": ctl.concurrency,
                "throttled_until_ms": ctl.throttled_until_ms,
                "keep": ctl.retention.map(|r| serde_json::json!({
                    "succeeded_ms": r.succeeded.map(|d| d.as_millis() as u64),
                    "cancelled_ms": r.cancelled.map(|d| d.as_millis() as u64),
                    "expired_ms": r.expired.map(|d| d.as_millis() as u64),
                    "max": r.max_kept,
                })),
                "events": ctl.events.map(|e| e.max_kept),
                "max_delay_ms": ctl.max_delay.map(|d| d.as_millis() as u64),
            }));
        }
        println!(
            "topic        {topic}\npaused       {}\nrate         {}\nconcurrency  {}\nkeep         {}\nevents       {}\nmax delay    {}",
            if ctl.paused { "yes" } else { "no" },
            rate.as_deref().unwrap_or("none"),
            ctl.concurrency.map_or("none".to_owned(), |c| c.to_string()),
            finished::retention_text(ctl.retention),
            ctl.events.map_or("off".to_owned(), |e| format!(
                "on, the last {} kept",
                e.max_kept
            )),
            ctl.max_delay.map_or("none".to_owned(), short_duration),
        );
        Ok(())
    }

    async fn reschedule(&self, a: RescheduleArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let due = match (a.when.at, a.when.after, a.when.now) {
            (Some(at), _, _) => NewDue::At(SystemTime::from(at)),
            (_, Some(after), _) => NewDue::After(after),
            _ => NewDue::After(Duration::ZERO),
        };
        match t.reschedule(&a.key, due).await? {
            RescheduleOutcome::Rescheduled { due_ms } => {
                if a.json {
                    print_json(&serde_json::json!({
                        "key": a.key, "outcome": "rescheduled", "due": view::rfc3339(due_ms),
                    }))
                } else {
                    let now = self.now_ms().await?;
                    println!(
                        "{} due at {} ({})",
                        a.key,
                        view::rfc3339(due_ms),
                        view::relative(due_ms, now)
                    );
                    Ok(())
                }
            }
            RescheduleOutcome::NotFound => Err(Failure::new(
                Exit::NotFound,
                format!("no job {:?} in topic {:?}", a.key, a.topic),
            )),
            RescheduleOutcome::Running => Err(Failure::new(
                Exit::Failed,
                format!("{} is running; not rescheduled", a.key),
            )),
            RescheduleOutcome::Dead => Err(Failure::new(
                Exit::Failed,
                format!(
                    "{} is in the dead queue; not rescheduled (requeue it)",
                    a.key
                ),
            )),
        }
    }

    async fn dead_list(&self, a: DeadListArgs) -> Outcome {
        let t = self.topic(&a.topic)?;
        let filter = DeadFilter {
            error_contains: a.error_contains,
            older_than: a.older_than,
        };
        let page = match &a.after {
            Some(c) => Page::after(c.parse::<Cursor>()?, a.limit),
            None => Page::first(a.limit),
        };
        let JobPage { jobs, next } = t.list_dead(&filter, page).await?;
        let outs: Vec<JobOut> = jobs.iter().map(|j| JobOut::new(&a.topic, j)).collect();
        let next = next.map(|c| c.to_string());
        if a.json {
            return print_json(&serde_json::json!({"jobs": outs, "next": next}));
        }
        let now = self.now_ms().await?;
        if outs.is_empty() {
            eprintln!("no dead jobs on this page");
        } else {
            println!("KEY\tDIED\tATTEMPTS\tLAST ERROR");
        }
        for (out, info) in outs.iter().zip(&jobs) {
            println!("{}", view::dead_line(out, info, now));
        }
        if let Some(c) = next {
            eprintln!("more: dq dead list {} --after '{c}'", a.topic);
        }
        Ok(())
    }

    async fn dead_bulk(&self, a: DeadBulkArgs, action: DeadAction) -> Outcome {
        let t = self.topic(&a.topic)?;
        let verb = match action {
            DeadAction::Requeue => "requeue",
            DeadAction::Purge => "purge",
        };
        let past = match action {
            DeadAction::Requeue => "requeued",
            DeadAction::Purge => "purged",
        };
        if !a.keys.is_empty() {
            return self.dead_keys(&t, &a, action, past).await;
        }
        let filter = DeadFilter {
            error_contains: a.error_contains.clone(),
            older_than: a.older_than,
        };
        if !a.all && filter == DeadFilter::all() {
            return Err(Failure::new(
                Exit::BadInput,
                format!(
                    "name the dead jobs to {verb} (KEY…), or use --all, --error-contains or --older-than"
                ),
            ));
        }
        filter.check()?;
        let dead = t.stats().await?.dead;
        if dead == 0 {
            return if a.json {
                print_json(&serde_json::json!({
                    "action": verb, "scanned": 0, "matched": 0, "done": 0,
                }))
            } else {
                println!("no dead jobs in topic {:?}", a.topic);
                Ok(())
            };
        }
        if !a.yes {
            confirm(&format!(
                "{verb} {} of the {dead} dead jobs of topic {:?}?",
                describe(&filter),
                a.topic
            ))?;
        }
        let mut sweep = t.sweep_dead(action, filter).await?;
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(dead);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} read ({eta} left)",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        while !sweep.is_finished() {
            let p = sweep.step().await?;
            // The dead queue may grow while we sweep: keep the bar's end ahead of it.
            if p.scanned > bar.length().unwrap_or(0) {
                bar.set_length(p.scanned);
            }
            bar.set_position(p.scanned);
            bar.set_message(format!("{} {past}", p.done));
        }
        bar.finish_and_clear();
        let p = sweep.progress();
        if a.json {
            print_json(&serde_json::json!({
                "action": verb, "scanned": p.scanned, "matched": p.matched, "done": p.done,
            }))
        } else {
            println!(
                "{past} {} dead jobs ({} matched of {} read)",
                p.done, p.matched, p.scanned
            );
            Ok(())
        }
    }

    /// Requeues or purges named dead jobs, one call per key, so each key's fate is known.
    async fn dead_keys(
        &self,
        t: &TopicClient,
        a: &DeadBulkArgs,
        action: DeadAction,
        past: &str,
    ) -> Outcome {
        let mut done = Vec::new();
        let mut missing = Vec::new();
        for key in &a.keys {
            let n = match action {
                DeadAction::Requeue => t.requeue_dead(&[key.as_str()]).await?,
                DeadAction::Purge => t.purge_dead(&[key.as_str()]).await?,
            };
            if n > 0 {
                done.push(key.as_str());
            } else {
                missing.push(key.as_str());
            }
        }
        if a.json {
            print_json(&serde_json::json!({ past: done, "not_dead": missing }))?;
        } else {
            for k in &done {
                println!("{past} {k}");
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(
                Exit::NotFound,
                format!("not in the dead queue: {}", missing.join(", ")),
            ))
        }
    }

    /// Serves the dashboard on `a.listen` until Ctrl-C, with the authentication the
    /// environment asks for.
    async fn dashboard(self, a: DashboardArgs) -> Outcome {
        let auth = dq_dashboard::Auth::from_env();
        if !a.listen.ip().is_loopback() && matches!(auth, dq_dashboard::Auth::None) {
            eprintln!(
                "dq: warning: the dashboard listens on {} with no authentication; set \
                 DQ_DASHBOARD_TOKEN or DQ_DASHBOARD_PASSWORD",
                a.listen
            );
        }
        let opts = dq_dashboard::DashboardOptions::default()
            .read_only(a.read_only)
            .auth(auth);
        let listener = tokio::net::TcpListener::bind(a.listen).await.map_err(|e| {
            Failure::new(
                Exit::BadInput,
                format!("cannot listen on {}: {e}", a.listen),
            )
        })?;
        eprintln!(
            "dq: dashboard on http://{}/{}",
            listener.local_addr()?,
            if a.read_only { " (read-only)" } else { "" }
        );
        if !a.api {
            dq_dashboard::serve_on(listener, self.client, opts, ctrl_c()).await?;
            return Ok(());
        }
        let api = api_config(a.listen, dq_http::DEFAULT_MAX_BODY)?;
        eprintln!("dq: HTTP API on http://{}/api/v1/", listener.local_addr()?);
        let app = dq_dashboard::router(self.client.clone(), opts)
            .nest("/api", dq_http::router(self.client, api));
        axum::serve(dq_http::no_delay(listener), app)
            .with_graceful_shutdown(ctrl_c())
            .await?;
        Ok(())
    }

    /// Serves the HTTP API on `a.listen` until Ctrl-C, with the tokens the environment gives.
    async fn serve(self, a: ServeArgs) -> Outcome {
        let config = api_config(a.listen, a.max_body)?;
        let listener = tokio::net::TcpListener::bind(a.listen).await.map_err(|e| {
            Failure::new(
                Exit::BadInput,
                format!("cannot listen on {}: {e}", a.listen),
            )
        })?;
        eprintln!(
            "dq: HTTP API on http://{}/v1/ (described at /openapi.json; {} token(s))",
            listener.local_addr()?,
            if config.has_tokens() { "with" } else { "no" }
        );
        dq_http::serve_on(listener, self.client, config, ctrl_c()).await?;
        Ok(())
    }

    async fn enqueue(&self, a: EnqueueArgs) -> Outcome {
        let partitions = match (self.meta(&a.topic)?, a.partitions) {
            (Some(m), None) => m.partitions,
            (_, Some(p)) => p,
            (None, None) => {
                return Err(Failure::new(
                    Exit::NotFound,
                    format!(
                        "no topic {:?} in namespace {:?}; to create it, pass --partitions N \
                         (the count its workers are configured with)",
                        a.topic, self.namespace
                    ),
                ));
            }
        };
        if partitions == 0 {
            return Err(Failure::new(
                Exit::BadInput,
                "--partitions must be at least 1",
            ));
        }
        let value: serde_json::Value = serde_json::from_str(&a.payload)
            .map_err(|e| Failure::new(Exit::BadInput, format!("--json is not valid JSON: {e}")))?;
        let t = self.client.admin().topic_with(&a.topic, partitions)?;
        let bytes = dq_core::payload::encode(&value, self.client.config().max_payload)?;
        let mut call = t.enqueue(bytes);
        if let Some(key) = &a.key {
            call = call.key(key.clone());
        }
        if let Some(after) = a.after {
            call = call.delay(after);
        }
        if let Some(at) = a.at {
            call = call.at(SystemTime::from(at));
        }
        if a.replace {
            call = call.replace();
        }
        if let Some(after) = a.expires_after {
            call = call.expires_after(after);
        }
        if let Some(d) = a.unique_for {
            call = call.unique_for(d);
        }
        if let Some(d) = a.debounce {
            call = call.debounce(d);
        }
        if let Some(d) = a.throttle {
            call = call.throttle(d);
        }
        if let Some(p) = a.priority {
            call = call.priority(p);
        }
        if let Some(g) = &a.group {
            call = call.group(g.as_str());
        }
        let done = call.await?;
        let key = done.key.to_string();
        match done.outcome {
            EnqueueOutcome::Created => println!("enqueued {key}"),
            EnqueueOutcome::Replaced => println!("replaced {key}"),
            EnqueueOutcome::Ended => println!("enqueued {key} (it has run already)"),
            EnqueueOutcome::Refused { until_ms } => {
                return Err(Failure::new(
                    Exit::Failed,
                    format!(
                        "key {key:?} is inside a unique_for or throttle window until \
                         {until_ms} ms; nothing written"
                    ),
                ));
            }
            EnqueueOutcome::Exists(state) => {
                return Err(Failure::new(
                    Exit::Failed,
                    format!(
                        "a job with key {key:?} exists ({state}); nothing written{}",
                        if a.replace {
                            ""
                        } else {
                            " (--replace replaces a waiting or dead one)"
                        }
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Completes at Ctrl-C (never, where no signal handler can be installed).
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The API's configuration from the environment's tokens; refused (bad input) beyond
/// loopback without a token, since anyone who can reach it could then enqueue and purge.
fn api_config(listen: std::net::SocketAddr, max_body: usize) -> Outcome<dq_http::HttpConfig> {
    let config = dq_http::HttpConfig::from_env().max_body(max_body);
    if !listen.ip().is_loopback() && !config.has_tokens() {
        return Err(Failure::new(
            Exit::BadInput,
            format!(
                "the HTTP API would listen on {listen} with no token: set {} (and {} for \
                 read-only tokens), or listen on loopback",
                dq_http::TOKENS_ENV,
                dq_http::READ_TOKENS_ENV
            ),
        ));
    }
    Ok(config)
}

/// The filter in words, for the confirmation prompt.
fn describe(filter: &DeadFilter) -> String {
    let mut parts = Vec::new();
    if let Some(text) = &filter.error_contains {
        parts.push(format!("whose last error contains {text:?}"));
    }
    if let Some(age) = filter.older_than {
        parts.push(format!(
            "that died more than {} ago",
            humantime::format_duration(age)
        ));
    }
    if parts.is_empty() {
        "all".into()
    } else {
        format!("those {}", parts.join(" and "))
    }
}

/// Asks on the terminal; refuses (bad input) when standard input is not one, so that a
/// script never waits on a prompt nobody sees.
fn confirm(question: &str) -> Outcome {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::new(
            Exit::BadInput,
            format!("{question} — standard input is not a terminal: pass --yes to go ahead"),
        ));
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Failure::new(Exit::Aborted, "aborted; nothing done"))
    }
}

/// A duration in its largest whole unit (`90d`, `12h`, `5m`, `30s`, `250ms`).
fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// How `dq cancel` and `dq bury` report a job's outcome: with `--json`, one line
/// `{"key", "outcome": word}` first; then `message` printed (text mode) when it went through,
/// or the failure with `message` and its exit code.
fn report_outcome(
    key: &str,
    json: bool,
    word: &str,
    message: String,
    failure: Option<Exit>,
) -> Outcome {
    if json {
        print_json(&serde_json::json!({"key": key, "outcome": word}))?;
    }
    match failure {
        None => {
            if !json {
                println!("{message}");
            }
            Ok(())
        }
        Some(exit) => Err(Failure::new(exit, message)),
    }
}
