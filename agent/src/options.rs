//! The agent's options: one typed [`Options`], the option string's one parser ([`parse`],
//! key by key through [`Options::set`]) and its one writer ([`Options::render`]). The
//! `memliner` command builds its `-agentpath:` string with the same two, so both sides take
//! the same keys, values and error messages.
//!
//! `-agentpath:/path/libmemliner_agent.so=key=value,key=value,...`, merged over the
//! `MEMLINER_OPTIONS` environment variable (same syntax; the agent string wins).
//!
//! | key        | value                                   | default |
//! |------------|-----------------------------------------|---------|
//! | `server`   | a memory server's URL, `tcp://HOST:PORT`, `fabric://HOST:PORT` (or just `HOST:PORT`), several joined by `+` (pages spread over them, see `replicas`), or `local` (in-process store, for tests) | `local` |
//! | `replicas` | copies of each page, on as many of the servers (1 to their number): a write completes when each copy is written, a read is served by any, a lost server's pages are copied again | `2` with two or more servers, else `1` |
//! | `local`    | local budget: percent of the heap (`25%`) or a size (`512m`, `2g`) | `100%` |
//! | `policy`   | `memliner` (GC-aware), `baseline` (like kernel swap) or `off` (agent loaded, heap not paged) | `memliner` |
//! | `prefetch` | largest prefetch window in pages, 0 turns prefetching off | `32` |
//! | `streams`  | `thread` or `class`: prefetch streams per thread or per thread class (`memliner` only) | `thread` |
//! | `stats`    | file to write the stats JSON to at VM death and on SIGQUIT (without it, SIGQUIT writes `memliner-HOST-PID.json` in `TMPDIR`, else /tmp, for `memliner stats PID`); `%p` becomes the JVM's pid and `%h` the host name (one file per executor when many JVMs share the option), a path ending in `/` is a directory to write `memliner-%h-%p.json` in | none |
//! | `log`      | `error`, `warn`, `info`, `debug`          | `warn` |
//! | `handlers` | fault-handler threads, 1..=16             | `1` |
//! | `token_file` | file holding the memory servers' shared secret (else `MEMLINER_TOKEN` in the environment); never the secret itself, which the JVM's command line would show every user | none |
//! | `dirty`    | `track` (write-protect pages mapped on a read; clean pages are dropped without a write-back), `auto` (track per thread class while it pays: see `policy::WriteRatio`; `memliner` only, `baseline` treats it as `track`) or `assume` (no write faults; every evicted page is written back) | `auto` |
//! | `reclaim`  | `lru` (the kernel's active and inactive lists with working-set detection; references sampled by unmapping pages whose bytes stay local) or `fifo` (arrival order, a second chance for pages written while mapped; for comparison) | `lru` |
//! | `faults`   | `signal` (the faulting thread serves its own fault from a SIGBUS handler: no thread wakes) or `thread` (fault-handler threads read userfaultfd events and wake the faulting thread; for programs whose system calls read paged-out heap memory from kernel mode) | `signal` |
//! | `latency`  | emulated latency every store request takes at least (`3us`, `1ms`), for planning: `server=local,latency=3us` approximates an RDMA fabric; 0 turns it off | `0` |
//! | `fallback` | `none` (the JVM does not start when the memory server cannot be used, and stops when its heap cannot be paged) or `local` (warn, and run without far memory) | `none` |
//! | `probe`    | interval in ms of the latency probe (a remote fault timed as the faulting thread sees it), 0 turns it off | `10` |
//!
//! An unknown key or a bad value is an error that names the key and the valid choices.

use swap_backend::units::parse_size;
use swap_backend::ServerUrl;

pub use crate::model::FaultDelivery;

/// Paging policy; the stats document names it as `name` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Load, classify threads and write stats, but do not page the heap.
    Off,
    /// Runtime-agnostic paging, like kernel swap.
    Baseline,
    /// GC-aware paging (see `policy::MemLiner`).
    MemLiner,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Off => "off",
            Policy::Baseline => "baseline",
            Policy::MemLiner => "memliner",
        }
    }
}

/// How much of the heap may be resident.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Percent(f64),
    Bytes(u64),
}

impl Budget {
    /// Budget in pages for a heap of `heap_bytes`.
    pub fn pages(self, heap_bytes: usize, page: usize) -> usize {
        let bytes = match self {
            Budget::Percent(p) => (heap_bytes as f64 * p / 100.0) as u64,
            Budget::Bytes(b) => b,
        };
        (bytes as usize / page).min(heap_bytes / page)
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Percent(p) => write!(f, "{p}%"),
            Budget::Bytes(b) => write!(f, "{b}"),
        }
    }
}

/// Log verbosity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

/// Which written pages the pager tracks (`dirty=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dirty {
    /// Track per thread class while it pays (`memliner`; `baseline` tracks).
    Auto,
    /// Write-protect pages mapped on a read: clean pages are dropped without a write-back.
    Track,
    /// No write faults; every evicted page is written back.
    Assume,
}

impl Dirty {
    /// Whether pages mapped on a read are write-protected (see `PagerConfig::track_dirty`).
    pub fn tracks(self) -> bool {
        self != Dirty::Assume
    }

    /// Whether the policy decides per thread class (see `policy::WriteRatio`).
    pub fn adaptive(self) -> bool {
        self == Dirty::Auto
    }
}

/// What one prefetch stream follows (`streams=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streams {
    Thread,
    Class,
}

/// How the reclaimer picks victims (`reclaim=`).
pub use crate::pager::Replacement as Reclaim;

/// What the agent does when it cannot give the JVM far memory (`fallback=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Refuse to start (at load: the memory server cannot be used) or stop the JVM (at VM
    /// start: the heap cannot be paged), with the reason.
    None,
    /// Warn and run without far memory: evicted pages stay in the JVM's own memory, or the
    /// heap stays wholly local.
    Local,
}

/// Everything the agent was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Memory servers; empty means the in-process store.
    pub servers: Vec<ServerUrl>,
    /// Whether `server=` was given at all (the in-process default deserves a warning).
    pub server_given: bool,
    /// Copies of each page (`None`: [`Options::replicas`]'s default).
    pub replicas: Option<usize>,
    pub budget: Budget,
    pub policy: Policy,
    pub stats: Option<String>,
    pub log: LogLevel,
    pub handlers: usize,
    /// Where the servers' token is (`None`: `MEMLINER_TOKEN`, if set).
    pub token_file: Option<String>,
    pub dirty: Dirty,
    /// Largest prefetch window in pages (0: off).
    pub prefetch: usize,
    pub streams: Streams,
    pub reclaim: Reclaim,
    pub fallback: Fallback,
    /// Latency probe interval in ms (0: off).
    pub probe_ms: u64,
    /// How faults reach the code serving them.
    pub faults: FaultDelivery,
    /// Every store request takes at least this long (emulation, for planning).
    pub latency: Option<std::time::Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            servers: Vec::new(),
            server_given: false,
            replicas: None,
            budget: Budget::Percent(100.0),
            policy: Policy::MemLiner,
            stats: None,
            log: LogLevel::Warn,
            handlers: 1,
            token_file: None,
            dirty: Dirty::Auto,
            prefetch: 32,
            streams: Streams::Thread,
            reclaim: Reclaim::Lru,
            fallback: Fallback::None,
            probe_ms: 10,
            // The faulting thread serves its own fault: no wake on either side (a remote
            // fault's latency as its thread sees it fell 5-7x with the in-process store).
            faults: FaultDelivery::Signal,
            latency: None,
        }
    }
}

const KEYS: &str =
    "server, replicas, local, policy, prefetch, streams, stats, log, handlers, token_file, dirty, reclaim, probe, faults, latency, fallback";

/// Parses `env` (from `MEMLINER_OPTIONS`, may be empty) then `agent` (the -agentpath string).
pub fn parse(env: &str, agent: &str) -> Result<Options, String> {
    let mut o = Options::default();
    for source in [env, agent] {
        for item in source.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                format!("option '{item}' has no value: write {item}=VALUE (keys: {KEYS})")
            })?;
            o.set(key, value)?;
        }
    }
    o.check()?;
    Ok(o)
}

/// Where a JVM's stats document goes when it is asked for one (SIGQUIT, `memliner stats
/// PID`): its `stats=` file, else `memliner-HOST-PID.json` in `tmpdir` (the JVM's `TMPDIR`,
/// else /tmp). Defined once for the agent, which writes there, and the command, which reads.
pub fn dump_path(stats: Option<&str>, pid: u32, host: &str, tmpdir: Option<&str>) -> String {
    match stats {
        Some(template) => stats_path(template, pid, host),
        None => {
            let dir = tmpdir.filter(|t| !t.is_empty()).unwrap_or("/tmp");
            stats_path(&format!("{}/", dir.trim_end_matches('/')), pid, host)
        }
    }
}

/// Where the stats of this JVM go for a `stats=` value: `%p` is the pid, `%h` the host name,
/// `%%` a percent sign; a value ending in `/` is a directory for `memliner-%h-%p.json`.
pub fn stats_path(template: &str, pid: u32, host: &str) -> String {
    let template = if template.ends_with('/') {
        format!("{template}memliner-%h-%p.json")
    } else {
        template.to_string()
    };
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(host),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `value` among `choices` (name, value), or an error listing the names.
fn choose<T: Copy>(value: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(n, _)| *n == value)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!("expected one of {}", names.join(", "))
        })
}

/// The name of `value` among `choices`.
fn name_of<T: PartialEq>(value: T, choices: &[(&'static str, T)]) -> &'static str {
    choices
        .iter()
        .find(|(_, v)| *v == value)
        .map_or("?", |(n, _)| n)
}

const POLICIES: [(&str, Policy); 3] = [
    ("memliner", Policy::MemLiner),
    ("baseline", Policy::Baseline),
    ("off", Policy::Off),
];
const STREAMS: [(&str, Streams); 2] = [("thread", Streams::Thread), ("class", Streams::Class)];
const LOGS: [(&str, LogLevel); 4] = [
    ("error", LogLevel::Error),
    ("warn", LogLevel::Warn),
    ("info", LogLevel::Info),
    ("debug", LogLevel::Debug),
];
const DIRTY: [(&str, Dirty); 3] = [
    ("auto", Dirty::Auto),
    ("track", Dirty::Track),
    ("assume", Dirty::Assume),
];
const RECLAIM: [(&str, Reclaim); 2] = [("lru", Reclaim::Lru), ("fifo", Reclaim::Fifo)];
const FALLBACK: [(&str, Fallback); 2] = [("none", Fallback::None), ("local", Fallback::Local)];
const FAULTS: [(&str, FaultDelivery); 2] = [
    ("signal", FaultDelivery::Signal),
    ("thread", FaultDelivery::Thread),
];

impl Options {
    /// Copies of each page: as asked, else two wherever there are two servers or more.
    pub fn replicas(&self) -> usize {
        self.replicas
            .unwrap_or(if self.servers.len() >= 2 { 2 } else { 1 })
    }

    /// What no single key can check: the options together.
    pub fn check(&self) -> Result<(), String> {
        for (i, s) in self.servers.iter().enumerate() {
            if self.servers[..i].contains(s) {
                return Err(format!(
                    "bad value for 'server': {s} is given twice (two copies of a page on one server share its fate)"
                ));
            }
        }
        if let Some(r) = self.replicas {
            let n = self.servers.len().max(1);
            if r > n {
                return Err(format!(
                    "bad value for 'replicas': '{r}': {r} copies need {r} memory servers, and server= gives {n}"
                ));
            }
        }
        Ok(())
    }

    /// Sets one option from its string form, as `key=value` in the option string sets it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let bad = |what: String| format!("bad value for '{key}': '{value}': {what}");
        let text = |what: &str| {
            if value.is_empty() || value.contains(',') {
                Err(bad(format!("expected {what} without a ','")))
            } else {
                Ok(value.to_string())
            }
        };
        match key {
            "server" => {
                self.server_given = true;
                self.servers = if value == "local" {
                    Vec::new()
                } else {
                    value
                        .split('+')
                        .map(|s| s.parse::<ServerUrl>().map_err(bad))
                        .collect::<Result<_, _>>()?
                };
            }
            "local" => {
                self.budget = if let Some(p) = value.strip_suffix('%') {
                    let p: f64 = p
                        .parse()
                        .map_err(|_| bad("expected a percentage like 25%".into()))?;
                    if !(p > 0.0 && p <= 100.0) {
                        return Err(bad("a percentage must be above 0% and at most 100%".into()));
                    }
                    Budget::Percent(p)
                } else {
                    let b = parse_size(value).map_err(|_| {
                        bad("expected a percentage (25%) or a size (512m, 2g)".into())
                    })?;
                    if b == 0 {
                        return Err(bad("the budget must be above zero".into()));
                    }
                    Budget::Bytes(b)
                }
            }
            "policy" => self.policy = choose(value, &POLICIES).map_err(bad)?,
            "prefetch" => {
                self.prefetch =
                    value.parse().ok().filter(|n| *n <= 256).ok_or_else(|| {
                        bad("expected a window in pages from 0 (off) to 256".into())
                    })?
            }
            "streams" => self.streams = choose(value, &STREAMS).map_err(bad)?,
            "stats" => self.stats = Some(text("a file path")?),
            "log" => self.log = choose(value, &LOGS).map_err(bad)?,
            "replicas" => {
                self.replicas = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|n| (1..=swap_backend::replica::MAX_SERVERS).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "expected a number of copies from 1 to {}",
                                swap_backend::replica::MAX_SERVERS
                            ))
                        })?,
                )
            }
            "handlers" => {
                self.handlers = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| bad("expected a number of threads from 1 to 16".into()))?
            }
            "token" => {
                return Err(
                    // The value is a secret: never echoed.
                    "bad value for 'token': a secret in -agentpath is readable by every user in /proc/PID/cmdline; give token_file=PATH, or set MEMLINER_TOKEN".into(),
                );
            }
            "token_file" => self.token_file = Some(text("a file path")?),
            "dirty" => self.dirty = choose(value, &DIRTY).map_err(bad)?,
            "reclaim" => self.reclaim = choose(value, &RECLAIM).map_err(bad)?,
            "fallback" => self.fallback = choose(value, &FALLBACK).map_err(bad)?,
            "probe" => {
                self.probe_ms =
                    value.parse().ok().filter(|n| *n <= 60_000).ok_or_else(|| {
                        bad("expected an interval in ms from 0 (off) to 60000".into())
                    })?
            }
            "faults" => self.faults = choose(value, &FAULTS).map_err(bad)?,
            "latency" => {
                let d = swap_backend::units::parse_duration(value).map_err(bad)?;
                self.latency = (!d.is_zero()).then_some(d);
            }
            _ => return Err(format!("unknown option '{key}' (valid keys: {KEYS})")),
        }
        Ok(())
    }

    /// The option string that [`parse`] reads back as these options: every option that
    /// differs from its default (and `server=` whenever it was given).
    pub fn render(&self) -> String {
        let d = Options::default();
        let mut out: Vec<String> = Vec::new();
        let mut put = |k: &str, v: String| out.push(format!("{k}={v}"));
        if self.server_given || !self.servers.is_empty() {
            let s: Vec<String> = self.servers.iter().map(ServerUrl::to_string).collect();
            put(
                "server",
                if s.is_empty() {
                    "local".into()
                } else {
                    s.join("+")
                },
            );
        }
        if let Some(r) = self.replicas {
            put("replicas", r.to_string());
        }
        if self.budget != d.budget {
            put("local", self.budget.to_string());
        }
        if self.policy != d.policy {
            put("policy", self.policy.name().into());
        }
        if self.prefetch != d.prefetch {
            put("prefetch", self.prefetch.to_string());
        }
        if self.streams != d.streams {
            put("streams", name_of(self.streams, &STREAMS).into());
        }
        if let Some(s) = &self.stats {
            put("stats", s.clone());
        }
        if self.log != d.log {
            put("log", name_of(self.log, &LOGS).into());
        }
        if self.handlers != d.handlers {
            put("handlers", self.handlers.to_string());
        }
        if let Some(f) = &self.token_file {
            put("token_file", f.clone());
        }
        if self.dirty != d.dirty {
            put("dirty", name_of(self.dirty, &DIRTY).into());
        }
        if self.reclaim != d.reclaim {
            put("reclaim", name_of(self.reclaim, &RECLAIM).into());
        }
        if self.fallback != d.fallback {
            put("fallback", name_of(self.fallback, &FALLBACK).into());
        }
        if self.probe_ms != d.probe_ms {
            put("probe", self.probe_ms.to_string());
        }
        if self.faults != d.faults {
            put("faults", name_of(self.faults, &FAULTS).into());
        }
        if let Some(l) = self.latency {
            put("latency", swap_backend::units::format_duration(l));
        }
        out.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_string() {
        assert_eq!(parse("", "").unwrap(), Options::default());
        let o = parse(
            "",
            "server=127.0.0.1:7070+mem2:7071,local=25%,policy=baseline,stats=/tmp/s.json,log=debug,handlers=2,token_file=/etc/memliner/token",
        )
        .unwrap();
        let servers: Vec<String> = o.servers.iter().map(ToString::to_string).collect();
        assert_eq!(servers, ["tcp://127.0.0.1:7070", "tcp://mem2:7071"]);
        assert_eq!(o.budget, Budget::Percent(25.0));
        assert_eq!(o.stats.as_deref(), Some("/tmp/s.json"));
        assert_eq!(o.log, LogLevel::Debug);
        assert_eq!(o.handlers, 2);
        assert_eq!(o.token_file.as_deref(), Some("/etc/memliner/token"));
        let err = parse("", "token=s3cret").unwrap_err();
        assert!(
            err.contains("token_file=PATH") && !err.contains("s3cret"),
            "{err}"
        );
        assert_eq!(o.policy, Policy::Baseline);
        let o = parse("", "policy=memliner,prefetch=0,streams=class").unwrap();
        assert_eq!(
            (o.policy, o.prefetch, o.streams),
            (Policy::MemLiner, 0, Streams::Class)
        );
    }

    #[test]
    fn sizes_and_percentages() {
        assert_eq!(
            parse("", "local=512m").unwrap().budget,
            Budget::Bytes(512 << 20)
        );
        assert_eq!(Budget::Percent(25.0).pages(64 << 20, 4096), 4096);
        assert_eq!(Budget::Bytes(1 << 40).pages(64 << 20, 4096), 16384);
    }

    #[test]
    fn agent_string_overrides_environment() {
        let o = parse("local=50%,log=info", "local=25%").unwrap();
        assert_eq!(o.budget, Budget::Percent(25.0));
        assert_eq!(o.log, LogLevel::Info);
    }

    #[test]
    fn stats_paths_take_the_pid_and_host_or_a_directory() {
        assert_eq!(stats_path("/s/x-%p.json", 42, "h1"), "/s/x-42.json");
        assert_eq!(
            stats_path("/s/%h/%p-100%%.json", 7, "h1"),
            "/s/h1/7-100%.json"
        );
        assert_eq!(stats_path("/s/", 7, "h1"), "/s/memliner-h1-7.json");
        assert_eq!(stats_path("/s/plain.json", 7, "h1"), "/s/plain.json");
        assert_eq!(stats_path("/s/a%q%", 7, "h1"), "/s/a%q%");
        // Asked for stats without a `stats=` file: the JVM's temporary directory.
        assert_eq!(
            dump_path(Some("/s/"), 7, "h1", None),
            "/s/memliner-h1-7.json"
        );
        assert_eq!(dump_path(None, 7, "h1", None), "/tmp/memliner-h1-7.json");
        assert_eq!(
            dump_path(None, 7, "h1", Some("/t/")),
            "/t/memliner-h1-7.json"
        );
        assert_eq!(
            dump_path(None, 7, "h1", Some("")),
            "/tmp/memliner-h1-7.json"
        );
    }

    #[test]
    fn errors_name_the_key_and_the_choices() {
        let e = parse("", "locall=25%").unwrap_err();
        assert!(
            e.contains("unknown option 'locall'") && e.contains("server, replicas, local"),
            "{e}"
        );
        let e = parse("", "local=abc").unwrap_err();
        assert!(e.contains("'local'") && e.contains("25%"), "{e}");
        assert!(parse("", "local=0%").unwrap_err().contains("above 0%"));
        assert!(parse("", "local=150%").is_err());
        let e = parse("", "policy=fast").unwrap_err();
        assert!(e.contains("memliner, baseline, off"), "{e}");
        assert!(parse("", "prefetch=1000")
            .unwrap_err()
            .contains("0 (off) to 256"));
        assert!(parse("", "streams=stack")
            .unwrap_err()
            .contains("thread, class"));
        assert!(parse("", "server=nohost")
            .unwrap_err()
            .contains("HOST:PORT"));
        let e = parse("", "server=udp://h:1").unwrap_err();
        assert!(
            e.contains("'server'") && e.contains("unknown scheme 'udp://'"),
            "{e}"
        );
        assert!(parse("", "stats=").unwrap_err().contains("file path"));
        assert!(parse("", "server=h:99999").is_err());
        assert!(parse("", "handlers=0").unwrap_err().contains("1 to 16"));
        assert!(parse("", "stats").unwrap_err().contains("no value"));
        assert!(parse("", "log=loud")
            .unwrap_err()
            .contains("error, warn, info, debug"));
    }

    #[test]
    fn what_render_writes_parses_back_to_the_same_options() {
        let cases = [
            "",
            "server=local",
            "server=tcp://127.0.0.1:7070+mem2:7071,local=25%,policy=baseline",
            "server=tcp://127.0.0.1:7070+tcp://mem2:7071+tcp://mem3:7072,replicas=3",
            "local=12.5%,prefetch=0,streams=class,stats=/tmp/s.json,log=debug,handlers=4",
            "local=512m,token_file=/tmp/t,dirty=assume,reclaim=fifo,probe=0,faults=thread,fallback=local",
            "server=local,latency=3us",
            "server=[::1]:9,dirty=track,policy=off",
        ];
        for c in cases {
            let o = parse("", c).unwrap();
            let text = o.render();
            assert_eq!(parse("", &text).unwrap(), o, "{c} -> {text}");
        }
        assert_eq!(Options::default().render(), "");
        let o = parse("", "server=h:1,local=25%").unwrap();
        assert_eq!(o.render(), "server=tcp://h:1,local=25%");
    }
}
