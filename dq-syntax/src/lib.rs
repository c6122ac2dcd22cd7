//! dq-syntax: the text forms a handler's attributes use — retry policies and durations
//! (`"15s, 3m, 10m"`), and the rule for topic names.
//!
//! Both `dq-macros` (to check a handler's `topic`, `retry` and `timeout` at compile time) and
//! `dq-core` (to parse the same text at run time) depend on this crate, so the macro and the
//! runtime can never disagree. Applications use it through `dq`. Periodic schedules (cron
//! expressions, time zones, intervals: [`schedule`]) are parsed with `croner` and `jiff`.
//!
//! ```text
//! retry    := "none" | policy [ ";" jitter ]
//! policy   := tiered | "fixed(" duration "," count ")"
//!           | "exponential(" duration "," duration "," count [ "," jitter ] ")"
//!                                                          initial, max, retries, jitter
//! tiered   := duration ("," duration)*                              one retry per entry
//! jitter   := "jitter" "=" integer "%"     0 to 100: each delay plus a random 0 to N %
//!                                          of itself; default 0 for tiered and fixed,
//!                                          100 for exponential (given once at most)
//! duration := integer ("ms" | "s" | "m" | "h" | "d")
//! ```

/// The default retry policy: the tiered schedule, nine retries.
pub const DEFAULT_RETRY: &str = "15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h";

/// Longest accepted topic name, in bytes.
pub const MAX_TOPIC_LEN: usize = 128;

/// Checks a topic name: 1–128 characters of `[A-Za-z0-9._-]` (topics appear inside Redis key
/// names, so `:`, `{`, `}` and whitespace are never allowed). Returns why a name is refused.
pub fn check_topic(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("must not be empty")
    } else if name.len() > MAX_TOPIC_LEN {
        Err("longer than 128 bytes")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Err("only A-Z, a-z, 0-9, '.', '_' and '-' are allowed")
    } else {
        Ok(())
    }
}

/// A parsed retry policy, in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetrySpec {
    /// No retries.
    None,
    /// One retry after each delay, in order, each plus a random 0 to `jitter_pct` % of itself.
    Tiered {
        /// The delays, ms.
        delays_ms: Vec<u64>,
        /// Most random extra delay, in percent of the delay: 0 (no jitter, the default) to 100.
        jitter_pct: u32,
    },
    /// `retries` retries, each after the same delay plus a random 0 to `jitter_pct` % of it.
    Fixed {
        /// The delay, ms.
        delay_ms: u64,
        /// How many retries.
        retries: u32,
        /// Most random extra delay, in percent of the delay: 0 (no jitter, the default) to 100.
        jitter_pct: u32,
    },
    /// `retries` retries, doubling from `initial_ms` up to `max_ms`, each plus a random
    /// 0 to `jitter_pct` % of itself (still at most `max_ms`).
    Exponential {
        /// First delay, ms.
        initial_ms: u64,
        /// Largest delay, ms.
        max_ms: u64,
        /// How many retries.
        retries: u32,
        /// Most random extra delay, in percent of the delay: 0 (no jitter) to 100.
        jitter_pct: u32,
    },
}

/// The jitter of an exponential policy that does not name one: each delay plus 0–100 %.
pub const DEFAULT_JITTER_PCT: u32 = 100;

/// The jitter of a tiered or fixed policy that does not name one: none, the delays are exact.
pub const DEFAULT_EXACT_JITTER_PCT: u32 = 0;

/// Checks a jitter percentage: 0 to 100.
pub fn check_jitter_pct(pct: u32) -> Result<u32, String> {
    if pct > 100 {
        return Err(format!("jitter of {pct}% is more than 100%"));
    }
    Ok(pct)
}

/// Parses `jitter = 20%`.
fn parse_jitter(text: &str) -> Result<u32, String> {
    let bad = || {
        format!(
            "`{}` is not a jitter: write e.g. `jitter = 20%`",
            text.trim()
        )
    };
    let value = text
        .trim()
        .strip_prefix("jitter")
        .and_then(|r| r.trim_start().strip_prefix('='))
        .and_then(|r| r.trim().strip_suffix('%'))
        .ok_or_else(bad)?;
    let digits = value.trim_end();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    check_jitter_pct(digits.parse().map_err(|_| bad())?)
}

/// Most retries any policy may have.
pub const MAX_RETRIES: u32 = 100;

/// Longest delay accepted anywhere: 365 days.
pub const MAX_DELAY_MS: u64 = 365 * 24 * 3600 * 1000;

/// Parses a duration such as `500ms`, `15s`, `3m`, `2h`, `1d`.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{t}` has no unit: write e.g. `{t}s` (units: ms, s, m, h, d)"))?;
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "`{t}` is not a duration: expected a number then a unit, e.g. `15s`"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{digits}` is too large"))?;
    let per_unit = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{t}`: use ms, s, m, h or d"
            ));
        }
    };
    let ms = n
        .checked_mul(per_unit)
        .filter(|ms| *ms <= MAX_DELAY_MS)
        .ok_or_else(|| format!("`{t}` is longer than 365 days"))?;
    Ok(ms)
}

/// Most jobs one rate may allow per period (`Rate::MAX_COUNT` in dq-core).
pub const MAX_RATE_COUNT: u32 = 1_000_000;

/// Parses a rate `<count>/<period>`: period `s`, `sec`, `second`, `m`, `min`, `minute`, `h`,
/// `hour`, or a duration such as `250ms` or `10s`; a count of 1 to [`MAX_RATE_COUNT`] over
/// 1 ms to one day. Returns the count and the period in ms.
pub fn parse_rate(text: &str) -> Result<(u32, u64), String> {
    let bad = || {
        format!("rate {text:?} is not <count>/<period>, e.g. \"100/s\", \"6000/min\", \"5/250ms\"")
    };
    let (count, per) = text.trim().split_once('/').ok_or_else(bad)?;
    let count: u32 = count.trim().parse().map_err(|_| bad())?;
    let per_ms = match per.trim() {
        "s" | "sec" | "second" => 1_000,
        "m" | "min" | "minute" => 60_000,
        "h" | "hour" => 3_600_000,
        other => parse_duration_ms(other).map_err(|_| bad())?,
    };
    if count == 0 || count > MAX_RATE_COUNT {
        return Err(format!("rate count {count} must be 1 to {MAX_RATE_COUNT}"));
    }
    if !(1..=86_400_000).contains(&per_ms) {
        return Err(format!("rate period of {per_ms} ms must be 1 ms to 1 day"));
    }
    Ok((count, per_ms))
}

fn parse_count(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let n: u32 = t
        .parse()
        .map_err(|_| format!("`{t}` is not a retry count"))?;
    if n > MAX_RETRIES {
        return Err(format!(
            "{n} retries is more than the maximum of {MAX_RETRIES}"
        ));
    }
    Ok(n)
}

fn call_args<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let rest = text.strip_prefix(name)?.trim_start();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').collect())
}

/// Parses a retry policy (see the module docs for the grammar).
pub fn parse_retry(text: &str) -> Result<RetrySpec, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty retry policy: write e.g. \"15s, 3m, 10m\" or \"none\"".into());
    }
    if t == "none" {
        return Ok(RetrySpec::None);
    }
    // `policy; jitter = N%`
    let (t, suffix) = match t.split_once(';') {
        Some((policy, jitter)) => (policy.trim(), Some(parse_jitter(jitter)?)),
        None => (t, None),
    };
    if t == "none" {
        return Err("\"none\" has no delays to add jitter to".into());
    }
    if let Some(args) = call_args(t, "fixed") {
        let [delay, retries] = args[..] else {
            return Err("fixed takes (delay, retries), e.g. \"fixed(1s, 5)\"".into());
        };
        return Ok(RetrySpec::Fixed {
            delay_ms: parse_duration_ms(delay)?,
            retries: parse_count(retries)?,
            jitter_pct: suffix.unwrap_or(DEFAULT_EXACT_JITTER_PCT),
        });
    }
    if let Some(args) = call_args(t, "exponential") {
        let (initial, max, retries, jitter) = match args[..] {
            [initial, max, retries] => (initial, max, retries, None),
            [initial, max, retries, jitter] => (initial, max, retries, Some(jitter)),
            _ => {
                return Err(
                    "exponential takes (initial, max, retries[, jitter = N%]), e.g. \
                            \"exponential(1s, 1h, 10)\" or \"exponential(1s, 1h, 10, jitter = 0%)\""
                        .into(),
                );
            }
        };
        let (initial_ms, max_ms) = (parse_duration_ms(initial)?, parse_duration_ms(max)?);
        if initial_ms == 0 || max_ms < initial_ms {
            return Err("exponential needs 0 < initial <= max".into());
        }
        let jitter_pct = match (jitter.map(parse_jitter).transpose()?, suffix) {
            (Some(_), Some(_)) => return Err("the jitter is given twice".into()),
            (Some(pct), None) | (None, Some(pct)) => pct,
            (None, None) => DEFAULT_JITTER_PCT,
        };
        return Ok(RetrySpec::Exponential {
            initial_ms,
            max_ms,
            retries: parse_count(retries)?,
            jitter_pct,
        });
    }
    let delays = t
        .split(',')
        .map(parse_duration_ms)
        .collect::<Result<Vec<_>, _>>()?;
    if delays.len() > MAX_RETRIES as usize {
        return Err(format!(
            "{} retries is more than the maximum of {MAX_RETRIES}",
            delays.len()
        ));
    }
    Ok(RetrySpec::Tiered {
        delays_ms: delays,
        jitter_pct: suffix.unwrap_or(DEFAULT_EXACT_JITTER_PCT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms(" 15s "), Ok(15_000));
        assert_eq!(parse_duration_ms("3m"), Ok(180_000));
        assert_eq!(parse_duration_ms("15h"), Ok(54_000_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        for bad in [
            "",
            "s",
            "15",
            "15x",
            "1.5s",
            "-1s",
            "366d",
            "99999999999999999999s",
        ] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn policies() {
        assert_eq!(parse_retry("none"), Ok(RetrySpec::None));
        assert_eq!(
            parse_retry("15s, 3m,10m"),
            Ok(RetrySpec::Tiered {
                delays_ms: vec![15_000, 180_000, 600_000],
                jitter_pct: 0
            })
        );
        assert_eq!(
            parse_retry("15s, 3m, 10m; jitter = 10%"),
            Ok(RetrySpec::Tiered {
                delays_ms: vec![15_000, 180_000, 600_000],
                jitter_pct: 10
            })
        );
        assert_eq!(
            parse_retry("fixed(1s, 3)"),
            Ok(RetrySpec::Fixed {
                delay_ms: 1000,
                retries: 3,
                jitter_pct: 0
            })
        );
        assert_eq!(
            parse_retry(" fixed(1s, 3) ;jitter=25% "),
            Ok(RetrySpec::Fixed {
                delay_ms: 1000,
                retries: 3,
                jitter_pct: 25
            })
        );
        assert_eq!(
            parse_retry("exponential(1s, 1h, 10); jitter = 5%"),
            Ok(RetrySpec::Exponential {
                initial_ms: 1000,
                max_ms: 3_600_000,
                retries: 10,
                jitter_pct: 5,
            })
        );
        assert_eq!(
            parse_retry("exponential(1s, 1h, 10)"),
            Ok(RetrySpec::Exponential {
                initial_ms: 1000,
                max_ms: 3_600_000,
                retries: 10,
                jitter_pct: 100,
            })
        );
        for (text, jitter_pct) in [
            ("exponential(1s, 1h, 10, jitter = 0%)", 0),
            ("exponential(1s,1h,10,jitter=25%)", 25),
            ("exponential(1s, 1h, 10, jitter = 100%)", 100),
        ] {
            assert_eq!(
                parse_retry(text),
                Ok(RetrySpec::Exponential {
                    initial_ms: 1000,
                    max_ms: 3_600_000,
                    retries: 10,
                    jitter_pct,
                }),
                "{text}"
            );
        }
        for bad in [
            "",
            "15s,,3m",
            "fixed(1s)",
            "exponential(1h, 1s, 3)",
            "fixed(1s, 101)",
            "exponential(1s, 1h, 10, jitter = 101%)",
            "exponential(1s, 1h, 10, jitter = 20)",
            "exponential(1s, 1h, 10, jitter = -5%)",
            "exponential(1s, 1h, 10, jitter = %)",
            "exponential(1s, 1h, 10, jitter = 1.5%)",
            "exponential(1s, 1h, 10, 20%)",
            "exponential(1s, 1h, 10, jitter = 0%, 1)",
            "exponential(1s, 1h, 10, jitter = 0%); jitter = 5%",
            "15s, 3m; jitter = 101%",
            "15s, 3m; 10%",
            "15s, 3m;",
            "none; jitter = 10%",
            "fixed(1s, 3); jitter = 1%; jitter = 2%",
        ] {
            assert!(parse_retry(bad).is_err(), "{bad:?}");
        }
    }
}

pub mod schedule;
