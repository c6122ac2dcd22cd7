//! The private server: start, isolation, kill/restart, stop, signals, drop.

use std::path::Path;
use std::time::{Duration, Instant};

use dq_testkit::{Persistence, RedisServer, ServerOptions, eventually_blocking, shared};

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The one-letter state of `pid` from `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`, ...).
fn proc_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next().map(str::to_owned)
}

#[test]
fn starts_and_answers_ping() {
    let server = RedisServer::start();
    assert_eq!(server.cmd::<String>(&["PING"]), "PONG");
    assert!(server.is_running());
    assert_ne!(server.port(), 6379);
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.dir().join("redis.log").exists());
    let info: String = server.cmd(&["INFO", "server"]);
    assert!(
        info.contains(&format!("process_id:{}\r\n", server.pid())),
        "pid {} not in INFO: {info}",
        server.pid()
    );
    let config: Vec<String> = server.cmd(&["CONFIG", "GET", "appendonly"]);
    assert_eq!(config, ["appendonly", "no"]);
}

#[test]
fn two_servers_are_separate() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.dir(), b.dir());
    a.cmd::<()>(&["SET", "k", "a"]);
    assert_eq!(b.cmd::<Option<String>>(&["GET", "k"]), None);
}

#[test]
fn options_reach_the_server() {
    let server = RedisServer::start_with(
        ServerOptions::default()
            .maxmemory(16 << 20)
            .maxmemory_policy("allkeys-lru")
            .hz(50)
            .arg("--maxclients")
            .arg("123"),
    );
    let get = |name: &str| server.cmd::<Vec<String>>(&["CONFIG", "GET", name])[1].clone();
    assert_eq!(get("maxmemory"), (16u64 << 20).to_string());
    assert_eq!(get("maxmemory-policy"), "allkeys-lru");
    assert_eq!(get("hz"), "50");
    assert_eq!(get("maxclients"), "123");
    assert_eq!(get("save"), "");
}

#[test]
fn default_policy_is_noeviction() {
    let server = RedisServer::start();
    let policy: Vec<String> = server.cmd(&["CONFIG", "GET", "maxmemory-policy"]);
    assert_eq!(policy[1], "noeviction");
}

#[test]
fn kill_then_restart_with_aof_always_keeps_data() {
    let server =
        RedisServer::start_with(ServerOptions::default().persistence(Persistence::AofAlways));
    let (port, old_pid) = (server.port(), server.pid());
    server.cmd::<()>(&["SET", "durable", "yes"]);

    server.kill();
    assert!(!server.is_running());
    assert!(!proc_exists(old_pid), "pid {old_pid} survived kill()");
    assert!(server.try_cmd::<String>(&["PING"]).is_err());
    assert_eq!(
        server.pid(),
        old_pid,
        "pid() keeps the last pid after kill()"
    );

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert_eq!(
        server.cmd::<Option<String>>(&["GET", "durable"]).as_deref(),
        Some("yes")
    );
}

#[test]
fn restart_without_persistence_starts_empty() {
    let server = RedisServer::start();
    server.cmd::<()>(&["SET", "volatile", "1"]);
    server.restart(); // kills the running server first
    assert_eq!(server.cmd::<i64>(&["DBSIZE"]), 0);
}

#[test]
fn stop_is_graceful_and_restart_reloads_everysec_aof() {
    let server =
        RedisServer::start_with(ServerOptions::default().persistence(Persistence::AofEverySec));
    let pid = server.pid();
    server.cmd::<()>(&["SET", "k", "v"]);
    server.stop();
    assert!(!server.is_running());
    assert!(!proc_exists(pid));
    // A graceful shutdown flushes the AOF even with `everysec`.
    server.restart();
    assert_eq!(
        server.cmd::<Option<String>>(&["GET", "k"]).as_deref(),
        Some("v")
    );
}

#[test]
fn stop_and_cont_signals() {
    let server = RedisServer::start();
    let pid = server.pid();
    server.signal("STOP");
    eventually_blocking("redis-server is stopped", Duration::from_secs(10), || {
        proc_state(pid).as_deref() == Some("T")
    });
    assert!(server.is_running(), "a stopped process is still alive");
    server.signal("CONT");
    assert_eq!(server.cmd::<String>(&["PING"]), "PONG");
}

#[test]
fn frozen_servers_can_be_stopped_and_killed() {
    for graceful in [true, false] {
        let server = RedisServer::start();
        let pid = server.pid();
        server.signal("STOP");
        eventually_blocking("redis-server is stopped", Duration::from_secs(10), || {
            proc_state(pid).as_deref() == Some("T")
        });
        let started = Instant::now();
        if graceful {
            server.stop();
        } else {
            server.kill();
        }
        assert!(!proc_exists(pid));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "graceful={graceful}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::start();
    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    assert!(proc_exists(pid));
    drop(server);
    eventually_blocking(
        "the dropped server's pid is gone",
        Duration::from_secs(10),
        || !proc_exists(pid),
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
#[should_panic(expected = "redis-server did not come up")]
fn bad_options_panic_with_the_log() {
    let _ = RedisServer::start_with(ServerOptions::default().arg("--no-such-option"));
}

#[test]
fn shared_is_one_server() {
    assert!(std::ptr::eq(shared(), shared()));
    assert_eq!(shared().cmd::<String>(&["PING"]), "PONG");
}
