//! The GC-hook patched JDK (scripts/build-jdk.sh): its cells, the hooks off, full GCs during
//! marking, store barriers in every compiler.
//!
//! Needs `cargo build --release --workspace` first (the agent is a cdylib that `cargo test`
//! does not build); `scripts/test.sh` does both.

#[macro_use]
mod common;

use common::*;
use std::path::Path;

use memliner_cli::locate;
use memliner_cli::run::{launch, GcHooks, RunConfig, RunOutcome};
use memliner_cli::workloads::{self, Workload};
use memliner_contracts::model::GcActivity;

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
    // the agent found them free in the heap's layout at the end of a pause first; with budget
    // to spare their mapped pages are left as they are), and the checksum above says no live
    // page went with them.
    let pager = s.pager.as_ref().expect("paged");
    let r = &pager.released;
    assert!(r.remote <= r.pages, "{what}: {r:?}");
    if w == Workload::Graph {
        assert!(
            r.pages + r.left_mapped + pager.dead.free_region.pages > 0,
            "{what}: no freed region was released: {r:?}, dead space {:?}",
            pager.dead
        );
    }
    assert!(h.on, "{what}: the JVM did not take the hooks: {h:?}");
    // G1's refinement names the cards it is about to read; the agent reads the remote pages
    // ahead of it (the run's own faults show there were some). Shenandoah has no refinement.
    let refine_reads = s.gc.refine_read_pages + s.gc.refine_read_dropped;
    let refined = s.gc_faults[&GcActivity::ConcurrentRefinement].remote;
    if gc == "G1" && refined > 1000 {
        assert!(
            refine_reads > 0,
            "{what}: {refined} refinement faults, no page read ahead of a refinement pass: {:?}",
            s.gc
        );
    } else if gc != "G1" {
        assert_eq!(refine_reads, 0, "{what}: {:?}", s.gc);
    }
    assert!(h.mark_cycles > 0, "{what}: no concurrent mark: {h:?}");
    // A patched G1's marking threads say which path they are on; the agent reads it when
    // they fault: their faults are by path, bar what they do outside the paths.
    let marking = |a: &[GcActivity]| a.iter().map(|x| s.gc_faults[x].remote).sum::<u64>();
    let paths = marking(GcActivity::MARK_PATHS) + marking(&[GcActivity::RemsetRebuild]);
    let unknown = marking(&[GcActivity::ConcurrentMark]);
    if gc == "G1" && paths + unknown >= 100 {
        assert!(
            paths >= 3 * unknown,
            "{what}: marking's faults by path {paths}, without one {unknown}: {:?}",
            s.gc_faults
        );
    }
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
    assert_eq!(s.gc.refine_read_pages + s.gc.refine_read_dropped, 0);
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
            // Each full GC came into a cycle still marking (300-900 ms in, or less where marking
            // ended sooner: the program then starts another and waits a quarter as long).
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

/// G1 counts every object it marks into its region's liveness, and at remark frees an old
/// region whose count is zero. Its marking reads an object to count it, so with the hooks an
/// object on a remote page below the finger is marked unread and counted later from the
/// worker's buffer, in address order, and one above the finger is marked unread and counted
/// by the bitmap walk that scans it (a debt in a side bitmap, settled once). HotSpot's heap
/// verification after remark (`VerifyDuringGC`) compares each region's count with the objects
/// the bitmap marks in it and fails the JVM on one too small; a region freed while it held
/// live objects fails it too, or the checksum. Remark's line says every debt was settled by
/// the walk (none left for remark to settle).
#[test]
fn g1_counts_objects_marked_unread() {
    let Some(java) = patched_java() else { return };
    for w in [Workload::Graph, Workload::Kv] {
        let what = format!("{} G1 25% hooks on, verified during GC", w.name());
        let flags = [
            "-XX:+UnlockDiagnosticVMOptions",
            "-XX:+VerifyDuringGC",
            "-XX:-G1UseAdaptiveIHOP",
            "-XX:InitiatingHeapOccupancyPercent=20",
            "-Xlog:gc+verify=info,gc+marking=info,gc=info,gc+ergo+cset=debug",
        ];
        let cfg = RunConfig::default().local(25);
        let out = run_verified(&java, w, "G1", &cfg, &flags, &what);
        let verified = out
            .stdout
            .lines()
            .filter(|l| l.contains("Verifying During GC (Remark after)"))
            .count();
        let h = &out.stats.as_ref().expect("stats").gc_hooks;
        assert!(
            verified > 0 && h.mark_cycles > 0 && h.deferred > 0,
            "{what}: no verified remark after deferrals ({verified} verified, {h:?})\n{}",
            out.stdout
        );
        let debts = marked_unread_lines(&out.stdout);
        let owed: u64 = debts.iter().map(|d| d.0).sum();
        assert!(
            !debts.is_empty() && owed > 0,
            "{what}: no object marked above the finger without being read ({debts:?})\n{}",
            out.stdout
        );
        for &(o, walked, at_remark) in &debts {
            assert!(
                walked == o && at_remark == 0,
                "{what}: {o} owed, {walked} settled by the walk, {at_remark} at remark"
            );
        }
        // Marking done sooner brings mixed collections into the run: each names the pages of
        // its old regions to the agent (`-Xlog:gc+ergo+cset=debug`), and only a mixed one does.
        let mixed = gc_ids_with(&out.stdout, "Pause Young (Mixed)");
        let named = gc_ids_with(&out.stdout, "old regions named for the pause");
        assert!(
            named.iter().all(|id| mixed.contains(id)) && (mixed.is_empty() || !named.is_empty()),
            "{what}: mixed pauses {mixed:?}, pauses that named their old regions {named:?}"
        );
        eprintln!(
            "{what}: {verified} remarks verified, {} objects deferred, {owed} marked unread above the finger, {} of {} mixed pauses named their old regions",
            h.deferred,
            named.len(),
            mixed.len()
        );
    }
}

/// The `GC(n)` numbers of the log lines that contain `what`.
fn gc_ids_with(log: &str, what: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| {
            let id = &l[l.find("GC(")? + 3..];
            id[..id.find(')')?].parse().ok()
        })
        .collect()
}

/// Remark's `MemLinerMarkUnread: O objects marked without being read, W counted by the bitmap
/// walk, R at remark` lines (`-Xlog:gc+marking=info`), as (O, W, R).
fn marked_unread_lines(log: &str) -> Vec<(u64, u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("MemLinerMarkUnread: ")? + "MemLinerMarkUnread: ".len()..];
            let n: Vec<u64> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|t| !t.is_empty())
                .map(|t| t.parse().unwrap())
                .collect();
            (n.len() == 3).then(|| (n[0], n[1], n[2]))
        })
        .collect()
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
