//! The memory server: holds pages for its clients in RAM, one namespace per client.
//!
//! Clients reach it over TCP (`tcp://`, and `fabric://`'s control channel) or a Unix socket
//! (`unix://`: one-sided pages in memory files, see [`swap_backend::memfile`]).
//!
//! One thread per connection. A namespace lives while at least one connection that said hello
//! with its name is open; when the last one closes its pages are freed (the client that owned
//! them is gone, so nobody can ask for them again). Capacity is shared by all namespaces and
//! enforced on every write. A malformed frame or a failed connection closes that connection
//! with a logged reason and never takes the server down.

mod fabric_target;
mod memfile_pool;
mod page_map;

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fabric_target::Target;
use crate::memfile_pool::FileGrants;
use crate::page_map::PageMap;
use swap_backend::auth::{same_secret, SessionKey};
use swap_backend::protocol::{
    self, code, read_frame, FrameError, HelloOk, Reply, Request, PAGE_SIZE,
};

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Bytes of page storage across all clients.
    pub capacity_bytes: u64,
    /// Clients must present this token in their hello; `None` accepts any.
    pub token: Option<String>,
    /// Log connection events and refused requests to stderr.
    pub verbose: bool,
    /// Emulated latency: each reply leaves no sooner than this after its request arrived.
    pub latency: Option<std::time::Duration>,
    /// Also serve one-sided clients (`fabric://`): register the page pool with libfabric and
    /// listen for their data endpoints.
    pub fabric: bool,
    /// How long a namespace whose last connection closed waits for its owner to reconnect
    /// (with its session key) before its pages are freed; zero frees them at once.
    pub grace: std::time::Duration,
    /// Most pages one namespace may hold; `None`: only the capacity bounds it.
    pub quota_pages: Option<u64>,
    /// Connections and the hello deadline.
    pub limits: Limits,
    /// Where to serve the counters in the Prometheus text format (`GET /metrics`), if at all.
    pub metrics: Option<String>,
    /// The libfabric provider a one-sided listener uses (`shm`, `tcp;ofi_rxm`); `None`:
    /// `FI_PROVIDER`'s choice or this host's (see [`swap_backend::fabric::provider_choice`]).
    pub fabric_provider: Option<String>,
}

/// What one server and one client may take, so that a flood of connections cannot exhaust the
/// server's threads or memory: a connection costs a thread (256 KiB of stack) and, once it
/// has said hello, 512 KiB of buffers.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections, all clients together; more are refused at once.
    pub connections: usize,
    /// Open connections of one namespace (a JVM opens one per fault handler, plus two).
    pub connections_per_client: usize,
    /// How long a new connection may take to say hello before it is closed.
    pub hello_deadline: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 512,
            connections_per_client: 64,
            hello_deadline: std::time::Duration::from_secs(5),
        }
    }
}

/// Why a listener was refused: other machines could reach it and the configuration has no
/// token (see [`ServerConfig::admits_listener`]). The error inside the `io::Error`, so that a
/// front end can add how its users give a token.
#[derive(Debug)]
pub struct TokenRequired(pub std::net::IpAddr);

impl std::fmt::Display for TokenRequired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is not a loopback address: a server other machines can reach needs a token",
            self.0
        )
    }
}

impl std::error::Error for TokenRequired {}

impl ServerConfig {
    /// Pages of storage across all clients.
    fn capacity_pages(&self) -> u64 {
        self.capacity_bytes / PAGE_SIZE as u64
    }

    /// Whether a TCP listener at `addr` may serve with this configuration: one that other
    /// machines can reach (any address but loopback) only with a token.
    pub fn admits_listener(&self, addr: &SocketAddr) -> std::io::Result<()> {
        if self.token.is_none() && !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                TokenRequired(addr.ip()),
            ));
        }
        Ok(())
    }

    /// `capacity_bytes` for every client together, no token, quiet, no emulated latency, TCP
    /// only, pages freed as soon as their owner disconnects, no per-client quota.
    pub fn with_capacity(capacity_bytes: u64) -> ServerConfig {
        ServerConfig {
            capacity_bytes,
            token: None,
            verbose: false,
            latency: None,
            fabric: false,
            grace: std::time::Duration::ZERO,
            quota_pages: None,
            limits: Limits::default(),
            metrics: None,
            fabric_provider: None,
        }
    }
}

struct Namespace {
    /// Presented by every later hello that attaches here.
    key: SessionKey,
    pages: PageMap,
    connections: AtomicU64,
    /// Pages this namespace holds (its own and its one-sided slots), for the quota.
    held: AtomicU64,
    /// When its last connection closed, while it waits out the grace period.
    detached: Mutex<Option<std::time::Instant>>,
    /// For the metrics: pages read, written and freed over TCP, requests refused.
    pages_read: AtomicU64,
    pages_written: AtomicU64,
    pages_freed: AtomicU64,
    errors: AtomicU64,
}

impl Namespace {
    /// An empty namespace with `connections` attached.
    fn new(key: SessionKey, connections: u64) -> Namespace {
        Namespace {
            key,
            pages: PageMap::default(),
            connections: AtomicU64::new(connections),
            held: AtomicU64::new(0),
            detached: Mutex::new(None),
            pages_read: AtomicU64::new(0),
            pages_written: AtomicU64::new(0),
            pages_freed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

struct Shared {
    config: ServerConfig,
    capacity_pages: u64,
    used_pages: AtomicU64,
    pages_read: AtomicU64,
    pages_written: AtomicU64,
    /// CPU time of finished connection threads, nanoseconds.
    cpu_ns: AtomicU64,
    namespaces: Mutex<HashMap<String, Arc<Namespace>>>,
    /// Notified whenever a namespace goes away (its last connection closed).
    namespace_gone: std::sync::Condvar,
    stopping: AtomicBool,
    /// The one-sided side, when configured.
    target: Option<Arc<Target>>,
    /// Every open connection, so that stopping the server closes them.
    connections: Mutex<HashMap<u64, Open>>,
    next_connection: AtomicU64,
}

impl Shared {
    fn new(config: ServerConfig, target: Option<Arc<Target>>) -> Shared {
        Shared {
            capacity_pages: config.capacity_pages(),
            config,
            used_pages: AtomicU64::new(0),
            pages_read: AtomicU64::new(0),
            pages_written: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            namespaces: Mutex::new(HashMap::new()),
            namespace_gone: std::sync::Condvar::new(),
            stopping: AtomicBool::new(false),
            target,
            connections: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(0),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in one connection thread must not poison the server for the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open connection as the server can cut it.
struct Open {
    socket: OwnedFd,
    /// Set when the server cut it (the client did not close it).
    cut: Arc<AtomicBool>,
}

impl Open {
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Both);
    }
}

/// A client connection, over TCP or a Unix socket.
trait Conn: Read + Write + AsFd + Send + Sized + 'static {
    fn clone_conn(&self) -> std::io::Result<Self>;
    /// The Unix socket, on which replies can carry memory files.
    fn unix(&self) -> Option<&UnixStream> {
        None
    }
}

impl Conn for TcpStream {
    fn clone_conn(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
}

impl Conn for UnixStream {
    fn clone_conn(&self) -> std::io::Result<Self> {
        self.try_clone()
    }

    fn unix(&self) -> Option<&UnixStream> {
        Some(self)
    }
}

/// A listening socket, TCP or Unix.
trait Accept: Send + 'static {
    type Conn: Conn;
    /// The next connection and who it is from (for the log).
    fn accept_one(&self) -> std::io::Result<(Self::Conn, String)>;
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    fn accept_one(&self) -> std::io::Result<(TcpStream, String)> {
        let (s, peer) = self.accept()?;
        s.set_nodelay(true)?;
        Ok((s, peer.to_string()))
    }
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    fn accept_one(&self) -> std::io::Result<(UnixStream, String)> {
        let (s, _) = self.accept()?;
        // Who is on the other end, by the kernel's word (a Unix socket has no address).
        let peer = match rustix::net::sockopt::socket_peercred(&s) {
            Ok(c) => format!("pid {} (uid {})", c.pid.as_raw_nonzero(), c.uid.as_raw()),
            Err(_) => "a local process".into(),
        };
        Ok((s, peer))
    }
}

/// Where a server listens.
#[derive(Clone, Debug)]
enum Listening {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A running server; dropping the handle does not stop it, [`ServerHandle::stop`] does.
pub struct ServerHandle {
    addr: Listening,
    shared: Arc<Shared>,
    metrics: Option<swap_backend::metrics::MetricsListener>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The thread that started the server, with its and the process's CPU time then.
    started_by: StartedBy,
}

impl ServerHandle {
    /// The TCP address it listens at (a `unix://` server has none: see [`Self::url`]).
    pub fn local_addr(&self) -> SocketAddr {
        match &self.addr {
            Listening::Tcp(a) => *a,
            Listening::Unix(p) => panic!("the server at {} listens on a Unix socket", p.display()),
        }
    }

    /// Its address as clients name it: `tcp://127.0.0.1:7070`, `unix:///run/memliner.sock`
    /// (a one-sided TCP server's is `fabric://`, see [`Self::fabric`]).
    pub fn url(&self) -> String {
        match &self.addr {
            Listening::Tcp(a) if self.shared.target.is_some() => format!("fabric://{a}"),
            Listening::Tcp(a) => format!("tcp://{a}"),
            Listening::Unix(p) => format!("unix://{}", p.display()),
        }
    }

    /// Pages currently stored, across all namespaces.
    pub fn pages_stored(&self) -> u64 {
        self.shared.used_pages.load(Ordering::Relaxed)
    }

    /// CPU time the server has used. Asked by the thread that started it (`memliner run`'s
    /// embedded server, in a process that does nothing else meanwhile): everything the process
    /// ran outside that thread since, libfabric's own threads included. Asked by another
    /// thread: what the connection threads that have closed used, and the one-sided
    /// listener's threads.
    pub fn cpu_time(&self) -> std::time::Duration {
        let (by, thread0, process0) = self.started_by;
        if std::thread::current().id() == by {
            let process = memliner_cpu::process_cpu_time().saturating_sub(process0);
            return process.saturating_sub(memliner_cpu::thread_cpu_time().saturating_sub(thread0));
        }
        std::time::Duration::from_nanos(self.shared.cpu_ns.load(Ordering::Relaxed))
            + self
                .shared
                .target
                .as_deref()
                .map_or(std::time::Duration::ZERO, Target::cpu_time)
    }

    /// Waits until no client is connected, at most `timeout`; `true` if none is.
    pub fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        let busy = |a: &HashMap<String, Arc<Namespace>>| {
            a.values()
                .any(|ns| ns.connections.load(Ordering::SeqCst) > 0)
        };
        let all = lock(&self.shared.namespaces);
        let (all, _) = self
            .shared
            .namespace_gone
            .wait_timeout_while(all, timeout, |a| busy(a))
            .unwrap_or_else(|e| e.into_inner());
        !busy(&all)
    }

    /// The one-sided listener's provider and port, when the server has one.
    pub fn fabric(&self) -> Option<(&str, u16)> {
        self.shared
            .target
            .as_deref()
            .map(|t| (t.provider(), t.port()))
    }

    /// Connections open now (each has a thread of its own).
    /// Where the metrics listener (`ServerConfig::metrics`) serves, if there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.local_addr())
    }

    pub fn open_connections(&self) -> usize {
        lock(&self.shared.connections).len()
    }

    /// Closes every client connection, as a network failure would; the namespaces stay for
    /// their grace period, for their owners to reconnect.
    pub fn disconnect_all(&self) {
        for c in lock(&self.shared.connections).values() {
            c.cut();
        }
    }

    /// Stops the server as a crash would look to its clients: stops accepting, closes every
    /// connection (and every one-sided endpoint), and waits for the accept loop to end.
    pub fn stop(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // The reaper, if any, sees the flag when woken.
        drop(lock(&self.shared.namespaces));
        self.shared.namespace_gone.notify_all();
        // Wake the blocking accept with a throwaway connection.
        match &self.addr {
            Listening::Tcp(a) => drop(TcpStream::connect(a)),
            Listening::Unix(p) => drop(UnixStream::connect(p)),
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Listening::Unix(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
        self.disconnect_all();
        if let Some(t) = &self.shared.target {
            t.stop();
        }
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
    }

    /// Blocks until the accept loop ends (for the `memliner server` foreground command).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds `listen` (`HOST:PORT`) and serves in background threads.
pub fn spawn(listen: &str, config: ServerConfig) -> std::io::Result<ServerHandle> {
    let started_by = started_now();
    let listener = TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    config.admits_listener(&addr)?;
    let target = if config.fabric {
        Some(
            Target::start(
                &addr.ip().to_string(),
                config.capacity_pages(),
                config.verbose,
                config.fabric_provider.as_deref(),
            )
            .map_err(std::io::Error::other)?,
        )
    } else {
        None
    };
    serve(listener, Listening::Tcp(addr), config, target, started_by)
}

/// Binds a Unix socket at `path` and serves `unix://` clients (memory files) there, in
/// background threads. A socket file left by a server that is gone is replaced; one a live
/// server listens on is an error. Only the socket's owner can connect (the umask's mode;
/// the token, if set, is asked for too).
pub fn spawn_unix(path: &Path, config: ServerConfig) -> std::io::Result<ServerHandle> {
    let started_by = started_now();
    if config.fabric {
        return Err(std::io::Error::other(
            "a one-sided libfabric listener needs a TCP address (fabric://HOST:PORT)",
        ));
    }
    swap_backend::memfile::available().map_err(std::io::Error::other)?;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !m.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("a server already listens at {}", path.display()),
            ));
        }
        // A socket nobody answers on: left by a server that is gone.
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    raise_file_limit();
    serve(
        listener,
        Listening::Unix(path.to_path_buf()),
        config,
        None,
        started_by,
    )
}

/// Each `unix://` grant holds a descriptor here: as many as the hard limit allows.
fn raise_file_limit() {
    let mut l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, l);
    }
}

type StartedBy = (
    std::thread::ThreadId,
    std::time::Duration,
    std::time::Duration,
);

fn started_now() -> StartedBy {
    (
        std::thread::current().id(),
        memliner_cpu::thread_cpu_time(),
        memliner_cpu::process_cpu_time(),
    )
}

fn serve<L: Accept>(
    listener: L,
    addr: Listening,
    config: ServerConfig,
    target: Option<Arc<Target>>,
    started_by: StartedBy,
) -> std::io::Result<ServerHandle> {
    let shared = Arc::new(Shared::new(config, target));
    let s = shared.clone();
    let thread = std::thread::Builder::new()
        .name("memliner-accept".into())
        .spawn(move || accept_loop(listener, s))?;
    if !shared.config.grace.is_zero() {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("memliner-reaper".into())
            .spawn(move || reap_loop(&s))?;
    }
    let metrics = match &shared.config.metrics {
        Some(listen) => {
            let s = shared.clone();
            Some(
                swap_backend::metrics::MetricsListener::start(listen, move || figures(&s))
                    .map_err(std::io::Error::other)?,
            )
        }
        None => None,
    };
    Ok(ServerHandle {
        addr,
        shared,
        metrics,
        thread: Some(thread),
        started_by,
    })
}

/// The counters now, for the metrics listener.
fn figures(shared: &Shared) -> swap_backend::metrics::Figures {
    let mut namespaces: Vec<swap_backend::metrics::NamespaceFigures> = lock(&shared.namespaces)
        .iter()
        .map(|(name, ns)| swap_backend::metrics::NamespaceFigures {
            name: name.clone(),
            pages: ns.held.load(Ordering::Relaxed),
            connections: ns.connections.load(Ordering::Relaxed),
            pages_read: ns.pages_read.load(Ordering::Relaxed),
            pages_written: ns.pages_written.load(Ordering::Relaxed),
            pages_freed: ns.pages_freed.load(Ordering::Relaxed),
            errors: ns.errors.load(Ordering::Relaxed),
        })
        .collect();
    namespaces.sort_by(|a, b| a.name.cmp(&b.name));
    swap_backend::metrics::Figures {
        capacity_pages: shared.capacity_pages,
        used_pages: shared.used_pages.load(Ordering::Relaxed),
        connections: lock(&shared.connections).len() as u64,
        pages_read: shared.pages_read.load(Ordering::Relaxed),
        pages_written: shared.pages_written.load(Ordering::Relaxed),
        namespaces,
    }
}

fn accept_loop<L: Accept>(listener: L, shared: Arc<Shared>) {
    let mut refused = RefusalLog::default();
    loop {
        let accepted = listener.accept_one();
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let (mut stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                eprintln!("memliner-server: accept failed: {e}");
                continue;
            }
        };
        let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
        let cut = Arc::new(AtomicBool::new(false));
        {
            let mut open = lock(&shared.connections);
            let max = shared.config.limits.connections;
            if open.len() >= max {
                drop(open);
                let why = format!("server full: {max} connections open, the most it takes");
                // The refusal must not wait on a client that does not read.
                let _ = socket2::SockRef::from(&stream)
                    .set_write_timeout(Some(std::time::Duration::from_millis(100)));
                let _ = send_error(&mut stream, 0, code::LIMIT, &why);
                refused.note(&shared, &peer, &why);
                continue;
            }
            if let Ok(socket) = stream.as_fd().try_clone_to_owned() {
                open.insert(
                    id,
                    Open {
                        socket,
                        cut: cut.clone(),
                    },
                );
            }
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("memliner-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let result = serve_connection(&s, stream, &peer, &cut);
                lock(&s.connections).remove(&id);
                if let Err(reason) = result {
                    // Closes and silent connections are routine (and a flood of the latter
                    // must not flood the log): shown under --verbose only.
                    if s.config.verbose || !reason.routine() {
                        eprintln!("memliner-server: connection from {peer} closed: {reason}");
                    }
                }
            });
        if let Err(e) = spawned {
            lock(&shared.connections).remove(&id);
            eprintln!("memliner-server: cannot start a connection thread: {e}");
        }
    }
}

/// Refused connections, logged one line each under `--verbose`, else at most one line a
/// second with the count (a flood must not flood the log too).
#[derive(Default)]
struct RefusalLog {
    since: Option<std::time::Instant>,
    count: u64,
}

impl RefusalLog {
    fn note(&mut self, shared: &Shared, peer: &str, why: &str) {
        if shared.config.verbose {
            eprintln!("memliner-server: refused a connection from {peer}: {why}");
            return;
        }
        self.count += 1;
        let now = std::time::Instant::now();
        if self
            .since
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1))
        {
            eprintln!(
                "memliner-server: refused {} connection(s) (the last from {peer}): {why}",
                self.count
            );
            self.since = Some(now);
            self.count = 0;
        }
    }
}

/// Keeps a namespace's connection count, and frees its pages with the last connection (or
/// leaves them for the grace period).
struct Attachment<'a> {
    shared: &'a Shared,
    name: String,
    ns: Arc<Namespace>,
    peer: String,
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        // Counted before the namespace can go: whoever waits for the server to be idle then
        // reads the whole CPU time.
        let cpu = memliner_cpu::thread_cpu_time().as_nanos() as u64;
        self.shared.cpu_ns.fetch_add(cpu, Ordering::Relaxed);
        let mut all = lock(&self.shared.namespaces);
        if self.ns.connections.fetch_sub(1, Ordering::SeqCst) == 1 {
            if self.shared.config.grace.is_zero() {
                all.remove(&self.name);
                free_namespace(self.shared, &self.name, &self.ns, &self.peer);
            } else {
                *lock(&self.ns.detached) = Some(std::time::Instant::now());
                if self.shared.config.verbose {
                    eprintln!(
                        "memliner-server: namespace '{}' detached by {}: its pages wait {} for the owner to reconnect",
                        self.name,
                        self.peer,
                        swap_backend::units::format_duration(self.shared.config.grace)
                    );
                }
            }
            self.shared.namespace_gone.notify_all();
        }
    }
}

/// Frees the pages of a namespace nobody can reach any more.
fn free_namespace(shared: &Shared, name: &str, ns: &Namespace, by: &str) {
    let freed = ns.pages.clear();
    give_back(shared, ns, freed);
    if shared.config.verbose {
        eprintln!("memliner-server: namespace '{name}' freed ({freed} pages; last held by {by})");
    }
}

/// Frees the namespaces whose grace period ran out, until the server stops.
fn reap_loop(shared: &Shared) {
    let mut all = lock(&shared.namespaces);
    while !shared.stopping.load(Ordering::SeqCst) {
        let now = std::time::Instant::now();
        let expired: Vec<String> = all
            .iter()
            .filter(|(_, ns)| {
                ns.connections.load(Ordering::SeqCst) == 0
                    && lock(&ns.detached).is_some_and(|t| now >= t + shared.config.grace)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in expired {
            if let Some(ns) = all.remove(&name) {
                free_namespace(shared, &name, &ns, "nobody: the grace period ran out");
            }
        }
        shared.namespace_gone.notify_all();
        // Woken by every detach (to time the new deadline) and by stop.
        let next = all
            .values()
            .filter_map(|ns| *lock(&ns.detached))
            .map(|t| (t + shared.config.grace).saturating_duration_since(now))
            .min()
            .unwrap_or(std::time::Duration::from_secs(1));
        all = shared
            .namespace_gone
            .wait_timeout(all, next.max(std::time::Duration::from_millis(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// A control channel's one-sided session: ended (endpoints closed, slots freed) with it.
struct Session<'a> {
    shared: &'a Shared,
    ns: Arc<Namespace>,
    side: OneSided<'a>,
    /// The client closed the session (rather than the server cutting it): a `unix://`
    /// client's grants are emptied then (it unmapped them first).
    closed_by_client: bool,
}

/// Where a session's slots are.
enum OneSided<'a> {
    /// Registered with libfabric (`fabric://`).
    Fabric { target: &'a Target, id: u64 },
    /// Memory files (`unix://`).
    Files(FileGrants),
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let freed = match &mut self.side {
            OneSided::Fabric { target, id } => target.detach(*id),
            OneSided::Files(files) => files.end(self.closed_by_client),
        };
        give_back(self.shared, &self.ns, freed);
    }
}

/// Reserves between `need` and `want` pages for namespace `ns` (as many as its quota and the
/// server's capacity leave), or says which limit refuses even `need`.
fn reserve(
    shared: &Shared,
    ns: &Namespace,
    name: &str,
    need: u64,
    want: u64,
) -> Result<u64, (u16, String)> {
    let quota = shared.config.quota_pages.unwrap_or(u64::MAX);
    let mut got = 0;
    ns.held
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
            got = want.min(quota.saturating_sub(h));
            (got >= need).then_some(h + got)
        })
        .map_err(|_| {
            (
                code::QUOTA,
                format!(
                    "quota of {quota} pages ({} MiB) for namespace '{name}' exhausted",
                    (quota * PAGE_SIZE as u64) >> 20
                ),
            )
        })?;
    let cap = shared.capacity_pages;
    let mut granted = 0;
    let r = shared
        .used_pages
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
            granted = got.min(cap.saturating_sub(u));
            (granted >= need).then_some(u + granted)
        });
    // What the capacity did not grant goes back to the namespace's count.
    ns.held
        .fetch_sub(got - if r.is_ok() { granted } else { 0 }, Ordering::SeqCst);
    r.map(|_| granted).map_err(|_| {
        (
            code::CAPACITY,
            format!(
                "capacity of {cap} pages ({} MiB) exhausted",
                (cap * PAGE_SIZE as u64) >> 20
            ),
        )
    })
}

/// Returns `n` pages of `ns` to the server.
fn give_back(shared: &Shared, ns: &Namespace, n: u64) {
    ns.held.fetch_sub(n, Ordering::SeqCst);
    shared.used_pages.fetch_sub(n, Ordering::SeqCst);
}

/// [`send_error`] for a request of namespace `ns`, counted in its metrics.
fn ns_error(
    ns: &Namespace,
    w: &mut impl Write,
    request: u64,
    code: u16,
    msg: &str,
) -> std::io::Result<()> {
    ns.errors.fetch_add(1, Ordering::Relaxed);
    send_error(w, request, code, msg)
}

fn send_error(w: &mut impl Write, request: u64, code: u16, msg: &str) -> std::io::Result<()> {
    Reply::Error {
        code,
        message: msg.into(),
    }
    .write_to(w, request)
}

/// Why a connection ended (logged with its peer).
#[derive(Debug, thiserror::Error)]
enum ConnectionEnd {
    #[error("closed by client{}", .0.as_ref().map_or(String::new(), |e| format!(" ({e})")))]
    ClosedByClient(Option<std::io::Error>),
    #[error("closed before hello")]
    ClosedBeforeHello,
    #[error("no hello within {}", swap_backend::units::format_duration(*.0))]
    NoHello(std::time::Duration),
    #[error("first frame was {0:?}, not hello")]
    NotHello(protocol::Op),
    #[error("refused: {0}")]
    Refused(String),
    #[error("bad {op:?} frame from a client: {message}")]
    BadFrame { op: protocol::Op, message: String },
    #[error("a second hello on one connection")]
    SecondHello,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Frame(#[from] FrameError),
}

impl ConnectionEnd {
    /// Ends that happen in normal operation: logged under --verbose only.
    fn routine(&self) -> bool {
        matches!(
            self,
            ConnectionEnd::ClosedByClient(_)
                | ConnectionEnd::ClosedBeforeHello
                | ConnectionEnd::NoHello(_)
        )
    }
}

/// A client that exits with a reply unread resets the connection (a JVM whose threads serve
/// their own faults can exit mid-request): that is a close, not an error.
fn client_gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe)
}

fn io_end(e: std::io::Error) -> ConnectionEnd {
    if client_gone(&e) {
        ConnectionEnd::ClosedByClient(Some(e))
    } else {
        ConnectionEnd::Io(e)
    }
}

fn serve_connection<S: Conn>(
    shared: &Shared,
    mut stream: S,
    peer: &str,
    cut: &AtomicBool,
) -> Result<(), ConnectionEnd> {
    let mut payload = Vec::new();

    // Hello first, within the deadline, read without buffers: a connection that never says
    // hello costs its thread and nothing more, and only until the deadline.
    let deadline = shared.config.limits.hello_deadline;
    socket2::SockRef::from(&stream).set_read_timeout(Some(deadline))?;
    let h = match read_frame(&mut stream, &mut payload) {
        Ok(h) => h,
        Err(FrameError::Io(e)) if client_gone(&e) => return Err(ConnectionEnd::ClosedBeforeHello),
        Err(FrameError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            let end = ConnectionEnd::NoHello(deadline);
            let _ = send_error(&mut stream, 0, code::LIMIT, &end.to_string());
            return Err(end);
        }
        Err(e) => return Err(e.into()),
    };
    socket2::SockRef::from(&stream).set_read_timeout(None)?;
    let hello = match Request::decode(h.op, &payload) {
        Ok(Request::Hello(hello)) => hello,
        Ok(other) => {
            let _ = send_error(&mut stream, h.request, code::BAD_REQUEST, "expected hello");
            return Err(ConnectionEnd::NotHello(other.op()));
        }
        Err(message) => return Err(ConnectionEnd::BadFrame { op: h.op, message }),
    };
    let (name, lane) = (hello.namespace, hello.lane);
    let mut refuse = |code: u16, why: String| {
        let _ = send_error(&mut stream, h.request, code, &why);
        Err(ConnectionEnd::Refused(why))
    };
    if let Some(expected) = &shared.config.token {
        if !same_secret(hello.token.as_bytes(), expected.as_bytes()) {
            return refuse(code::AUTH, "bad token".into());
        }
    }
    let attached = attach(shared, &name, hello.key.as_ref());
    let (ns, created) = match attached {
        Ok(a) => a,
        Err((c, why)) => return refuse(c, why),
    };
    // Counted from here: whatever happens next, the drop takes the connection back.
    let _attachment = Attachment {
        shared,
        name: name.clone(),
        ns: ns.clone(),
        peer: peer.to_string(),
    };
    let mut reader = BufReader::with_capacity(256 << 10, stream.clone_conn()?);
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    Reply::HelloOk(HelloOk {
        page_size: PAGE_SIZE as u32,
        capacity_pages: shared.capacity_pages,
        key: Some(ns.key),
    })
    .write_to(&mut writer, h.request)
    .map_err(io_end)?;
    writer.flush().map_err(io_end)?;
    if shared.config.verbose {
        let how = if created { "created" } else { "attached to" };
        eprintln!("memliner-server: {peer} {how} namespace '{name}' ({lane:?} lane)");
    }

    let mut session: Option<Session> = None;
    let end = serve_requests(
        shared,
        &ns,
        &name,
        lane,
        &mut reader,
        &mut writer,
        &mut session,
    );
    if let Some(s) = session.as_mut() {
        s.closed_by_client =
            matches!(end, Err(ConnectionEnd::ClosedByClient(_))) && !cut.load(Ordering::SeqCst);
    }
    end
}

/// Answers a connection's requests after its hello, until it ends.
fn serve_requests<'s, S: Conn>(
    shared: &'s Shared,
    ns: &Arc<Namespace>,
    name: &str,
    lane: protocol::Lane,
    reader: &mut BufReader<S>,
    writer: &mut BufWriter<S>,
    session: &mut Option<Session<'s>>,
) -> Result<(), ConnectionEnd> {
    let mut payload = Vec::new();
    let mut out = Vec::new();
    let mut fds = Vec::new();
    let unix = writer.get_ref().unix().is_some();
    loop {
        // Flush replies only when no further request is already buffered: pipelined requests
        // get their replies in one write.
        if reader.buffer().is_empty() {
            writer.flush().map_err(io_end)?;
            // A pager's fault handler asks again soon after an answer: spin briefly rather
            // than sleep (the governor permitting). Prefetch and reclaim lanes just block.
            if lane == protocol::Lane::Demand {
                swap_backend::tcp::spin_until_readable(reader.get_ref());
            }
        }
        let h = match read_frame(reader, &mut payload) {
            Ok(h) => h,
            Err(FrameError::Io(e)) if client_gone(&e) => {
                writer.flush().map_err(io_end)?;
                return Err(ConnectionEnd::ClosedByClient(None));
            }
            Err(e) => return Err(ConnectionEnd::Frame(e)),
        };
        let arrived = std::time::Instant::now();
        if let Some(l) = shared.config.latency {
            // Emulated fabric latency: nothing is answered sooner than `l` after it came.
            swap_backend::store::wait_until(arrived, l);
        }
        let request = match Request::decode(h.op, &payload) {
            Ok(r) => r,
            Err(e) => {
                let _ = ns_error(ns, writer, h.request, code::BAD_REQUEST, &e);
                let _ = writer.flush();
                return Err(ConnectionEnd::BadFrame {
                    op: h.op,
                    message: e,
                });
            }
        };
        let second_hello = matches!(request, Request::Hello(_));
        let ctx = Context {
            shared,
            ns,
            name,
            unix,
        };
        match respond(&ctx, session, request, &mut out, &mut fds) {
            Ok(reply) if fds.is_empty() => reply.write_to(writer, h.request).map_err(io_end)?,
            Ok(reply) => {
                // Memory files go with the reply's first byte, past the buffer.
                let mut frame = Vec::new();
                reply.write_to(&mut frame, h.request)?;
                writer.flush().map_err(io_end)?;
                let socket = writer.get_ref().unix().expect("files only on Unix sockets");
                let sent = swap_backend::memfile::send_with_fds(socket, &frame, &fds);
                fds.clear();
                sent.map_err(io_end)?;
            }
            Err((c, msg)) => ns_error(ns, writer, h.request, c, &msg).map_err(io_end)?,
        }
        if second_hello {
            let _ = writer.flush();
            return Err(ConnectionEnd::SecondHello);
        }
    }
}

/// Who asks: the namespace a connection attached to, and over what.
struct Context<'s, 'n> {
    shared: &'s Shared,
    ns: &'n Arc<Namespace>,
    name: &'n str,
    /// A Unix socket: one-sided means memory files.
    unix: bool,
}

/// Attaches a hello presenting `key` to namespace `name`: the namespace and whether it was
/// created, or a refusal. A new name makes a namespace (with a new key); an existing one
/// takes only its own key, and at most `connections_per_client` connections.
fn attach(
    shared: &Shared,
    name: &str,
    key: Option<&SessionKey>,
) -> Result<(Arc<Namespace>, bool), (u16, String)> {
    let mut all = lock(&shared.namespaces);
    match (all.get(name), key) {
        (Some(ns), Some(k)) if ns.key.matches(k) => {
            let max = shared.config.limits.connections_per_client;
            if ns.connections.load(Ordering::SeqCst) >= max as u64 {
                Err((
                    code::LIMIT,
                    format!("namespace '{name}' has {max} connections open, the most one client may"),
                ))
            } else {
                ns.connections.fetch_add(1, Ordering::SeqCst);
                *lock(&ns.detached) = None;
                Ok((ns.clone(), false))
            }
        }
        (Some(_), _) => Err((code::SESSION, format!(
            "namespace '{name}' belongs to another client (only a connection presenting its session key attaches to it)"
        ))),
        (None, Some(_)) => Err((code::SESSION, format!(
            "namespace '{name}' no longer exists here: the pages it held are gone (the server restarted, or its owner stayed away past the grace period)"
        ))),
        (None, None) => match SessionKey::random() {
            Ok(key) => {
                let ns = Arc::new(Namespace::new(key, 1));
                all.insert(name.to_string(), ns.clone());
                Ok((ns, true))
            }
            Err(e) => Err((code::BAD_REQUEST, format!("cannot make a session key: {e}"))),
        },
    }
}

/// The answer to one request of a connection attached to namespace `name` (`ns`): its reply,
/// or a refusal (a [`code`] and why). `out` holds a read's pages; `session` is the
/// connection's one-sided session, once it attached. A second hello is refused here, and the
/// caller then ends the connection; every other refusal leaves it open.
fn respond<'s, 'o>(
    ctx: &Context<'s, '_>,
    session: &mut Option<Session<'s>>,
    request: Request<'_>,
    out: &'o mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> Result<Reply<'o>, (u16, String)> {
    let (shared, ns, name) = (ctx.shared, ctx.ns, ctx.name);
    Ok(match request {
        Request::Read { ids } => {
            out.clear();
            if let Err(id) = ns.pages.read_into(&ids, out) {
                return Err((
                    code::NOT_FOUND,
                    format!("page {id} is not stored in namespace '{name}'"),
                ));
            }
            shared
                .pages_read
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
            ns.pages_read.fetch_add(ids.len() as u64, Ordering::Relaxed);
            let out: &'o Vec<u8> = out;
            Reply::ReadOk(out.as_slice())
        }
        Request::Write { ids, data } => {
            let new = ns.pages.missing(&ids);
            reserve(shared, ns, name, new, new)?;
            // Counted and stored shard by shard: another connection of the namespace may
            // have stored or freed one of these pages in between (the pager never writes
            // a page from two connections at once). Settle the difference.
            let added = ns.pages.write(&ids, data);
            if added < new {
                give_back(shared, ns, new - added);
            } else if added > new {
                ns.held.fetch_add(added - new, Ordering::SeqCst);
                shared.used_pages.fetch_add(added - new, Ordering::SeqCst);
            }
            shared
                .pages_written
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
            ns.pages_written
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
            Reply::WriteOk
        }
        Request::Free { ids } => {
            let freed = ns.pages.free(&ids);
            give_back(shared, ns, freed);
            ns.pages_freed.fetch_add(freed, Ordering::Relaxed);
            Reply::FreeOk
        }
        Request::Stats => Reply::StatsOk(protocol::ServerStats {
            pages_stored: shared.used_pages.load(Ordering::Relaxed),
            capacity_pages: shared.capacity_pages,
            namespaces: lock(&shared.namespaces).len() as u64,
            pages_read: shared.pages_read.load(Ordering::Relaxed),
            pages_written: shared.pages_written.load(Ordering::Relaxed),
        }),
        Request::Attach => {
            if session.is_some() {
                return Err((
                    code::BAD_REQUEST,
                    "this connection is attached already".into(),
                ));
            }
            let (side, ok) = if ctx.unix {
                let ok = protocol::AttachOk {
                    port: 0,
                    session: 0,
                    provider: swap_backend::memfile::PROVIDER.into(),
                    endpoint: Vec::new(),
                };
                (OneSided::Files(FileGrants::new(name)), ok)
            } else {
                let Some(target) = shared.target.as_deref() else {
                    return Err((
                        code::BAD_REQUEST,
                        "this server has no one-sided listener: start it with --listen fabric://HOST:PORT (or unix://PATH on this host)".into(),
                    ));
                };
                let ok = target.attach();
                (
                    OneSided::Fabric {
                        target,
                        id: ok.session,
                    },
                    ok,
                )
            };
            if shared.config.verbose {
                eprintln!(
                    "memliner-server: namespace '{name}' attached for one-sided access ({})",
                    ok.provider
                );
            }
            *session = Some(Session {
                shared,
                ns: ns.clone(),
                side,
                closed_by_client: false,
            });
            Reply::AttachOk(ok)
        }
        Request::Alloc { need, want } => {
            let Some(s) = session.as_mut() else {
                return Err((code::BAD_REQUEST, "alloc before attach".into()));
            };
            let count = reserve(shared, ns, name, need as u64, want as u64)?;
            let granted = match &mut s.side {
                OneSided::Fabric { target, id } => target
                    .alloc(*id, count as u32)
                    .map_err(|msg| (code::BAD_REQUEST, msg)),
                OneSided::Files(files) => match files.alloc(count) {
                    Ok((grant, fd)) => {
                        fds.push(fd);
                        if shared.config.verbose {
                            eprintln!(
                                "memliner-server: namespace '{name}' granted a memory file of {count} pages"
                            );
                        }
                        Ok(vec![grant])
                    }
                    Err(e) => Err((
                        code::CAPACITY,
                        format!("cannot allocate {count} pages of memory for a grant: {e}"),
                    )),
                },
            };
            match granted {
                Ok(grants) => Reply::AllocOk(grants),
                Err(refusal) => {
                    // The namespace's count goes back too, or its quota would shrink.
                    give_back(shared, ns, count);
                    return Err(refusal);
                }
            }
        }
        Request::Release { grants } => {
            let Some(s) = session.as_mut() else {
                return Err((code::BAD_REQUEST, "release before attach".into()));
            };
            let slots = match &mut s.side {
                OneSided::Fabric { target, id } => target.release(*id, &grants),
                OneSided::Files(files) => files.release(&grants),
            }
            .map_err(|msg| (code::BAD_REQUEST, msg))?;
            give_back(shared, ns, slots);
            Reply::ReleaseOk
        }
        Request::Hello(_) => {
            return Err((code::BAD_REQUEST, "second hello".into()));
        }
    })
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.addr)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn a_listener_other_machines_can_reach_needs_a_token() {
        let Err(e) = spawn("0.0.0.0:0", ServerConfig::with_capacity(1 << 20)) else {
            panic!("served without a token on every address");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.get_ref().is_some_and(|i| i.is::<TokenRequired>()), "{e}");
        assert_eq!(
            e.to_string(),
            "0.0.0.0 is not a loopback address: a server other machines can reach needs a token"
        );
        let with_token = ServerConfig {
            token: Some("s3cret".into()),
            ..ServerConfig::with_capacity(1 << 20)
        };
        spawn("0.0.0.0:0", with_token).expect("a token admits it");
        spawn("127.0.0.1:0", ServerConfig::with_capacity(1 << 20)).expect("loopback needs none");
    }

    fn shared(capacity_pages: u64, quota_pages: Option<u64>) -> Shared {
        Shared::new(
            ServerConfig {
                quota_pages,
                ..ServerConfig::with_capacity(capacity_pages * PAGE_SIZE as u64)
            },
            None,
        )
    }

    fn namespace() -> Arc<Namespace> {
        Arc::new(Namespace::new(SessionKey::random().unwrap(), 1))
    }

    fn page(fill: u8) -> Vec<u8> {
        vec![fill; PAGE_SIZE]
    }

    /// `respond` to `request` with no session: the reply's op and bytes, or the refusal.
    fn ask(
        s: &Shared,
        ns: &Arc<Namespace>,
        request: Request<'_>,
    ) -> Result<(Op, Vec<u8>), (u16, String)> {
        let mut out = Vec::new();
        let mut session = None;
        let ctx = Context {
            shared: s,
            ns,
            name: "n",
            unix: false,
        };
        let reply = respond(&ctx, &mut session, request, &mut out, &mut Vec::new())?;
        let bytes = match &reply {
            Reply::ReadOk(b) => b.to_vec(),
            _ => Vec::new(),
        };
        Ok((reply.op(), bytes))
    }

    fn write(ids: &[u64], data: &[u8]) -> Request<'static> {
        Request::Write {
            ids: Cow::Owned(ids.to_vec()),
            data: Vec::leak(data.to_vec()),
        }
    }

    fn read(ids: &[u64]) -> Request<'static> {
        Request::Read {
            ids: Cow::Owned(ids.to_vec()),
        }
    }

    use swap_backend::protocol::Op;

    #[test]
    fn pages_written_read_back_in_the_order_asked_and_a_missing_one_is_named() {
        let s = shared(16, None);
        let ns = namespace();
        let data = [page(1), page(2)].concat();
        assert_eq!(ask(&s, &ns, write(&[7, 9], &data)).unwrap().0, Op::WriteOk);
        let (op, bytes) = ask(&s, &ns, read(&[9, 7])).unwrap();
        assert_eq!(op, Op::ReadOk);
        assert_eq!(bytes, [page(2), page(1)].concat());
        assert_eq!(
            ask(&s, &ns, read(&[7, 8])).unwrap_err(),
            (
                code::NOT_FOUND,
                "page 8 is not stored in namespace 'n'".into()
            )
        );
        assert_eq!(s.used_pages.load(Ordering::SeqCst), 2);
        assert_eq!(s.pages_read.load(Ordering::SeqCst), 2);
        assert_eq!(ns.pages_written.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn capacity_counts_new_pages_only_and_a_free_gives_room_back() {
        let s = shared(3, None);
        let ns = namespace();
        let three = [page(1), page(2), page(3)].concat();
        ask(&s, &ns, write(&[0, 1, 2], &three)).unwrap();
        // Rewriting a stored page takes no room.
        ask(&s, &ns, write(&[1], &page(9))).unwrap();
        assert_eq!(
            ask(&s, &ns, write(&[3], &page(4))).unwrap_err(),
            (
                code::CAPACITY,
                "capacity of 3 pages (0 MiB) exhausted".into()
            )
        );
        // A refused batch stores nothing of it.
        assert_eq!(ns.pages.missing(&[3]), 1);
        assert_eq!(
            ask(
                &s,
                &ns,
                Request::Free {
                    ids: Cow::Owned(vec![0, 5])
                }
            )
            .unwrap()
            .0,
            Op::FreeOk
        );
        assert_eq!(s.used_pages.load(Ordering::SeqCst), 2);
        assert_eq!(ns.held.load(Ordering::SeqCst), 2);
        ask(&s, &ns, write(&[3], &page(4))).unwrap();
        assert_eq!(ask(&s, &ns, read(&[1])).unwrap().1, page(9));
    }

    #[test]
    fn a_namespace_stops_at_its_quota_while_the_server_has_room() {
        let s = shared(100, Some(2));
        let (a, b) = (namespace(), namespace());
        ask(&s, &a, write(&[0, 1], &[page(1), page(2)].concat())).unwrap();
        let (c, why) = ask(&s, &a, write(&[2], &page(3))).unwrap_err();
        assert_eq!(c, code::QUOTA);
        assert!(why.contains("quota of 2 pages"), "{why}");
        // Another namespace has its own quota.
        ask(&s, &b, write(&[2], &page(3))).unwrap();
        assert_eq!(s.used_pages.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn one_sided_requests_without_a_listener_or_a_session_are_refused() {
        let s = shared(16, None);
        let ns = namespace();
        let (c, why) = ask(&s, &ns, Request::Attach).unwrap_err();
        assert_eq!(c, code::BAD_REQUEST);
        assert!(why.contains("no one-sided listener"), "{why}");
        assert_eq!(
            ask(&s, &ns, Request::Alloc { need: 1, want: 2 }).unwrap_err(),
            (code::BAD_REQUEST, "alloc before attach".into())
        );
        assert_eq!(
            ask(
                &s,
                &ns,
                Request::Release {
                    grants: Cow::Owned(vec![0])
                }
            )
            .unwrap_err(),
            (code::BAD_REQUEST, "release before attach".into())
        );
        assert_eq!(s.used_pages.load(Ordering::SeqCst), 0);
        let (op, _) = ask(&s, &ns, Request::Stats).unwrap();
        assert_eq!(op, Op::StatsOk);
    }

    #[test]
    fn a_namespace_takes_only_its_own_key_and_a_bounded_number_of_connections() {
        let mut config = ServerConfig::with_capacity(1 << 20);
        config.limits.connections_per_client = 2;
        let s = Shared::new(config, None);
        let refused = |r: Result<(Arc<Namespace>, bool), (u16, String)>| match r {
            Ok(_) => panic!("attached"),
            Err(e) => e,
        };
        let Ok((ns, created)) = attach(&s, "jvm", None) else {
            panic!("no namespace")
        };
        assert!(created);
        let key = ns.key;
        // Its owner's second connection attaches; a third is over the limit.
        let Ok((again, created)) = attach(&s, "jvm", Some(&key)) else {
            panic!("the owner's key refused")
        };
        assert!(!created && Arc::ptr_eq(&ns, &again));
        let (c, why) = refused(attach(&s, "jvm", Some(&key)));
        assert_eq!(c, code::LIMIT);
        assert!(why.contains("has 2 connections open"), "{why}");
        // Without the key, or with another one, the name is somebody else's.
        for wrong in [None, Some(SessionKey([7; 16]))] {
            let (c, why) = refused(attach(&s, "jvm", wrong.as_ref()));
            assert_eq!(c, code::SESSION);
            assert!(why.contains("belongs to another client"), "{why}");
        }
        // A key for a name the server does not hold: its pages are gone.
        let (c, why) = refused(attach(&s, "gone", Some(&key)));
        assert_eq!(c, code::SESSION);
        assert!(why.contains("no longer exists here"), "{why}");
        assert_eq!(lock(&s.namespaces).len(), 1);
    }

    #[test]
    fn closes_and_silent_clients_are_routine_and_the_rest_is_not() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(ConnectionEnd::ClosedByClient(Some(reset)).routine());
        assert!(ConnectionEnd::ClosedBeforeHello.routine());
        let silent = ConnectionEnd::NoHello(std::time::Duration::from_secs(5));
        assert!(silent.routine());
        assert_eq!(silent.to_string(), "no hello within 5s");
        assert!(!ConnectionEnd::SecondHello.routine());
        assert!(!ConnectionEnd::Refused("bad token".into()).routine());
        let bad = ConnectionEnd::Frame(FrameError::Malformed("bad magic".into()));
        assert!(!bad.routine());
        assert_eq!(bad.to_string(), "malformed frame: bad magic");
        assert_eq!(
            ConnectionEnd::ClosedByClient(None).to_string(),
            "closed by client"
        );
    }

    /// A stream that hands over one byte per read, as a slow network may.
    struct Trickle<'a>(&'a [u8]);

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            if buf.is_empty() {
                return Ok(0);
            }
            buf[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn frames_that_arrive_a_byte_at_a_time_decode_and_a_cut_one_is_an_error() {
        let mut wire = Vec::new();
        write(&[3], &page(5)).write_to(&mut wire, 42).unwrap();
        read(&[3]).write_to(&mut wire, 43).unwrap();
        let mut r = Trickle(&wire);
        let mut payload = Vec::new();
        let h = read_frame(&mut r, &mut payload).unwrap();
        assert_eq!((h.op, h.request), (Op::Write, 42));
        let Request::Write { ids, data } = Request::decode(h.op, &payload).unwrap() else {
            panic!("not a write");
        };
        assert_eq!((&*ids, data), (&[3u64][..], &page(5)[..]));
        let h = read_frame(&mut r, &mut payload).unwrap();
        assert_eq!((h.op, h.request), (Op::Read, 43));
        // The same frame cut short: the stream's end is an error, not a frame.
        let mut cut = Trickle(&wire[..wire.len() - 3]);
        read_frame(&mut cut, &mut payload).unwrap();
        assert!(matches!(
            read_frame(&mut cut, &mut payload),
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof
        ));
    }
}
