//! Code nobody here wrote, from Maven Central, paged by memliner: an Apache Cassandra node
//! (`scripts/cassandra.sh`) at 25% of its heap under the verifying YCSB-style load
//! (`scripts/ycsb.sh`), every read checked against what was written; and Lucene indexing and
//! searching an index held in the heap (`scripts/lucene.sh`), every answer checked.
//!
//! Needs `cargo build --release --workspace` and the jars (`scripts/cassandra.sh --fetch`,
//! `scripts/lucene.sh`); without them a test says it is skipped, and fails where
//! MEMLINER_REQUIRE_CASSANDRA is set (CI fetches both).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use memliner_cli::locate;
use memliner_contracts::stats::StatsDoc;

fn root() -> PathBuf {
    locate::project_root().expect("run from the checkout")
}

/// Whether the jars are fetched; `false` (and a skip line) when not and not required.
fn cassandra_fetched(what: &str) -> bool {
    let cache = std::env::var_os("MEMLINER_CASSANDRA_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| Path::new(&d).join("memliner/cassandra"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/memliner/cassandra"))
        })
        .unwrap();
    if cache.join("5.0.8/lib/.complete").exists() {
        return true;
    }
    let why = "no Cassandra jars (scripts/cassandra.sh --fetch takes them from Maven Central)";
    assert!(
        std::env::var_os("MEMLINER_REQUIRE_CASSANDRA").is_none(),
        "{why}"
    );
    swap_backend::conformance::skip(what, why);
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Stops the node if the test panics before it did: SIGTERM to memliner run, which passes it to
/// the JVM (a SIGKILL would leave the JVM running without its memliner run).
struct Node(Option<Child>);

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

fn ycsb(port: u16, args: &[&str]) -> std::process::Output {
    Command::new(root().join("scripts/ycsb.sh"))
        .args(["--port", &port.to_string(), "--wait", "300"])
        .args(args)
        .output()
        .unwrap()
}

/// The `ycsb-result` line of `phase`, as JSON.
fn phase(stdout: &str, phase: &str) -> serde_json::Value {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ycsb-result "))
        .map(|j| serde_json::from_str::<serde_json::Value>(j).unwrap())
        .find(|v| v["phase"] == phase)
        .unwrap_or_else(|| panic!("no {phase} phase in:\n{stdout}"))
}

#[test]
fn a_node_at_25_percent_serves_a_verified_ycsb_run() {
    if !cassandra_fetched("cassandra at 25%") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("memliner-cassandra-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("stats.json");
    let (port, storage) = (free_port(), free_port());
    let node = Command::new(env!("CARGO_BIN_EXE_memliner"))
        .args([
            "run",
            "--local",
            "25%",
            "--agent-env",
            "MEMLINER_AGENT_OPTS",
            "--stats",
        ])
        .arg(&stats)
        .arg("--")
        .arg(root().join("scripts/cassandra.sh"))
        .args(["--heap", "1g", "--port", &port.to_string()])
        .args(["--storage-port", &storage.to_string(), "--data"])
        .arg(dir.join("node"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut node = Node(Some(node));

    let out = ycsb(
        port,
        &[
            "--workloads",
            "a,c",
            "--records",
            "100000",
            "--ops",
            "20000",
            "--threads",
            "4",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ycsb: {stderr}\n{stdout}");
    for p in ["a", "c"] {
        let r = phase(&stdout, p);
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["verified"].as_u64().unwrap() >= 9_000, "{r}");
        assert!(r["by_op"]["read"]["p99_us"].as_u64().unwrap() > 0, "{r}");
    }
    // The check is not vacuous: records read back against another seed's values are wrong,
    // and said so with the key.
    let wrong = ycsb(
        port,
        &[
            "--no-load",
            "--seed",
            "2",
            "--workloads",
            "c",
            "--records",
            "100000",
            "--ops",
            "200",
        ],
    );
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(1), "{err}");
    assert!(
        err.contains("WRONG: key user") && err.contains("wrong bytes"),
        "{err}"
    );

    // SIGTERM to memliner run: the node drains and the JVM exits as Cassandra does on SIGTERM.
    let rc = Command::new("kill")
        .args(["-TERM", &node.0.as_ref().unwrap().id().to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    let out = node.0.take().unwrap().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("FATAL"), "{err}");
    assert_eq!(out.status.code(), Some(143), "{err}");
    // Cassandra locks its memory at start (mlockall): the agent unlocked the heap and paged it.
    assert!(err.contains("the heap is unlocked"), "{err}");

    let doc: StatsDoc = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let pager = doc.pager.expect("the node paged");
    assert!(pager.remote.pages_read > 10_000, "{:?}", pager.remote);
    assert!(pager.evictions.dirty > 0, "{:?}", pager.evictions);
    assert!(
        pager.peak_resident_pages <= pager.budget_pages + 64,
        "peak {} over the budget {}",
        pager.peak_resident_pages,
        pager.budget_pages
    );
    let integrity = pager.integrity.expect("checksums on by default");
    assert_eq!(integrity.mismatches, 0, "{integrity:?}");
    eprintln!(
        "cassandra at 25%: {} pages read, {} written; a: {}; c: {}",
        pager.remote.pages_read,
        pager.remote.pages_written,
        phase(&stdout, "a")["throughput"],
        phase(&stdout, "c")["throughput"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// lucene-core's classpath with the workload built (`scripts/lucene.sh`), where Maven Central
/// served it; `None` (and a skip line) when not and not required.
fn lucene_classpath() -> Option<String> {
    let out = Command::new(root().join("scripts/lucene.sh"))
        .output()
        .unwrap();
    if out.status.success() {
        return Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    let why = format!("no Lucene: {}", String::from_utf8_lossy(&out.stderr).trim());
    assert!(
        std::env::var_os("MEMLINER_REQUIRE_CASSANDRA").is_none(),
        "{why}"
    );
    swap_backend::conformance::skip("lucene at 25%", &why);
    None
}

#[test]
fn lucene_at_25_percent_answers_as_all_local() {
    let Some(cp) = lucene_classpath() else {
        return;
    };
    let java = locate::java().display().to_string();
    let job = |heap: &str| {
        vec![
            java.clone(),
            "-XX:+UseG1GC".to_string(),
            format!("-Xms{heap}"),
            format!("-Xmx{heap}"),
            "-cp".into(),
            cp.clone(),
            "memliner.lucene.Search".into(),
            "--docs".into(),
            "120000".into(),
            "--queries".into(),
            "3000".into(),
        ]
    };
    let cmd = job("256m");
    let local = Command::new(&cmd[0]).args(&cmd[1..]).output().unwrap();
    let reference = memliner_cli::workloads::verified_checksum(&local, "lucene all-local")
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = std::env::temp_dir().join(format!("memliner-lucene-{}.json", std::process::id()));
    // --young keep: G1 sizes the young generation itself, so that the searches page (more than
    // 1,000 reads). Fitted to the budget (the default), eden stays local and the index's live
    // set fits: a few hundred reads, too few for this test's point.
    let paged = Command::new(env!("CARGO_BIN_EXE_memliner"))
        .args(["run", "--local", "25%", "--young", "keep", "--stats"])
        .arg(&stats)
        .arg("--")
        .args(&cmd)
        .output()
        .unwrap();
    assert_eq!(
        memliner_cli::workloads::verified_checksum(&paged, "lucene at 25%")
            .unwrap_or_else(|e| panic!("{e}")),
        reference
    );
    let doc: StatsDoc = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let pager = doc.pager.expect("the JVM paged");
    assert!(pager.remote.pages_read > 1_000, "{:?}", pager.remote);
    assert_eq!(pager.integrity.expect("checksums on").mismatches, 0);
}
