//! The agent's options: one typed [`Options`] and one table, [`OPTIONS`], that every use of
//! the option keys is derived from: the parser ([`parse`], key by key through
//! [`Options::set`]), the writer ([`Options::render`]), the keys listed in errors, `memliner
//! run`'s flags with their help, and the option table of docs/operating.md (a test compares it
//! row by row). The `memliner` command builds its `-agentpath:` string with the same parser and
//! writer, so both sides take the same keys, values and error messages.
//!
//! `-agentpath:/path/libmemliner_agent.so=key=value,key=value,...`, merged over the
//! `MEMLINER_OPTIONS` environment variable (same syntax; the agent string wins). An unknown
//! key or a bad value is an error that names the key and the valid choices.

use std::str::FromStr;

use memliner_protocol::units::parse_size;
use memliner_protocol::ServerUrl;
use strum::VariantNames;

pub use crate::model::FaultDelivery;

lowercase_enum! {
    /// Paging policy; the stats document names it as `name` does.
    pub enum Policy {
        /// GC-aware paging (see `policy::MemLiner`).
        MemLiner,
        /// Runtime-agnostic paging, like kernel swap.
        Baseline,
        /// Load, classify threads and write stats, but do not page the heap.
        Off,
    }
}

/// How much of the heap may be resident.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Percent(f64),
    Bytes(u64),
}

impl Budget {
    /// Budget in bytes for a heap of `heap_bytes` (a size is taken as it is, even above it).
    pub fn bytes(self, heap_bytes: u64) -> u64 {
        match self {
            Budget::Percent(p) => (heap_bytes as f64 * p / 100.0) as u64,
            Budget::Bytes(b) => b,
        }
    }

    /// Budget in pages for a heap of `heap_bytes`.
    pub fn pages(self, heap_bytes: usize, page: usize) -> usize {
        (self.bytes(heap_bytes as u64) as usize / page).min(heap_bytes / page)
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

impl FromStr for Budget {
    type Err = String;

    /// `25%` or a size (`512m`, `2g`), above zero.
    fn from_str(value: &str) -> Result<Budget, String> {
        if let Some(p) = value.strip_suffix('%') {
            let p: f64 = p
                .parse()
                .map_err(|_| "expected a percentage like 25%".to_string())?;
            if !(p > 0.0 && p <= 100.0) {
                return Err("a percentage must be above 0% and at most 100%".into());
            }
            Ok(Budget::Percent(p))
        } else {
            let b = parse_size(value)
                .map_err(|_| "expected a percentage (25%) or a size (512m, 2g)".to_string())?;
            if b == 0 {
                return Err("the budget must be above zero".into());
            }
            Ok(Budget::Bytes(b))
        }
    }
}

lowercase_enum! {
    /// Log verbosity.
    #[derive(PartialOrd, Ord)]
    pub enum LogLevel {
        Error = 0,
        Warn = 1,
        Info = 2,
        Debug = 3,
    }
}

lowercase_enum! {
    /// Which written pages the pager tracks (`dirty=`).
    pub enum Dirty {
        /// Track per thread class while it pays (`memliner`; `baseline` tracks).
        Auto,
        /// Write-protect pages mapped on a read: clean pages are dropped without a write-back.
        Track,
        /// No write faults; every evicted page is written back.
        Assume,
    }
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

lowercase_enum! {
    /// Whether the pages a stop-the-world pause will read are read in bulk when it starts
    /// (`pause_reads=`).
    pub enum PauseReads {
        On,
        Off,
    }
}

lowercase_enum! {
    /// Whether pages holding cards the collector has yet to read are kept local a while longer
    /// (`card_hold=`).
    pub enum CardHold {
        On,
        Off,
    }
}

lowercase_enum! {
    /// Whether the agent sizes G1's young generation to the local budget (`young=`).
    pub enum Young {
        /// At most half the budget, unless the command line sized it.
        Fit,
        /// As the JVM sizes it.
        Keep,
    }
}

lowercase_enum! {
    /// Whether every page read back is checked against the checksum it was written with
    /// (`checksums=`).
    pub enum Checksums {
        On,
        Off,
    }
}

lowercase_enum! {
    /// What one prefetch stream follows (`streams=`).
    pub enum Streams {
        Thread,
        Class,
    }
}

/// How the reclaimer picks victims (`reclaim=`).
pub use crate::model::Replacement as Reclaim;

lowercase_enum! {
    /// What the agent does when it cannot give the JVM far memory (`fallback=`).
    pub enum Fallback {
        /// Refuse to start (at load: the memory server cannot be used) or stop the JVM (at VM
        /// start: the heap cannot be paged), with the reason.
        None,
        /// Warn and run without far memory: evicted pages stay in the JVM's own memory, or the
        /// heap stays wholly local.
        Local,
    }
}

/// One agent option: its key, the `memliner run` flag that sets it, what it takes and its
/// default (Markdown, as the README shows them), and how it is read and written.
#[derive(Debug)]
pub struct OptionSpec {
    pub key: &'static str,
    pub flag: Option<Flag>,
    pub values: &'static str,
    pub default: &'static str,
    /// Sets the option from its string form; the error says what was expected.
    set: fn(&mut Options, &str) -> Result<(), String>,
    /// The option's string form when it differs from the default (what `render` writes).
    get: fn(&Options) -> Option<String>,
}

/// The `memliner run` flag for an option.
#[derive(Debug)]
pub struct Flag {
    /// Without the leading `--`.
    pub long: &'static str,
    pub value_name: &'static str,
    /// Given again, its values are joined by `+`.
    pub repeat: bool,
    /// What `memliner run` does without the flag, where it differs from the agent's default.
    pub run_default: RunDefault,
}

/// `memliner run`'s default for an option.
#[derive(Debug)]
pub enum RunDefault {
    /// The agent's.
    Agent,
    /// This value.
    Value(&'static str),
    /// Something `memliner run` provides (an embedded server, a temporary file), in words.
    Provided(&'static str),
}

const fn flag(long: &'static str, value_name: &'static str) -> Option<Flag> {
    Some(Flag {
        long,
        value_name,
        repeat: false,
        run_default: RunDefault::Agent,
    })
}

/// `value` parsed as one of `T`'s names, or an error listing them.
fn choice<T: FromStr + VariantNames>(value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("expected one of {}", T::VARIANTS.join(", ")))
}

/// `value`'s name when it is not `default`'s.
fn named<T: PartialEq + Into<&'static str>>(value: T, default: T) -> Option<String> {
    (value != default).then(|| Into::<&'static str>::into(value).to_string())
}

/// `value` as a number within `range`, or `what` was expected.
fn number<T: FromStr + PartialOrd>(
    value: &str,
    range: std::ops::RangeInclusive<T>,
    what: &str,
) -> Result<T, String> {
    value
        .parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| format!("expected {what}"))
}

/// `value` as free text (a path): not empty, and without the option string's separator.
fn text(value: &str) -> Result<Option<String>, String> {
    if value.is_empty() || value.contains(',') {
        Err("expected a file path without a ','".into())
    } else {
        Ok(Some(value.to_string()))
    }
}

/// A label value: not empty, without the option string's separator.
fn label_text(value: &str) -> Result<Option<String>, String> {
    if value.is_empty() || value.contains(',') {
        Err("expected a name without a ','".into())
    } else {
        Ok(Some(value.to_string()))
    }
}

/// `metrics=`'s address: `HOST:PORT` (an IP address, or `localhost`), or a bare port on
/// loopback.
fn metrics_addr(value: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::{Ipv4Addr, SocketAddr};
    let expected =
        || "expected HOST:PORT (an IP address) or a port, 0 for any free one".to_string();
    if let Ok(port) = value.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Some(port) = value.strip_prefix("localhost:") {
        let port = port.parse::<u16>().map_err(|_| expected())?;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    value.parse().map_err(|_| expected())
}

/// An option whose value is one of its enum's names (`strum`), held in `Options::field`.
macro_rules! choice_option {
    (key: $key:literal, flag: $flag:expr, field: $field:ident, values: $values:literal, default: $default:literal,) => {
        OptionSpec {
            key: $key,
            flag: $flag,
            values: $values,
            default: $default,
            set: |o, v| {
                o.$field = choice(v)?;
                Ok(())
            },
            get: |o| named(o.$field, Options::default().$field),
        }
    };
}

/// A number in `range` held in `Options::field`; `expected` says what it takes.
macro_rules! number_option {
    (key: $key:literal, flag: $flag:expr, field: $field:ident, range: $range:expr, expected: $expected:literal, values: $values:literal, default: $default:literal,) => {
        OptionSpec {
            key: $key,
            flag: $flag,
            values: $values,
            default: $default,
            set: |o, v| {
                o.$field = number(v, $range, $expected)?;
                Ok(())
            },
            get: |o| (o.$field != Options::default().$field).then(|| o.$field.to_string()),
        }
    };
}

/// An option held as text in `Options::field` (a path, a label), checked by `check`.
macro_rules! text_option {
    (key: $key:literal, flag: $flag:expr, field: $field:ident, check: $check:ident, values: $values:literal, default: $default:literal,) => {
        OptionSpec {
            key: $key,
            flag: $flag,
            values: $values,
            default: $default,
            set: |o, v| {
                o.$field = $check(v)?;
                Ok(())
            },
            get: |o| o.$field.clone(),
        }
    };
}

/// Every agent option, in the order the README and `memliner run --help` list them.
pub static OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        key: "server",
        flag: Some(Flag {
            long: "server",
            value_name: "URL",
            repeat: true,
            run_default: RunDefault::Provided("embedded server (`unix://`, else TCP)"),
        }),
        values: "a memory server's URL, `tcp://HOST:PORT` (a bare `HOST:PORT` is TCP; IPv6 as `[ADDR]:PORT`), `fabric://HOST:PORT` (one-sided, above) or `unix:///PATH` (one-sided in memory files, a server on this host, above); several joined by `+` (or `--server` given again) spread pages over them with `replicas` copies (above); `local` keeps pages in the JVM's own memory (tests)",
        default: "`local`",
        set: |o, v| {
            o.server_given = true;
            o.servers = if v == "local" {
                Vec::new()
            } else {
                v.split('+')
                    .map(str::parse::<ServerUrl>)
                    .collect::<Result<_, _>>()?
            };
            Ok(())
        },
        get: |o| {
            let s: Vec<String> = o.servers.iter().map(ServerUrl::to_string).collect();
            (o.server_given || !s.is_empty()).then(|| {
                if s.is_empty() {
                    "local".into()
                } else {
                    s.join("+")
                }
            })
        },
    },
    OptionSpec {
        key: "replicas",
        flag: flag("replicas", "N"),
        values: "copies of each page, 1 to the number of servers",
        default: "`2` with two servers or more, else `1`",
        set: |o, v| {
            let max = memliner_protocol::url::MAX_SERVERS;
            o.replicas = Some(number(v, 1..=max, &format!("a number of copies from 1 to {max}"))?);
            Ok(())
        },
        get: |o| o.replicas.map(|r| r.to_string()),
    },
    OptionSpec {
        key: "local",
        flag: Some(Flag {
            long: "local",
            value_name: "BUDGET",
            repeat: false,
            run_default: RunDefault::Value("25%"),
        }),
        values: "percent of the heap (`25%`) or bytes (`512m`, `2g`)",
        default: "`100%`",
        set: |o, v| {
            o.budget = v.parse()?;
            Ok(())
        },
        get: |o| (o.budget != Options::default().budget).then(|| o.budget.to_string()),
    },
    choice_option! {
        key: "policy",
        flag: flag("policy", "POLICY"),
        field: policy,
        values: "`memliner` (GC-aware, below), `baseline` (kernel-swap-like: one global prefetch stream, one recency queue), `off` (load, classify, count; no paging)",
        default: "`memliner`",
    },
    number_option! {
        key: "prefetch",
        flag: flag("prefetch", "PAGES"),
        field: prefetch,
        range: 0..=256,
        expected: "a window in pages from 0 (off) to 256",
        values: "largest prefetch window in pages, `0` turns prefetching off (a window is also capped at 1/8 of the budget)",
        default: "`32`",
    },
    choice_option! {
        key: "streams",
        flag: flag("streams", "thread|class"),
        field: streams,
        values: "`thread` or `class`: `memliner`'s prefetch streams per thread or per thread class",
        default: "`thread`",
    },
    choice_option! {
        key: "pause_reads",
        flag: flag("pause-reads", "on|off"),
        field: pause_reads,
        values: "`on`: under `memliner`, a stop-the-world pause's pages are read in bulk, in address order, while its threads work on what is local: when it starts, the remote pages of its young regions (G1's eden and survivors, Parallel's and Serial's young spaces), whose local pages are held out of the pause's own evictions until it ends; on G1 and Serial, when it first reads an old region through a card, the card table's list of what it is about to scan (local pages are kept from eviction until the pause reaches them; the remote ones are read at once only when they all fit in the pause's share of the prefetch), and at its first fault in each megabyte of old regions the remote pages of the cards to scan in that megabyte on the scan's way from the fault (G1 scans up, Serial down), read before anything else; `off`: the pause faults them in one at a time",
        default: "`on`",
    },
    choice_option! {
        key: "card_hold",
        flag: flag("card-hold", "on|off"),
        field: card_hold,
        values: "`on`: under `memliner` on G1 with `-Xms` equal to `-Xmx`, a page holding a dirty card (an old object the application wrote, or one a pause left pointing into young regions), which a refinement thread or the next pause will scan, or the page before a dirty card that starts a page (where the object crossing into it begins), is kept local up to a second longer before it is evicted, and when a pause ends the remote pages of the dirty cards it left are read in bulk for the refinement threads; with a GC-hook patched G1, the pages of the cards a refinement pass has just cleaned are kept, and the remote ones read by the pass's thread before it starts; `off`: such pages are evicted like any other (and counted)",
        default: "`on`",
    },
    choice_option! {
        key: "young",
        flag: flag("young", "fit|keep"),
        field: young,
        values: "`fit`: under `memliner`, when the agent loads (before the heap is made), the young generation may grow to at most half the local budget (G1: `G1MaxNewSizePercent`; Parallel and Serial: `MaxNewSize`, the old generation taking the rest of the heap; shown as ergonomic by `-XX:+PrintFlagsFinal`): an eden larger than the budget is written to the memory server page by page before each collection frees it, and its survivors read back; left alone when the command line sizes the young generation (`-Xmn`, `NewSize`, `MaxNewSize`, `NewRatio`, and on G1 `G1NewSizePercent`, `G1MaxNewSizePercent`) or half the budget already holds the collector's largest; `keep`: the collector sizes it as it would without the agent",
        default: "`fit`",
    },
    choice_option! {
        key: "checksums",
        flag: flag("checksums", "on|off"),
        field: checksums,
        values: "`on`: the agent keeps a CRC-32 of every page it writes to a memory server and checks every page read back (demand and prefetch) before it is installed: a page with wrong bytes is read from another copy, or asked for once more from a single server, and otherwise stops the JVM with a message naming the page and the server; `off`: pages are installed as they come",
        default: "`on`",
    },
    choice_option! {
        key: "dirty",
        flag: flag("dirty", "auto|track|assume"),
        field: dirty,
        values: "`auto`: under `memliner`, write-protect the pages a thread class reads in only while fewer than 1 in 4 of them get written (tracking is then cheaper than the write-backs it saves); `track`: always, so a page only read is dropped at eviction without a write-back; `assume`: no write faults, every evicted page is written back (`baseline` treats `auto` as `track`)",
        default: "`auto`",
    },
    choice_option! {
        key: "reclaim",
        flag: flag("reclaim", "lru|fifo"),
        field: reclaim,
        values: "`lru`: the kernel's active and inactive lists with working-set detection, references seen through write faults, refault distances and (where it pays) sampling by unmapping pages whose bytes stay local (below); `fifo`: arrival order, a second chance for pages written while mapped, for comparison",
        default: "`lru`",
    },
    choice_option! {
        key: "faults",
        flag: flag("faults", "signal|thread"),
        field: faults,
        values: "`signal`: the faulting thread serves its own fault from a SIGBUS handler (userfaultfd's `UFFD_FEATURE_SIGBUS`; x86-64), no thread wakes on either side; `thread`: fault-handler threads read userfaultfd events and wake the faulting thread (for programs whose system calls read paged-out heap memory from kernel mode, which get `EFAULT` under `signal`; chosen automatically, with a warning, where SIGBUS delivery is unavailable or a preloaded libjsig keeps HotSpot's SIGBUS handler in front of the agent's)",
        default: "`signal`",
    },
    number_option! {
        key: "handlers",
        flag: flag("handlers", "N"),
        field: handlers,
        range: 1..=16,
        expected: "a number of threads from 1 to 16",
        values: "fault-handler threads, 1–16 (with `faults=signal` one thread reads the events that are not faults)",
        default: "`1`",
    },
    OptionSpec {
        key: "stats",
        flag: Some(Flag {
            long: "stats",
            value_name: "PATH",
            repeat: false,
            run_default: RunDefault::Provided("a temporary file"),
        }),
        values: "file for the stats JSON, written at VM death and on `kill -QUIT` (`memliner stats PID`; without `stats=` that writes `memliner-HOST-PID.json` in the JVM's `TMPDIR`, else /tmp); `%p` is replaced by the JVM's pid and `%h` by the host name, and a path ending in `/` is a directory (created if missing) for `memliner-HOST-PID.json`, so that a job's executors sharing one option string each write their own",
        default: "none",
        set: |o, v| {
            o.stats = text(v)?;
            Ok(())
        },
        get: |o| o.stats.clone(),
    },
    choice_option! {
        key: "log",
        flag: flag("log", "LEVEL"),
        field: log,
        values: "`error`, `warn`, `info`, `debug`",
        default: "`warn`",
    },
    text_option! {
        key: "token_file",
        flag: flag("token-file", "PATH"),
        field: token_file,
        check: text,
        values: "a file holding the memory servers' shared secret; without it the agent reads `MEMLINER_TOKEN` from its environment (`memliner run` passes its own on). A `token=` with the secret itself is refused: the JVM's command line is readable by every user",
        default: "none",
    },
    OptionSpec {
        key: "latency",
        flag: flag("emulate-latency", "DURATION"),
        values: "every request to the page store takes at least this long (`3us`, `1ms`): a model for planning, not a measurement; `server=local,latency=3us` (pages in the JVM's own memory) approximates one-sided RDMA reads, which loopback TCP (20 us and more) cannot; `0` turns it off",
        default: "off",
        set: |o, v| {
            let d = memliner_protocol::units::parse_duration(v)?;
            o.latency = (!d.is_zero()).then_some(d);
            Ok(())
        },
        get: |o| o.latency.map(memliner_protocol::units::format_duration),
    },
    OptionSpec {
        key: "deadline",
        flag: flag("deadline", "DURATION"),
        values: "the longest the agent waits on a memory server at a time (to connect, to send, for the next bytes of a reply); past it the server counts as lost, as if it had closed the connection: with a copy elsewhere the read goes there and the server rejoins when it answers again, without one the JVM stops with the page and the server named. a LAN with a dedicated server can use `500ms`; `0` waits as long as TCP does (minutes for a host that vanished)",
        default: "`2s`",
        set: |o, v| {
            let d = memliner_protocol::units::parse_duration(v)?;
            o.deadline = (!d.is_zero()).then_some(d);
            Ok(())
        },
        get: |o| match o.deadline {
            d if d == Options::default().deadline => None,
            None => Some("0".into()),
            Some(d) => Some(memliner_protocol::units::format_duration(d)),
        },
    },
    choice_option! {
        key: "fallback",
        flag: flag("fallback", "none|local"),
        field: fallback,
        values: "what to do without far memory: `none`, the JVM does not start when a memory server cannot be used at start-up (and stops when its heap cannot be paged), or `local`, one line saying why and the JVM runs on local memory (evicted pages in its own memory, or the heap wholly local)",
        default: "`none`",
    },
    OptionSpec {
        key: "metrics",
        flag: flag("metrics", "ADDR"),
        values: "serve the JVM's figures at `http://ADDR/metrics` in the Prometheus text format while it runs: `HOST:PORT`, or a bare `PORT` on loopback; port `0` takes a free one (the agent says which on stderr, and writes it to the `metrics_file`). A busy port is one line on stderr and the JVM runs without; a scrape reads counters and takes no lock a fault takes",
        default: "off",
        set: |o, v| {
            o.metrics = Some(metrics_addr(v)?);
            Ok(())
        },
        get: |o| o.metrics.map(|a| a.to_string()),
    },
    text_option! {
        key: "metrics_file",
        flag: flag("metrics-file", "PATH"),
        field: metrics_file,
        check: text,
        values: "where the agent writes its metrics address, as a Prometheus file-based discovery target (`[{\"targets\": [\"HOST:PORT\"], \"labels\": {...}}]`), removed at exit; `%p`, `%h` and a directory ending in `/` as for `stats` (a job's executors each write `memliner-HOST-PID.metrics.json` there); `memliner stats PID --every` and `memliner top` find JVMs' metrics through it",
        default: "`memliner-HOST-PID.metrics.json` in the JVM's `TMPDIR`, else /tmp",
    },
    text_option! {
        key: "job",
        flag: flag("job", "NAME"),
        field: job,
        check: label_text,
        values: "a `job` label on every metric of this JVM (and in its `metrics_file`)",
        default: "none",
    },
    text_option! {
        key: "instance",
        flag: flag("instance", "NAME"),
        field: instance,
        check: label_text,
        values: "an `instance` label on every metric of this JVM (and in its `metrics_file`)",
        default: "none",
    },
    number_option! {
        key: "probe",
        flag: None,
        field: probe_ms,
        range: 0..=60_000,
        expected: "an interval in ms from 0 (off) to 60000",
        values: "interval in ms of the latency probe (one remote fault timed as the faulting thread sees it), `0` turns it off",
        default: "`10`",
    },
];

/// Why an option string (or a `memliner run` flag) was refused; each says so in one line that
/// names the key and what it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("option '{item}' has no value: write {item}=VALUE (keys: {keys})", keys = keys())]
    NoValue { item: String },
    #[error("unknown option '{key}' (valid keys: {keys})", keys = keys())]
    UnknownKey { key: String },
    #[error("bad value for '{key}': '{value}': {expected}")]
    BadValue {
        key: &'static str,
        value: String,
        /// What the key takes.
        expected: String,
    },
    /// `token=`: the value is a secret, never echoed.
    #[error("bad value for 'token': a secret in -agentpath is readable by every user in /proc/PID/cmdline; give token_file=PATH, or set MEMLINER_TOKEN")]
    SecretInOptions,
    /// Options that each parse but do not go together.
    #[error("bad value for '{key}': {why}")]
    Conflict { key: &'static str, why: String },
}

/// The option keys, as errors list them.
fn keys() -> String {
    OPTIONS.iter().map(|s| s.key).collect::<Vec<_>>().join(", ")
}

/// The option `key` names.
pub fn spec(key: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|s| s.key == key)
}

/// The option table rows (docs/operating.md) for the agent's keys: one row per [`OPTIONS`] entry.
pub fn markdown_rows() -> String {
    OPTIONS
        .iter()
        .map(|s| {
            let flag = match &s.flag {
                Some(f) if f.repeat => format!("`--{}` (repeatable)", f.long),
                Some(f) => format!("`--{}`", f.long),
                None => "—".into(),
            };
            let default = match s.flag.as_ref().map(|f| &f.run_default) {
                Some(RunDefault::Value(v)) => format!("agent: {}; `run`: `{v}`", s.default),
                Some(RunDefault::Provided(what)) => format!("agent: {}; `run`: {what}", s.default),
                _ => s.default.to_string(),
            };
            format!("| `{}` | {flag} | {} | {default} |\n", s.key, s.values)
        })
        .collect()
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
    pub pause_reads: PauseReads,
    pub card_hold: CardHold,
    pub young: Young,
    pub checksums: Checksums,
    pub reclaim: Reclaim,
    pub fallback: Fallback,
    /// Latency probe interval in ms (0: off).
    pub probe_ms: u64,
    /// How faults reach the code serving them.
    pub faults: FaultDelivery,
    /// Every store request takes at least this long (emulation, for planning).
    pub latency: Option<std::time::Duration>,
    /// The longest one wait on a memory server lasts (`None`: TCP's own).
    pub deadline: Option<std::time::Duration>,
    /// Where to serve `/metrics` (`HOST:PORT`, port 0: any free one).
    pub metrics: Option<std::net::SocketAddr>,
    /// Where to write the metrics target file (a template, as `stats`); `None`: the JVM's
    /// temporary directory (see [`metrics_path`]).
    pub metrics_file: Option<String>,
    /// `job` and `instance` labels for every metric, if given.
    pub job: Option<String>,
    pub instance: Option<String>,
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
            pause_reads: PauseReads::On,
            card_hold: CardHold::On,
            young: Young::Fit,
            checksums: Checksums::On,
            reclaim: Reclaim::Lru,
            fallback: Fallback::None,
            probe_ms: 10,
            // The faulting thread serves its own fault: no wake on either side (a remote
            // fault's latency as its thread sees it fell 5-7x with the in-process store).
            faults: FaultDelivery::Signal,
            latency: None,
            // Not shorter: on 2 cores under a test suite's load a co-located server went
            // 500 ms without running (a replicated store then loses it and re-copies its
            // pages; a single server's JVM would stop).
            deadline: Some(std::time::Duration::from_secs(2)),
            metrics: None,
            metrics_file: None,
            job: None,
            instance: None,
        }
    }
}

/// Parses `env` (from `MEMLINER_OPTIONS`, may be empty) then `agent` (the -agentpath string).
pub fn parse(env: &str, agent: &str) -> Result<Options, OptionError> {
    let mut o = Options::default();
    for source in [env, agent] {
        for item in source.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| OptionError::NoValue {
                item: item.to_string(),
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

/// Where JVM `pid` writes its metrics target file: its `metrics_file=`, else
/// `memliner-HOST-PID.metrics.json` in `tmpdir` (the JVM's `TMPDIR`, else /tmp). Defined once
/// for the agent, which writes it, and the command, which reads it.
pub fn metrics_path(template: Option<&str>, pid: u32, host: &str, tmpdir: Option<&str>) -> String {
    let template = match template {
        Some(t) => t.to_string(),
        None => format!(
            "{}/",
            tmpdir
                .filter(|t| !t.is_empty())
                .unwrap_or("/tmp")
                .trim_end_matches('/')
        ),
    };
    expand(&template, "memliner-%h-%p.metrics.json", pid, host)
}

/// Where the stats of this JVM go for a `stats=` value: `%p` is the pid, `%h` the host name,
/// `%%` a percent sign; a value ending in `/` is a directory for `memliner-%h-%p.json`.
pub fn stats_path(template: &str, pid: u32, host: &str) -> String {
    expand(template, "memliner-%h-%p.json", pid, host)
}

/// `template` with `%p`, `%h` and `%%` replaced; a directory (ending in `/`) holds `file`.
fn expand(template: &str, file: &str, pid: u32, host: &str) -> String {
    let template = if template.ends_with('/') {
        format!("{template}{file}")
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

impl Options {
    /// Whether pages with dirty cards are held and the cards a pause leaves are read
    /// (`card_hold=on`, which only `memliner` uses).
    pub fn holds_cards(&self) -> bool {
        self.policy == Policy::MemLiner && self.card_hold == CardHold::On
    }

    /// Whether the agent fits G1's young generation to the budget (`young=fit`, which only
    /// `memliner` uses).
    pub fn fits_young(&self) -> bool {
        self.policy == Policy::MemLiner && self.young == Young::Fit
    }

    /// Copies of each page: as asked, else two wherever there are two servers or more.
    pub fn replicas(&self) -> usize {
        self.replicas
            .unwrap_or(if self.servers.len() >= 2 { 2 } else { 1 })
    }

    /// What no single key can check: the options together.
    pub fn check(&self) -> Result<(), OptionError> {
        for (i, s) in self.servers.iter().enumerate() {
            if self.servers[..i].contains(s) {
                return Err(OptionError::Conflict {
                    key: "server",
                    why: format!(
                        "{s} is given twice (two copies of a page on one server share its fate)"
                    ),
                });
            }
        }
        if let Some(r) = self.replicas {
            let n = self.servers.len().max(1);
            if r > n {
                return Err(OptionError::Conflict {
                    key: "replicas",
                    why: format!(
                        "'{r}': {r} copies need {r} memory servers, and server= gives {n}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Sets one option from its string form, as `key=value` in the option string sets it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        if key == "token" {
            return Err(OptionError::SecretInOptions);
        }
        let spec = spec(key).ok_or_else(|| OptionError::UnknownKey {
            key: key.to_string(),
        })?;
        (spec.set)(self, value).map_err(|expected| OptionError::BadValue {
            key: spec.key,
            value: value.to_string(),
            expected,
        })
    }

    /// The option string that [`parse`] reads back as these options: every option that
    /// differs from its default (and `server=` whenever it was given).
    pub fn render(&self) -> String {
        OPTIONS
            .iter()
            .filter_map(|s| Some(format!("{}={}", s.key, (s.get)(self)?)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one line `parse` refuses `agent` with.
    fn err(agent: &str) -> String {
        parse("", agent).unwrap_err().to_string()
    }

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
        assert_eq!(
            parse("", "token=s3cret").unwrap_err(),
            OptionError::SecretInOptions
        );
        let err = err("token=s3cret");
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
        assert_eq!(
            parse("", "locall=25%").unwrap_err(),
            OptionError::UnknownKey {
                key: "locall".into()
            }
        );
        let e = err("locall=25%");
        assert!(
            e.contains("unknown option 'locall'") && e.contains("server, replicas, local"),
            "{e}"
        );
        let e = err("local=abc");
        assert!(e.contains("'local'") && e.contains("25%"), "{e}");
        assert!(err("local=0%").contains("above 0%"));
        assert!(parse("", "local=150%").is_err());
        let e = err("policy=fast");
        assert!(e.contains("memliner, baseline, off"), "{e}");
        assert!(err("prefetch=1000").contains("0 (off) to 256"));
        assert!(err("streams=stack").contains("thread, class"));
        assert!(err("server=nohost").contains("HOST:PORT"));
        let e = err("server=udp://h:1");
        assert!(
            e.contains("'server'") && e.contains("unknown scheme 'udp://'"),
            "{e}"
        );
        assert!(err("stats=").contains("file path"));
        assert!(parse("", "server=h:99999").is_err());
        assert!(err("handlers=0").contains("1 to 16"));
        assert!(err("stats").contains("no value"));
        assert!(err("log=loud").contains("error, warn, info, debug"));
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
            "metrics=0.0.0.0:9400,metrics_file=/m/,job=spark,instance=exec-1",
            "metrics=0",
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

    #[test]
    fn metrics_take_an_address_or_a_port_on_loopback_and_a_target_file() {
        let o = parse("", "metrics=9400").unwrap();
        assert_eq!(o.metrics, Some("127.0.0.1:9400".parse().unwrap()));
        let o = parse("", "metrics=localhost:0,job=j").unwrap();
        assert_eq!(o.metrics, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(o.job.as_deref(), Some("j"));
        assert_eq!(
            parse("", "metrics=[::1]:9").unwrap().metrics,
            Some("[::1]:9".parse().unwrap())
        );
        let e = err("metrics=host.example:9");
        assert!(
            e.starts_with("bad value for 'metrics': 'host.example:9': expected HOST:PORT"),
            "{e}"
        );
        assert!(err("metrics=70000").contains("expected HOST:PORT"));
        assert!(err("job=").contains("expected a name"));
        assert_eq!(
            metrics_path(None, 7, "h1", None),
            "/tmp/memliner-h1-7.metrics.json"
        );
        assert_eq!(
            metrics_path(None, 7, "h1", Some("/t/")),
            "/t/memliner-h1-7.metrics.json"
        );
        assert_eq!(
            metrics_path(Some("/sd/"), 7, "h1", Some("/t")),
            "/sd/memliner-h1-7.metrics.json"
        );
        assert_eq!(
            metrics_path(Some("/sd/x-%p.json"), 7, "h1", None),
            "/sd/x-7.json"
        );
    }

    #[test]
    fn the_operating_guide_lists_every_option_as_the_table_says() {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md"));
        let rows = markdown_rows();
        assert!(
            readme.contains(&rows),
            "docs/operating.md's option table differs from contracts/src/options.rs's OPTIONS; its rows \
             should read:\n{rows}"
        );
    }

    #[test]
    fn every_key_is_set_and_rendered_by_its_own_entry() {
        let mut seen = std::collections::HashSet::new();
        for spec in OPTIONS {
            assert!(seen.insert(spec.key), "{} twice", spec.key);
            // Nothing given: nothing written.
            assert_eq!((spec.get)(&Options::default()), None, "{}", spec.key);
        }
        let flags: Vec<&str> = OPTIONS
            .iter()
            .filter_map(|s| Some(s.flag.as_ref()?.long))
            .collect();
        assert!(flags.contains(&"emulate-latency") && flags.contains(&"token-file"));
    }
}
