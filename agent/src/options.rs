//! The agent's option string, parsed in one pure function.
//!
//! `-agentpath:/path/libmemliner_agent.so=key=value,key=value,...`, merged over the
//! `MEMLINER_OPTIONS` environment variable (same syntax; the agent string wins).
//!
//! | key        | value                                   | default |
//! |------------|-----------------------------------------|---------|
//! | `server`   | `HOST:PORT`, several joined by `+` (pages striped over them), or `local` (in-process store, for tests) | `local` |
//! | `local`    | local budget: percent of the heap (`25%`) or a size (`512m`, `2g`) | `100%` |
//! | `policy`   | `memliner` (GC-aware), `baseline` (like kernel swap) or `off` (agent loaded, heap not paged) | `memliner` |
//! | `prefetch` | largest prefetch window in pages, 0 turns prefetching off | `32` |
//! | `streams`  | `thread` or `class`: prefetch streams per thread or per thread class (`memliner` only) | `thread` |
//! | `stats`    | file to write the stats JSON to at VM death (and on SIGQUIT) | none |
//! | `log`      | `error`, `warn`, `info`, `debug`          | `warn` |
//! | `handlers` | fault-handler threads, 1..=16             | `1` |
//! | `token`    | shared secret of the memory server        | none |
//! | `dirty`    | `track` (write-protect pages mapped on a read; clean pages are dropped without a write-back), `auto` (track per thread class while it pays: see `policy::WriteRatio`; `memliner` only, `baseline` treats it as `track`) or `assume` (no write faults; every evicted page is written back) | `auto` |
//! | `reclaim`  | `fifo` (evict in arrival order, second chance for faulted pages) or `clock` (the reclaimer unmaps pages but keeps their bytes to see which are used before evicting them) | `fifo` |
//! | `faults`   | `signal` (the faulting thread serves its own fault from a SIGBUS handler: no thread wakes) or `thread` (fault-handler threads read userfaultfd events and wake the faulting thread; for programs whose system calls read paged-out heap memory from kernel mode) | `signal` |
//! | `probe`    | interval in ms of the latency probe (a remote fault timed as the faulting thread sees it), 0 turns it off | `10` |
//!
//! An unknown key or a bad value is an error that names the key and the valid choices.

use swap_backend::units::parse_size;

pub use crate::model::FaultDelivery;

/// Paging policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Log verbosity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

/// Everything the agent was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Memory servers (`HOST:PORT`); empty means the in-process store.
    pub servers: Vec<String>,
    /// Whether `server=` was given at all (the in-process default deserves a warning).
    pub server_given: bool,
    pub budget: Budget,
    pub policy: Policy,
    pub stats: Option<String>,
    pub log: LogLevel,
    pub handlers: usize,
    pub token: String,
    /// Track which pages were written (see `PagerConfig::track_dirty`).
    pub track_dirty: bool,
    /// Under `memliner`, decide per thread class whether tracking pays (`dirty=auto`).
    pub adaptive_dirty: bool,
    /// Largest prefetch window in pages (0: off).
    pub prefetch: usize,
    /// Stream per thread (true) or per class.
    pub streams_per_thread: bool,
    /// Sample references with an inactive list (`reclaim=clock`) or not (`fifo`).
    pub sampling: bool,
    /// Latency probe interval in ms (0: off).
    pub probe_ms: u64,
    /// How faults reach the code serving them.
    pub faults: FaultDelivery,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            servers: Vec::new(),
            server_given: false,
            budget: Budget::Percent(100.0),
            policy: Policy::MemLiner,
            stats: None,
            log: LogLevel::Warn,
            handlers: 1,
            token: String::new(),
            track_dirty: true,
            adaptive_dirty: true,
            prefetch: 32,
            streams_per_thread: true,
            // A local fault costs a handler round trip (30-40 us on the VMs measured), so
            // sampling lost 10-20% on the graph and kv workloads; it wins where a hot set
            // fits and FIFO keeps pushing it out.
            sampling: false,
            probe_ms: 10,
            // The faulting thread serves its own fault: no wake on either side (a remote
            // fault's latency as its thread sees it fell 5-7x with the in-process store).
            faults: FaultDelivery::Signal,
        }
    }
}

const KEYS: &str =
    "server, local, policy, prefetch, streams, stats, log, handlers, token, dirty, reclaim, probe, faults";

/// Parses `env` (from `MEMLINER_OPTIONS`, may be empty) then `agent` (the -agentpath string).
pub fn parse(env: &str, agent: &str) -> Result<Options, String> {
    let mut o = Options::default();
    for source in [env, agent] {
        for item in source.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                format!("option '{item}' has no value: write {item}=VALUE (keys: {KEYS})")
            })?;
            let bad = |what: &str| format!("bad value for '{key}': '{value}': {what}");
            match key {
                "server" => {
                    o.server_given = true;
                    o.servers = if value == "local" {
                        Vec::new()
                    } else {
                        value
                            .split('+')
                            .map(|s| {
                                let (h, p) = s.rsplit_once(':').ok_or_else(|| {
                                    bad("expected HOST:PORT, several joined by '+', or 'local'")
                                })?;
                                if h.is_empty() || p.parse::<u16>().is_err() {
                                    return Err(bad("expected HOST:PORT with a port of 1-65535"));
                                }
                                Ok(s.to_string())
                            })
                            .collect::<Result<_, _>>()?
                    };
                }
                "local" => {
                    o.budget = if let Some(p) = value.strip_suffix('%') {
                        let p: f64 = p
                            .parse()
                            .map_err(|_| bad("expected a percentage like 25%"))?;
                        if !(p > 0.0 && p <= 100.0) {
                            return Err(bad("a percentage must be above 0% and at most 100%"));
                        }
                        Budget::Percent(p)
                    } else {
                        let b = parse_size(value)
                            .map_err(|_| bad("expected a percentage (25%) or a size (512m, 2g)"))?;
                        if b == 0 {
                            return Err(bad("the budget must be above zero"));
                        }
                        Budget::Bytes(b)
                    }
                }
                "policy" => {
                    o.policy = match value {
                        "off" => Policy::Off,
                        "baseline" => Policy::Baseline,
                        "memliner" => Policy::MemLiner,
                        _ => return Err(bad("expected one of memliner, baseline, off")),
                    }
                }
                "prefetch" => {
                    o.prefetch = value
                        .parse()
                        .ok()
                        .filter(|n| *n <= 256)
                        .ok_or_else(|| bad("expected a window in pages from 0 (off) to 256"))?
                }
                "streams" => {
                    o.streams_per_thread = match value {
                        "thread" => true,
                        "class" => false,
                        _ => return Err(bad("expected one of thread, class")),
                    }
                }
                "stats" => {
                    if value.is_empty() {
                        return Err(bad("expected a file path"));
                    }
                    o.stats = Some(value.to_string())
                }
                "log" => {
                    o.log = match value {
                        "error" => LogLevel::Error,
                        "warn" => LogLevel::Warn,
                        "info" => LogLevel::Info,
                        "debug" => LogLevel::Debug,
                        _ => return Err(bad("expected one of error, warn, info, debug")),
                    }
                }
                "handlers" => {
                    o.handlers = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=16).contains(n))
                        .ok_or_else(|| bad("expected a number of threads from 1 to 16"))?
                }
                "token" => o.token = value.to_string(),
                "dirty" => {
                    (o.track_dirty, o.adaptive_dirty) = match value {
                        "auto" => (true, true),
                        "track" => (true, false),
                        "assume" => (false, false),
                        _ => return Err(bad("expected one of auto, track, assume")),
                    }
                }
                "reclaim" => {
                    o.sampling = match value {
                        "clock" => true,
                        "fifo" => false,
                        _ => return Err(bad("expected one of clock, fifo")),
                    }
                }
                "probe" => {
                    o.probe_ms =
                        value.parse().ok().filter(|n| *n <= 60_000).ok_or_else(|| {
                            bad("expected an interval in ms from 0 (off) to 60000")
                        })?
                }
                "faults" => {
                    o.faults = match value {
                        "signal" => FaultDelivery::Signal,
                        "thread" => FaultDelivery::Thread,
                        _ => return Err(bad("expected one of signal, thread")),
                    }
                }
                _ => return Err(format!("unknown option '{key}' (valid keys: {KEYS})")),
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_string() {
        assert_eq!(parse("", "").unwrap(), Options::default());
        let o = parse(
            "",
            "server=127.0.0.1:7070+mem2:7071,local=25%,policy=baseline,stats=/tmp/s.json,log=debug,handlers=2,token=t",
        )
        .unwrap();
        assert_eq!(o.servers, vec!["127.0.0.1:7070", "mem2:7071"]);
        assert_eq!(o.budget, Budget::Percent(25.0));
        assert_eq!(o.stats.as_deref(), Some("/tmp/s.json"));
        assert_eq!(o.log, LogLevel::Debug);
        assert_eq!(o.handlers, 2);
        assert_eq!(o.token, "t");
        assert_eq!(o.policy, Policy::Baseline);
        let o = parse("", "policy=memliner,prefetch=0,streams=class").unwrap();
        assert_eq!(
            (o.policy, o.prefetch, o.streams_per_thread),
            (Policy::MemLiner, 0, false)
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
    fn errors_name_the_key_and_the_choices() {
        let e = parse("", "locall=25%").unwrap_err();
        assert!(
            e.contains("unknown option 'locall'") && e.contains("server, local"),
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
        assert!(parse("", "server=h:99999").is_err());
        assert!(parse("", "handlers=0").unwrap_err().contains("1 to 16"));
        assert!(parse("", "stats").unwrap_err().contains("no value"));
        assert!(parse("", "log=loud")
            .unwrap_err()
            .contains("error, warn, info, debug"));
    }
}
