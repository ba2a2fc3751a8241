//! Building and describing the Java workloads in `java/src` (plain javac, no build tool).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A workload the demo, the benchmarks and the tests can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Graph,
    Kv,
    /// An ordered record index: skewed read-modify-writes and range scans over a sorted map.
    Index,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Kv, Workload::Graph, Workload::Index];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Graph => "graph",
            Workload::Kv => "kv",
            Workload::Index => "index",
        }
    }

    pub fn class(self) -> &'static str {
        match self {
            Workload::Graph => "memliner.workloads.Graph",
            Workload::Kv => "memliner.workloads.KvCache",
            Workload::Index => "memliner.workloads.Index",
        }
    }

    pub fn parse(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown workload '{s}' (choose kv, graph or index)"))
    }
}

fn newest_mtime(dir: &Path) -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            let t = if p.is_dir() {
                newest_mtime(&p)
            } else {
                e.metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
            };
            newest = newest.max(t);
        }
    }
    newest
}

/// Compiles `root/java/src` into `root/target/java-classes` unless it is up to date; returns
/// the class path.
pub fn ensure_built(root: &Path) -> Result<PathBuf, String> {
    let src = root.join("java/src");
    let out = root.join("target/java-classes");
    let stamp = out.join(".built");
    let fresh = stamp
        .metadata()
        .and_then(|m| m.modified())
        .map(|t| t >= newest_mtime(&src))
        .unwrap_or(false);
    if fresh {
        return Ok(out);
    }
    let mut files = Vec::new();
    collect_java(&src, &mut files);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let javac = match std::env::var_os("JAVA_HOME") {
        Some(h) if Path::new(&h).join("bin/javac").is_file() => Path::new(&h).join("bin/javac"),
        _ => PathBuf::from("javac"),
    };
    let status = Command::new(&javac)
        .arg("-d")
        .arg(&out)
        .args(&files)
        .status()
        .map_err(|e| {
            format!(
                "cannot run {}: {e} (install a JDK, e.g. apt-get install openjdk-17-jdk-headless)",
                javac.display()
            )
        })?;
    if !status.success() {
        return Err(format!("javac failed ({status})"));
    }
    std::fs::write(&stamp, b"").map_err(|e| e.to_string())?;
    Ok(out)
}

fn collect_java(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                collect_java(&p, out);
            } else if p.extension().is_some_and(|x| x == "java") {
                out.push(p);
            }
        }
    }
}

/// The `RESULT key=value ...` line a workload prints, as pairs.
pub fn parse_result(stdout: &str) -> Option<Vec<(String, String)>> {
    let line = stdout.lines().rev().find(|l| l.starts_with("RESULT "))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
    )
}

/// The checksum of a finished process's RESULT line, when it exited 0 and says
/// `verified=true`; otherwise why not, with `what` and its output.
pub fn verified_checksum(out: &std::process::Output, what: &str) -> Result<String, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = |why: &str| {
        format!(
            "{what}: {why}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    if !out.status.success() {
        return Err(failed(&out.status.to_string()));
    }
    let r = parse_result(&stdout).ok_or_else(|| failed("no RESULT line"))?;
    if field(&r, "verified") != Some("true") {
        return Err(failed("not verified"));
    }
    field(&r, "checksum")
        .map(str::to_string)
        .ok_or_else(|| failed("no checksum"))
}

/// Looks up a key of a parsed result line.
pub fn field<'a>(result: &'a [(String, String)], key: &str) -> Option<&'a str> {
    result
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The JVM command line of a Java workload, its live set and its work scaled with the heap (the
/// sizes below are for 64 MiB; at 1 GiB the runs take 9-13 s all-local here).
pub fn java_command(classes: &Path, w: Workload, collector: &str, heap_mb: u64) -> Vec<String> {
    let mut cmd: Vec<String> = vec![
        crate::locate::java().display().to_string(),
        format!("-XX:+Use{collector}GC"),
        format!("-Xms{heap_mb}m"),
        format!("-Xmx{heap_mb}m"),
        "-cp".into(),
        classes.display().to_string(),
        w.class().into(),
    ];
    let scaled = |n: u64| (n * heap_mb / 64).to_string();
    match w {
        Workload::Graph => cmd.extend(["--nodes".into(), scaled(60_000)]),
        // Half the default operations: paged at 13%, the full count takes minutes.
        Workload::Kv => cmd.extend([
            "--keys".into(),
            scaled(200_000),
            "--capacity".into(),
            scaled(100_000),
            "--ops".into(),
            scaled(300_000),
        ]),
        Workload::Index => cmd.extend([
            "--records".into(),
            scaled(75_000),
            "--ops".into(),
            scaled(62_500),
        ]),
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines() {
        let r = parse_result("noise\nRESULT workload=graph checksum=ab verified=true\n").unwrap();
        assert_eq!(field(&r, "checksum"), Some("ab"));
        assert_eq!(field(&r, "verified"), Some("true"));
        assert!(parse_result("no result").is_none());
        assert!(Workload::parse("nope")
            .unwrap_err()
            .contains("kv, graph or index"));
        assert_eq!(Workload::parse("index"), Ok(Workload::Index));
    }
}
