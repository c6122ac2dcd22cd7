//! The command line's grammar (clap derive): global connection options, every command and
//! its flags, and the help text an operator reads.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Printed after `dq --help`: what each exit code means, for scripts.
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  failed or refused (e.g. the job is running, a job with the key exists)
  2  bad input (a usage error, bad JSON, a bad time or key, a bulk operation without --yes
     when standard input is not a terminal); nothing was written
  3  not found (no such job or batch, or no such topic in the namespace)
  4  cannot reach Redis (connection refused or lost, timeout, a TLS certificate refused)
  5  aborted at the confirmation prompt; nothing was written

Examples:
  dq topics
  dq stats orders.close --watch
  dq schedules --json
  dq formats
  dq formats hold
  dq job orders.close order-7
  dq bury orders.close order-7 --reason 'order withdrawn'
  dq dead list orders.close --error-contains 503 --limit 50
  dq dead requeue orders.close --all --error-contains 'partner API'
  dq dead purge orders.close --older-than 7d --yes
  dq enqueue orders.close --key order-7 --json '{\"order\":7}' --in 5m
  dq enqueue orders.close --key order-8 --json '{\"order\":8}' --priority 8
  dq enqueue orders.close --key order-9 --json '{\"order\":9}' --group tenant-7
  dq group orders.close --concurrency 4 --weight 1
  dq group orders.close tenant-7 --rate 10/s --weight 3
  dq group orders.close tenant-7 --hold 5m
  dq batches
  dq batch order-17
  dq batch order-17 --members --state dead
  dq batch order-17 --cancel --yes
  dq dashboard --listen 127.0.0.1:8080 --read-only
  DQ_API_TOKENS=… dq serve --listen 0.0.0.0:8081";

/// `dq`: operate dq job queues on Redis — inspect topics, stats and jobs; cancel, bury
/// and reschedule jobs; list, requeue and purge the dead queue; enqueue a job by hand.
#[derive(Debug, Parser)]
#[command(
    name = "dq",
    version,
    about = "Operate dq job queues on Redis: inspect topics, stats and jobs; cancel, \
             bury, reschedule and enqueue jobs; list, requeue and purge the dead queue.",
    after_help = EXIT_CODES,
    max_term_width = 100
)]
pub struct Cli {
    /// Redis to connect to: redis://host:port/db (redis://user:password@host:port/db with
    /// ACLs; rediss://… in TLS builds), a cluster by seed nodes,
    /// redis+cluster://host:port,host:port, or a master watched by Redis Sentinel,
    /// redis+sentinel://host:port,host:port/MASTER[/db] (the hosts are sentinels, MASTER the
    /// name they know the master by).
    #[arg(
        long,
        env = "REDIS_URL",
        global = true,
        default_value = "redis://127.0.0.1:6379/",
        hide_env_values = true,
        help_heading = "Connection"
    )]
    pub url: String,

    /// Key prefix the applications use (their ClientBuilder::namespace).
    #[arg(
        long,
        env = "DQ_NAMESPACE",
        global = true,
        default_value = "dq",
        help_heading = "Connection"
    )]
    pub namespace: String,

    /// How long to wait for Redis before giving up with exit code 4 (e.g. 2s, 1m): a wrong
    /// address or a server that is down fails this soon instead of looking like a hang.
    /// Applications wait 30 s by default; the dashboard command waits this long to start.
    #[arg(
        long,
        env = "DQ_CONNECT_TIMEOUT",
        global = true,
        default_value = "5s",
        value_parser = parse_duration,
        value_name = "DURATION",
        help_heading = "Connection"
    )]
    pub connect_timeout: Duration,

    /// PEM file of the CA certificate(s) to trust for rediss:// (a private CA); without it
    /// the Mozilla roots built into dq are trusted. TLS builds only.
    #[arg(
        long,
        env = "DQ_TLS_CA",
        global = true,
        value_name = "FILE",
        help_heading = "Connection"
    )]
    pub tls_ca: Option<PathBuf>,

    /// PEM file of a client certificate to present (mutual TLS), with --tls-key.
    #[arg(
        long,
        env = "DQ_TLS_CERT",
        global = true,
        value_name = "FILE",
        requires = "tls_key",
        help_heading = "Connection"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM file of the client certificate's private key, with --tls-cert.
    #[arg(
        long,
        env = "DQ_TLS_KEY",
        global = true,
        value_name = "FILE",
        requires = "tls_cert",
        help_heading = "Connection"
    )]
    pub tls_key: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Every command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the topics recorded in the namespace, with their partition counts.
    Topics(JsonOut),

    /// Depths, counters and lateness of one topic, or of every topic.
    Stats(StatsArgs),

    /// Show one job: state, due time, attempts, every error, and its payload as JSON; for a
    /// finished job its topic keeps, its outcome, timings, worker and result.
    Job(JobArgs),

    /// List one page of a topic's jobs in a state: scheduled, ready, active, retry, dead, or
    /// the finished jobs the topic keeps (succeeded, cancelled, expired). Ready jobs are
    /// listed in the order workers take them (higher priority first).
    List(ListArgs),

    /// Cancel a job: one that has not started is removed; a running one is asked to stop
    /// (its worker ends it as cancelled, without a retry).
    Cancel(JobArgs),

    /// Bury a waiting job (scheduled, ready or retry): move it to the dead queue without
    /// running it, the reason in its history (a running job is not touched: cancel it).
    Bury(BuryArgs),

    /// Pause a topic: no worker leases its jobs until `dq resume` (enqueue still works).
    Pause(TopicArgs),

    /// Resume a paused topic (its workers are woken at once).
    Resume(TopicArgs),

    /// Show or set a topic's limits across every worker (a rate, a concurrency cap), which
    /// finished jobs it keeps, and whether it records events.
    Limits(LimitsArgs),

    /// Show or set the limits of a topic's groups (a job enqueued with --group waits, once
    /// due, for its group's turn): one group's own limits, or without GROUP the default every
    /// group without its own follows; hold a group for a while; its running and waiting jobs.
    Group(GroupArgs),

    /// List the batches not done — open, closed with members not ended, or complete with
    /// their callback not enqueued yet — oldest first: id, status, member counts, age. A
    /// flow's children are the batch `flow.<topic>.<parent key>`.
    Batches(BatchesArgs),

    /// Show one batch: status, failure policy, what its completion does (a callback, or a
    /// flow's parent) and that job's state, its members by state, when it was opened, closed
    /// and done; or list its members (--members); close it (--close) or cancel it
    /// (--cancel: closes it and cancels every member not ended).
    Batch(BatchArgs),

    /// Follow the events of the topics that record them (enqueued, started, succeeded,
    /// failed, dead, cancelled, expired, …) as they happen, or replay those kept.
    Events(EventsArgs),

    /// Give a waiting job a new due time.
    Reschedule(RescheduleArgs),

    /// The dead queue: list, requeue, purge.
    #[command(subcommand)]
    Dead(DeadCommand),

    /// Enqueue a job by hand, its payload given as JSON (stored as MessagePack).
    Enqueue(EnqueueArgs),

    /// List the periodic schedules: topic, cron expression or interval, next and last tick.
    Schedules(JsonOut),

    /// Serve the web dashboard (topics, jobs, the dead queue) until Ctrl-C.
    Dashboard(DashboardArgs),

    /// Serve the HTTP+JSON API (enqueue, cancel, reschedule, operate; docs/HTTP.md) until
    /// Ctrl-C, for producers in any language.
    Serve(ServeArgs),

    /// The job-record formats: the one new jobs are written in (the level), the hold, and
    /// the live processes with the newest format each reads; hold or release the level
    /// during an upgrade (docs/UPGRADING.md).
    Formats(FormatsArgs),

    /// List the live workers: host, pid, topics, jobs running, dq version, the newest
    /// job-record format each reads, last heartbeat.
    Workers(JsonOut),

    /// Print the Redis ACL rule a dq process needs for the namespace (the keys, no channels,
    /// the commands), to follow `ACL SETUSER <user> on ><password>`; connects to nothing.
    AclRule,
}

/// `dq formats [hold [LEVEL] | release]`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FormatsArgs {
    /// Hold or release the level (without one: show the registry).
    #[command(subcommand)]
    pub action: Option<FormatsCommand>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `dq formats hold|release`.
#[derive(Debug, Subcommand)]
pub enum FormatsCommand {
    /// Keep the level from rising past LEVEL (default: the level now), so a rollback to a dq
    /// that reads it stays possible; `dq formats release` lets it rise again.
    Hold {
        /// The highest format new jobs may be written in (at least the level now: it never
        /// goes back).
        level: Option<u8>,
    },
    /// Let the level rise again: at the next registration once every live process reads a
    /// newer format.
    Release,
}

/// `dq dashboard`.
#[derive(Debug, Args)]
#[command(after_help = "\
Authentication comes from the environment, never from the command line:
  DQ_DASHBOARD_TOKEN      require `Authorization: Bearer <token>`
  DQ_DASHBOARD_PASSWORD   else require basic auth with this password
  DQ_DASHBOARD_USER       the basic-auth user (default: dq)")]
pub struct DashboardArgs {
    /// Address to listen on. The default is loopback only; listening on another address
    /// without DQ_DASHBOARD_TOKEN or DQ_DASHBOARD_PASSWORD is logged as a warning.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,

    /// Show, never change: no buttons, and every POST is refused (403).
    #[arg(long)]
    pub read_only: bool,

    /// Also serve the HTTP+JSON API (`dq serve`) under /api, with its own tokens
    /// (DQ_API_TOKENS, DQ_API_READ_TOKENS).
    #[arg(long)]
    pub api: bool,
}

/// `dq serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Tokens come from the environment, never from the command line (comma-separated lists):
  DQ_API_TOKENS        read-write bearer tokens
  DQ_API_READ_TOKENS   read-only bearer tokens (GET only)
Without any, the API answers everyone: it then refuses to listen beyond loopback.
The API is described at /openapi.json; docs/HTTP.md is the guide.")]
pub struct ServeArgs {
    /// Address to listen on (default: loopback only).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: std::net::SocketAddr,

    /// Largest request body, in bytes; a larger one is refused with 413.
    #[arg(long, default_value_t = 2 * 1024 * 1024, value_name = "BYTES")]
    pub max_body: usize,
}

/// `--json` alone.
#[derive(Debug, Args)]
pub struct JsonOut {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A topic alone (`dq pause`, `dq resume`).
#[derive(Debug, Args)]
pub struct TopicArgs {
    /// The topic.
    pub topic: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq limits`.
#[derive(Debug, Args)]
pub struct LimitsArgs {
    /// The topic.
    pub topic: String,
    /// Set the rate limit (`100/s`, `6000/min`, `5/250ms`), or `none` to remove it.
    #[arg(long)]
    pub rate: Option<String>,
    /// Set the cap on running jobs across every worker, or `none` to remove it.
    #[arg(long)]
    pub concurrency: Option<String>,
    /// Keep succeeded jobs (and their results) this long (e.g. 1h; 0s: stop keeping them).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub keep_succeeded: Option<Duration>,
    /// Keep cancelled jobs this long (0s: stop keeping them).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub keep_cancelled: Option<Duration>,
    /// Keep jobs that expired before they started this long (0s: stop keeping them).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub keep_expired: Option<Duration>,
    /// Most finished jobs the topic keeps (default 10000).
    #[arg(long, value_name = "N")]
    pub keep_max: Option<u64>,
    /// Keep no finished jobs (remove the retention).
    #[arg(long, conflicts_with_all = ["keep_succeeded", "keep_cancelled", "keep_expired", "keep_max"])]
    pub keep_none: bool,
    /// Record the topic's events, keeping the last N (`on`: 10000), or `off` to stop
    /// recording (what was recorded stays readable with `dq events`).
    #[arg(long, value_name = "N|on|off")]
    pub events: Option<String>,
    /// Refuse enqueues and reschedules due further than this from now (e.g. 90d), or `off`
    /// to remove the limit.
    #[arg(long, value_name = "DURATION|off")]
    pub max_delay: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq group`.
#[derive(Debug, Args)]
pub struct GroupArgs {
    /// The topic.
    pub topic: String,
    /// The group (default: the default limits of every group without its own; the running
    /// and waiting jobs shown are then every group's).
    pub group: Option<String>,
    /// Set the cap on the group's jobs running at once across every worker (at least the
    /// partition count), or `none` to remove it.
    #[arg(long, value_name = "N|none")]
    pub concurrency: Option<String>,
    /// Set how many of the group's jobs may start per period (`10/s`, `600/min`), or `none`
    /// to remove it.
    #[arg(long, value_name = "RATE|none")]
    pub rate: Option<String>,
    /// Set how many of the group's jobs may start per turn when groups share a fetch (1 to
    /// 1000; default 1).
    #[arg(long, value_name = "N")]
    pub weight: Option<u32>,
    /// Remove the limits (the group's own: it follows the default again; without GROUP, the
    /// default).
    #[arg(long, conflicts_with_all = ["concurrency", "rate", "weight"])]
    pub clear: bool,
    /// Start none of the group's jobs for this long from now (e.g. 30s, 5m); never shortens
    /// a hold under way. Needs GROUP.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "group")]
    pub hold: Option<Duration>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq batches`.
#[derive(Debug, Args)]
pub struct BatchesArgs {
    /// Most batches to list (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Continue after this batch id (printed at the end of a listing that has more).
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The batch's id (a flow's children: `flow.<topic>.<parent key>`).
    pub id: String,
    /// List its members with their states instead.
    #[arg(long, conflicts_with_all = ["close", "cancel"])]
    pub members: bool,
    /// With --members: only those in this state (reserved, enqueued, succeeded, dead,
    /// cancelled, expired, discarded, refused, never_enqueued).
    #[arg(long, value_name = "STATE", requires = "members", value_parser = parse_member_state)]
    pub state: Option<dq_core::MemberState>,
    /// With --members: about this many members (1 to 1000; members are read page by page,
    /// so a few more may be listed).
    #[arg(long, default_value_t = 50, requires = "members")]
    pub limit: usize,
    /// With --members: continue from this cursor (printed at the end of a listing that has
    /// more).
    #[arg(long, value_name = "CURSOR", requires = "members")]
    pub after: Option<u64>,
    /// Close it to new members: once every member has ended, its callback is enqueued (or
    /// its flow's parent released).
    #[arg(long, conflicts_with = "cancel")]
    pub close: bool,
    /// Cancel it: close it, and cancel every member that has not ended (a running one is
    /// asked to stop); the callback follows once all have ended. Asks for confirmation.
    #[arg(long)]
    pub cancel: bool,
    /// With --cancel: do not ask for confirmation (needed when standard input is not a
    /// terminal).
    #[arg(long, short = 'y', requires = "cancel")]
    pub yes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The topics to follow (default: every topic of the namespace, new ones included).
    pub topics: Vec<String>,
    /// Where to start: `now` (default), `start` (every event kept), or a cursor printed by an
    /// earlier `dq events` (resumes right after it).
    #[arg(long, default_value = "now", value_name = "now|start|CURSOR")]
    pub from: String,
    /// Stop after this many events (default: follow until Ctrl-C); the cursor to resume
    /// from is printed on stderr either way.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Print one JSON object per event instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The topic.
    pub topic: String,
    /// scheduled, ready, active, retry, dead, succeeded, cancelled or expired.
    #[arg(long)]
    pub state: String,
    /// Most jobs to list (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Continue after this cursor (printed at the end of a listing that has more).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The topic (default: every topic in the namespace).
    pub topic: Option<String>,

    /// Refresh until interrupted (Ctrl-C).
    #[arg(long)]
    pub watch: bool,

    /// Time between refreshes with --watch (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub interval: Duration,

    /// With --watch: stop after this many refreshes.
    #[arg(long, requires = "watch")]
    pub count: Option<u64>,

    /// Print JSON instead of text (one document per refresh with --watch).
    #[arg(long)]
    pub json: bool,
}

/// A command on one job.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// The job's topic.
    pub topic: String,
    /// The job's key.
    pub key: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq bury`.
#[derive(Debug, Args)]
pub struct BuryArgs {
    /// The job's topic.
    pub topic: String,
    /// The job's key.
    pub key: String,
    /// Why it is buried, kept in its history (cut like an error text when long).
    #[arg(long, default_value = "buried by an operator")]
    pub reason: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq reschedule`.
#[derive(Debug, Args)]
pub struct RescheduleArgs {
    /// The job's topic.
    pub topic: String,
    /// The job's key.
    pub key: String,
    /// The new due time.
    #[command(flatten)]
    pub when: When,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Exactly one new due time.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct When {
    /// At this time, RFC 3339 (2026-11-24T08:00:00Z, 2026-11-24T09:00:00+01:00).
    #[arg(long, value_parser = parse_time)]
    pub at: Option<jiff::Timestamp>,
    /// This long from now (90s, 10m, 2h, 1d).
    #[arg(long = "in", value_parser = parse_duration)]
    pub after: Option<Duration>,
    /// Due now.
    #[arg(long)]
    pub now: bool,
}

/// `dq dead …`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs, oldest death first, with their last error.
    List(DeadListArgs),
    /// Move dead jobs back to ready, attempts reset (history kept): named ones, or --all
    /// (optionally only those matching --error-contains / --older-than).
    Requeue(DeadBulkArgs),
    /// Delete dead jobs: named ones, or --all, or those matching --older-than /
    /// --error-contains.
    Purge(DeadBulkArgs),
}

/// `dq dead list`.
#[derive(Debug, Args)]
pub struct DeadListArgs {
    /// The topic.
    pub topic: String,
    /// Only jobs whose last error contains this text (case-sensitive).
    #[arg(long, value_name = "TEXT")]
    pub error_contains: Option<String>,
    /// Only jobs that died more than this long ago (e.g. 7d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Most jobs to list (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Continue after this cursor (printed at the end of a listing that has more).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `dq dead requeue` and `dq dead purge`.
#[derive(Debug, Args)]
pub struct DeadBulkArgs {
    /// The topic.
    pub topic: String,
    /// Keys of the dead jobs (or use --all / a filter).
    #[arg(conflicts_with_all = ["all", "error_contains", "older_than"])]
    pub keys: Vec<String>,
    /// Every dead job of the topic (narrowed by --error-contains / --older-than if given).
    #[arg(long)]
    pub all: bool,
    /// Only jobs whose last error contains this text (case-sensitive).
    #[arg(long, value_name = "TEXT")]
    pub error_contains: Option<String>,
    /// Only jobs that died more than this long ago (e.g. 7d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Do not ask for confirmation (needed when standard input is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `dq enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The topic.
    pub topic: String,
    /// The job's key (default: a generated one). A job with this key that exists is left
    /// alone unless --replace.
    #[arg(long)]
    pub key: Option<String>,
    /// The payload, as JSON.
    #[arg(long = "json", value_name = "JSON")]
    pub payload: String,
    /// Due this long from now (e.g. 5m); default: now.
    #[arg(long = "in", value_parser = parse_duration, conflicts_with = "at")]
    pub after: Option<Duration>,
    /// Due at this time, RFC 3339.
    #[arg(long, value_parser = parse_time)]
    pub at: Option<jiff::Timestamp>,
    /// Replace a waiting or dead job with the same key.
    #[arg(long)]
    pub replace: bool,
    /// Drop the job, never starting it, if it has not started this long after its due time
    /// (e.g. 10m; see dq::Expiry).
    #[arg(long, value_parser = parse_duration)]
    pub expires_after: Option<Duration>,
    /// Refuse the key while its job exists and for this long after it finished (see
    /// dq::KeyWindow).
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["debounce", "throttle"])]
    pub unique_for: Option<Duration>,
    /// Run the job this long after the last enqueue of its key, with the last payload.
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["after", "at", "throttle"])]
    pub debounce: Option<Duration>,
    /// Refuse every enqueue of the key for this long after this one.
    #[arg(long, value_parser = parse_duration)]
    pub throttle: Option<Duration>,
    /// Its priority among the due jobs of its partition: 0 (lowest) to 9 (highest), default
    /// 5 (see dq::Priority). A priority other than 5 needs record format 5.
    #[arg(long, value_name = "0-9", value_parser = parse_priority, allow_negative_numbers = true)]
    pub priority: Option<dq_core::Priority>,
    /// Its group: once due it waits for its group's turn and runs within the group's limits
    /// (`dq group`; 1 to 64 bytes of visible text, no whitespace). Needs record format 6.
    #[arg(long, value_name = "NAME", value_parser = parse_group)]
    pub group: Option<dq_core::GroupName>,
    /// Partition count to record for a topic the namespace has no record of yet (refused
    /// for such a topic without it, so that a typo does not create a topic).
    #[arg(long)]
    pub partitions: Option<u16>,
}

/// A duration as people write it: 90s, 10m, 2h30m, 7d.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 90s, 10m, 2h, 7d)"))
}

/// A priority, 0 (lowest) to 9 (highest).
fn parse_priority(s: &str) -> Result<dq_core::Priority, String> {
    let bad = || format!("{s:?} is not a priority: write 0 (lowest) to 9 (highest); 5 is normal");
    let level: u8 = s.trim().parse().map_err(|_| bad())?;
    dq_core::Priority::new(level).map_err(|_| bad())
}

/// A batch member's state by its name (`succeeded`, `never_enqueued`, …).
fn parse_member_state(s: &str) -> Result<dq_core::MemberState, String> {
    dq_core::MemberState::ALL
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = dq_core::MemberState::ALL.iter().map(|m| m.name()).collect();
            format!(
                "{s:?} is not a member state: write one of {}",
                names.join(", ")
            )
        })
}

/// A group name (see dq::GroupName).
fn parse_group(s: &str) -> Result<dq_core::GroupName, String> {
    dq_core::GroupName::new(s).map_err(|e| e.to_string())
}

/// An RFC 3339 time with an offset or Z.
fn parse_time(s: &str) -> Result<jiff::Timestamp, String> {
    s.parse::<jiff::Timestamp>()
        .map_err(|e| format!("{e} (write RFC 3339, e.g. 2026-11-24T08:00:00Z)"))
}
