//! What the JVM tests share: the workloads' classes and commands, the reference checksums,
//! and one paged cell checked end to end (`cell_on`, the `cells!` macro).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use memliner_cli::run::{launch, RunConfig, RunOutcome, Transport};
use memliner_cli::workloads::{self, Workload};
use memliner_cli::{locate, summary};
use memliner_contracts::model::GcActivity;
use memliner_contracts::model::{Discovery, FaultDelivery};
use memliner_contracts::options::{PauseReads, Policy};
use memliner_contracts::stats::StatsDoc;

/// Pages the budget may be exceeded by: heap pages the JVM touched before the agent registered
/// the heap are adopted as they are and trimmed by the reclaimer (every charge after that is
/// checked against the budget).
pub const SLACK_PAGES: u64 = 32;
pub const HEAP: &str = "32m";

pub fn classes() -> &'static PathBuf {
    static C: OnceLock<PathBuf> = OnceLock::new();
    C.get_or_init(|| {
        let root = locate::project_root().expect("run from the checkout");
        workloads::ensure_built(&root).expect("javac")
    })
}

pub fn java() -> String {
    locate::java().display().to_string()
}

pub fn workload_args(w: Workload) -> Vec<String> {
    let a: &[&str] = match w {
        Workload::Graph => &["--nodes", "30000", "--rounds", "4"],
        Workload::Kv => &["--keys", "60000", "--ops", "150000", "--capacity", "30000"],
        Workload::Index => &["--records", "60000", "--ops", "120000"],
    };
    a.iter().map(|s| s.to_string()).collect()
}

pub fn command(w: Workload, gc: &str, xms: &str) -> Vec<String> {
    command_for(&java(), w, gc, xms)
}

pub fn command_for(java: &str, w: Workload, gc: &str, xms: &str) -> Vec<String> {
    let mut c = vec![
        java.to_string(),
        format!("-XX:+Use{gc}GC"),
        format!("-Xms{xms}"),
        format!("-Xmx{HEAP}"),
        "-cp".into(),
        classes().display().to_string(),
        w.class().into(),
    ];
    c.extend(workload_args(w));
    c
}

/// Runs `cmd` as it is, without the agent.
pub fn without_agent(cmd: &[String]) -> RunOutcome {
    let cfg = RunConfig {
        agent: false,
        ..RunConfig::default()
    };
    launch(&cfg, cmd, true).unwrap()
}

/// The checksum of an all-local run without the agent (collector-independent).
pub fn reference(w: Workload) -> String {
    static R: OnceLock<Vec<(Workload, String)>> = OnceLock::new();
    let all = R.get_or_init(|| {
        Workload::ALL
            .iter()
            .map(|&w| {
                let out = without_agent(&command(w, "G1", HEAP));
                (w, checked_result(&out, "reference"))
            })
            .collect()
    });
    all.iter().find(|(x, _)| *x == w).unwrap().1.clone()
}

pub fn checked_result(out: &RunOutcome, what: &str) -> String {
    let r = workloads::parse_result(&out.stdout).unwrap_or_else(|| {
        panic!(
            "{what}: no RESULT line\nstdout: {}\nstderr: {}",
            out.stdout, out.stderr
        )
    });
    assert!(
        out.status.success(),
        "{what}: exit {}\nstderr: {}",
        out.status,
        out.stderr
    );
    assert_eq!(
        workloads::field(&r, "verified"),
        Some("true"),
        "{what}: {}",
        out.stdout
    );
    workloads::field(&r, "checksum").unwrap().to_string()
}

/// Runs one matrix cell and checks checksum, budget and stats consistency.
pub fn cell(w: Workload, gc: &str, local: u32) {
    cell_with(w, gc, local, RunConfig::default())
}

pub fn cell_with(w: Workload, gc: &str, local: u32, base: RunConfig) {
    cell_on(&java(), w, gc, local, base, &[]);
}

/// Runs workload `w` on `java` under `cfg` (with `jvm_flags` after the collector's); it must
/// compute the all-local run's checksum.
pub fn run_verified(
    java: &str,
    w: Workload,
    gc: &str,
    cfg: &RunConfig,
    jvm_flags: &[&str],
    what: &str,
) -> RunOutcome {
    let mut cmd = command_for(java, w, gc, HEAP);
    cmd.splice(2..2, jvm_flags.iter().map(|f| f.to_string()));
    let out = launch(cfg, &cmd, true).unwrap();
    assert_eq!(
        checked_result(&out, what),
        reference(w),
        "{what}: checksum differs from the all-local run"
    );
    out
}

/// A matrix cell run by `java` (with `jvm_flags` after the collector's); returns its stats
/// for further checks.
pub fn cell_on(
    java: &str,
    w: Workload,
    gc: &str,
    local: u32,
    base: RunConfig,
    jvm_flags: &[&str],
) -> StatsDoc {
    let cfg = base.local(local);
    let what = format!(
        "{java} {} {gc} [{}] {:?} {:?}",
        w.name(),
        cfg.options.render(),
        cfg.gc_hooks,
        cfg.transport
    );
    let out = run_verified(java, w, gc, &cfg, jvm_flags, &what);
    let s = out
        .stats
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no stats file"));
    let pager = s
        .pager
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: not paged"));
    let budget = pager.budget_pages;
    assert_eq!(
        budget,
        pager.heap_pages * local as u64 / 100,
        "{what}: budget"
    );
    assert!(
        pager.peak_resident_pages <= budget + SLACK_PAGES,
        "{what}: peak resident {} over budget {budget}",
        pager.peak_resident_pages
    );
    assert!(
        pager.resident_pages_mincore <= budget + SLACK_PAGES,
        "{what}: the kernel sees {} resident pages, budget {budget}",
        pager.resident_pages_mincore
    );
    assert_eq!(pager.delivery, cfg.options.faults, "{what}: fault delivery");
    if pager.delivery == FaultDelivery::Signal && local < 100 {
        assert!(pager.signal_faults > 0, "{what}: no fault served by signal");
    }
    let heap = s.heap.as_ref().unwrap();
    assert_eq!(heap.collector, gc, "{what}");
    assert_eq!(heap.discovery, Discovery::VmStructs, "{what}");
    // A stock JDK's dead space is read after every collection: its remote pages are dropped,
    // its mapped ones only while the budget is short (with the whole heap local, never: the
    // JVM reuses them in place).
    let dead = &pager.dead;
    assert!(dead.on, "{what}: dead space not read: {:?}", dead.why_not);
    if s.gc.pauses > 0 {
        assert_eq!(
            dead.collections, s.gc.pauses,
            "{what}: dead space read after every pause"
        );
        assert!(
            dead.pages() + dead.left_mapped() > 0,
            "{what}: no dead page found: {dead:?}"
        );
        if local == 100 {
            assert_eq!(dead.mapped(), 0, "{what}: budget to spare: {dead:?}");
            assert!(dead.left_mapped() > 0, "{what}: {dead:?}");
        }
    }
    let scheme = match cfg.transport.resolve().0 {
        Transport::Tcp | Transport::Auto => "tcp://127.0.0.1:",
        Transport::Fabric => "fabric://127.0.0.1:",
        Transport::Unix => "unix:///",
    };
    assert!(pager.store.starts_with(scheme), "{what}: {}", pager.store);
    // Consistency: class totals add up; every remote fault read exactly one page.
    let faults = &s.faults;
    let by_class: u64 = faults.by_class.iter().map(|(_, c)| c.total).sum();
    assert_eq!(by_class, faults.total, "{what}: class totals");
    // The stats are taken at VM death while threads still fault: a fault being served may be
    // counted on one side only (a handful at most, one per thread serving).
    let counted = faults.remote + pager.remote.pages_prefetched;
    let read = pager.remote.pages_read;
    assert!(
        counted.abs_diff(read) <= 4,
        "{what}: pages read {read} != demand faults + prefetched pages {counted}"
    );
    assert!(
        faults.by_class.application.total > 0,
        "{what}: no application faults"
    );
    if gc == "Serial" && local < 100 && s.gc.pauses > 0 {
        // Serial collects on the VM thread: its faults in a pause are the collector's.
        assert!(
            faults.by_class.gc.total > 0,
            "{what}: {} pauses and no GC fault: {:?}",
            s.gc.pauses,
            faults.by_class
        );
        // Its card scan reads the old space's cards below each first fault in a megabyte
        // (600-1,200 pages a run at these sizes).
        if cfg.options.policy == Policy::MemLiner && cfg.options.pause_reads == PauseReads::On {
            assert!(s.gc.scan_ahead_pages > 0, "{what}: {:?}", s.gc);
        }
    }
    let evictions = pager.evictions.total();
    if local == 100 {
        assert_eq!(
            faults.remote, 0,
            "{what}: nothing should come back from remote"
        );
        assert_eq!(evictions, 0, "{what}: nothing should be evicted");
    } else {
        assert!(
            evictions > 0 && faults.remote > 0,
            "{what}: expected paging"
        );
        assert!(pager.remote.pages_written > 0, "{what}");
    }
    assert_eq!(s.policy, cfg.options.policy, "{what}");
    // Prefetching: every window maps at least its marker; each marker resolves once at most.
    let pf = &s.prefetch.as_ref().unwrap().all;
    assert!(pf.pages >= pf.windows, "{what}: {pf:?}");
    assert!(
        pf.marker_hits + pf.marker_misses <= pf.windows,
        "{what}: {pf:?}"
    );
    // The stats are written at VMDeath while the JVM's other threads may still fault: a
    // marker fault in flight has counted its hit and not yet its fault kind (or the other way
    // round, as the writer reads them). A handful at most; every other marker hit is a
    // prefetch-hit fault.
    assert!(
        pf.marker_hits.abs_diff(faults.prefetch_hit) <= 8,
        "{what}: a marker hit is a prefetch-hit fault: {} marker hits, {} prefetch-hit faults",
        pf.marker_hits,
        faults.prefetch_hit
    );
    let gc_remote = faults.by_class.gc.remote + faults.by_class.gc_concurrent.remote;
    // Every remote fault of a GC thread is attributed once to what the collector was doing
    // (read before the class counters: a fault being served may be counted there only).
    let attributed: u64 = s.gc_faults.values().map(|a| a.remote).sum();
    assert!(
        attributed <= gc_remote && gc_remote - attributed <= 4,
        "{what}: {attributed} GC faults attributed of {gc_remote}: {:?}",
        s.gc_faults
    );
    assert_eq!(
        s.gc.incremental_pauses + s.gc.full_pauses + s.gc.remark_cleanup_pauses,
        s.gc.pauses,
        "{what}: every pause has a kind: {:?}",
        s.gc
    );
    // Marking paths come from a patched G1's marking threads only.
    let paths: u64 = GcActivity::MARK_PATHS
        .iter()
        .map(|a| s.gc_faults[a].remote)
        .sum();
    if !s.jdk.contains("memliner gc-hooks") || gc != "G1" {
        assert_eq!(paths, 0, "{what}: {:?}", s.gc_faults);
    }
    let pause_other = s.gc_faults[&GcActivity::PauseOther].remote;
    if gc != "Shenandoah" {
        // G1's regions and Parallel's spaces are read at each pause's start: a pause's fault
        // lies in one of them (a G1 region free then is a copy destination).
        assert!(
            pause_other * 20 <= faults.by_class.gc.remote.max(20),
            "{what}: {pause_other} of {} pause faults unattributed: {:?}",
            faults.by_class.gc.remote,
            s.gc_faults
        );
    }
    let concurrent = faults.by_class.gc_concurrent.remote;
    if gc == "Shenandoah" && local < 100 && concurrent > 1000 {
        // Its concurrent work is told by the collection set its last pause left: marking,
        // evacuation, reference updating (only the work before its first pause is not).
        let told: u64 = [
            GcActivity::ConcurrentMark,
            GcActivity::ConcurrentEvacuation,
            GcActivity::ConcurrentUpdateRefs,
        ]
        .iter()
        .map(|a| s.gc_faults[a].remote)
        .sum();
        assert!(
            told * 10 >= concurrent * 9,
            "{what}: {told} of {concurrent} concurrent faults told apart: {:?}",
            s.gc_faults
        );
        // Its collection set's pages that evacuation read back soon were kept, not cold
        // (memliner only: baseline has no cold queue).
        let evacuation = s.gc_faults[&GcActivity::ConcurrentEvacuation].remote;
        let kept = pager.reclaim.cold_rereads_kept;
        if cfg.options.policy == Policy::Baseline {
            assert_eq!(kept, 0, "{what}: baseline keeps nothing cold");
        } else if evacuation > 1000 {
            assert!(
                kept > 0,
                "{what}: {evacuation} evacuation faults, no collection-set page read back kept"
            );
        }
    }
    if gc == "G1" && local < 100 && faults.by_class.gc.remote > 100 {
        let evacuated = s.gc_faults[&GcActivity::YoungEvacuation].remote
            + s.gc_faults[&GcActivity::MixedEvacuation].remote
            + s.gc_faults[&GcActivity::CardScan].remote;
        assert!(
            evacuated > 0,
            "{what}: no young, mixed or card-scan fault: {:?}",
            s.gc_faults
        );
        // Pauses read their young regions and their cards' pages in bulk under memliner
        // (`pause_reads=on`); the checksum above says none of those pages was stale.
        if cfg.options.policy == Policy::MemLiner
            && cfg.options.pause_reads == memliner_contracts::options::PauseReads::On
        {
            assert!(
                s.gc.pause_read_pages > 0,
                "{what}: {} pause faults, no page read for a pause: {:?}",
                faults.by_class.gc.remote,
                s.gc
            );
        }
        // Refinement threads read pages: some had dirty cards when the reclaimer looked, and
        // under `card_hold=on` it held them (the card table is read outside pauses).
        let refined = s.gc_faults[&GcActivity::ConcurrentRefinement].remote;
        if cfg.options.holds_cards() && refined > 100 {
            assert!(
                pager.reclaim.card_holds > 0,
                "{what}: {refined} refinement faults, no page with a dirty card held: {:?}",
                pager.reclaim.card_holds
            );
        }
    }
    let cold = pager.cold.evicted;
    if cfg.options.policy == Policy::Baseline {
        assert_eq!(cold, 0, "{what}: baseline has no cold queue");
    } else if local < 100 && gc_remote > 1000 {
        assert!(
            cold > 0,
            "{what}: GC read {gc_remote} remote pages, none went cold"
        );
    }
    if local < 100 {
        assert!(pf.windows > 0, "{what}: nothing prefetched: {pf:?}");
    }
    assert!(!summary::lines(s).is_empty());
    s.clone()
}

/// One test per cell, each calling `$cell(workload, collector, local)`.
#[allow(unused_macros)] // used by the files that have cells
macro_rules! cells {
    ($cell:ident { $($name:ident: $w:expr, $gc:expr, $local:expr;)* }) => {
        $( #[test] fn $name() { $cell($w, $gc, $local) } )*
    };
}

/// Where the tests look for a JDK 25 (Temurin's Debian package installs it there).
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// The JDK 25 home, if installed; under MEMLINER_REQUIRE_JDK25 (CI, whose machines have it)
/// a missing one fails the test instead of skipping it.
pub fn jdk25() -> Option<std::path::PathBuf> {
    let home = std::path::PathBuf::from(JDK25);
    if home.join("bin/java").is_file() {
        return Some(home);
    }
    assert!(
        std::env::var_os("MEMLINER_REQUIRE_JDK25").is_none(),
        "MEMLINER_REQUIRE_JDK25 is set and there is no JDK 25 at {JDK25}"
    );
    None
}

pub fn memliner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memliner"))
}

pub fn java_with_agent(opts: &str) -> std::process::Output {
    java_version_with_agent(&java(), &[], opts)
}

/// `java [jvm_flags] -agentpath:...=opts -version`, as `java` runs it.
pub fn java_version_with_agent(java: &str, jvm_flags: &[&str], opts: &str) -> std::process::Output {
    let agent = locate::agent().unwrap();
    Command::new(java)
        .args(jvm_flags)
        .arg(format!("-agentpath:{}={opts}", agent.display()))
        .arg("-version")
        .output()
        .unwrap()
}
