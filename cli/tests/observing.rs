//! Watching paged JVMs: stats paths, `memliner stats PID`, `/metrics` scraped while a JVM
//! pages, `memliner stats --every`, `memliner top` in tmux.
//!
//! Needs `cargo build --release --workspace` first (the agent is a cdylib that `cargo test`
//! does not build); `scripts/test.sh` does both.

#[macro_use]
mod common;

use common::*;
use memliner_contracts::metrics::jvm;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use memliner_cli::locate;
use memliner_cli::run::{launch, RunConfig, RunOutcome, Transport};
use memliner_cli::workloads::{self, Workload};
use memliner_contracts::stats::StatsDoc;

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
    // Index of the last scrape answered before VMDeath began (the agent removes its target
    // file, then writes the stats; the pager and its metrics go on until the process ends).
    let mut before_death = None;
    while !jvm.is_finished() {
        // Scraped as fast as it answers: a scrape must never hold up the JVM.
        if let Ok(p) = scrape::get(&addr, std::time::Duration::from_secs(5)) {
            if let Some(before) = pages.last() {
                assert_monotonic(before, &p);
            }
            pages.push(p);
            if file.exists() {
                before_death = Some(pages.len() - 1);
            }
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
        .filter(|p| p.value(jvm::PAGING, &[]) == Some(1.0))
        .filter(|p| p.sum(jvm::FAULTS_TOTAL, &[("kind", "remote")]) > 0.0)
        .collect();
    assert!(paging.len() >= 3, "{} scrapes while it paged", paging.len());
    let last = paging.last().unwrap();
    // Every family the contracts name is on the page (what `top`, `stats --every` and the bench
    // read among them), but for those of checksums and of a replicated store: cli/tests/
    // failover.rs scrapes those.
    for family in jvm::always_when_paged() {
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
    let budget = last.value(jvm::BUDGET_BYTES, &[]).unwrap();
    assert!(last.value(jvm::RESIDENT_BYTES, &[]).unwrap() <= budget + (SLACK_PAGES * 4096) as f64);
    let app = last.sum(
        jvm::FAULTS_TOTAL,
        &[("class", "application"), ("kind", "remote")],
    );
    let remote = last.buckets(jvm::FAULT_LATENCY_SECONDS, &[("source", "remote")]);
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
    for m in queried.iter().filter(|m| !jvm::REPLICATED.contains(m)) {
        assert!(
            last.find(m, &[]).next().is_some(),
            "the dashboard draws {m}, which the JVM does not serve"
        );
    }
    // The JVM's figures at exit and the last scrape before them tell the same story (a scrape
    // after VMDeath may count faults of the JVM's shutdown that the stats, written then, do
    // not: CI saw one).
    let s = out.stats.as_ref().unwrap();
    let alive = &pages[before_death.expect("a scrape before VMDeath")];
    let scraped = alive.sum(jvm::FAULTS_TOTAL, &[("kind", "remote")]);
    assert!(
        s.faults.remote as f64 >= scraped,
        "{} < {scraped}",
        s.faults.remote
    );
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
