//! Tests that bind what the Lua scripts spell to what Rust spells: the state letters of
//! `lib.lua`'s `STATE` table and `JobState::code`, its history codes and `AttemptOutcome`, and
//! its `retry_delay` and `RetryPolicy::delay_with`, run on a real redis-server.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::job::{AttemptOutcome, JobState};
use crate::retry::{Jitter, RetryDecision, RetryPolicy};

const LIB: &str = include_str!("lua/lib.lua");
const LUA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/redis/lua");

const EVERY_STATE: [JobState; 5] = [
    JobState::Scheduled,
    JobState::Ready,
    JobState::Active,
    JobState::Retry,
    JobState::Dead,
];

/// The `name = 'x'` pairs of the table `local NAME = {…}` of `lib.lua` (on one line).
fn lib_table(name: &str) -> BTreeMap<String, String> {
    let prefix = format!("local {name} = {{");
    let line = LIB
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("lib.lua has no one-line table {name}"));
    let body = line[prefix.len()..].trim_end().trim_end_matches('}');
    body.split(',')
        .map(|pair| {
            let (k, v) = pair.split_once('=').expect("name = 'x'");
            (
                k.trim().to_string(),
                v.trim().trim_matches('\'').to_string(),
            )
        })
        .collect()
}

/// Every string literal of a Lua text with its line number, comments skipped.
fn string_literals(lua: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in lua.lines().enumerate() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '-' if chars.peek() == Some(&'-') => break,
                '\'' | '"' => {
                    let mut text = String::new();
                    while let Some(d) = chars.next() {
                        match d {
                            '\\' => text.extend(chars.next()),
                            d if d == c => break,
                            d => text.push(d),
                        }
                    }
                    out.push((n + 1, text));
                }
                _ => {}
            }
        }
    }
    out
}

/// A line that names constants: `local NAME, OTHER = …` (upper-case names).
fn declares_constants(line: &str) -> bool {
    line.strip_prefix("local ")
        .and_then(|rest| rest.split_once(" = "))
        .is_some_and(|(names, _)| {
            names
                .split(", ")
                .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        })
}

#[test]
fn state_table_is_job_state_code() {
    let table = lib_table("STATE");
    assert_eq!(table.len(), EVERY_STATE.len(), "{table:?}");
    for state in EVERY_STATE {
        let letter = table
            .get(state.as_str())
            .unwrap_or_else(|| panic!("lib.lua's STATE has no {}", state.as_str()));
        assert_eq!(
            letter.as_bytes(),
            [state.code()],
            "STATE.{}",
            state.as_str()
        );
        assert_eq!(JobState::from_code(state.code()), Some(state));
    }
}

#[test]
fn history_table_is_attempt_outcome() {
    let table = lib_table("HISTORY");
    let expected = [
        ("failed", AttemptOutcome::Failed),
        ("lease_expired", AttemptOutcome::LeaseExpired),
        ("deferred", AttemptOutcome::Deferred),
        ("buried", AttemptOutcome::Buried),
    ];
    assert_eq!(table.len(), expected.len(), "{table:?}");
    for (name, outcome) in expected {
        let code = &table[name];
        assert_eq!(AttemptOutcome::from_code(code), outcome, "HISTORY.{name}");
    }
}

/// No script writes a state letter as a literal: states are `STATE.<name>`. A code of another
/// meaning that shares a letter (an ack's 'S' for stale) is a named constant of its script.
#[test]
fn no_script_spells_a_state_letter() {
    let letters: Vec<String> = EVERY_STATE
        .iter()
        .map(|s| char::from(s.code()).to_string())
        .collect();
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(LUA_DIR).expect("the lua directory") {
        let path = entry.expect("a lua file").path();
        if path.extension().and_then(|e| e.to_str()) != Some("lua") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("readable");
        let lines: Vec<&str> = text.lines().collect();
        for (n, literal) in string_literals(&text) {
            let spells_state =
                !literal.is_empty() && literal.chars().all(|c| letters.contains(&c.to_string()));
            if spells_state && !declares_constants(lines[n - 1]) {
                found.push(format!("{}:{n}: '{literal}'", path.display()));
            }
        }
    }
    assert!(files > 10, "only {files} scripts found in {LUA_DIR}");
    assert!(
        found.is_empty(),
        "state letters spelled literally (write STATE.<name>):\n{}",
        found.join("\n")
    );
}

/// The lexer above sees what the check needs.
#[test]
fn string_literals_skip_comments_and_escapes() {
    let lua = "local a = 'S' -- 'R'\nlocal b = \"x\\\"y\" .. 'A'\n-- 'D'";
    assert_eq!(
        string_literals(lua),
        [
            (1, "S".to_string()),
            (2, "x\"y".to_string()),
            (2, "A".to_string())
        ]
    );
    assert!(declares_constants("local ACKED, STALE = 'A', 'S'"));
    assert!(!declares_constants("local state = 'S'"));
}

/// The script that runs `lib.lua`'s `retry_delay`: ARGV = n, then n (attempt, draw) pairs,
/// then the policy's `script_args`; returns the n delays (-1 for dead, -2 for discard).
const RETRY_DELAY_PROBE: &str = "
local n = tonumber(ARGV[1])
local policy, err = read_retry_policy(ARGV, 2 + 2 * n)
if not policy then return redis.error_reply('bad policy: ' .. err) end
local out = {}
for i = 1, n do
  local delay, verdict = retry_delay(policy, tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]))
  out[i] = delay or (verdict == 'discard' and -2) or -1
end
return out
";

/// A delay as a test draws it: short, within the hour, up to the 365-day limit, or an edge.
fn some_delay(rng: &mut impl Rng) -> Duration {
    Duration::from_millis(match rng.random_range(0..4) {
        0 => rng.random_range(0..1000),
        1 => rng.random_range(0..3_600_000),
        2 => rng.random_range(0..=dq_syntax::MAX_DELAY_MS),
        _ => [0, 1, 7, 15_000, dq_syntax::MAX_DELAY_MS][rng.random_range(0..5)],
    })
}

/// Many policies of every kind and jitter, with the default and `none` among them.
fn some_policies(rng: &mut impl Rng) -> Vec<RetryPolicy> {
    let mut policies = vec![RetryPolicy::none(), RetryPolicy::default()];
    for _ in 0..300 {
        let policy = match rng.random_range(0..4) {
            3 => {
                // a retry function's decisions for expired leases (kind 4)
                let n = rng.random_range(1..=crate::retry::MAX_FN_ATTEMPTS);
                let decisions = (0..n).map(|_| match rng.random_range(0..4) {
                    0 => RetryDecision::Dead,
                    1 => RetryDecision::Discard,
                    _ => RetryDecision::After(some_delay(rng)),
                });
                RetryPolicy::table(decisions.collect())
            }
            0 => {
                let n = rng.random_range(1..=12);
                RetryPolicy::tiered((0..n).map(|_| some_delay(rng))).unwrap()
            }
            1 => RetryPolicy::fixed(some_delay(rng), rng.random_range(0..=12)).unwrap(),
            _ => {
                let initial = some_delay(rng).max(Duration::from_millis(1));
                let max =
                    (initial + some_delay(rng)).min(Duration::from_millis(dq_syntax::MAX_DELAY_MS));
                RetryPolicy::exponential(initial, max, rng.random_range(0..=100)).unwrap()
            }
        };
        let jitter = match rng.random_range(0..6) {
            0 => Jitter::None,
            1 => Jitter::UpTo(100),
            2 => Jitter::UpTo([1, 10, 33, 50, 99][rng.random_range(0..5)]),
            _ => Jitter::UpTo(rng.random_range(0..=100)),
        };
        policies.push(match policy.clone().with_jitter(jitter) {
            Ok(p) => p,
            Err(_) => policy, // a policy without retries has no jitter
        });
    }
    policies
}

/// `retry_delay` in Lua on a real Redis gives exactly what `RetryPolicy::delay_with` gives
/// (`decision_with`: with a retry function's tabulated decisions, discard included), over
/// many (policy, attempt, draw) triples: the lease-expiry retries of `fetch.lua` and the
/// worker's retries are one function.
#[test]
fn lua_retry_delay_is_rust_delay_with() {
    let server = dq_testkit::shared();
    let script = format!("{LIB}\n{RETRY_DELAY_PROBE}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let mut triples = 0;
    for policy in some_policies(&mut rng) {
        let mut pairs: Vec<(u32, f64)> = Vec::new();
        for attempt in 0..=policy.retries() + 1 {
            for unit in [0.0, 0.5, 1.0 - f64::EPSILON / 2.0, rng.random::<f64>()] {
                pairs.push((attempt, unit));
            }
        }
        let mut args = vec![
            "EVAL".to_string(),
            script.clone(),
            "0".into(),
            pairs.len().to_string(),
        ];
        for (attempt, unit) in &pairs {
            args.push(attempt.to_string());
            args.push(format!("{unit:?}"));
        }
        args.extend(policy.script_args().iter().map(u64::to_string));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let lua: Vec<i64> = server.cmd(&argv);
        assert_eq!(lua.len(), pairs.len());
        for ((attempt, unit), got) in pairs.iter().zip(lua) {
            let rust = match policy.decision_with(*attempt, *unit) {
                RetryDecision::After(d) => d.as_millis() as i64,
                RetryDecision::Dead => -1,
                RetryDecision::Discard => -2,
            };
            assert_eq!(got, rust, "{policy:?}, attempt {attempt}, draw {unit:?}");
            triples += 1;
        }
    }
    assert!(triples > 5_000, "only {triples} triples");
}

/// `lib.lua`'s `cut_error` cuts an error text exactly as `truncate_error` does: the same
/// bytes kept, the same marker, on a character boundary, for texts around the limit in one-,
/// two-, three- and four-byte characters.
#[test]
fn lua_cut_error_is_rust_truncate_error() {
    let server = dq_testkit::shared();
    let script = format!("{LIB}\nreturn cut_error(ARGV[1])");
    let mut texts = Vec::new();
    for unit in ["a", "é", "€", "🦀"] {
        for len in [0, 1, 1000, 1024, 1025, 1026, 1027, 5000] {
            texts.push(unit.repeat(len / unit.len() + 1));
            // And one shifted by a byte, so that the cut meets every position in a character.
            texts.push(format!("x{}", unit.repeat(len / unit.len())));
        }
    }
    for text in texts {
        let lua: Vec<u8> = server.cmd(&["EVAL", &script, "0", &text]);
        let rust = crate::job::truncate_error(&text);
        assert!(rust.len() <= crate::job::MAX_ERROR_LEN, "{}", rust.len());
        assert_eq!(
            String::from_utf8(lua).expect("Lua cut on a character boundary"),
            rust,
            "a text of {} bytes",
            text.len()
        );
    }
}

/// The script that classifies each ARGV value with `lib.lua`'s format helpers: per value
/// {format_of or -1, is_newer, is_record, then for a record: its format as `pack_record` takes
/// it, header length, state, token}.
const FORMAT_PROBE: &str = "
local out = {}
for i, rec in ipairs(ARGV) do
  local row = {format_of(rec) or -1, is_newer(rec) and 1 or 0, is_record(rec) and 1 or 0}
  if is_record(rec) then
    local state, _, _, _, token = unpack_record(rec)
    row[4], row[5], row[6], row[7] = record_format(rec), header_len(rec), state, token
    row[8] = expiry_of(rec)
    row[9] = priority_of(rec)
    row[10] = group_of(rec) or ''
    row[11] = batch_of(rec) or ''
    if state ~= state_of(rec) or token ~= token_of(rec) then row[6] = 'mismatch' end
  end
  out[i] = row
end
return out
";

/// Runs `script` (the probe) on the shared server with `values` as ARGV: one row per value.
fn eval_rows(script: &str, values: &[&[u8]]) -> Vec<Vec<dq_testkit::redis::Value>> {
    let mut conn = dq_testkit::shared().connection();
    dq_testkit::redis::cmd("EVAL")
        .arg(script)
        .arg(0)
        .arg(values)
        .query(&mut conn)
        .expect("the probe runs")
}

/// Sample stored values: records of both formats, newer ones, damaged ones.
fn format_samples() -> Vec<(&'static str, Vec<u8>)> {
    use crate::store::redis::layout::{MAX_FORMAT, RecordHeader};
    let header = |format| RecordHeader {
        format,
        state: JobState::Retry,
        attempts: 2,
        due_ms: 1_790_000_000_123,
        created_ms: 1_790_000_000_000,
        token: 77,
        expires_ms: 0,
        priority: 5,
        group_len: 0,
        batch_len: 0,
    };
    let newer = |format: u8| {
        let mut r = vec![format];
        r.extend_from_slice(&header(1).encode(b"whatever a newer dq writes"));
        r
    };
    vec![
        ("format 1", header(1).encode(b"payload")),
        ("format 1, empty payload", header(1).encode(b"")),
        ("format 2", header(2).encode(b"payload")),
        ("format 2, empty payload", header(2).encode(b"")),
        (
            "format 3",
            RecordHeader {
                token: 0,
                expires_ms: 0,
                ..header(3)
            }
            .encode(b"payload"),
        ),
        (
            "format 3, empty payload",
            RecordHeader {
                token: 0,
                expires_ms: 0,
                ..header(3)
            }
            .encode(b""),
        ),
        (
            "format 3 too short",
            RecordHeader {
                token: 0,
                expires_ms: 0,
                ..header(3)
            }
            .encode(b"")[..14]
                .to_vec(),
        ),
        ("format 3, active (a lean record never is)", {
            let mut r = RecordHeader {
                token: 0,
                expires_ms: 0,
                ..header(3)
            }
            .encode(b"p");
            r[1] = b'A';
            r
        }),
        (
            "format 4",
            RecordHeader {
                token: 0,
                expires_ms: 1_790_000_060_000,
                ..header(4)
            }
            .encode(b"payload"),
        ),
        (
            "format 4, no expiry",
            RecordHeader {
                token: 0,
                expires_ms: 0,
                ..header(4)
            }
            .encode(b""),
        ),
        (
            "format 4 too short",
            RecordHeader {
                token: 0,
                expires_ms: 5,
                ..header(4)
            }
            .encode(b"")[..20]
                .to_vec(),
        ),
        (
            "format 5",
            RecordHeader {
                token: 0,
                expires_ms: 1_790_000_060_000,
                priority: 9,
                group_len: 0,
                batch_len: 0,
                ..header(5)
            }
            .encode(b"payload"),
        ),
        (
            "format 5, lowest priority, no expiry",
            RecordHeader {
                token: 0,
                expires_ms: 0,
                priority: 0,
                group_len: 0,
                batch_len: 0,
                ..header(5)
            }
            .encode(b""),
        ),
        (
            "format 5 too short",
            RecordHeader {
                token: 0,
                priority: 7,
                group_len: 0,
                batch_len: 0,
                ..header(5)
            }
            .encode(b"")[..21]
                .to_vec(),
        ),
        (
            "format 6, in a group",
            RecordHeader {
                token: 0,
                expires_ms: 1_790_000_060_000,
                priority: 8,
                group_len: 0,
                batch_len: 0,
                ..header(6)
            }
            .encode_in_group("tenant-7", b"payload"),
        ),
        (
            "format 6, no group",
            RecordHeader {
                token: 0,
                ..header(6)
            }
            .encode(b"payload"),
        ),
        ("format 6, group past the end", {
            let r = RecordHeader {
                token: 0,
                ..header(6)
            }
            .encode_in_group("tenant-7", b"");
            r[..r.len() - 1].to_vec()
        }),
        (
            "format 7, in a batch and a group",
            RecordHeader {
                token: 0,
                priority: 3,
                group_len: 0,
                batch_len: 0,
                ..header(7)
            }
            .encode_in_batch("tenant-7", "order-17", b"payload"),
        ),
        (
            "format 7, in a batch",
            RecordHeader {
                token: 0,
                ..header(7)
            }
            .encode_in_batch("", "flow.orders.close.o-1", b"payload"),
        ),
        (
            "format 7, in neither",
            RecordHeader {
                token: 0,
                ..header(7)
            }
            .encode(b""),
        ),
        ("format 7, batch past the end", {
            let r = RecordHeader {
                token: 0,
                ..header(7)
            }
            .encode_in_batch("g", "order-17", b"");
            r[..r.len() - 1].to_vec()
        }),
        ("format 7, no batch length byte", {
            let r = RecordHeader {
                token: 0,
                ..header(7)
            }
            .encode_in_group("g", b"");
            r[..r.len() - 1].to_vec()
        }),
        ("format 8", newer(8)),
        ("format 31", newer(MAX_FORMAT)),
        ("format 8, one byte", vec![8]),
        ("first byte 32", newer(MAX_FORMAT + 1)),
        ("first byte 0", newer(0)),
        ("first byte 1", newer(1)),
        ("unknown letter", b"Zxxxxxxxxxxxxxxxxxxxxxxx".to_vec()),
        ("format 1 too short", header(1).encode(b"")[..19].to_vec()),
        ("format 2 too short", header(2).encode(b"")[..20].to_vec()),
        ("format 2, bad state", {
            let mut r = header(2).encode(b"p");
            r[1] = b'Z';
            r
        }),
        ("empty", Vec::new()),
    ]
}

/// The version rules are one rule: for a process reading formats up to 1, 2, 3 and 4, every
/// sample value is classified alike by `lib.lua` (format_of, is_newer, is_record, and the
/// header fields of a record), by Rust's `RecordHeader::decode_reading` (a record, newer
/// with its format, or not a record), and by the embedded store, which leaves a planted
/// record of each format untouched exactly when Lua calls that format newer. Also: `FORMAT`
/// in `lib.lua` is dq-core's `LEGACY_FORMAT` and the layout's `MAX_FORMAT`, and its
/// `NEWEST_FORMAT` is dq-core's.
#[test]
fn record_format_rules_are_one_rule_in_lua_rust_and_memory() {
    use crate::format::{LEGACY_FORMAT, NEWEST_FORMAT};
    use crate::store::redis::layout::{MAX_FORMAT, RecordHeader};

    let table = lib_table("FORMAT");
    assert_eq!(table["legacy"], LEGACY_FORMAT.to_string());
    assert_eq!(table["versioned"], (LEGACY_FORMAT + 1).to_string());
    assert_eq!(table["max"], MAX_FORMAT.to_string());
    assert_eq!(table["lean"], crate::format::LEAN_FORMAT.to_string());
    assert_eq!(
        table["expiring"],
        crate::format::EXPIRING_FORMAT.to_string()
    );
    assert_eq!(
        table["priority"],
        crate::format::PRIORITY_FORMAT.to_string()
    );
    assert!(LIB.contains(&format!(
        "\nlocal NORMAL_PRIORITY, MAX_PRIORITY = {}, {}\n",
        crate::job::Priority::NORMAL.level(),
        crate::job::Priority::MAX
    )));
    assert!(LIB.contains(&format!("\nlocal NEWEST_FORMAT = {NEWEST_FORMAT}\n")));

    use dq_testkit::redis::from_redis_value as from;
    let samples = format_samples();
    let mut checked = 0;
    for reads in LEGACY_FORMAT..=NEWEST_FORMAT {
        let script = format!("{}\n{FORMAT_PROBE}", super::scripts::lib_reading(reads));
        let values: Vec<&[u8]> = samples.iter().map(|(_, v)| v.as_slice()).collect();
        let rows = eval_rows(&script, &values);
        assert_eq!(rows.len(), samples.len());
        for ((name, value), row) in samples.iter().zip(rows) {
            let int = |i: usize| -> i64 { from(row[i].clone()).unwrap() };
            let (lua_format, lua_newer, lua_record) = (int(0), int(1) == 1, int(2) == 1);
            let at = format!("{name} (reading formats up to {reads})");
            match RecordHeader::decode_reading(value, reads) {
                Ok(h) => {
                    assert!(
                        lua_record && !lua_newer,
                        "{at}: Rust reads a record, Lua not"
                    );
                    assert_eq!(i64::from(h.format), lua_format, "{at}");
                    assert_eq!(int(3), i64::from(h.format), "{at}: record_format");
                    assert_eq!(int(4), h.payload_start() as i64, "{at}: header_len");
                    let state: String = from(row[5].clone()).unwrap();
                    assert_eq!(state.as_bytes(), [h.state.code()], "{at}: state");
                    assert_eq!(int(6), h.token as i64, "{at}: token");
                    assert_eq!(int(7), h.expires_ms as i64, "{at}: expiry");
                    assert_eq!(int(8), i64::from(h.priority), "{at}: priority");
                    let group: String = from(row[9].clone()).unwrap();
                    assert_eq!(group, h.group(value).unwrap_or(""), "{at}: group");
                    let batch: String = from(row[10].clone()).unwrap();
                    assert_eq!(batch, h.batch(value).unwrap_or(""), "{at}: batch");
                }
                Err(crate::error::Error::NewerFormat { format, reads: r }) => {
                    assert_eq!(r, reads);
                    assert!(lua_newer && !lua_record, "{at}: Rust says newer, Lua not");
                    assert_eq!(i64::from(format), lua_format, "{at}");
                }
                Err(e) => {
                    assert!(
                        !lua_newer && !lua_record,
                        "{at}: Rust says {e}, Lua reads it"
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, usize::from(NEWEST_FORMAT) * samples.len());

    // The embedded store reads every format this dq knows: a planted record of a format Lua
    // (reading as much) calls newer is left in place and reported; any other is leased.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use crate::store::lease::Lease;
        let script = format!(
            "{}\n{FORMAT_PROBE}",
            super::scripts::lib_reading(NEWEST_FORMAT)
        );
        for format in LEGACY_FORMAT..=MAX_FORMAT {
            let value = if format == LEGACY_FORMAT {
                b"R".to_vec()
            } else {
                vec![format]
            };
            let rows = eval_rows(&script, &[&value]);
            let lua_newer: i64 = from(rows[0][1].clone()).unwrap();
            let store = crate::store::memory::MemoryStore::new();
            let queue = crate::job::Queue::new(crate::names::Topic::new("t").unwrap(), 0);
            let key = crate::names::JobKey::new("k").unwrap();
            let now = crate::store::catalog::Catalog::now_ms(&store)
                .await
                .unwrap();
            store.plant_record(&queue, &key, (format, JobState::Ready), now, b"p");
            let reply = store
                .fetch(&queue, &crate::store::lease::FetchRequest::default())
                .await
                .unwrap();
            assert_eq!(
                (reply.newer.len(), reply.jobs.len()),
                if lua_newer == 1 { (1, 0) } else { (0, 1) },
                "format {format}"
            );
        }
    });
}
