//! Real JVMs with the real agent over a real memory server (TCP loopback).
//!
//! Needs `cargo build --release --workspace` first (the agent is a cdylib that `cargo test`
//! does not build); `scripts/test.sh` does both.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use memliner_cli::run::{launch, GcHooks, RunConfig, RunOutcome, Transport};
use memliner_cli::workloads::{self, Workload};
use memliner_cli::{locate, summary};
use memliner_contracts::model::GcActivity;
use memliner_contracts::model::{Discovery, FaultDelivery};
use memliner_contracts::options::{Dirty, Policy};
use memliner_contracts::stats::StatsDoc;

/// Pages the budget may be exceeded by: heap pages the JVM touched before the agent registered
/// the heap are adopted as they are and trimmed by the reclaimer (every charge after that is
/// checked against the budget).
const SLACK_PAGES: u64 = 32;
const HEAP: &str = "32m";

fn classes() -> &'static PathBuf {
    static C: OnceLock<PathBuf> = OnceLock::new();
    C.get_or_init(|| {
        let root = locate::project_root().expect("run from the checkout");
        workloads::ensure_built(&root).expect("javac")
    })
}

fn java() -> String {
    locate::java().display().to_string()
}

fn workload_args(w: Workload) -> Vec<String> {
    let a: &[&str] = match w {
        Workload::Graph => &["--nodes", "30000", "--rounds", "4"],
        Workload::Kv => &["--keys", "60000", "--ops", "150000", "--capacity", "30000"],
        Workload::Index => &["--records", "60000", "--ops", "120000"],
    };
    a.iter().map(|s| s.to_string()).collect()
}

fn command(w: Workload, gc: &str, xms: &str) -> Vec<String> {
    command_for(&java(), w, gc, xms)
}

fn command_for(java: &str, w: Workload, gc: &str, xms: &str) -> Vec<String> {
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
fn without_agent(cmd: &[String]) -> RunOutcome {
    let cfg = RunConfig {
        agent: false,
        ..RunConfig::default()
    };
    launch(&cfg, cmd, true).unwrap()
}

/// The checksum of an all-local run without the agent (collector-independent).
fn reference(w: Workload) -> String {
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

fn checked_result(out: &RunOutcome, what: &str) -> String {
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
fn cell(w: Workload, gc: &str, local: u32) {
    cell_with(w, gc, local, RunConfig::default())
}

fn cell_with(w: Workload, gc: &str, local: u32, base: RunConfig) {
    cell_on(&java(), w, gc, local, base, &[]);
}

/// A matrix cell run by `java` (with `jvm_flags` after the collector's); returns its stats
/// for further checks.
fn cell_on(
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
    let mut cmd = command_for(java, w, gc, HEAP);
    cmd.splice(2..2, jvm_flags.iter().map(|f| f.to_string()));
    let out = launch(&cfg, &cmd, true).unwrap();
    assert_eq!(
        checked_result(&out, &what),
        reference(w),
        "{what}: checksum differs from the all-local run"
    );
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
    // A stock JDK's dead space is read after every collection, and dropped.
    let dead = &pager.dead;
    assert!(dead.on, "{what}: dead space not read: {:?}", dead.why_not);
    if s.gc.pauses > 0 {
        assert_eq!(
            dead.collections, s.gc.pauses,
            "{what}: dead space read after every pause"
        );
        assert!(dead.pages() > 0, "{what}: no dead page dropped: {dead:?}");
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
    assert_eq!(
        pf.marker_hits, faults.prefetch_hit,
        "{what}: a marker hit is a prefetch-hit fault"
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
    let pause_other = s.gc_faults[&GcActivity::PauseOther].remote;
    if gc != "Shenandoah" {
        // G1's regions and Parallel's spaces are read at each pause's start: a pause's fault
        // lies in one of them (a free region's page a pause allocates into is the exception).
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
macro_rules! cells {
    ($cell:ident { $($name:ident: $w:expr, $gc:expr, $local:expr;)* }) => {
        $( #[test] fn $name() { $cell($w, $gc, $local) } )*
    };
}

/// The same cell under `policy=baseline` (the default is memliner).
fn baseline_cell(w: Workload, gc: &str, local: u32) {
    cell_with(
        w,
        gc,
        local,
        RunConfig::default().with(|o| o.policy = Policy::Baseline),
    )
}

cells!(baseline_cell {
    graph_g1_25_baseline: Workload::Graph, "G1", 25;
    graph_parallel_25_baseline: Workload::Graph, "Parallel", 25;
    graph_shenandoah_25_baseline: Workload::Graph, "Shenandoah", 25;
    kv_g1_25_baseline: Workload::Kv, "G1", 25;
    kv_parallel_25_baseline: Workload::Kv, "Parallel", 25;
    kv_shenandoah_25_baseline: Workload::Kv, "Shenandoah", 25;
    index_g1_25_baseline: Workload::Index, "G1", 25;
});

cells!(cell {
    graph_g1_100: Workload::Graph, "G1", 100;
    graph_g1_50: Workload::Graph, "G1", 50;
    graph_g1_25: Workload::Graph, "G1", 25;
    graph_parallel_100: Workload::Graph, "Parallel", 100;
    graph_parallel_50: Workload::Graph, "Parallel", 50;
    graph_parallel_25: Workload::Graph, "Parallel", 25;
    graph_shenandoah_100: Workload::Graph, "Shenandoah", 100;
    graph_shenandoah_50: Workload::Graph, "Shenandoah", 50;
    graph_shenandoah_25: Workload::Graph, "Shenandoah", 25;
    kv_g1_100: Workload::Kv, "G1", 100;
    kv_g1_50: Workload::Kv, "G1", 50;
    kv_g1_25: Workload::Kv, "G1", 25;
    kv_parallel_100: Workload::Kv, "Parallel", 100;
    kv_parallel_50: Workload::Kv, "Parallel", 50;
    kv_parallel_25: Workload::Kv, "Parallel", 25;
    kv_shenandoah_100: Workload::Kv, "Shenandoah", 100;
    kv_shenandoah_50: Workload::Kv, "Shenandoah", 50;
    kv_shenandoah_25: Workload::Kv, "Shenandoah", 25;
    kv_serial_25: Workload::Kv, "Serial", 25;
    index_g1_100: Workload::Index, "G1", 100;
    index_g1_25: Workload::Index, "G1", 25;
    index_parallel_25: Workload::Index, "Parallel", 25;
    index_shenandoah_25: Workload::Index, "Shenandoah", 25;
    index_serial_25: Workload::Index, "Serial", 25;
});

/// The cell over one-sided reads and writes (`fabric://`, libfabric's tcp provider on
/// loopback). Where libfabric is missing it says so and passes, except under
/// MEMLINER_REQUIRE_FABRIC (CI, which installs it).
fn fabric_cell(w: Workload, gc: &str, local: u32) {
    if !swap_backend::conformance::libfabric_or_skip("a fabric JVM cell") {
        return;
    }
    cell_over(Transport::Fabric, w, gc, local);
}

/// The cell with the embedded server reached over `transport`.
fn cell_over(transport: Transport, w: Workload, gc: &str, local: u32) {
    let cfg = RunConfig {
        transport,
        ..RunConfig::default()
    };
    cell_with(w, gc, local, cfg);
}

cells!(fabric_cell {
    fabric_graph_g1_25: Workload::Graph, "G1", 25;
    fabric_graph_shenandoah_25: Workload::Graph, "Shenandoah", 25;
    fabric_kv_g1_25: Workload::Kv, "G1", 25;
});

/// The cell over two-sided TCP to the embedded server (the default is `unix://` memory files
/// where the host has them): the path a server on another machine is reached by.
fn tcp_cell(w: Workload, gc: &str, local: u32) {
    cell_over(Transport::Tcp, w, gc, local);
}

cells!(tcp_cell {
    tcp_graph_g1_25: Workload::Graph, "G1", 25;
    tcp_kv_shenandoah_25: Workload::Kv, "Shenandoah", 25;
    tcp_index_parallel_25: Workload::Index, "Parallel", 25;
});

#[test]
fn two_handler_threads() {
    let cfg = RunConfig::default().with(|o| {
        o.handlers = 2;
        o.faults = FaultDelivery::Thread;
    });
    cell_with(Workload::Graph, "G1", 25, cfg);
}

/// Faults delivered to handler threads (`faults=thread`) instead of served by signal.
fn thread_faults_cell(w: Workload, gc: &str, local: u32) {
    let cfg = RunConfig::default().with(|o| o.faults = FaultDelivery::Thread);
    cell_with(w, gc, local, cfg);
}

cells!(thread_faults_cell {
    graph_g1_25_faults_thread: Workload::Graph, "G1", 25;
    kv_shenandoah_25_faults_thread: Workload::Kv, "Shenandoah", 25;
});

/// Reading a truncated mapped file raises a SIGBUS outside the heap: it must still reach
/// HotSpot (an InternalError for the program) while the pager serves its own SIGBUS faults.
#[test]
fn a_sigbus_outside_the_heap_still_reaches_the_jvm() {
    let cmd = |c: &str| {
        vec![
            java(),
            "-XX:+UseG1GC".into(),
            "-Xms32m".into(),
            "-Xmx32m".into(),
            "-cp".into(),
            classes().display().to_string(),
            c.into(),
        ]
    };
    let cmd = cmd("memliner.checks.TruncatedMapping");
    let plain = without_agent(&cmd);
    let want = workloads::field(&result_of(&plain.stdout), "checksum")
        .unwrap()
        .to_string();
    for faults in [FaultDelivery::Signal, FaultDelivery::Thread] {
        let cfg = RunConfig::default().local(25).with(|o| o.faults = faults);
        let out = launch(&cfg, &cmd, true).unwrap();
        assert!(out.status.success(), "{faults:?}: {}", out.stderr);
        let r = result_of(&out.stdout);
        assert_eq!(
            workloads::field(&r, "outcome"),
            Some("internal-error"),
            "{faults:?}: {r:?}"
        );
        assert_eq!(
            workloads::field(&r, "heap"),
            Some("ok"),
            "{faults:?}: {r:?}"
        );
        assert_eq!(
            workloads::field(&r, "checksum"),
            Some(want.as_str()),
            "{faults:?}: {r:?}"
        );
        let s = out.stats.as_ref().unwrap();
        let pager = s.pager.as_ref().unwrap();
        assert_eq!(pager.delivery, faults);
        assert!(s.faults.remote > 0, "{faults:?}: the heap did not page");
        if faults == FaultDelivery::Signal {
            assert!(pager.signal_faults > 0);
        }
    }
}

fn result_of(stdout: &str) -> Vec<(String, String)> {
    workloads::parse_result(stdout).unwrap_or_else(|| panic!("no RESULT line: {stdout}"))
}

#[test]
fn without_dirty_tracking() {
    let cfg = RunConfig::default().with(|o| o.dirty = Dirty::Assume);
    cell_with(Workload::Kv, "Parallel", 25, cfg);
}

#[test]
fn heap_that_grows_and_shrinks_is_followed() {
    for gc in ["G1", "Shenandoah"] {
        let cfg = RunConfig::default().local(25);
        let out = launch(&cfg, &command(Workload::Graph, gc, "8m"), true).unwrap();
        assert_eq!(
            checked_result(&out, gc),
            reference(Workload::Graph),
            "{gc} -Xms8m"
        );
        let s = out.stats.unwrap();
        let pager = s.pager.as_ref().unwrap();
        assert!(pager.unmap_events > 0, "{gc}: the heap never re-mapped");
        assert!(
            pager.peak_resident_pages <= pager.budget_pages + SLACK_PAGES,
            "{gc} -Xms8m: peak resident {} pages over a budget of {} (+{SLACK_PAGES} slack), {} unmap events",
            pager.peak_resident_pages,
            pager.budget_pages,
            pager.unmap_events
        );
    }
}

/// Where the tests look for a JDK 25 (Temurin's Debian package installs it there).
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// The JDK 25 home, if installed; under MEMLINER_REQUIRE_JDK25 (CI, whose machines have it)
/// a missing one fails the test instead of skipping it.
fn jdk25() -> Option<std::path::PathBuf> {
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

#[test]
fn jdk25_runs_paged_when_installed() {
    let Some(home) = jdk25() else {
        eprintln!("SKIPPED jdk25_runs_paged_when_installed: no JDK 25 at {JDK25}");
        return;
    };
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd[0] = home.join("bin/java").display().to_string();
    let out = launch(&RunConfig::default().local(25), &cmd, true).unwrap();
    assert_eq!(checked_result(&out, "jdk25"), reference(Workload::Graph));
    let s = out.stats.unwrap();
    assert_eq!(s.heap.unwrap().discovery, Discovery::VmStructs);
    assert!(s.faults.remote > 0);
}

fn memliner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memliner"))
}

/// The RDMA stack is loaded at run time, never linked: the agent and the command start on a
/// machine without libfabric or libibverbs.
#[test]
fn no_rdma_library_is_linked() {
    for bin in [
        locate::agent().unwrap(),
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_memliner")),
    ] {
        let out = Command::new("readelf")
            .arg("-d")
            .arg(&bin)
            .output()
            .unwrap();
        assert!(out.status.success(), "readelf -d {}", bin.display());
        let dynamic = String::from_utf8_lossy(&out.stdout);
        assert!(dynamic.contains("(NEEDED)"), "{dynamic}");
        for lib in ["libfabric", "libibverbs", "librdmacm"] {
            assert!(
                !dynamic.contains(lib),
                "{} links {lib}:\n{dynamic}",
                bin.display()
            );
        }
    }
}

/// `memliner doctor --json`: every check named with a status, the JDK's heap found with the
/// agent, live servers reached (over tcp://, unix:// and fabric:// where libfabric is
/// installed, the one-sided ones with a page written and read back) and a dead one failed with
/// its fix (exit code 1).
#[test]
fn doctor_checks_the_machine_the_jdk_and_the_servers() {
    let fabric = swap_backend::conformance::libfabric_or_skip("doctor's fabric:// check");
    let live = swap_backend::server::spawn(
        "127.0.0.1:0",
        swap_backend::server::ServerConfig {
            fabric,
            ..swap_backend::server::ServerConfig::with_capacity(64 << 20)
        },
    )
    .unwrap();
    let socket = std::env::temp_dir().join(format!("memliner-doctor-{}.sock", std::process::id()));
    let files = swap_backend::server::spawn_unix(
        &socket,
        swap_backend::server::ServerConfig::with_capacity(64 << 20),
    )
    .unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = memliner()
        .args(["doctor", "--json", "--java"])
        .arg(java())
        .args(["--server", &format!("tcp://{}", live.local_addr())])
        .args(["--server", &files.url()])
        .args(["--server", &format!("127.0.0.1:{dead}")])
        .args(
            fabric
                .then(|| {
                    [
                        "--server".to_string(),
                        format!("fabric://{}", live.local_addr()),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a dead server fails the report");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = r["checks"].as_array().unwrap();
    let get = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {r}"))
    };
    for c in checks {
        assert!(
            ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        if c["status"] != "ok" {
            assert!(
                c["fix"].is_string(),
                "a check that is not ok says what to do: {c}"
            );
        }
    }
    assert_eq!(get("userfaultfd")["status"], "ok");
    assert_eq!(get("java")["status"], "ok");
    let heap = get("heap discovery");
    assert_eq!(heap["status"], "ok", "{heap}");
    assert!(
        heap["detail"].as_str().unwrap().contains("64 MiB"),
        "{heap}"
    );
    let ok = get(&format!("server tcp://{}", live.local_addr()));
    assert_eq!(ok["status"], "ok", "{ok}");
    assert!(
        ok["detail"].as_str().unwrap().contains("64 MiB capacity"),
        "{ok}"
    );
    if fabric {
        let one_sided = get(&format!("server fabric://{}", live.local_addr()));
        assert_eq!(one_sided["status"], "ok", "{one_sided}");
        assert!(
            one_sided["detail"]
                .as_str()
                .unwrap()
                .contains("one-sided write and read of a page over tcp: ok"),
            "{one_sided}"
        );
    }
    let in_files = get(&format!("server {}", files.url()));
    assert_eq!(in_files["status"], "ok", "{in_files}");
    assert!(
        in_files["detail"]
            .as_str()
            .unwrap()
            .contains("one-sided write and read of a page in a memory file: ok"),
        "{in_files}"
    );
    assert_eq!(get("memory files")["status"], "ok");
    if fabric {
        let rdm = get("libfabric RDM providers");
        assert!(
            rdm["detail"].as_str().unwrap().contains("FI_EP_RDM"),
            "{rdm}"
        );
    }
    let bad = get(&format!("server tcp://127.0.0.1:{dead}"));
    assert_eq!(bad["status"], "fail");
    assert!(bad["detail"].as_str().unwrap().contains("refused"), "{bad}");
    // The RDMA stack is listed whatever this machine has.
    assert_eq!(r["rdma"]["libraries"].as_array().unwrap().len(), 3);
    assert!(["ok", "warn"].contains(&get("rdma devices")["status"].as_str().unwrap()));
    live.stop();
    files.stop();
}

/// Server addresses are URLs on both sides: the server says where it listens as one, a client
/// reaches it at that URL, and a bad URL is one clear line from either command.
#[test]
fn servers_listen_and_are_reached_at_urls() {
    use std::io::BufRead;
    let mut server = memliner()
        .args([
            "server",
            "--listen",
            "tcp://127.0.0.1:0",
            "--capacity",
            "16m",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let at = line
        .split_whitespace()
        .find(|w| w.starts_with("tcp://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    let url: swap_backend::ServerUrl = at.parse().unwrap();
    assert!(url.port > 0 && url.is_loopback(), "{line}");
    let store = swap_backend::TcpStore::connect(
        &url.authority(),
        swap_backend::ClientOptions {
            namespace: "url-test".into(),
            connections: 1,
            ..Default::default()
        },
    )
    .unwrap();
    use swap_backend::PageStore;
    let page = vec![0xa5u8; swap_backend::PAGE_SIZE];
    store.write_pages(&[9], &page).unwrap();
    let mut back = vec![0u8; swap_backend::PAGE_SIZE];
    store.read_pages(&[9], &mut back).unwrap();
    assert_eq!(back, page);
    assert_eq!(store.describe(), url.to_string());
    server.kill().unwrap();
    let _ = server.wait();

    let out = memliner()
        .args(["server", "--listen", "udp://127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("unknown scheme 'udp://'"), "{err}");
    // A listener others can reach needs a token, and never on the command line.
    let out = memliner()
        .args(["server", "--listen", "tcp://0.0.0.0:0"])
        .env_remove("MEMLINER_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not a loopback address") && err.contains("--token-file"),
        "{err}"
    );
    for cmd in [
        &["server", "--token", "s3cret"][..],
        &["run", "--token", "s3cret", "--", "java"],
    ] {
        let out = memliner().args(cmd).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}");
        assert!(err.contains("/proc/PID/cmdline"), "{cmd:?}: {err}");
    }
    let out = memliner()
        .args([
            "run",
            "-q",
            "--server",
            "rdma://mem1:7070",
            "--",
            "java",
            "-version",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad value for 'server'") && err.contains("unknown scheme 'rdma://'"),
        "{err}"
    );
    assert!(!err.contains("version \""), "no JVM may start: {err}");
}

#[test]
fn memory_server_killed_mid_run_stops_the_jvm_naming_server_and_page() {
    // A real server process on a port we pick by binding first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = memliner()
        .args(["server", "--listen", &addr, "--capacity", "1g"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until it accepts (bounded): connect attempts, not sleeps.
    let probe = (0..2000)
        .find_map(|_| {
            swap_backend::TcpStore::connect(
                &addr,
                swap_backend::ClientOptions {
                    namespace: "probe".into(),
                    connections: 1,
                    ..Default::default()
                },
            )
            .ok()
            .or_else(|| {
                std::thread::yield_now();
                None
            })
        })
        .expect("server never came up");
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--rounds".to_string(), "400".to_string()]);
    let agent = locate::agent().unwrap();
    let jvm = Command::new(&cmd[0])
        .arg(format!(
            "-agentpath:{}=server={addr},local=25%",
            agent.display()
        ))
        .args(&cmd[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once the JVM depends on it (pages stored there).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while probe.server_stats().unwrap().pages_stored < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the JVM never paged out"
        );
        std::thread::yield_now();
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let out = jvm.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(memliner_contracts::FATAL_EXIT_CODE),
        "stderr: {err}"
    );
    assert!(err.contains("FATAL"), "{err}");
    assert!(
        err.contains(&format!("tcp://{addr}")),
        "the message must name the server: {err}"
    );
    assert!(
        err.contains("heap page"),
        "the message must name the page: {err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("verified=true"));
}

fn java_with_agent(opts: &str) -> std::process::Output {
    let agent = locate::agent().unwrap();
    Command::new(java())
        .arg(format!("-agentpath:{}={opts}", agent.display()))
        .arg("-version")
        .output()
        .unwrap()
}

#[test]
fn bad_agent_options_fail_with_one_clear_line() {
    for (opts, expect) in [
        ("locall=25%", "unknown option 'locall'"),
        ("local=lots", "bad value for 'local': 'lots'"),
        ("policy=fast", "expected one of memliner, baseline, off"),
        ("server=nohost", "HOST:PORT"),
        ("token=s3cret", "token_file=PATH"),
        (
            "server=127.0.0.1:1+127.0.0.1:2,replicas=3",
            "3 copies need 3 memory servers, and server= gives 2",
        ),
        ("replicas=0", "expected a number of copies from 1 to 16"),
        ("server=h:1+tcp://h:1", "tcp://h:1 is given twice"),
    ] {
        let out = java_with_agent(opts);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{opts}: must fail");
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("memliner:")).collect();
        assert_eq!(
            ours.len(),
            1,
            "{opts}: exactly one line from the agent: {err}"
        );
        assert!(ours[0].contains(expect), "{opts}: {err}");
    }
}

#[test]
fn unreachable_server_is_reported_before_the_jvm_runs() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = java_with_agent(&format!("server=127.0.0.1:{port}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("cannot use memory server tcp://127.0.0.1:{port}")),
        "{err}"
    );
}

/// `fallback=local`: the same unreachable server, but the JVM runs (on local memory) with one
/// line saying why; a ZGC heap, which cannot be paged, stays local the same way.
#[test]
fn fallback_local_runs_the_jvm_without_far_memory_and_says_why() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = java_with_agent(&format!("server=127.0.0.1:{port},fallback=local"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("memliner:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains(&format!("cannot use memory server tcp://127.0.0.1:{port}"))
            && ours[0].contains("fallback=local: the JVM runs without far memory"),
        "{err}"
    );
    let out = Command::new(java())
        .arg(format!(
            "-agentpath:{}=server=local,local=25%,fallback=local",
            locate::agent().unwrap().display()
        ))
        .args(["-XX:+UseZGC", "-Xmx64m", "-version"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "memliner: cannot page the Java heap: {}",
            memliner_contracts::ZGC_REFUSED
        )) && err.contains("fallback=local: the JVM runs with its whole heap local"),
        "{err}"
    );
}

/// `-XX:+UseZGC` without a fallback: the JVM stops with the line that names ZGC and the
/// collectors that work, on JDK 17 and JDK 25 (whose ZGC is generational only).
#[test]
fn zgc_is_refused_with_a_line_naming_it_on_both_jdks() {
    let mut javas = vec![java()];
    javas.extend(jdk25().map(|h| h.join("bin/java").display().to_string()));
    for java in javas {
        let out = memliner()
            .args([
                "run",
                "--server",
                "local",
                "--",
                &java,
                "-XX:+UseZGC",
                "-Xmx64m",
            ])
            .args(["-version"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{java}: {err}");
        assert!(
            err.contains(memliner_contracts::ZGC_REFUSED),
            "{java}: {err}"
        );
        assert!(!err.contains("implausible"), "{java}: {err}");
    }
}

#[test]
fn options_come_from_java_tool_options_and_memliner_options() {
    let dir = std::env::temp_dir().join(format!("memliner-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("s.json");
    let agent = locate::agent().unwrap();
    let cmd = command(Workload::Kv, "G1", HEAP);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env(
            "JAVA_TOOL_OPTIONS",
            format!(
                "-agentpath:{}=server=local,stats={}",
                agent.display(),
                stats.display()
            ),
        )
        .env("MEMLINER_OPTIONS", "local=50%,policy=off")
        .env_remove("MEMLINER_AGENT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = StatsDoc::parse(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // MEMLINER_OPTIONS said policy=off; the agent string did not override it.
    assert_eq!(s.policy, Policy::Off);
    assert!(s.pager.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memliner_run_propagates_the_exit_code_and_prints_a_summary() {
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--bogus".to_string(), "1".to_string()]);
    let out = memliner()
        .args(["run", "--local", "50%", "--"])
        .args(&cmd)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unknown option --bogus"), "{err}");
    assert!(
        err.contains("memliner: G1 heap 32.0 MiB, local 16.0 MiB (50%)"),
        "{err}"
    );

    let ok = memliner()
        .args(["run", "--local", "25%", "--"])
        .args(command(Workload::Kv, "G1", HEAP))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&ok.stdout).contains("verified=true"));
    assert!(err.contains("remote traffic:"), "{err}");

    let bad = memliner()
        .args(["run", "--local", "lots", "--", &java(), "-version"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad value for 'local'"));
}

/// Whether process `pid` has a thread named `name`.
fn has_thread(pid: u32, name: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
            })
        })
        .unwrap_or(false)
}

/// User + system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat; 12 and 13 after the name and state.
    fields
        .get(11)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
}

#[test]
fn sigterm_to_memliner_run_stops_the_jvm_cleanly_with_the_embedded_server_alive() {
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.extend(["--rounds".to_string(), "400".to_string()]);
    let run = memliner()
        .args(["run", "--local", "25%", "--"])
        .args(&cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until the JVM child runs the pager.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let jvm = loop {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", run.id()))
            .unwrap_or_default();
        if let Some(pid) = children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .next()
        {
            // Paging, and far enough in (half a second of CPU) that pages live on the server.
            if has_thread(pid, "memliner-fault0") && cpu_ticks(pid) >= 50 {
                break pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the JVM never started paging"
        );
        std::thread::yield_now();
    };
    eprintln!("jvm {jvm} paging; sending SIGTERM to memliner {}", run.id());
    let rc = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(143),
        "memliner must exit as the JVM did: {err}"
    );
    assert!(
        !err.contains("FATAL"),
        "the JVM lost its memory server on the way out: {err}"
    );
    assert!(
        err.contains("remote traffic:"),
        "stats written at VM death: {err}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{jvm}")).exists() || {
            // A zombie entry may linger briefly; it must not be running.
            std::fs::read_to_string(format!("/proc/{jvm}/stat")).map_or(true, |s| s.contains(") Z"))
        }
    );
}

/// With libjsig preloaded, HotSpot's SIGBUS handler stays in front of any handler installed
/// later: the agent must see that and serve faults with handler threads, correctly.
#[test]
fn libjsig_keeps_faults_with_handler_threads() {
    // Every HotSpot JDK ships libjsig next to libjvm's directory.
    let java = std::path::PathBuf::from(java());
    let java = if java.is_absolute() {
        java
    } else {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(&java))
            .find(|p| p.is_file())
            .expect("java on PATH")
    };
    let home = std::fs::canonicalize(&java).unwrap();
    let jsig = home
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("lib/libjsig.so");
    assert!(jsig.is_file(), "no libjsig.so at {}", jsig.display());
    let stats = std::env::temp_dir().join(format!("memliner-jsig-{}.json", std::process::id()));
    let out = memliner()
        .args(["run", "-q", "--local", "25%", "--stats"])
        .arg(&stats)
        .arg("--")
        .args(command(Workload::Graph, "G1", HEAP))
        .env("LD_PRELOAD", &jsig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r = result_of(&stdout);
    assert_eq!(
        workloads::field(&r, "checksum"),
        Some(reference(Workload::Graph).as_str())
    );
    assert!(stderr.contains("libjsig"), "{stderr}");
    let s = StatsDoc::parse(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    assert_eq!(s.pager.as_ref().unwrap().delivery, FaultDelivery::Thread);
    assert!(s.faults.remote > 0);
}

// ---- The GC-hook patched JDK (scripts/build-jdk.sh) -------------------------------------------

/// The patched JDK's java (target/jdk-memliner). Without one the test is skipped with a note,
/// unless MEMLINER_REQUIRE_PATCHED_JDK is set, as CI sets it after building the JDK.
fn patched_java() -> Option<String> {
    if let Some(java) = locate::patched_java() {
        return Some(java.display().to_string());
    }
    let why = "no patched JDK at target/jdk-memliner (scripts/build-jdk.sh builds it)";
    if std::env::var_os("MEMLINER_REQUIRE_PATCHED_JDK").is_some() {
        panic!("{why}");
    }
    swap_backend::conformance::skip("a patched-JDK cell", why);
    None
}

/// A cell on the patched JDK with the hooks on (`memliner run` switches them on for a patched
/// JDK under policy memliner): correct, and the hook counters consistent.
fn hooks_cell(w: Workload, gc: &str, local: u32) {
    let Some(java) = patched_java() else { return };
    // kv's live set sits near G1's adaptive marking threshold at this size: left to itself,
    // most runs would never mark concurrently (and the JVM never look for the hooks). A fixed
    // initiating occupancy below its live set makes every run mark.
    let flags: &[&str] = if gc == "G1" {
        &[
            "-XX:-G1UseAdaptiveIHOP",
            "-XX:InitiatingHeapOccupancyPercent=20",
        ]
    } else {
        &[]
    };
    let s = cell_on(&java, w, gc, local, RunConfig::default(), flags);
    let what = format!("{} {gc} {local}% hooks on", w.name());
    let h = &s.gc_hooks;
    assert!(
        s.jdk.contains("memliner gc-hooks"),
        "{what}: jdk {:?}",
        s.jdk
    );
    // Graph's collectors free regions in every run (G1 after each young pause, Shenandoah
    // when it recycles the regions a cycle emptied): the JVM released them to the agent (or
    // the agent found them free in the heap's layout at the end of a pause first), and the
    // checksum above says no live page went with them.
    let pager = s.pager.as_ref().expect("paged");
    let r = &pager.released;
    assert!(r.remote <= r.pages, "{what}: {r:?}");
    if w == Workload::Graph {
        assert!(
            r.pages + pager.dead.free_region.pages > 0,
            "{what}: no freed region was released: {r:?}, dead space {:?}",
            pager.dead
        );
    }
    assert!(h.on, "{what}: the JVM did not take the hooks: {h:?}");
    assert!(h.mark_cycles > 0, "{what}: no concurrent mark: {h:?}");
    // The JVM adds its counts as each batch of hints goes out, and the stats are read at VM
    // death while marking may still run: a few batches (32 pages each, MemLinerHintBatch) may
    // be counted on one side only.
    let slack = 32 * 8;
    assert!(h.deferred_resident <= h.deferred, "{what}: {h:?}");
    assert!(h.lined_up <= h.recorded, "{what}: {h:?}");
    assert!(
        h.concurrent_remote_while_marking <= s.faults.by_class.gc_concurrent.remote,
        "{what}: faults while marking are the concurrent GC threads': {h:?} {:?}",
        s.faults.by_class.gc_concurrent
    );
    assert!(
        h.hinted_pages <= h.deferred + slack,
        "{what}: a deferral hints one page at most: {h:?}"
    );
    assert!(
        h.hint_pages_fetched + h.hint_pages_dropped <= h.hinted_pages + slack,
        "{what}: {h:?}"
    );
    let pf = s.prefetch.as_ref().unwrap();
    assert!(
        pf.by_class.gc_concurrent.pages >= h.hint_pages_fetched,
        "{what}: hinted pages are the concurrent GC's prefetches: {h:?} {pf:?}"
    );
    if local == 100 {
        assert_eq!(h.deferred, 0, "{what}: everything is resident: {h:?}");
    } else if local == 25 {
        assert!(
            h.deferred > 0 && h.hinted_pages > 0 && h.hint_pages_fetched > 0,
            "{what}: marking met remote pages: {h:?}"
        );
        // Marking counts the store log's entries as the application threads hand in full
        // buffers (G1: 1024 entries each); a short concurrent phase (CI saw one of 270 ms on
        // kv, its threads mostly waiting on faults) may see none handed in. Seconds of paged
        // marking while the workload stores references always do.
        if h.marking_ms >= 1000.0 {
            assert!(
                h.recorded > 0,
                "{what}: the store log reached marking: {h:?}"
            );
        } else {
            eprintln!(
                "{what}: {:.0} ms of marking; store log not checked",
                h.marking_ms
            );
        }
    }
}

cells!(hooks_cell {
    hooks_graph_g1_100: Workload::Graph, "G1", 100;
    hooks_graph_g1_50: Workload::Graph, "G1", 50;
    hooks_graph_g1_25: Workload::Graph, "G1", 25;
    hooks_graph_shenandoah_100: Workload::Graph, "Shenandoah", 100;
    hooks_graph_shenandoah_50: Workload::Graph, "Shenandoah", 50;
    hooks_graph_shenandoah_25: Workload::Graph, "Shenandoah", 25;
    hooks_kv_g1_100: Workload::Kv, "G1", 100;
    hooks_kv_g1_50: Workload::Kv, "G1", 50;
    hooks_kv_g1_25: Workload::Kv, "G1", 25;
    hooks_kv_shenandoah_100: Workload::Kv, "Shenandoah", 100;
    hooks_kv_shenandoah_50: Workload::Kv, "Shenandoah", 50;
    hooks_kv_shenandoah_25: Workload::Kv, "Shenandoah", 25;
});

/// Hooks off on the patched JDK: the JVM tests' cells pass unchanged, and nothing is deferred.
fn hooks_off_cell(w: Workload, gc: &str, local: u32) {
    let Some(java) = patched_java() else { return };
    let cfg = RunConfig {
        gc_hooks: GcHooks::Off,
        ..RunConfig::default()
    };
    let s = cell_on(&java, w, gc, local, cfg, &[]);
    assert!(!s.gc_hooks.on, "{:?}", s.gc_hooks);
    assert_eq!(s.gc_hooks.deferred + s.gc_hooks.hinted_pages, 0);
    let released = s.pager.as_ref().expect("paged").released.pages;
    assert_eq!(released, 0, "hooks off: nothing is released");
}

cells!(hooks_off_cell {
    patched_jdk_hooks_off_graph_g1_25: Workload::Graph, "G1", 25;
    patched_jdk_hooks_off_kv_shenandoah_25: Workload::Kv, "Shenandoah", 25;
});

/// -XX:+MemLinerLineUp without the agent: the hooks find no table and stay off; the JVM
/// computes what a stock one does.
#[test]
fn patched_jdk_without_the_agent_runs_like_stock() {
    let Some(java) = patched_java() else { return };
    for (w, gc) in [(Workload::Graph, "G1"), (Workload::Kv, "Shenandoah")] {
        let mut cmd = command_for(&java, w, gc, HEAP);
        cmd.insert(1, "-XX:+MemLinerLineUp".into());
        cmd.insert(1, "-Xlog:gc=info".into());
        let out = without_agent(&cmd);
        let what = format!("{} {gc} without the agent", w.name());
        assert_eq!(checked_result(&out, &what), reference(w), "{what}");
        assert!(
            out.stdout
                .contains("MemLinerLineUp: no memliner agent loaded: hooks off"),
            "{what}: the JVM did not say the hooks are off:\n{}",
            out.stdout
        );
    }
}

/// `--gc-hooks on` with a stock JDK is a clear error before anything runs.
#[test]
fn gc_hooks_on_needs_a_patched_jdk() {
    let cfg = RunConfig {
        gc_hooks: GcHooks::On,
        ..RunConfig::default()
    };
    let err = launch(&cfg, &command(Workload::Graph, "G1", HEAP), true).unwrap_err();
    assert!(
        err.contains("--gc-hooks on needs a GC-hook patched JDK"),
        "{err}"
    );
}

/// Runs the check program `memliner.checks.NAME` (java/src/memliner/checks) on `java` with
/// `jvm` options under the agent at `local`; it must exit 0 and print verified=true.
fn run_check(
    java: &str,
    jvm: &[&str],
    name: &str,
    args: &[&str],
    local: &str,
    what: &str,
) -> RunOutcome {
    let classes = classes().display().to_string();
    let class = format!("memliner.checks.{name}");
    let mut cmd = vec![java];
    cmd.extend(jvm);
    cmd.extend(["-cp", &classes, &class]);
    cmd.extend(args);
    let cfg = RunConfig::default().with(|o| o.set("local", local).unwrap());
    let cmd: Vec<String> = cmd.into_iter().map(String::from).collect();
    let out = launch(&cfg, &cmd, true).unwrap();
    checked_result(&out, what);
    out
}

/// Full collections while the hooks are on and concurrent marking runs with objects deferred:
/// G1 aborts its cycle (the buffer is forgotten with the queues), Shenandoah cancels it (the
/// buffer goes back to the queues for the degenerated or full cycle). Every node's value and
/// link must survive, checked by the program against arrays that recorded what was written.
/// G1's full GCs come through HotSpot's WhiteBox API (built with the patched JDK), each issued
/// while a cycle it started is marking a paged heap: the abort is asserted. Shenandoah answers
/// System.gc() only after the running cycle, so its interruptions are allocation failures
/// inside marking, driven through the same API's breakpoints (a cycle held just after marking
/// started while the heap fills): the cancellation and the pause that finishes the mark are
/// asserted.
#[test]
fn full_gcs_during_marking_with_deferred_objects() {
    let Some(java) = patched_java() else { return };
    let home = Path::new(&java).parent().and_then(Path::parent).unwrap();
    let wb_jar = home.join("lib/memliner-whitebox.jar");
    assert!(
        wb_jar.is_file(),
        "{} (scripts/build-jdk.sh builds it)",
        wb_jar.display()
    );
    let boot = format!("-Xbootclasspath/a:{}", wb_jar.display());
    for (gc, flags, mode) in [
        (
            "G1",
            &[&boot, "-XX:+UnlockDiagnosticVMOptions", "-XX:+WhiteBoxAPI"][..],
            "whitebox",
        ),
        (
            "Shenandoah",
            &[
                &boot,
                "-XX:+UnlockDiagnosticVMOptions",
                "-XX:+WhiteBoxAPI",
                "-XX:+UnlockExperimentalVMOptions",
                "-XX:-ShenandoahPacing",
                "-XX:+ShenandoahImplicitGCInvokesConcurrent",
                "-XX:ShenandoahGCHeuristics=static",
                "-XX:ShenandoahMinFreeThreshold=0",
                "-XX:-ExplicitGCInvokesConcurrent",
            ][..],
            "shenandoah-whitebox",
        ),
    ] {
        let what = format!("{gc}: full GCs during marking");
        let use_gc = format!("-XX:+Use{gc}GC");
        let mut jvm = vec![use_gc.as_str(), "-Xms32m", "-Xmx32m", "-Xlog:gc"];
        jvm.extend(flags.iter().copied());
        // Exit 0 and verified=true: every node as the program recorded it.
        let out = run_check(
            &java,
            &jvm,
            "FullGcDuringMarking",
            &["300000", "3", mode],
            "25%",
            &what,
        );
        let h = &out.stats.as_ref().expect("stats").gc_hooks;
        assert!(h.on && h.mark_cycles > 0, "{what}: {h:?}");
        // How many objects sat in a buffer when a full GC came is not visible; the cycles
        // defer thousands in all.
        eprintln!("{what}: {} objects deferred", h.deferred);
        let r = workloads::parse_result(&out.stdout).unwrap();
        let aborts: u32 = workloads::field(&r, "marking_aborts")
            .unwrap()
            .parse()
            .unwrap();
        if gc == "G1" {
            // Each full GC came 300-900 ms into a cycle marking a paged heap (1-2 s of work).
            assert!(
                aborts >= 1,
                "{what}: no full GC while marking ran\n{}",
                out.stdout
            );
            assert!(
                full_gc_inside_a_mark_cycle(&out.stdout),
                "{what}: -Xlog:gc shows no full GC inside a cycle\n{}",
                out.stdout
            );
            eprintln!("{what}: {aborts} of 3 full GCs issued while marking ran");
        } else {
            // Here the count is of the cycles driven into an allocation failure.
            assert_eq!(
                aborts, 3,
                "{what}: not every cycle was driven\n{}",
                out.stdout
            );
            // An allocation failure cancels the marking it meets, and the degenerated cycle
            // finishes that mark in a pause (here: every cycle driven, or nearly; the System.gc
            // after each is a full GC outside any cycle and is not counted).
            let count = |what: &str| out.stdout.lines().filter(|l| l.contains(what)).count();
            let cancelled = count("Cancelling GC: Allocation Failure");
            let in_mark = count("Pause Degenerated GC (Mark)");
            assert!(
                cancelled >= 1 && in_mark >= 1,
                "{what}: no allocation failure cancelled marking\n{}",
                out.stdout
            );
            eprintln!("{what}: {cancelled} cycles cancelled, {in_mark} of them in marking");
        }
    }
}

/// The store barriers record the references the application stores while marking runs, in
/// the interpreter, C1 and C2 (the check program compiles its store loop before the cycles it
/// counts, with -Xbatch): fresh arrays' null slots filled with references to old nodes, which
/// the collectors' own snapshot barriers never log. The counters must show those stores,
/// marking must have gone on from some of them, and every node and reference must be intact.
#[test]
fn store_barriers_record_stored_references_in_every_compiler() {
    let Some(java) = patched_java() else { return };
    for (gc, gc_flags) in [
        (
            "G1",
            &["-XX:+UseG1GC", "-XX:+ExplicitGCInvokesConcurrent"][..],
        ),
        ("Shenandoah", &["-XX:+UseShenandoahGC"][..]),
    ] {
        for (compiler, flags) in [
            ("interpreter", &["-Xint"][..]),
            ("C1", &["-XX:TieredStopAtLevel=1", "-Xbatch"][..]),
            ("C2", &["-XX:-TieredCompilation", "-Xbatch"][..]),
        ] {
            let what = format!("{gc} {compiler}: stores during marking");
            let mut jvm = vec!["-Xmx64m"];
            jvm.extend(gc_flags.iter().chain(flags));
            let out = run_check(&java, &jvm, "StoresDuringMarking", &[], "50%", &what);
            let h = &out.stats.as_ref().expect("stats").gc_hooks;
            assert!(h.on && h.mark_cycles >= 8, "{what}: {h:?}");
            // Millions of stores while 8 cycles run (1.0-2.8 M entries seen here); without the
            // recording the collectors log nearly nothing here, the slots being null.
            assert!(h.recorded >= 100_000, "{what}: {h:?}");
            assert!(h.lined_up > 0 && h.lined_up <= h.recorded, "{what}: {h:?}");
            eprintln!("{what}: {} recorded, {} lined up", h.recorded, h.lined_up);
        }
    }
}

/// Whether a `Pause Full` line falls between a G1 `Concurrent Mark Cycle` start line and the
/// cycle's end line (`-Xlog:gc`).
fn full_gc_inside_a_mark_cycle(log: &str) -> bool {
    let mut open = false;
    for l in log.lines() {
        if l.contains("Concurrent Mark Cycle") {
            open = !l.trim_end().ends_with("ms");
        } else if open && l.contains("Pause Full") {
            return true;
        }
    }
    false
}

#[test]
fn stats_paths_name_each_jvm_by_pid_and_host() {
    let dir = std::env::temp_dir().join(format!("memliner-stats-paths-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    // Two JVMs with one option string: two files, one per pid.
    for _ in 0..2 {
        let out = java_with_agent(&format!("server=local,stats={}/s-%p.json", dir.display()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let got = files(&dir);
    assert_eq!(got.len(), 2, "{got:?}");
    for f in &got {
        let pid = f.strip_prefix("s-").and_then(|f| f.strip_suffix(".json"));
        assert!(pid.is_some_and(|p| p.parse::<u32>().is_ok()), "{f}");
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        StatsDoc::parse(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    // The command merges them: one row each and the total.
    let merged = memliner().arg("stats").arg(&dir).output().unwrap();
    let table = String::from_utf8_lossy(&merged.stdout);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert!(
        table.lines().filter(|l| l.starts_with("| s-")).count() == 2
            && table.contains("| **all 2** |"),
        "{table}"
    );
    // A directory (created if missing): memliner-HOST-PID.json in it.
    let sub = dir.join("executors");
    let out = java_with_agent(&format!("server=local,stats={}/", sub.display()));
    assert!(out.status.success());
    let host = memliner_contracts::host_name();
    let got = files(&sub);
    assert!(
        got.len() == 1 && got[0].starts_with(&format!("memliner-{host}-")),
        "{got:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `memliner stats PID`'s row for JVM `pid`: (wall s, faults, remote faults).
fn live_row(table: &str, pid: u32) -> Option<(f64, u64, u64)> {
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| pid {pid} |")))?;
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    Some((
        cells[2].parse().ok()?,
        cells[3].parse().ok()?,
        cells[4].parse().ok()?,
    ))
}

#[test]
fn memliner_stats_asks_a_running_jvm_for_its_figures() {
    let server = memliner_cli::run::embedded_server(Transport::Tcp).unwrap();
    let dir = std::env::temp_dir().join(format!("memliner-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = command(Workload::Kv, "G1", HEAP);
    // Four times the usual operations: long enough (10-20 s here) to be asked twice.
    let ops = cmd.iter().position(|a| a == "--ops").unwrap() + 1;
    cmd[ops] = "600000".into();
    let reference = checked_result(&without_agent(&cmd), "reference");
    cmd.insert(
        1,
        format!(
            "-agentpath:{}=server={},local=25%,stats={}/%p.json",
            locate::agent().unwrap().display(),
            server.url(),
            dir.display()
        ),
    );
    // HotSpot answers SIGQUIT with a thread dump on stdout too: a file, not a pipe nobody
    // reads while the JVM runs.
    let stdout_path = dir.join("stdout");
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Ask until the figures show remote faults: bounded, and each answer waits for the JVM's
    // own write, not for a clock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (wall, faults, remote) = loop {
        let out = memliner()
            .args(["stats", &pid.to_string()])
            .output()
            .unwrap();
        let (table, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no remote faults after 60 s: {table}{err}"
        );
        // Still starting: the agent not loaded yet, or not paging yet.
        if still_starting(&out) {
            continue;
        }
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "JVM {pid} wrote its stats to {}/{pid}.json",
                dir.display()
            )),
            "{err}"
        );
        let row = live_row(&table, pid).unwrap_or_else(|| panic!("no row for {pid}: {table}"));
        if row.2 > 0 {
            break row;
        }
    };
    assert!(faults >= remote && wall > 0.0, "{wall} {faults} {remote}");
    // This test's own process runs no agent: refused in one line, naming the JVM it started
    // (other tests' JVMs may be its children too).
    let me = std::process::id();
    let out = memliner()
        .args(["stats", &me.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(memliner_cli::live::EXIT_NO_AGENT))
    );
    assert!(
        err.starts_with(&format!("memliner: process {me} ("))
            && err.contains(") does not run the memliner agent; its child")
            && err.contains(&pid.to_string()),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Asked again, the same JVM has gone on.
    let out = memliner()
        .args(["stats", &pid.to_string()])
        .output()
        .unwrap();
    let again = live_row(&String::from_utf8_lossy(&out.stdout), pid)
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert!(again.0 >= wall && again.2 >= remote, "{again:?}");
    // The JVM was not disturbed: it finishes with the all-local checksum, and its document at
    // exit counts at least what was seen while it ran.
    let out = child.wait_with_output().unwrap();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = workloads::parse_result(&stdout).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(workloads::field(&r, "checksum"), Some(reference.as_str()));
    assert!(
        stdout.contains("Full thread dump"),
        "HotSpot's own SIGQUIT answer"
    );
    let text = std::fs::read_to_string(dir.join(format!("{pid}.json"))).unwrap();
    let last = StatsDoc::parse(&text).unwrap();
    assert!(
        last.faults.remote >= again.2,
        "{} < {}",
        last.faults.remote,
        again.2
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `memliner stats PID` said the JVM has not loaded the agent or does not page yet
/// (its exit status tells; each ask is a new process, so the loops that ask again take a
/// process start per turn rather than spin).
fn still_starting(out: &std::process::Output) -> bool {
    use memliner_cli::live::{EXIT_NOT_PAGING, EXIT_NO_AGENT};
    matches!(out.status.code(), Some(c) if c == i32::from(EXIT_NO_AGENT) || c == i32::from(EXIT_NOT_PAGING))
}

#[test]
fn a_jvm_that_ignores_sigquit_is_not_signalled() {
    let server = memliner_cli::run::embedded_server(Transport::Tcp).unwrap();
    let mut cmd = command(Workload::Graph, "G1", HEAP);
    cmd.insert(1, "-Xrs".into());
    cmd.insert(
        1,
        format!(
            "-agentpath:{}=server={},local=25%",
            locate::agent().unwrap().display(),
            server.url()
        ),
    );
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Until the agent is loaded and paging the answer says so; then, that the JVM cannot be
    // asked (with -Xrs SIGQUIT would kill it). Bounded: a JVM that never pages fails here.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let err = loop {
        let out = memliner()
            .args(["stats", &pid.to_string()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if !still_starting(&out) {
            assert_eq!(out.status.code(), Some(2), "{err}");
            break err;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "JVM {pid} not paging after 60 s: {err}"
        );
    };
    assert_eq!(
        err.trim_end(),
        format!(
            "memliner: JVM {pid} was started with -Xrs (it does not handle SIGQUIT): it cannot \
             be asked for its stats; they are written at exit with stats=PATH"
        )
    );
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = workloads::parse_result(&stdout).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        workloads::field(&r, "checksum").map(str::to_string),
        Some(reference(Workload::Graph))
    );
    server.stop();
}

// --- Watching paged JVMs live: /metrics, `memliner stats PID --every`, `memliner top` ---

/// A fresh path for a metrics target file.
fn target_file(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "memliner-test-{}-{name}.metrics.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// (pid, HOST:PORT) from a target file the agent wrote, once it has; `None` once `done`
/// says the JVM is gone without writing one.
fn wait_for_target(file: &Path, done: impl Fn() -> bool) -> Option<(u32, String)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(g) = memliner_contracts::targets::TargetGroup::read(file) {
            return Some((g.pid()?, g.addr()?.to_string()));
        }
        if done() || std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Every counter of `before` that is also on `now` did not go down.
fn assert_monotonic(before: &memliner_cli::scrape::Page, now: &memliner_cli::scrape::Page) {
    let key = |s: &memliner_cli::scrape::Sample| format!("{}{:?}", s.name, s.labels);
    let counters = |p: &memliner_cli::scrape::Page| -> std::collections::HashMap<String, f64> {
        p.samples
            .iter()
            .filter(|s| {
                s.name.ends_with("_total")
                    || s.name.ends_with("_bucket")
                    || s.name.ends_with("_count")
                    || s.name.ends_with("_sum")
            })
            .map(|s| (key(s), s.value))
            .collect()
    };
    let (a, b) = (counters(before), counters(now));
    for (k, v) in &a {
        if let Some(w) = b.get(k) {
            assert!(w >= v, "{k} went from {v} to {w}");
        }
    }
}

/// Graph at 25% serving `/metrics` on a free port (with `job`), on a thread of its own;
/// returns it with its pid, its metrics address and its target file, once it has written it.
fn graph_serving_metrics(
    name: &str,
    job: Option<&str>,
) -> (std::thread::JoinHandle<RunOutcome>, u32, String, PathBuf) {
    let file = target_file(name);
    let cfg = RunConfig::default().local(25).with(|o| {
        o.metrics = Some("127.0.0.1:0".parse().unwrap());
        o.metrics_file = Some(file.display().to_string());
        o.job = job.map(str::to_string);
    });
    let jvm = std::thread::spawn(move || {
        launch(&cfg, &command(Workload::Graph, "G1", HEAP), true).unwrap()
    });
    let (pid, addr) =
        wait_for_target(&file, || jvm.is_finished()).expect("the agent wrote its target file");
    (jvm, pid, addr, file)
}

#[test]
fn a_paging_jvm_serves_metrics_whose_counters_only_grow() {
    use memliner_cli::scrape;
    let (jvm, pid, addr, file) = graph_serving_metrics("scraped", Some("tests"));
    let mut pages: Vec<scrape::Page> = Vec::new();
    while !jvm.is_finished() {
        // Scraped as fast as it answers: a scrape must never hold up the JVM.
        if let Ok(p) = scrape::get(&addr, std::time::Duration::from_secs(5)) {
            if let Some(before) = pages.last() {
                assert_monotonic(before, &p);
            }
            pages.push(p);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let out = jvm.join().unwrap();
    assert_eq!(checked_result(&out, "scraped"), reference(Workload::Graph));
    assert!(
        out.stderr
            .contains(&format!("memliner: metrics at http://{addr}/metrics")),
        "port 0 is said: {}",
        out.stderr
    );
    let paging: Vec<&scrape::Page> = pages
        .iter()
        .filter(|p| p.value("memliner_jvm_paging", &[]) == Some(1.0))
        .filter(|p| p.sum("memliner_jvm_faults_total", &[("kind", "remote")]) > 0.0)
        .collect();
    assert!(paging.len() >= 3, "{} scrapes while it paged", paging.len());
    let last = paging.last().unwrap();
    // Every family the contracts name is on the page (what `top`, `stats --every` and the bench
    // read among them), but for those of checksums and of a replicated store: cli/tests/
    // failover.rs scrapes those.
    for family in memliner_contracts::metrics::jvm::always_when_paged() {
        assert!(
            last.find(family, &[]).next().is_some()
                || last.find(&format!("{family}_bucket"), &[]).next().is_some(),
            "{family} is named but not served"
        );
    }
    let pid_s = pid.to_string();
    for s in &last.samples {
        assert_eq!(s.label("pid"), Some(pid_s.as_str()), "{s:?}");
        assert_eq!(s.label("job"), Some("tests"), "{s:?}");
    }
    let budget = last.value("memliner_jvm_budget_bytes", &[]).unwrap();
    assert!(
        last.value("memliner_jvm_resident_bytes", &[]).unwrap()
            <= budget + (SLACK_PAGES * 4096) as f64
    );
    let app = last.sum(
        "memliner_jvm_faults_total",
        &[("class", "application"), ("kind", "remote")],
    );
    let remote = last.buckets(
        "memliner_jvm_fault_latency_seconds",
        &[("source", "remote")],
    );
    assert!(app > 0.0 && remote.last().unwrap().1 > 0.0, "{remote:?}");
    // Every JVM metric the dashboard in the repository draws is on the page (those of a
    // replicated store are checked in cli/tests/failover.rs, with a server down).
    let root = locate::project_root().unwrap();
    let dashboard = std::fs::read_to_string(root.join("scripts/grafana/memliner.json")).unwrap();
    let mut queried: Vec<&str> = dashboard
        .match_indices("memliner_jvm_")
        .map(|(i, _)| {
            let rest = &dashboard[i..];
            &rest[..rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())]
        })
        .collect();
    queried.sort_unstable();
    queried.dedup();
    assert!(queried.len() >= 10, "{queried:?}");
    for m in queried
        .iter()
        .filter(|m| !m.starts_with("memliner_jvm_server_"))
    {
        assert!(
            last.find(m, &[]).next().is_some(),
            "the dashboard draws {m}, which the JVM does not serve"
        );
    }
    // The JVM's figures at exit and the last scrape tell the same story.
    let s = out.stats.as_ref().unwrap();
    assert!(s.faults.remote as f64 >= last.sum("memliner_jvm_faults_total", &[("kind", "remote")]));
    assert!(!file.exists(), "the target file goes with the JVM");
}

#[test]
fn a_busy_metrics_port_is_one_line_and_the_jvm_runs() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let out = memliner()
        .args([
            "run",
            "--local",
            "50%",
            "--metrics",
            &port.to_string(),
            "--",
        ])
        .args(command(Workload::Kv, "G1", HEAP))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("metrics")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "memliner: cannot serve metrics on 127.0.0.1:{port}"
        )) && lines[0].ends_with("the JVM runs without /metrics"),
        "{}",
        lines[0]
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("verified=true"));
    let bad = memliner()
        .args(["run", "--metrics", "nowhere", "--", &java(), "-version"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("bad value for 'metrics': 'nowhere': expected HOST:PORT"));
}

#[test]
fn stats_every_streams_a_line_per_interval_until_the_jvm_exits() {
    let (jvm, pid, _, _) = graph_serving_metrics("every", None);
    let every = memliner()
        .args(["stats", &pid.to_string(), "--every", "200ms"])
        .output()
        .unwrap();
    // `--every` ends by itself, once the JVM has exited.
    assert!(jvm.is_finished() || !memliner_cli::live::alive(pid));
    let out = jvm.join().unwrap();
    checked_result(&out, "every");
    let text = String::from_utf8_lossy(&every.stdout);
    let err = String::from_utf8_lossy(&every.stderr);
    assert!(every.status.success(), "{err}");
    assert!(err.contains(&format!("JVM {pid} exited")), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], memliner_cli::watch::HEADER, "{text}");
    let data: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| *l != memliner_cli::watch::HEADER)
        .collect();
    assert!(data.len() >= 2, "{text}");
    // Faults were counted in some interval, against a 25% budget of the 32 MiB heap.
    assert!(
        data.iter()
            .any(|l| l.split_whitespace().nth(1).is_some_and(|f| f != "0")),
        "{text}"
    );
    // The budget: 8 MiB (25% of the 32 MiB heap) once paging started (0 before VMInit).
    let budgets: Vec<&str> = data
        .iter()
        .filter_map(|l| l.split_whitespace().nth(6))
        .collect();
    assert!(budgets.iter().all(|b| *b == "8.0" || *b == "0.0"), "{text}");
    assert_eq!(budgets.last(), Some(&"8.0"), "{text}");
    // Read from /metrics: no SIGQUIT, so no thread dump on the JVM's stdout.
    assert!(!out.stdout.contains("Full thread dump"), "{}", out.stdout);
}

/// A shell in a detached tmux session, read through capture-pane.
struct Tmux(String);

impl Tmux {
    fn start(name: &str) -> Tmux {
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "200",
                "-y",
                "40",
                "bash --norc --noprofile",
            ])
            .env("PS1", "$ ")
            .status()
            .expect("tmux is needed for the `memliner top` test (apt-get install tmux)");
        assert!(ok.success());
        Tmux(name.to_string())
    }

    fn send(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-t", &self.0])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen once `ready` holds for it (polled), or a panic showing it.
    fn wait(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let s = self.screen();
            if ready(&s) {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}; the screen:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

/// The line of `screen` that starts with `pid` (a row of the JVM table).
fn row_of(screen: &str, pid: u32) -> Option<usize> {
    screen
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{pid} ")))
}

#[test]
fn top_lists_paged_jvms_sorts_them_and_quits_restoring_the_terminal() {
    // Two long runs: one all local (no remote faults), one at 25% (faulting), started in this
    // order so that the first has the lower pid.
    let start = |local: &str, name: &str| {
        let file = target_file(name);
        let child = memliner()
            .args([
                "run",
                "-q",
                "--local",
                local,
                "--metrics",
                "0",
                "--metrics-file",
            ])
            .arg(&file)
            .arg("--")
            .args(command_for(&java(), Workload::Kv, "G1", HEAP)[..6].iter())
            .args([
                Workload::Kv.class(),
                "--keys",
                "60000",
                "--ops",
                "400000000",
                "--capacity",
                "30000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (pid, _) = wait_for_target(&file, || false).expect("target file");
        (child, pid)
    };
    let (mut quiet, quiet_pid) = start("100%", "top-local");
    let (mut busy, busy_pid) = start("25%", "top-paged");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            // `memliner run` passes SIGTERM on to its JVM.
            let _ = Command::new("kill").arg(self.0.id().to_string()).status();
            let _ = self.0.wait();
        }
    }
    let _k1 = Kill(&mut quiet);
    let _k2 = Kill(&mut busy);
    assert!(quiet_pid < busy_pid, "pids {quiet_pid} {busy_pid}");

    let t = Tmux::start(&format!("memliner-top-{}", std::process::id()));
    let bin = env!("CARGO_BIN_EXE_memliner");
    t.send(&[
        &format!("TERM=xterm-256color {bin} top --every 300ms; echo TOP-EXIT=$?"),
        "Enter",
    ]);
    // Both rows, with figures (two scrapes each), ordered by pid.
    let s = t.wait("both JVMs listed with figures", |s| {
        s.contains("sorted by pid")
            && [quiet_pid, busy_pid].iter().all(|&p| {
                row_of(s, p).is_some_and(|r| {
                    s.lines()
                        .nth(r)
                        .is_some_and(|l| l.contains("KvCache") && !l.contains("reading"))
                })
            })
    });
    assert!(row_of(&s, quiet_pid) < row_of(&s, busy_pid), "{s}");
    // Sorted by remote faults/s: the paging JVM first.
    t.send(&["s"]);
    let s = t.wait("sorted by remote faults", |s| {
        s.contains("sorted by remote faults/s") && row_of(s, busy_pid) < row_of(s, quiet_pid)
    });
    assert!(s.contains("paged JVMs"), "{s}");
    // Enter shows the picked JVM; q goes back, q again quits.
    t.send(&["Enter"]);
    t.wait("the detail view", |s| {
        s.contains("enter or q: back to the list")
    });
    t.send(&["q"]);
    t.wait("back to the list", |s| s.contains("paged JVMs"));
    t.send(&["q"]);
    let s = t.wait("top exited", |s| s.contains("TOP-EXIT=0"));
    assert!(
        !s.contains("paged JVMs"),
        "the alternate screen is gone: {s}"
    );
    // Raw mode is off again: the terminal echoes and reads lines.
    let stty = std::env::temp_dir().join(format!("memliner-test-stty-{}", std::process::id()));
    t.send(&[
        &format!("stty -a > {}; echo STTY-DONE", stty.display()),
        "Enter",
    ]);
    t.wait("stty's answer", |s| {
        s.lines().any(|l| l.trim() == "STTY-DONE")
    });
    let flags = std::fs::read_to_string(&stty).unwrap();
    let _ = std::fs::remove_file(&stty);
    let words: Vec<&str> = flags.split([' ', ';', '\n']).collect();
    assert!(
        words.contains(&"icanon") && words.contains(&"echo"),
        "{flags}"
    );
    // A terminal that hangs up (the session killed under it) ends it too.
    t.send(&[&format!("{bin} top --every 301ms"), "Enter"]);
    t.wait("top again", |s| s.contains("memliner top:"));
    let pgrep = Command::new("pgrep")
        .args(["-f", "top --every 301ms"])
        .output()
        .unwrap();
    let top_pid: u32 = String::from_utf8_lossy(&pgrep.stdout)
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("top's pid");
    drop(t);
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_or(true, |s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone(top_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "memliner top ({top_pid}) runs on without its terminal"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
