//! Parsing and checking the attribute's arguments and the handler's signature.
//!
//! Everything a user can get wrong is caught here, as one `syn::Error` spanned on the token at
//! fault; `expand.rs` only ever sees a [`Handler`] that is known to be well-formed.

use proc_macro2::Span;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{FnArg, Ident, ItemFn, LitInt, LitStr, Path, ReturnType, Token, Type};

use crate::retry_syntax::{self, RetrySpec};
use dq_syntax::schedule as schedule_syntax;

mod kw {
    syn::custom_keyword!(topic);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(retry_fn);
    syn::custom_keyword!(max_attempts);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(expires_after);
    syn::custom_keyword!(keep_succeeded);
    syn::custom_keyword!(keep_cancelled);
    syn::custom_keyword!(keep_expired);
    syn::custom_keyword!(keep_max);
    syn::custom_keyword!(events);
    syn::custom_keyword!(max_delay);
    syn::custom_keyword!(priority);
    syn::custom_keyword!(group);
    syn::custom_keyword!(group_concurrency);
    syn::custom_keyword!(group_rate);
    syn::custom_keyword!(unique_for);
    syn::custom_keyword!(debounce);
    syn::custom_keyword!(throttle);
    syn::custom_keyword!(concurrency);
    syn::custom_keyword!(data);
    syn::custom_keyword!(cron);
    syn::custom_keyword!(tz);
    syn::custom_keyword!(every);
    syn::custom_keyword!(missed);
}

/// The highest priority (`dq_core::Priority::MAX`, tied by a test in dq-core's macro tests).
pub(crate) const MAX_PRIORITY: u8 = 9;

/// The default retry policy, as `RetryPolicy::default()` in dq-core (docs/ARCHITECTURE.md §8).
pub(crate) use crate::retry_syntax::DEFAULT_RETRY;

const EXPECTED_ARGS: &str = "expected `topic = \"…\"`, `retry = \"…\"`, `retry_fn = path`, \
                             `max_attempts = N`, `timeout = \"…\"`, \
                             `expires_after = \"…\"`, `keep_succeeded = \"…\"`, \
                             `keep_cancelled = \"…\"`, `keep_expired = \"…\"`, `keep_max = N`, \
                             `events`, `events = N`, `max_delay = \"…\"`, `priority = N`, \
                             `group = field`, `group_concurrency = N`, `group_rate = \"…\"`, \
                             `unique_for = \"…\"`, \
                             `debounce = \"…\"`, `throttle = \"…\"`, \
                             `concurrency = N`, `data(Type, …)`, `cron = \"…\"`, `tz = \"…\"`, \
                             `every = \"…\"`, `missed = \"…\"` or `crate = \"…\"`";

/// The arguments of `#[delayed_job(…)]`, parsed and checked.
#[derive(Default)]
pub(crate) struct Args {
    /// `topic = "…"`, already validated.
    topic: Option<LitStr>,
    /// `retry = "…"`, normalized, and where it was written.
    retry: Option<String>,
    retry_span: Option<Span>,
    /// `retry_fn = path`: the handler's retry function.
    retry_fn: Option<Path>,
    /// `max_attempts = N` (with `retry_fn`), and where it was written.
    max_attempts: Option<(Span, u32)>,
    /// `timeout = "…"`, in ms.
    timeout_ms: Option<u64>,
    /// `expires_after = "…"`, in ms.
    expires_after_ms: Option<u64>,
    /// `keep_succeeded`, `keep_cancelled`, `keep_expired = "…"`, in ms.
    keep_ms: [Option<u64>; 3],
    /// `keep_max = N`, and where it was written.
    keep_max: Option<(Span, u64)>,
    /// `events` (the default bound) or `events = N`: the most events the topic keeps.
    events: Option<u64>,
    /// `max_delay = "…"`, in ms.
    max_delay_ms: Option<u64>,
    /// `priority = N` (0..=9).
    priority: Option<u8>,
    /// `unique_for`, `debounce` or `throttle = "…"`: the kind (its keyword) and ms.
    window: Option<(&'static str, u64)>,
    /// `concurrency = N`.
    concurrency: Option<u32>,
    /// `group = field`: the payload field whose value is each job's group.
    group: Option<Ident>,
    /// `group_concurrency = N`: the default cap of every group.
    group_concurrency: Option<u32>,
    /// `group_rate = "…"`: the default rate of every group (count, period ms).
    group_rate: Option<(u32, u64)>,
    /// `crate = "…"`: where the generated code finds `__private`.
    krate: Option<Path>,
    /// `data(Db, Mailer)`: the shared data the handler needs.
    data: Option<Vec<Type>>,
    /// `cron = "…"`, checked.
    cron: Option<LitStr>,
    /// `tz = "…"`, checked.
    tz: Option<LitStr>,
    /// `every = "…"`, in ms, checked.
    every: Option<(LitStr, u64)>,
    /// `missed = "once" | "skip"`, checked.
    missed: Option<(LitStr, &'static str)>,
}

/// A periodic schedule declared on the handler (`cron`/`tz` or `every`, and `missed`).
pub(crate) struct ScheduleArgs {
    /// The cron expression, or `None` for `every`.
    pub(crate) cron: Option<String>,
    /// The time zone of a cron expression.
    pub(crate) tz: Option<String>,
    /// The interval of `every`, in ms.
    pub(crate) every_ms: Option<u64>,
    /// `once` or `skip`.
    pub(crate) missed: &'static str,
    /// Where a payload that has no `Default` is reported.
    pub(crate) span: Span,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::topic) {
                let key = input.parse::<kw::topic>()?;
                let value = value::<LitStr>(input, "a topic name such as \"orders.close\"")?;
                check_topic(&value.value()).map_err(|e| syn::Error::new(value.span(), e))?;
                set(&mut args.topic, key.span, "topic", value)?;
            } else if lookahead.peek(kw::retry) {
                let key = input.parse::<kw::retry>()?;
                let value = value::<LitStr>(input, "a retry policy such as \"15s, 3m, 10m\"")?;
                let spec = retry_syntax::parse_retry(&value.value())
                    .map_err(|e| syn::Error::new(value.span(), format!("invalid retry: {e}")))?;
                set(&mut args.retry, key.span, "retry", normalize(&spec))?;
                args.retry_span = Some(value.span());
            } else if lookahead.peek(kw::retry_fn) {
                let key = input.parse::<kw::retry_fn>()?;
                let path = value::<Path>(input, "the path of a retry function such as `my_retry`")?;
                set(&mut args.retry_fn, key.span, "retry_fn", path)?;
            } else if lookahead.peek(kw::max_attempts) {
                let key = input.parse::<kw::max_attempts>()?;
                let value = value::<LitInt>(input, "an integer such as 10")?;
                let n = value.base10_parse::<u32>()?;
                if n == 0 || n > MAX_FN_ATTEMPTS {
                    return Err(syn::Error::new(
                        value.span(),
                        format!("max_attempts must be from 1 to {MAX_FN_ATTEMPTS}"),
                    ));
                }
                set(
                    &mut args.max_attempts,
                    key.span,
                    "max_attempts",
                    (value.span(), n),
                )?;
            } else if lookahead.peek(kw::timeout) {
                let key = input.parse::<kw::timeout>()?;
                let value = value::<LitStr>(input, "a duration such as \"30s\"")?;
                let ms = retry_syntax::parse_duration_ms(&value.value())
                    .map_err(|e| syn::Error::new(value.span(), format!("invalid timeout: {e}")))?;
                if ms == 0 {
                    return Err(syn::Error::new(
                        value.span(),
                        "invalid timeout: must be longer than zero (leave it out for no timeout)",
                    ));
                }
                set(&mut args.timeout_ms, key.span, "timeout", ms)?;
            } else if lookahead.peek(kw::expires_after) {
                let key = input.parse::<kw::expires_after>()?;
                let value = value::<LitStr>(input, "a duration such as \"10m\"")?;
                let ms = retry_syntax::parse_duration_ms(&value.value()).map_err(|e| {
                    syn::Error::new(value.span(), format!("invalid expires_after: {e}"))
                })?;
                if ms == 0 {
                    return Err(syn::Error::new(
                        value.span(),
                        "invalid expires_after: must be longer than zero (leave it out for no \
                         expiry)",
                    ));
                }
                set(&mut args.expires_after_ms, key.span, "expires_after", ms)?;
            } else if lookahead.peek(kw::priority) {
                let key = input.parse::<kw::priority>()?;
                let value = value::<LitInt>(input, "a priority from 0 (lowest) to 9 (highest)")?;
                let n = value
                    .base10_parse::<u8>()
                    .ok()
                    .filter(|n| *n <= MAX_PRIORITY)
                    .ok_or_else(|| {
                        syn::Error::new(
                            value.span(),
                            format!(
                                "priority must be from 0 (lowest) to {MAX_PRIORITY} (highest); \
                                 5 is normal"
                            ),
                        )
                    })?;
                set(&mut args.priority, key.span, "priority", n)?;
            } else if lookahead.peek(kw::max_delay) {
                let key = input.parse::<kw::max_delay>()?;
                let ms = positive_duration(input, "max_delay", "a duration such as \"90d\"")?;
                set(&mut args.max_delay_ms, key.span, "max_delay", ms)?;
            } else if lookahead.peek(kw::unique_for)
                || lookahead.peek(kw::debounce)
                || lookahead.peek(kw::throttle)
            {
                let (name, span) = if lookahead.peek(kw::unique_for) {
                    ("unique_for", input.parse::<kw::unique_for>()?.span)
                } else if lookahead.peek(kw::debounce) {
                    ("debounce", input.parse::<kw::debounce>()?.span)
                } else {
                    ("throttle", input.parse::<kw::throttle>()?.span)
                };
                let ms = positive_duration(input, name, "a duration such as \"10m\"")?;
                if let Some((other, _)) = args.window {
                    return Err(syn::Error::new(
                        span,
                        format!(
                            "`{name}` and `{other}`: a job opens one window on its key (give one \
                             of `unique_for`, `debounce`, `throttle`)"
                        ),
                    ));
                }
                args.window = Some((name, ms));
            } else if lookahead.peek(kw::keep_succeeded) {
                let key = input.parse::<kw::keep_succeeded>()?;
                let ms = keep_for(input, "keep_succeeded")?;
                set(&mut args.keep_ms[0], key.span, "keep_succeeded", ms)?;
            } else if lookahead.peek(kw::keep_cancelled) {
                let key = input.parse::<kw::keep_cancelled>()?;
                let ms = keep_for(input, "keep_cancelled")?;
                set(&mut args.keep_ms[1], key.span, "keep_cancelled", ms)?;
            } else if lookahead.peek(kw::keep_expired) {
                let key = input.parse::<kw::keep_expired>()?;
                let ms = keep_for(input, "keep_expired")?;
                set(&mut args.keep_ms[2], key.span, "keep_expired", ms)?;
            } else if lookahead.peek(kw::keep_max) {
                let key = input.parse::<kw::keep_max>()?;
                let value = value::<LitInt>(input, "an integer such as 10000")?;
                let n = value.base10_parse::<u64>()?;
                if n == 0 || n > MAX_KEPT {
                    return Err(syn::Error::new(
                        value.span(),
                        format!("keep_max must be from 1 to {MAX_KEPT}"),
                    ));
                }
                set(&mut args.keep_max, key.span, "keep_max", (value.span(), n))?;
            } else if lookahead.peek(kw::events) {
                let key = input.parse::<kw::events>()?;
                let n = if input.peek(Token![=]) {
                    let value = value::<LitInt>(input, "an integer such as 10000")?;
                    let n = value.base10_parse::<u64>()?;
                    if n == 0 || n > MAX_EVENTS_KEPT {
                        return Err(syn::Error::new(
                            value.span(),
                            format!(
                                "events must keep from 1 to {MAX_EVENTS_KEPT} events (leave \
                                 `events` out to record none)"
                            ),
                        ));
                    }
                    n
                } else {
                    DEFAULT_EVENTS_KEPT
                };
                set(&mut args.events, key.span, "events", n)?;
            } else if lookahead.peek(kw::group_concurrency) {
                let key = input.parse::<kw::group_concurrency>()?;
                let value = value::<LitInt>(input, "an integer such as 2")?;
                let n = value.base10_parse::<u32>()?;
                if n == 0 {
                    return Err(syn::Error::new(
                        value.span(),
                        "group_concurrency must be at least 1",
                    ));
                }
                set(
                    &mut args.group_concurrency,
                    key.span,
                    "group_concurrency",
                    n,
                )?;
            } else if lookahead.peek(kw::group_rate) {
                let key = input.parse::<kw::group_rate>()?;
                let value = value::<LitStr>(input, "a rate such as \"10/s\"")?;
                let rate = retry_syntax::parse_rate(&value.value()).map_err(|e| {
                    syn::Error::new(value.span(), format!("invalid group_rate: {e}"))
                })?;
                set(&mut args.group_rate, key.span, "group_rate", rate)?;
            } else if lookahead.peek(kw::group) {
                let key = input.parse::<kw::group>()?;
                input.parse::<Token![=]>()?;
                if input.peek(LitStr) {
                    let lit = input.parse::<LitStr>()?;
                    return Err(syn::Error::new(
                        lit.span(),
                        "group names a field of the payload, unquoted (`group = tenant_id`): \
                         the field's value (Display) is each job's group; a fixed group is \
                         given per job with `.group(\"…\")`",
                    ));
                }
                let field = input.parse::<Ident>().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "expected the name of a payload field, such as `tenant_id`",
                    )
                })?;
                set(&mut args.group, key.span, "group", field)?;
            } else if lookahead.peek(kw::concurrency) {
                let key = input.parse::<kw::concurrency>()?;
                let value = value::<LitInt>(input, "an integer such as 16")?;
                let n = value.base10_parse::<u32>()?;
                if n == 0 {
                    return Err(syn::Error::new(
                        value.span(),
                        "concurrency must be at least 1",
                    ));
                }
                set(&mut args.concurrency, key.span, "concurrency", n)?;
            } else if lookahead.peek(kw::data) {
                let key = input.parse::<kw::data>()?;
                let types = data_types(input, key.span)?;
                set(&mut args.data, key.span, "data", types)?;
            } else if lookahead.peek(kw::cron) {
                let key = input.parse::<kw::cron>()?;
                let value = value::<LitStr>(input, "a cron expression such as \"0 */5 * * * *\"")?;
                schedule_syntax::parse_cron(&value.value())
                    .map_err(|e| syn::Error::new(value.span(), e))?;
                set(&mut args.cron, key.span, "cron", value)?;
            } else if lookahead.peek(kw::tz) {
                let key = input.parse::<kw::tz>()?;
                let value = value::<LitStr>(input, "a time zone such as \"Europe/Berlin\"")?;
                schedule_syntax::parse_tz(&value.value())
                    .map_err(|e| syn::Error::new(value.span(), e))?;
                set(&mut args.tz, key.span, "tz", value)?;
            } else if lookahead.peek(kw::every) {
                let key = input.parse::<kw::every>()?;
                let value = value::<LitStr>(input, "an interval such as \"5m\"")?;
                let ms = retry_syntax::parse_duration_ms(&value.value())
                    .and_then(schedule_syntax::check_every_ms)
                    .map_err(|e| syn::Error::new(value.span(), format!("invalid every: {e}")))?;
                set(&mut args.every, key.span, "every", (value, ms))?;
            } else if lookahead.peek(kw::missed) {
                let key = input.parse::<kw::missed>()?;
                let value = value::<LitStr>(input, "\"once\" or \"skip\"")?;
                let policy = schedule_syntax::parse_missed(&value.value())
                    .map_err(|e| syn::Error::new(value.span(), e))?;
                set(
                    &mut args.missed,
                    key.span,
                    "missed",
                    (value, policy.as_str()),
                )?;
            } else if lookahead.peek(Token![crate]) {
                let key = input.parse::<Token![crate]>()?;
                let value = value::<LitStr>(input, "a path such as \"::dq\"")?;
                let path = value.parse::<Path>().map_err(|_| {
                    syn::Error::new(value.span(), "`crate` must be a path such as \"::dq\"")
                })?;
                set(&mut args.krate, key.span, "crate", path)?;
            } else if input.peek(Ident::peek_any) {
                let unknown = input.call(Ident::parse_any)?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!("unknown argument `{unknown}`: {EXPECTED_ARGS}"),
                ));
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

impl Args {
    /// The retry function and its attempts, if declared: exclusive with `retry = "…"`;
    /// `max_attempts` only with it.
    fn retry_fn(&mut self) -> syn::Result<Option<RetryFnArgs>> {
        match (self.retry_fn.take(), self.retry_span) {
            (Some(path), Some(retry)) => {
                let mut e = syn::Error::new_spanned(
                    &path,
                    "give `retry = \"…\"` or `retry_fn = …`, not both: the function decides \
                     every retry",
                );
                e.combine(syn::Error::new(retry, "`retry` given here"));
                Err(e)
            }
            (Some(path), None) => Ok(Some(RetryFnArgs {
                max_attempts: self.max_attempts.map_or(DEFAULT_FN_ATTEMPTS, |(_, n)| n),
                path,
            })),
            (None, _) => match self.max_attempts {
                Some((span, _)) => Err(syn::Error::new(
                    span,
                    "`max_attempts` bounds a retry function: add `retry_fn = …` (a `retry = \
                     \"…\"` policy allows its retries plus one)",
                )),
                None => Ok(None),
            },
        }
    }

    /// The retention the arguments declare: `[succeeded, cancelled, expired]` ms and the cap
    /// (`keep_max` alone is refused).
    fn keep(&self) -> syn::Result<Option<KeepArgs>> {
        if self.keep_ms.iter().all(Option::is_none) {
            return match self.keep_max {
                Some((span, _)) => Err(syn::Error::new(
                    span,
                    "`keep_max` caps the finished jobs a topic keeps: add `keep_succeeded`, \
                     `keep_cancelled` or `keep_expired = \"…\"`",
                )),
                None => Ok(None),
            };
        }
        Ok(Some((self.keep_ms, self.keep_max.map(|(_, n)| n))))
    }

    /// The periodic schedule the arguments declare, if any, checked for combinations that
    /// make no sense (`tz` without `cron`, `cron` with `every`, `missed` alone).
    fn schedule(&self) -> syn::Result<Option<ScheduleArgs>> {
        if let (Some(cron), Some((every, _))) = (&self.cron, &self.every) {
            let mut e = syn::Error::new(every.span(), "give `cron` or `every`, not both");
            e.combine(syn::Error::new(cron.span(), "`cron` given here"));
            return Err(e);
        }
        if let (Some(tz), None) = (&self.tz, &self.cron) {
            return Err(syn::Error::new(
                tz.span(),
                "`tz` is the time zone of a `cron` expression: add `cron = \"…\"`",
            ));
        }
        let missed = self.missed.as_ref().map_or("once", |(_, m)| *m);
        match (&self.cron, &self.every) {
            (Some(cron), None) => Ok(Some(ScheduleArgs {
                cron: Some(cron.value()),
                tz: self.tz.as_ref().map(LitStr::value),
                every_ms: None,
                missed,
                span: cron.span(),
            })),
            (None, Some((every, ms))) => Ok(Some(ScheduleArgs {
                cron: None,
                tz: None,
                every_ms: Some(*ms),
                missed,
                span: every.span(),
            })),
            _ => match &self.missed {
                Some((lit, _)) => Err(syn::Error::new(
                    lit.span(),
                    "`missed` is the policy of a periodic job: add `cron = \"…\"` or `every = \"…\"`",
                )),
                None => Ok(None),
            },
        }
    }
}

/// Parses `= <value>` after an argument's name.
/// `retry_fn = path` and `max_attempts = N` as declared.
pub(crate) struct RetryFnArgs {
    /// The function's path.
    pub(crate) path: Path,
    /// The most attempts (default [`DEFAULT_FN_ATTEMPTS`]).
    pub(crate) max_attempts: u32,
}

/// The most attempts a retry function may allow (dq-core `retry::MAX_FN_ATTEMPTS`, tied by a
/// test): one plus the most retries.
pub(crate) const MAX_FN_ATTEMPTS: u32 = retry_syntax::MAX_RETRIES + 1;
/// The attempts a retry function allows unless told (dq-core `retry::DEFAULT_FN_ATTEMPTS`).
pub(crate) const DEFAULT_FN_ATTEMPTS: u32 = 10;

/// `keep_*` and `keep_max` as declared: `[succeeded, cancelled, expired]` ms and the cap.
pub(crate) type KeepArgs = ([Option<u64>; 3], Option<u64>);

/// The longest `keep_*` time: 90 days (dq-core `finished::MAX_KEEP`, tied by a test).
const MAX_KEEP_MS: u64 = 90 * 24 * 3600 * 1000;

/// The largest `keep_max` (dq-core `finished::MAX_KEPT`, tied by a test).
const MAX_KEPT: u64 = 10_000_000;
/// `= "<duration>"` after `name`: more than zero and at most what a due time can hold.
fn positive_duration(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<u64> {
    let value = value::<LitStr>(input, example)?;
    let ms = retry_syntax::parse_duration_ms(&value.value())
        .map_err(|e| syn::Error::new(value.span(), format!("invalid {name}: {e}")))?;
    if ms == 0 || ms > MAX_DUE_MS {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "invalid {name}: must be longer than zero and at most {MAX_DUE_MS} ms (leave it \
                 out for none)"
            ),
        ));
    }
    Ok(ms)
}

/// The longest duration dq stores (dq-core `MAX_DUE_MS`, tied by a test).
const MAX_DUE_MS: u64 = (1 << 48) - 1;

/// The largest `events = N` (dq-core `events::MAX_EVENTS_KEPT`, tied by a test).
pub(crate) const MAX_EVENTS_KEPT: u64 = 10_000_000;
/// What a bare `events` keeps (dq-core `events::DEFAULT_EVENTS_KEPT`, tied by a test).
pub(crate) const DEFAULT_EVENTS_KEPT: u64 = 10_000;

/// Parses `= "…"` after a `keep_*` argument: a time from 1 ms to 90 days, in ms.
fn keep_for(input: ParseStream<'_>, name: &str) -> syn::Result<u64> {
    let value = value::<LitStr>(input, "a duration such as \"1h\"")?;
    let ms = retry_syntax::parse_duration_ms(&value.value())
        .map_err(|e| syn::Error::new(value.span(), format!("invalid {name}: {e}")))?;
    if ms == 0 || ms > MAX_KEEP_MS {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "invalid {name}: a job is kept from 1 ms to 90 days (leave it out to delete \
                 such jobs when they end)"
            ),
        ));
    }
    Ok(ms)
}

fn value<T: Parse>(input: ParseStream<'_>, expected: &str) -> syn::Result<T> {
    input.parse::<Token![=]>()?;
    let span = input.span();
    input
        .parse::<T>()
        .map_err(|_| syn::Error::new(span, format!("expected {expected}")))
}

/// Parses `(Type, …)` after `data`: at least one type, each a concrete type, none twice.
fn data_types(input: ParseStream<'_>, key: Span) -> syn::Result<Vec<Type>> {
    const EXPECTED: &str = "expected the shared data types in parentheses, \
                            e.g. `data(Db, Mailer)`";
    if !input.peek(syn::token::Paren) {
        return Err(syn::Error::new(
            if input.is_empty() { key } else { input.span() },
            EXPECTED,
        ));
    }
    let content;
    let parens = syn::parenthesized!(content in input);
    let list = content.parse_terminated(Type::parse, Token![,])?;
    if list.is_empty() {
        return Err(syn::Error::new(
            parens.span.join(),
            "`data(…)` lists at least one type, e.g. `data(Db)` (or leave it out)",
        ));
    }
    let mut seen = Vec::<String>::new();
    let mut types = Vec::new();
    for ty in list {
        if matches!(ty, Type::Infer(_) | Type::ImplTrait(_)) {
            return Err(syn::Error::new_spanned(
                &ty,
                "shared data is found by its concrete type: name it, e.g. `data(Db)`",
            ));
        }
        let text = ty.to_token_stream().to_string();
        if seen.contains(&text) {
            return Err(syn::Error::new_spanned(
                &ty,
                format!("`{text}` is listed twice in `data(…)`: give it once"),
            ));
        }
        seen.push(text);
        types.push(ty);
    }
    Ok(types)
}

fn set<T>(slot: &mut Option<T>, key: Span, name: &str, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            key,
            format!("duplicate argument `{name}`: give it once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// The rules of `Topic::new` in dq-core (shared source: `retry_syntax.rs`).
fn check_topic(name: &str) -> Result<(), String> {
    crate::retry_syntax::check_topic(name)
        .map_err(|reason| format!("invalid topic name {name:?}: {reason}"))
}

/// The canonical text of a retry policy: what the descriptor carries and dq-core parses again.
pub(crate) fn normalize(spec: &RetrySpec) -> String {
    match spec {
        RetrySpec::None => "none".to_owned(),
        RetrySpec::Tiered {
            delays_ms,
            jitter_pct,
        } => {
            let delays = delays_ms
                .iter()
                .map(|ms| duration_text(*ms))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{delays}{}", exact_jitter_suffix(*jitter_pct))
        }
        RetrySpec::Fixed {
            delay_ms,
            retries,
            jitter_pct,
        } => format!(
            "fixed({}, {retries}){}",
            duration_text(*delay_ms),
            exact_jitter_suffix(*jitter_pct)
        ),
        RetrySpec::Exponential {
            initial_ms,
            max_ms,
            retries,
            jitter_pct,
        } => format!(
            "exponential({}, {}, {retries}{})",
            duration_text(*initial_ms),
            duration_text(*max_ms),
            if *jitter_pct == retry_syntax::DEFAULT_JITTER_PCT {
                String::new()
            } else {
                format!(", jitter = {jitter_pct}%")
            }
        ),
    }
}

/// `; jitter = N%` for a tiered or fixed policy with jitter (none: their default).
fn exact_jitter_suffix(pct: u32) -> String {
    if pct == retry_syntax::DEFAULT_EXACT_JITTER_PCT {
        String::new()
    } else {
        format!("; jitter = {pct}%")
    }
}

/// A duration in the largest unit that states it exactly: 90000 → `90s`, 180000 → `3m`.
fn duration_text(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    UNITS
        .iter()
        .find(|(per_unit, _)| ms != 0 && ms.is_multiple_of(*per_unit))
        .map_or_else(
            || format!("{ms}ms"),
            |(per_unit, unit)| format!("{}{unit}", ms / per_unit),
        )
}

/// `group_concurrency` and `group_rate` (count, period ms), either of them given.
pub(crate) type GroupLimitsArgs = (Option<u32>, Option<(u32, u64)>);

/// What `#[delayed_job]` registers, all checked.
pub(crate) struct Handler {
    /// The user's fn, emitted unchanged.
    pub(crate) item: ItemFn,
    /// The topic: the `topic` argument, or the fn's name.
    pub(crate) topic: String,
    /// Where a topic problem would be reported (for the generated `TOPIC`).
    pub(crate) topic_span: Span,
    /// The normalized retry policy text.
    pub(crate) retry: String,
    /// The retry function, which then decides instead of `retry`.
    pub(crate) retry_fn: Option<RetryFnArgs>,
    pub(crate) timeout_ms: Option<u64>,
    /// `expires_after`, in ms: the default expiry of the jobs the typed client enqueues.
    pub(crate) expires_after_ms: Option<u64>,
    /// `keep_*` and `keep_max`: `[succeeded, cancelled, expired]` ms and the cap.
    pub(crate) keep: Option<KeepArgs>,
    /// `events` / `events = N`: the most events the topic keeps.
    pub(crate) events: Option<u64>,
    /// `max_delay`, in ms: written to the topic by every worker at start.
    pub(crate) max_delay_ms: Option<u64>,
    /// `unique_for`, `debounce` or `throttle`: the typed client's default key window.
    pub(crate) window: Option<(&'static str, u64)>,
    /// `priority`: the typed client's default priority.
    pub(crate) priority: Option<u8>,
    pub(crate) concurrency: Option<u32>,
    /// `group = field`: the typed client takes each job's group from this payload field.
    pub(crate) group: Option<Ident>,
    /// `group_concurrency` and `group_rate` (count, period ms): the default limits of every
    /// group, written by every worker at start.
    pub(crate) group_limits: Option<GroupLimitsArgs>,
    /// The path generated code reaches `__private` through (`::dq` unless overridden).
    pub(crate) krate: Path,
    /// The payload type (first parameter).
    pub(crate) payload: Type,
    /// The `JobContext` parameter's type, if the fn takes one.
    pub(crate) context: Option<Type>,
    /// The declared return type, to span result-type errors on it.
    pub(crate) output: Type,
    /// The shared data it declares (`data(…)`), in the order given.
    pub(crate) data: Vec<Type>,
    /// The periodic schedule it declares (`cron`/`tz` or `every`, `missed`).
    pub(crate) schedule: Option<ScheduleArgs>,
}

fn bad_signature(tokens: impl ToTokens, what: &str) -> syn::Error {
    syn::Error::new_spanned(tokens, format!("bad signature: {what}"))
}

impl Handler {
    /// Checks the fn's signature against what a handler may be.
    pub(crate) fn new(mut args: Args, item: ItemFn) -> syn::Result<Self> {
        let sig = &item.sig;
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            return Err(bad_signature(
                &sig.generics,
                "a job handler cannot be generic: the worker decodes its payload into one known type",
            ));
        }
        if let Some(unsafety) = &sig.unsafety {
            return Err(bad_signature(unsafety, "a job handler cannot be `unsafe`"));
        }
        if let Some(variadic) = &sig.variadic {
            return Err(bad_signature(variadic, "a job handler cannot be variadic"));
        }
        if let Some(receiver) = sig.receiver() {
            return Err(bad_signature(
                receiver,
                "a job handler cannot take `self`: make it a free fn",
            ));
        }
        let mut params = sig.inputs.iter().map(|arg| match arg {
            FnArg::Typed(typed) => typed,
            FnArg::Receiver(_) => unreachable!("receivers are rejected above"),
        });
        let Some(payload) = params.next() else {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                "bad signature: a job handler takes its payload as the first parameter, \
                 e.g. `async fn close_order(order: CloseOrder) -> Result<(), dq::JobError>`",
            ));
        };
        let context = params.next();
        if let Some(extra) = params.next() {
            return Err(bad_signature(
                extra,
                "a job handler takes at most two parameters: the payload and a `dq::JobContext`",
            ));
        }
        let payload_type = (*payload.ty).clone();
        match &payload_type {
            Type::ImplTrait(_) | Type::Infer(_) => {
                return Err(bad_signature(
                    &payload_type,
                    "the payload must be a concrete type: the worker decodes it into that type",
                ));
            }
            Type::Reference(_) => {
                return Err(bad_signature(
                    &payload_type,
                    "the payload is decoded into an owned value: take it by value \
                     (e.g. `String`, not `&str`)",
                ));
            }
            _ => {}
        }
        let output = match &sig.output {
            ReturnType::Default => {
                return Err(syn::Error::new(
                    sig.paren_token.span.close(),
                    "bad signature: a job handler returns `Result<T, E>`, where T is `()` or \
                     serializable and E converts into `dq::JobError`: add e.g. \
                     `-> Result<(), dq::JobError>`",
                ));
            }
            ReturnType::Type(_, ty) if is_result(ty) => (**ty).clone(),
            ReturnType::Type(_, ty) => {
                return Err(bad_signature(
                    ty,
                    "a job handler returns `Result<T, E>`, where T is `()` or serializable and E \
                     converts into `dq::JobError`",
                ));
            }
        };

        let (topic, topic_span) = match &args.topic {
            Some(lit) => (lit.value(), lit.span()),
            None => {
                let name = sig.ident.unraw().to_string();
                check_topic(&name).map_err(|e| {
                    syn::Error::new(
                        sig.ident.span(),
                        format!(
                            "{e}; the topic defaults to the fn's name: set one with `topic = \"…\"`"
                        ),
                    )
                })?;
                (name, sig.ident.span())
            }
        };
        let schedule = args.schedule()?;
        let keep = args.keep()?;
        let retry_fn = args.retry_fn()?;
        Ok(Handler {
            retry_fn,
            schedule,
            keep,
            events: args.events,
            max_delay_ms: args.max_delay_ms,
            window: args.window,
            priority: args.priority,
            topic,
            topic_span,
            retry: args.retry.unwrap_or_else(|| DEFAULT_RETRY.to_owned()),
            timeout_ms: args.timeout_ms,
            expires_after_ms: args.expires_after_ms,
            concurrency: args.concurrency,
            group: args.group,
            group_limits: (args.group_concurrency.is_some() || args.group_rate.is_some())
                .then_some((args.group_concurrency, args.group_rate)),
            krate: args.krate.unwrap_or_else(|| syn::parse_quote!(::dq)),
            payload: payload_type,
            context: context.map(|c| (*c.ty).clone()),
            output,
            data: args.data.unwrap_or_default(),
            item,
        })
    }
}

/// A `Result<…>` by name (`Result`, `io::Result`, `anyhow::Result`, …): the compiler checks the
/// rest, with errors spanned on the return type.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => {
            path.qself.is_none()
                && path
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Result")
        }
        Type::Paren(inner) => is_result(&inner.elem),
        Type::Group(inner) => is_result(&inner.elem),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The macro's bounds are dq-core's (the macro cannot depend on dq-core: read its source).
    #[test]
    fn bounds_match_dq_core() {
        let finished = include_str!("../../dq-core/src/finished.rs");
        assert!(finished.contains(&format!("pub const MAX_KEPT: u64 = {};", group(MAX_KEPT))));
        let events = include_str!("../../dq-core/src/events.rs");
        assert!(events.contains(&format!(
            "pub const MAX_EVENTS_KEPT: u64 = {};",
            group(MAX_EVENTS_KEPT)
        )));
        assert!(events.contains(&format!(
            "pub const DEFAULT_EVENTS_KEPT: u64 = {};",
            group(DEFAULT_EVENTS_KEPT)
        )));
        assert_eq!(MAX_DUE_MS, (1 << 48) - 1);
        assert!(
            include_str!("../../dq-core/src/job.rs")
                .contains("pub const MAX_DUE_MS: u64 = (1 << 48) - 1;")
        );
    }

    /// `n` as Rust writes it with `_` every three digits.
    fn group(n: u64) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push('_');
            }
            out.push(c);
        }
        out
    }

    #[test]
    fn normalized_text_parses_back_to_the_same_policy() {
        for text in [
            "none",
            "15s,3m , 10m",
            "500ms, 1500ms, 90s, 86400s",
            "fixed( 1s , 5)",
            "exponential(1000ms, 1h, 10)",
            "15s, 3m; jitter = 10%",
            "fixed(1s, 5);jitter=0%",
            "exponential(1s, 1h, 10); jitter = 20%",
            DEFAULT_RETRY,
        ] {
            let spec = retry_syntax::parse_retry(text).unwrap();
            let normal = normalize(&spec);
            assert_eq!(retry_syntax::parse_retry(&normal).unwrap(), spec, "{text}");
        }
        let spec = retry_syntax::parse_retry("500ms, 1500ms, 90s, 86400s").unwrap();
        assert_eq!(normalize(&spec), "500ms, 1500ms, 90s, 1d");
        let spec = retry_syntax::parse_retry(" 15s,3m,10m,30m,30m,1h,2h,6h,15h").unwrap();
        assert_eq!(normalize(&spec), DEFAULT_RETRY);
    }

    #[test]
    fn topics() {
        assert!(check_topic("orders.close-v2_x").is_ok());
        assert!(check_topic("a:b").is_err());
        assert!(check_topic("").is_err());
        assert!(check_topic(&"a".repeat(129)).is_err());
    }
}
