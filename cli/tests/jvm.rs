//! Real JVMs paged by the real agent over a real memory server: the cells (workloads x
//! collectors x budgets x policies, transports and fault deliveries), signals, heaps that
//! grow, JDK 25.
//!
//! Needs `cargo build --release --workspace` first (the agent is a cdylib that `cargo test`
//! does not build); `scripts/test.sh` does both.

#[macro_use]
mod common;

use common::*;

use memliner_cli::run::{launch, RunConfig, Transport};
use memliner_cli::workloads::{self, Workload};
use memliner_contracts::model::{Discovery, FaultDelivery};
use memliner_contracts::options::{Dirty, Policy, Young};
use memliner_contracts::stats::{StatsDoc, YoungSizing};

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

/// An allocating workload whose young generation G1 would let outgrow the budget: with it
/// fitted to half the budget (`young=fit`), eden is collected while local instead of written
/// to the memory server page by page first (measured: kv at 64 MiB, 25%: 16.5-18.6k pages
/// written kept, 3.5-4.1k fitted; remote faults 11-12k and 1.7-1.9k).
#[test]
fn a_young_generation_fitted_to_the_budget_keeps_eden_from_the_memory_server() {
    let run = |young: Young| {
        let cfg = RunConfig::default().local(25).with(|o| o.young = young);
        let mut cmd = command(Workload::Kv, "G1", HEAP);
        for a in cmd.iter_mut() {
            if a.starts_with("-Xm") {
                *a = format!("{}64m", &a[..4]);
            }
        }
        let out = launch(&cfg, &cmd, true).unwrap();
        let what = format!("kv G1 64m young={young:?}");
        assert_eq!(
            checked_result(&out, &what),
            reference(Workload::Kv),
            "{what}"
        );
        let s = out.stats.unwrap();
        let pager = s.pager.unwrap();
        (
            s.heap.unwrap().young.unwrap(),
            pager.remote.pages_written,
            s.faults.remote,
            (pager.dead.protected(), pager.unprotected_ahead),
        )
    };
    let (kept, kept_written, kept_remote, _) = run(Young::Keep);
    let (fitted, fit_written, fit_remote, (protected, ahead)) = run(Young::Fit);
    // Fitted, eden's freed regions are reused before the budget turns over: their written
    // pages are write-protected in the pause, not discarded, and reused a run per write fault
    // (the checksum above says no write was lost).
    assert!(
        protected > 0 && ahead > 0,
        "{protected} pages protected, {ahead} unprotected ahead"
    );
    assert_eq!((kept.sizing, kept.max_percent), (YoungSizing::Kept, 60));
    assert_eq!(
        (fitted.sizing, fitted.max_percent, fitted.jvm_max_percent),
        (YoungSizing::Fitted, 12, 60)
    );
    assert!(
        fit_written * 2 < kept_written && fit_remote * 2 < kept_remote,
        "pages written {fit_written} fitted vs {kept_written} kept; remote faults {fit_remote} vs {kept_remote}"
    );
}

/// `-XX:+PrintFlagsFinal` of a JVM started with the agent (`-version`): the lines of G1's
/// young sizing flags and of `G1ReservePercent`, another G1 percentage, as a witness that
/// nothing beside them changed (an 8-byte write to JDK 25's 4-byte percentages overwrites
/// whatever the JVM stores next).
fn young_flags(java: &str, jvm_flags: &[&str], opts: &str) -> String {
    let mut flags = vec![
        "-Xmx1g",
        "-XX:+UseG1GC",
        "-XX:+UnlockExperimentalVMOptions",
        "-XX:+PrintFlagsFinal",
    ];
    flags.extend_from_slice(jvm_flags);
    let out = java_version_with_agent(java, &flags, &format!("server=local,{opts}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{java} {jvm_flags:?} {opts}: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            [
                " G1MaxNewSizePercent ",
                " G1NewSizePercent ",
                " G1ReservePercent ",
            ]
            .iter()
            .any(|f| l.contains(f))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The flags as the JVM itself reports them, on JDK 17 (`uintx`) and 25 (`uint`): lowered as
/// ergonomics would with a small budget (the minimum with the maximum), untouched when the
/// command line sized the young generation or `young=keep`.
#[test]
fn the_young_generation_flags_are_set_as_ergonomics_would_unless_the_user_sized_it() {
    let mut javas = vec![java()];
    if let Some(home) = jdk25() {
        javas.push(home.join("bin/java").display().to_string());
    }
    for j in &javas {
        let fitted = young_flags(j, &[], "local=6%");
        for want in [
            "G1MaxNewSizePercent = 3 {experimental} {ergonomic}",
            "G1NewSizePercent = 3 {experimental} {ergonomic}",
            "G1ReservePercent = 10 {product} {default}",
        ] {
            assert!(fitted.contains(want), "{j}: no '{want}' in\n{fitted}");
        }
        for (flags, opts) in [
            (&["-Xmn200m"][..], "local=6%"),
            (&["-XX:MaxNewSize=300m"][..], "local=25%"),
            (&[][..], "local=25%,young=keep"),
            (&[][..], "local=25%,policy=baseline"),
        ] {
            let kept = young_flags(j, flags, opts);
            assert!(
                kept.contains("G1MaxNewSizePercent = 60 {experimental} {default}")
                    && kept.contains("G1NewSizePercent = 5 {experimental} {default}"),
                "{j} {flags:?} {opts}:\n{kept}"
            );
        }
    }
}

/// Parallel and Serial size their generations when the heap is made, after the agent
/// loaded, from `MaxNewSize`: lowered to half the budget, the old generation gets the rest of
/// the heap (as the JVM itself reports, on JDK 17 and 25) and the stats say so; untouched where
/// the command line sized the young generation, under `young=keep`, `policy=baseline`, or where
/// half the budget holds it.
#[test]
fn parallel_and_serial_young_generations_are_fitted_before_the_heap_is_laid_out() {
    let dir = std::env::temp_dir().join(format!("memliner-young-gen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut javas = vec![java()];
    if let Some(home) = jdk25() {
        javas.push(home.join("bin/java").display().to_string());
    }
    let mut n = 0;
    let mut run = |java: &str, gc: &str, flags: &[&str], opts: &str| {
        n += 1;
        let stats = dir.join(format!("{n}.json"));
        let use_gc = format!("-XX:+Use{gc}GC");
        let mut all = vec![
            "-Xmx1g",
            "-Xms1g",
            "-XX:+PrintFlagsFinal",
            "-Xlog:gc+heap=trace",
        ];
        all.push(&use_gc);
        all.extend_from_slice(flags);
        let out = java_version_with_agent(
            java,
            &all,
            &format!("server=local,{opts},stats={}", stats.display()),
        );
        let what = format!("{java} {gc} {flags:?} {opts}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let max_new = text
            .lines()
            .find(|l| l.contains(" MaxNewSize "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        // What the collector laid out: "Minimum old A  Initial old B  Maximum old C".
        let max_old: u64 = text
            .lines()
            .find(|l| l.contains("Maximum old"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let doc = StatsDoc::parse(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let young = doc.heap.and_then(|h| h.young);
        (
            what,
            max_new,
            max_old,
            young.unwrap_or_else(|| panic!("no heap.young")),
        )
    };
    for java in &javas {
        for gc in ["Parallel", "Serial"] {
            let (what, max_new, max_old, young) = run(java, gc, &[], "local=25%");
            assert_eq!(
                max_new, "size_t MaxNewSize = 134217728 {product} {ergonomic}",
                "{what}"
            );
            assert_eq!(max_old, (1 << 30) - (128 << 20), "{what}");
            assert_eq!(
                (young.sizing, young.max_percent, young.jvm_max_percent),
                (YoungSizing::Fitted, 12, 33),
                "{what}"
            );
            for (flags, opts, sizing) in [
                (&["-Xmn200m"][..], "local=25%", YoungSizing::User),
                (&["-XX:NewRatio=6"][..], "local=25%", YoungSizing::User),
                (&[][..], "local=25%,young=keep", YoungSizing::Kept),
                (&[][..], "local=25%,policy=baseline", YoungSizing::Kept),
                (&[][..], "local=70%", YoungSizing::Roomy),
            ] {
                let (what, max_new, max_old, young) = run(java, gc, flags, opts);
                assert_eq!(young.sizing, sizing, "{what}");
                assert_eq!(young.max_percent, young.jvm_max_percent, "{what}");
                assert!(
                    !max_new.contains("= 134217728 ") && max_old > 0,
                    "{what}: {max_new}, old {max_old}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
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
