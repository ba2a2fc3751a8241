//! Launching a JVM with the agent: the option string, the embedded memory server, the stats.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::workloads;
use memliner_contracts::options::{Budget, OptionError, Options, Policy};
use memliner_contracts::stats::StatsDoc;
use memliner_server::{self as server, ServerConfig, ServerHandle};

/// How to run one JVM.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Load the agent at all (false: a plain JVM, the all-local reference).
    pub agent: bool,
    /// What the agent is told. Without `server=` (`server_given` false) `launch` starts an
    /// embedded server (none under policy `off`); without `stats=` it reads the stats from a
    /// temporary file.
    pub options: Options,
    /// Whether to switch a patched JDK's GC hooks on (`-XX:+MemLinerLineUp`).
    pub gc_hooks: GcHooks,
    /// Hand the `-agentpath:` argument over in this environment variable instead of putting
    /// it on the command line (for launchers such as spark-submit that start the JVM).
    pub agent_env: Option<String>,
    /// How the JVM reaches the embedded server (without `server=`).
    pub transport: Transport,
    /// Embedded servers to start (without `server=`): more than one for the bench's
    /// replicated cell, the pages then spread over them with `replicas` copies.
    pub embedded_servers: usize,
}

impl RunConfig {
    /// This configuration with its agent options changed by `f`.
    pub fn with(mut self, f: impl FnOnce(&mut Options)) -> RunConfig {
        f(&mut self.options);
        self
    }

    /// This configuration with `local` percent of the heap local.
    pub fn local(self, percent: u32) -> RunConfig {
        self.with(|o| o.budget = Budget::Percent(f64::from(percent)))
    }

    /// This configuration with the agent's `server=` set to `urls` (checked by its parser).
    pub fn servers(self, urls: &str) -> Result<RunConfig, OptionError> {
        let mut cfg = self;
        cfg.options.set("server", urls)?;
        Ok(cfg)
    }
}

/// How pages travel to the embedded memory server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// `unix` where this host can hand out memory files (Linux: everywhere but a sandbox
    /// that forbids memfd), `tcp` otherwise.
    #[default]
    Auto,
    /// Two-sided requests over TCP (`tcp://`): the portable path, and what a server on
    /// another machine is reached with.
    Tcp,
    /// One-sided RDMA reads and writes through libfabric (`fabric://`; the tcp provider
    /// where no RDMA NIC exists).
    Fabric,
    /// One-sided copies in memory files the embedded server hands the JVM (`unix://`): no
    /// server CPU per read, as with RDMA, and no network.
    Unix,
}

impl Transport {
    /// What `Auto` means on this host, and why not `unix` when it falls back.
    pub fn resolve(self) -> (Transport, Option<String>) {
        match self {
            Transport::Auto => match swap_backend::memfile::available() {
                Ok(()) => (Transport::Unix, None),
                Err(why) => (Transport::Tcp, Some(why)),
            },
            t => (t, None),
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            agent: true,
            options: Options::default(),
            embedded_servers: 1,
            gc_hooks: GcHooks::Auto,
            agent_env: None,
            transport: Transport::Auto,
        }
    }
}

/// The GC hooks of a patched JDK (scripts/build-jdk.sh builds one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GcHooks {
    /// On under policy memliner when the command's java is a patched build.
    Auto,
    /// On (the command's java must be a patched build).
    On,
    Off,
}

/// Whether `program` (a path, or a name looked up on PATH) is a java of a GC-hook patched JDK:
/// scripts/build-jdk.sh leaves a `memliner-jdk` file in the JDK's home.
pub fn is_patched_jdk(program: &str) -> bool {
    let path = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(program))
                .find(|c| c.is_file())
        })
    };
    path.and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent()?.parent().map(|h| h.join("memliner-jdk")))
        .is_some_and(|m| m.is_file())
}

/// The flag `launch` adds for `cfg`'s GC hooks, if any; an error for hooks asked for on a
/// stock JDK.
fn gc_hooks_flag(
    cfg: &RunConfig,
    program: &str,
    args: &[String],
) -> Result<Option<&'static str>, String> {
    if args.iter().any(|a| a.contains("MemLinerLineUp")) {
        return Ok(None); // the command says
    }
    let patched = is_patched_jdk(program);
    match cfg.gc_hooks {
        GcHooks::Off => Ok(None),
        GcHooks::On if !patched => Err(format!(
            "--gc-hooks on needs a GC-hook patched JDK, and {program} is not one (build one with \
             scripts/build-jdk.sh: target/jdk-memliner/bin/java)"
        )),
        GcHooks::On => Ok(Some("-XX:+MemLinerLineUp")),
        GcHooks::Auto if patched && cfg.agent && cfg.options.policy == Policy::MemLiner => {
            Ok(Some("-XX:+MemLinerLineUp"))
        }
        GcHooks::Auto => Ok(None),
    }
}

/// What a run left behind.
#[derive(Debug)]
pub struct RunOutcome {
    pub status: ExitStatus,
    pub wall: Duration,
    /// The stats document, if the agent wrote one.
    pub stats: Option<StatsDoc>,
    /// CPU time the embedded memory server spent serving this run.
    pub server_cpu: Option<Duration>,
    /// Captured output (empty when inherited).
    pub stdout: String,
    pub stderr: String,
    /// The embedded server's address, if one was started.
    pub embedded: Option<String>,
}

impl RunOutcome {
    /// The RESULT line of a workload that finished and verified itself: (checksum, workload
    /// ms); `what` names the run in the error otherwise.
    pub fn checked(&self, what: &str) -> Result<(String, f64), String> {
        let result = workloads::parse_result(&self.stdout).ok_or_else(|| {
            format!(
                "{what}: no RESULT line (exit {}); stderr: {}",
                self.status,
                tail(&self.stderr)
            )
        })?;
        if !self.status.success() || workloads::field(&result, "verified") != Some("true") {
            return Err(format!(
                "{what}: failed ({}): {}",
                self.status,
                tail(&self.stderr)
            ));
        }
        let ms = workloads::field(&result, "elapsed_ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        let sum = workloads::field(&result, "checksum")
            .unwrap_or("?")
            .to_string();
        Ok((sum, ms))
    }

    /// The process's exit code, or 128 + signal as a shell reports it.
    pub fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .code()
            .unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

/// The `-agentpath:` argument for `options`.
pub fn agent_arg(agent: &std::path::Path, options: &Options) -> String {
    format!("-agentpath:{}={}", agent.display(), options.render())
}

/// This machine's memory (`MemTotal`), 1 TiB if /proc/meminfo cannot tell.
fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            kib.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(1 << 40, |k| k << 10)
}

/// An in-process memory server for one launch: on a free loopback port, or (`unix`) on a
/// socket in a directory only this user can enter, removed with the server.
#[derive(Debug)]
pub struct Embedded {
    pub handle: ServerHandle,
    dir: Option<PathBuf>,
}

impl Embedded {
    /// The URL the agent is given.
    pub fn url(&self) -> String {
        self.handle.url()
    }

    /// Stops the server and removes its directory.
    pub fn stop(self) {
        self.handle.stop();
        if let Some(d) = self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Starts an in-process memory server reached over `transport` (resolved: not `Auto`).
pub fn embedded_server(transport: Transport) -> Result<Embedded, String> {
    let config = embedded_config(transport);
    let fail = |e: std::io::Error| format!("cannot start the embedded memory server: {e}");
    if transport != Transport::Unix {
        return server::spawn("127.0.0.1:0", config)
            .map(|handle| Embedded { handle, dir: None })
            .map_err(fail);
    }
    embedded_unix(config)
}

/// What an embedded server reached over `transport` is configured with.
pub fn embedded_config(transport: Transport) -> ServerConfig {
    ServerConfig {
        // Bounded by this machine's memory, not by a setting: the demo server only ever
        // holds what one JVM's heap evicts. A one-sided pool is reserved (and, on an RDMA
        // NIC, pinned) whole: as large as the machine's memory.
        capacity_bytes: match transport {
            Transport::Tcp | Transport::Auto => 1 << 40,
            Transport::Fabric | Transport::Unix => machine_memory(),
        },
        token: None,
        verbose: false,
        latency: None,
        fabric: transport == Transport::Fabric,
        grace: std::time::Duration::ZERO,
        quota_pages: None,
        limits: memliner_server::Limits::default(),
        metrics: None,
        fabric_provider: None,
    }
}

/// An embedded server in memory files, its socket in a private directory.
fn embedded_unix(config: ServerConfig) -> Result<Embedded, String> {
    let fail = |e: std::io::Error| format!("cannot start the embedded memory server: {e}");
    let dir = private_dir().map_err(fail)?;
    match server::spawn_unix(&dir.join("server.sock"), config) {
        Ok(handle) => Ok(Embedded {
            handle,
            dir: Some(dir),
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(fail(e))
        }
    }
}

/// A new directory under the temporary one that only this user can enter (the embedded
/// server's socket: no token needed, no other user can connect).
fn private_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "memliner-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The line `memliner run` prints about its embedded server: where, and what that models.
fn embedded_line(transport: Transport, urls: &[String], fallback: Option<String>) -> String {
    let at = urls.join(" + ");
    match transport {
        Transport::Unix => format!(
            "pages go to an embedded memory server at {at}, one-sided: the JVM copies them in and out of memory files the server handed it (no server CPU per read, as over RDMA; --server tcp://HOST:PORT for a server on another machine)"
        ),
        Transport::Fabric => format!(
            "pages go to an embedded memory server at {at}, one-sided through libfabric"
        ),
        _ => format!(
            "pages go to an embedded memory server at {at}, two-sided over loopback TCP (its threads share this host's cores with the JVM){}",
            fallback.map_or(String::new(), |why| format!("; not unix://: {why}"))
        ),
    }
}

/// Runs `command` (`java ...`) under `cfg`. With `capture`, stdout/stderr are collected,
/// else inherited.
pub fn launch(cfg: &RunConfig, command: &[String], capture: bool) -> Result<RunOutcome, String> {
    let (program, args) = command
        .split_first()
        .ok_or("no command given: write `memliner run -- java ...`")?;
    if args.iter().any(|a| a.contains(crate::locate::AGENT_FILE)) {
        return Err("the command already loads the memliner agent; drop its -agentpath".into());
    }
    let hooks = if cfg.agent_env.is_some() {
        None // a launcher starts the JVM: its options are the launcher's to set
    } else {
        gc_hooks_flag(cfg, program, args)?
    };
    let mut embedded: Vec<Embedded> = Vec::new();
    let mut stats_path = None;
    let mut cmd = Command::new(program);
    if cfg.agent {
        let agent = crate::locate::agent()?;
        let mut options = cfg.options.clone();
        if !options.server_given && options.policy != Policy::Off {
            let (transport, fallback) = cfg.transport.resolve();
            let mut urls = Vec::new();
            for _ in 0..cfg.embedded_servers.max(1) {
                let h = embedded_server(transport)?;
                urls.push(h.url());
                embedded.push(h);
            }
            if !capture {
                eprintln!("memliner: {}", embedded_line(transport, &urls, fallback));
            }
            options
                .set("server", &urls.join("+"))
                .map_err(|e| e.to_string())?;
        }
        if options
            .servers
            .iter()
            .any(|s| s.scheme == swap_backend::Scheme::Fabric)
            && std::env::var_os("FI_MR_CACHE_MONITOR").is_none()
        {
            // The agent registers a few long-lived buffers: libfabric's registration cache
            // buys nothing, and its monitors (hooks on munmap, a userfaultfd of their own)
            // have no business inside a paged JVM.
            cmd.env("FI_MR_CACHE_MONITOR", "disabled");
        }
        let stats = options.stats.clone().map(PathBuf::from).unwrap_or_else(|| {
            // One name per launch: tests launch JVMs from several threads of one process (a
            // clock's reading is no tie-breaker: two runs sharing a file read each other's
            // stats, and one found none).
            static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            std::env::temp_dir().join(format!(
                "memliner-stats-{}-{}.json",
                std::process::id(),
                LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ))
        });
        let _ = std::fs::remove_file(&stats);
        options
            .set("stats", &stats.display().to_string())
            .map_err(|e| e.to_string())?;
        options.check().map_err(|e| e.to_string())?;
        let arg = agent_arg(&agent, &options);
        match &cfg.agent_env {
            Some(var) => {
                cmd.env(var, arg);
            }
            None => {
                cmd.arg(arg);
            }
        }
        stats_path = Some(stats);
    }
    cmd.args(hooks);
    cmd.args(args);
    if capture {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let started = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let child_pid = child.id();
    if !embedded.is_empty() {
        // The embedded server lives in this process: it must outlive the JVM, which may still
        // fault pages in while it runs its shutdown hooks.
        outlive_child(child.id());
    }
    let out = child.wait_with_output();
    // Reaped: its pid may be reused, and no later signal must be passed to it.
    CHILD.store(0, std::sync::atomic::Ordering::SeqCst);
    let out = out.map_err(|e| format!("waiting for {program}: {e}"))?;
    let wall = started.elapsed();
    // A launcher (spark-submit, a shell script) may exit before the JVM it started: keep
    // serving until the agent has disconnected, or the JVM would die on a closed server.
    let deadline = Instant::now() + Duration::from_secs(120);
    for h in embedded.iter().map(|e| &e.handle) {
        if !h.wait_idle(deadline.saturating_duration_since(Instant::now())) {
            eprintln!("memliner: a JVM still holds pages on the embedded server 120 s after the command exited; stopping the server");
        }
    }
    // A template (`%p`, `%h`, a directory) names the JVM's own file: the command's when it is
    // the JVM itself (a launcher's JVMs are for `memliner stats`).
    let stats_path = stats_path.map(|p: PathBuf| {
        PathBuf::from(memliner_contracts::options::stats_path(
            &p.display().to_string(),
            child_pid,
            &memliner_contracts::host_name(),
        ))
    });
    let stats = stats_path.as_ref().and_then(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        if cfg.options.stats.is_none() {
            let _ = std::fs::remove_file(p);
        }
        StatsDoc::parse(&text)
            .map_err(|e| eprintln!("memliner: cannot read the stats file {}: {e}", p.display()))
            .ok()
    });
    let embedded_addr = embedded.first().map(Embedded::url);
    // Any one of them counts the whole process but the starting thread: all of them.
    let server_cpu = embedded.first().map(|e| e.handle.cpu_time());
    for h in embedded {
        h.stop();
    }
    Ok(RunOutcome {
        status: out.status,
        wall,
        stats,
        server_cpu,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        embedded: embedded_addr,
    })
}

static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The last signal asking us to stop (SIGINT, SIGTERM, SIGHUP), 0 if none.
static STOP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether a signal asked this process to stop while it ran a JVM (which got it too): a
/// caller running one JVM after another (the bench) stops rather than start the next.
pub fn stop_requested() -> Option<i32> {
    match STOP.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

#[allow(unsafe_code)]
extern "C" fn forward_signal(sig: libc::c_int) {
    if sig != libc::SIGQUIT {
        STOP.store(sig, std::sync::atomic::Ordering::SeqCst);
    }
    let pid = CHILD.load(std::sync::atomic::Ordering::SeqCst);
    // Ctrl-C and Ctrl-\ reach the JVM from the terminal already (same process group); only
    // signals aimed at us alone are passed on.
    if pid > 0 && sig != libc::SIGINT && sig != libc::SIGQUIT {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Keeps this process alive until the child exits: SIGINT/SIGQUIT are left to the child,
/// SIGTERM/SIGHUP are forwarded to it.
#[allow(unsafe_code)]
fn outlive_child(pid: u32) {
    CHILD.store(pid as i32, std::sync::atomic::Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only calls the async-signal-safe kill.
        unsafe { libc::signal(sig, forward_signal as *const () as libc::sighandler_t) };
    }
}

/// The last lines of a run's output, for an error.
pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.trim().lines().collect();
    lines[lines.len().saturating_sub(6)..].join("\n")
}
