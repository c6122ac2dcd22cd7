//! A TCP fault proxy: sits between a client and a server on 127.0.0.1 and, on command, delays
//! the server's replies, cuts every connection, or black-holes traffic.
//!
//! The proxy runs on a thread of its own with its own tokio runtime, so it keeps forwarding
//! while the test blocks (on `std::process`, a synchronous Redis connection, …), and it can be
//! driven from sync and async tests alike. Every control method takes `&self` and takes effect
//! at once; dropping the proxy closes its listener and every connection.
//!
//! ```no_run
//! use std::time::Duration;
//! use dq_testkit::{FaultProxy, RedisServer};
//! let server = RedisServer::start();
//! let proxy = FaultProxy::start(server.port());
//! // clients connect to proxy.url() instead of server.url()
//! proxy.set_reply_delay(Duration::from_millis(500)); // replies arrive 500 ms late
//! proxy.cut();                                        // every open connection is closed now
//! proxy.set_blackhole(true);                          // nothing moves, new connections hang
//! proxy.set_blackhole(false);                         // held bytes flow again
//! proxy.freeze_open();                                // open connections hang for good
//! ```
//!
//! What each fault means on the wire:
//!
//! - **Reply delay**: every chunk the server sends is held until `delay` after it arrived at
//!   the proxy, and chunks keep their order (a chunk never overtakes an earlier one, so a
//!   shortened delay takes effect behind the chunks already held). Client → server bytes are
//!   not delayed: the server applies a command at once; only its reply is late. This is the
//!   "ambiguous outcome": the client times out although the command took effect.
//! - **Cut**: every connection open at that moment is closed on both sides. New connections
//!   are accepted and work normally.
//! - **Black hole**: nothing is forwarded in either direction until it is lifted: the proxy
//!   stops reading, so bytes wait in socket buffers as they would behind a broken link, and
//!   flow again, in order, once it is lifted (like TCP retransmission after a partition heals).
//!   New connections are accepted, but not connected upstream until it is lifted.
//! - **Freeze**: every connection open at that moment stops forwarding in both directions, for
//!   good, and stays open: the half-open connection a NAT or firewall leaves when it drops its
//!   state. New connections are accepted and work normally; a cut still closes frozen ones.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Size of one read from either side.
const CHUNK: usize = 16 * 1024;

/// State shared between the proxy handle and its connections.
struct Shared {
    upstream: SocketAddr,
    /// Reply delay in microseconds.
    delay_us: AtomicU64,
    /// `true` while traffic is black-holed.
    blackhole: watch::Sender<bool>,
    /// Bumped by every cut; a connection ends when it changes.
    epoch: watch::Sender<u64>,
    /// Set when the proxy is dropped.
    shutdown: watch::Sender<bool>,
    /// Connections currently open (client side accepted).
    open: AtomicUsize,
    /// Connections accepted since start; also the id of the next one.
    accepted: AtomicUsize,
    /// Connections whose id is below this are frozen.
    frozen_below: watch::Sender<usize>,
}

/// A TCP proxy on 127.0.0.1 that injects network faults; see the module documentation.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("port", &self.port)
            .field("upstream", &self.shared.upstream)
            .field("reply_delay", &self.reply_delay())
            .field("blackhole", &*self.shared.blackhole.borrow())
            .field("open", &self.open_connections())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to `127.0.0.1:upstream_port`,
    /// passing everything through until told otherwise. Panics if it cannot listen.
    pub fn start(upstream_port: u16) -> FaultProxy {
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let listener = StdListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("dq-testkit: the fault proxy cannot listen: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("dq-testkit: the fault proxy has no address: {e}"))
            .port();
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("dq-testkit: the fault proxy's listener: {e}"));
        let shared = Arc::new(Shared {
            upstream,
            delay_us: AtomicU64::new(0),
            blackhole: watch::Sender::new(false),
            epoch: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            frozen_below: watch::Sender::new(0),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("dq-testkit: the fault proxy's runtime: {e}"));
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("dq-fault-proxy-{port}"))
            .spawn(move || runtime.block_on(accept_loop(listener, for_thread)))
            .unwrap_or_else(|e| panic!("dq-testkit: cannot start the fault proxy thread: {e}"));
        FaultProxy {
            port,
            shared,
            thread: Some(thread),
        }
    }

    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL Redis clients connect through, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Holds every server → client chunk until `delay` after it reached the proxy (zero: pass
    /// through). Chunks already held keep their release time; order is always kept.
    pub fn set_reply_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// The current reply delay.
    pub fn reply_delay(&self) -> Duration {
        Duration::from_micros(self.shared.delay_us.load(Ordering::SeqCst))
    }

    /// Closes every connection open now, on both sides. Later connections work normally.
    pub fn cut(&self) {
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Starts (`true`) or lifts (`false`) the black hole: while on, nothing is forwarded in
    /// either direction and new connections are not connected upstream.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.blackhole.send_replace(on);
    }

    /// Freezes every connection open now, for good: nothing more is forwarded on it in either
    /// direction, and it stays open until cut or the proxy is dropped. Later connections work
    /// normally.
    pub fn freeze_open(&self) {
        let next = self.shared.accepted.load(Ordering::SeqCst);
        self.shared
            .frozen_below
            .send_modify(|f| *f = (*f).max(next));
    }

    /// Whether traffic is black-holed now.
    pub fn is_blackholed(&self) -> bool {
        *self.shared.blackhole.borrow()
    }

    /// How many client connections are open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// How many client connections were accepted since the proxy started.
    pub fn accepted_connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        // Lift the black hole so no task waits on it; the shutdown ends them all.
        self.shared.blackhole.send_replace(false);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(listener: StdListener, shared: Arc<Shared>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("dq-testkit: the fault proxy cannot use its listener: {e}");
            return;
        }
    };
    let mut shutdown = shared.shutdown.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
                    connections.spawn(connection(client, id, shared.clone()));
                }
                Err(e) => {
                    // Out of descriptors or similar: pause briefly rather than spin.
                    eprintln!("dq-testkit: the fault proxy failed to accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.wait_for(|s| *s) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// Counts an open connection for as long as it lives.
struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one direction of one connection waits on before it moves bytes.
struct Gate {
    /// The connection's id (its accept order).
    id: usize,
    blackhole: watch::Receiver<bool>,
    frozen_below: watch::Receiver<usize>,
}

impl Gate {
    fn new(id: usize, shared: &Shared) -> Gate {
        Gate {
            id,
            blackhole: shared.blackhole.subscribe(),
            frozen_below: shared.frozen_below.subscribe(),
        }
    }

    /// Waits until the black hole is lifted (at once if it is not on); never returns once this
    /// connection is frozen (the connection then ends only by a cut or the shutdown).
    async fn passable(&mut self) {
        loop {
            let frozen = *self.frozen_below.borrow_and_update() > self.id;
            if frozen {
                std::future::pending::<()>().await;
            }
            if !*self.blackhole.borrow_and_update() {
                return;
            }
            tokio::select! {
                r = self.blackhole.changed() => if r.is_err() { return },
                r = self.frozen_below.changed() => if r.is_err() { return },
            }
        }
    }
}

async fn connection(client: TcpStream, id: usize, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _guard = OpenGuard(shared.clone());
    let mut epoch = shared.epoch.subscribe();
    epoch.borrow_and_update();
    let mut shutdown = shared.shutdown.subscribe();
    let mut gate = Gate::new(id, &shared);
    let ended = async {
        tokio::select! {
            _ = epoch.changed() => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    };
    let work = async {
        gate.passable().await;
        let Ok(server) = TcpStream::connect(shared.upstream).await else {
            return; // upstream down: close the client side, as a refused connect would
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let down = async {
            tokio::join!(
                read_down(server_read, tx, Gate::new(id, &shared), shared.clone()),
                write_down(rx, client_write, Gate::new(id, &shared)),
            )
        };
        tokio::select! {
            () = pump_up(client_read, server_write, Gate::new(id, &shared)) => {}
            _ = down => {}
        }
    };
    tokio::select! {
        () = ended => {}
        () = work => {}
    }
}

/// Client → server: forwarded as read, except while black-holed.
async fn pump_up(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut gate: Gate,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        gate.passable().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        gate.passable().await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Server → client, first half: reads chunks and stamps each with its release time.
async fn read_down(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    mut gate: Gate,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut last_release = Instant::now();
    loop {
        gate.passable().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = Duration::from_micros(shared.delay_us.load(Ordering::SeqCst));
        let release = (Instant::now() + delay).max(last_release);
        last_release = release;
        if to.send((release, buf[..n].to_vec())).is_err() {
            return;
        }
    }
    // The server closed: dropping the sender lets the writer deliver what is held, then end.
}

/// Server → client, second half: writes each chunk at its release time, in order.
async fn write_down(
    mut from: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut gate: Gate,
) {
    while let Some((release, bytes)) = from.recv().await {
        tokio::time::sleep_until(release).await;
        gate.passable().await;
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;

    /// An echo server on a free port, on a thread; returns its port.
    fn echo_server() -> u16 {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        port
    }

    fn connect(proxy: &FaultProxy) -> StdStream {
        let s = StdStream::connect(("127.0.0.1", proxy.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    fn roundtrip(s: &mut StdStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn passes_through_and_delays_replies_in_order() {
        let proxy = FaultProxy::start(echo_server());
        let mut s = connect(&proxy);
        assert_eq!(roundtrip(&mut s, b"hello").unwrap(), b"hello");

        // A delay long against scheduling noise, so "late" and "fast" cannot be confused.
        proxy.set_reply_delay(Duration::from_millis(1500));
        let t = std::time::Instant::now();
        assert_eq!(roundtrip(&mut s, b"late").unwrap(), b"late");
        assert!(
            t.elapsed() >= Duration::from_millis(1490),
            "{:?}",
            t.elapsed()
        );

        proxy.set_reply_delay(Duration::ZERO);
        let t = std::time::Instant::now();
        assert_eq!(roundtrip(&mut s, b"fast").unwrap(), b"fast");
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn cut_closes_open_connections_only() {
        let proxy = FaultProxy::start(echo_server());
        let mut s = connect(&proxy);
        assert_eq!(roundtrip(&mut s, b"a").unwrap(), b"a");
        assert_eq!(proxy.open_connections(), 1);
        proxy.cut();
        let mut buf = [0u8; 1];
        // The proxy closed its side: the read sees end of stream (or a reset), not the read
        // timeout of a connection still open.
        let read = s.read(&mut buf);
        assert!(
            matches!(&read, Ok(0))
                || matches!(&read, Err(e) if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                )),
            "{read:?}"
        );
        let mut fresh = connect(&proxy);
        assert_eq!(roundtrip(&mut fresh, b"b").unwrap(), b"b");
    }

    #[test]
    fn blackhole_holds_traffic_until_lifted() {
        let proxy = FaultProxy::start(echo_server());
        let mut s = connect(&proxy);
        assert_eq!(roundtrip(&mut s, b"x").unwrap(), b"x");
        proxy.set_blackhole(true);
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        assert!(
            s.read_exact(&mut buf).is_err(),
            "nothing passes a black hole"
        );
        proxy.set_blackhole(false);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");
    }

    #[test]
    fn freeze_hangs_open_connections_only() {
        let proxy = FaultProxy::start(echo_server());
        let mut old = connect(&proxy);
        assert_eq!(roundtrip(&mut old, b"x").unwrap(), b"x");
        proxy.freeze_open();
        old.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        old.write_all(b"lost").unwrap();
        let mut buf = [0u8; 4];
        let read = old.read_exact(&mut buf);
        assert!(
            matches!(&read, Err(e) if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )),
            "a frozen connection stays open and silent: {read:?}"
        );
        assert_eq!(proxy.open_connections(), 1);
        let mut fresh = connect(&proxy);
        assert_eq!(roundtrip(&mut fresh, b"new").unwrap(), b"new");
        // Still frozen after the new connection came and went.
        let read = old.read_exact(&mut buf);
        assert!(read.is_err(), "{read:?}");
    }
}
