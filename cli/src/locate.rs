//! Finding the agent library and the project's source folders.

use std::path::{Path, PathBuf};

/// File name of the agent built by `cargo build`.
pub const AGENT_FILE: &str = "libmemliner_agent.so";

/// The agent library: `$MEMLINER_AGENT`, else beside the `memliner` executable (or one level
/// up, where test binaries live in `target/*/deps`).
pub fn agent() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("MEMLINER_AGENT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "MEMLINER_AGENT names {} which is not a file",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    for dir in exe.ancestors().skip(1).take(2) {
        let p = dir.join(AGENT_FILE);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(format!(
        "cannot find {AGENT_FILE} beside {}; build it with `cargo build --release --workspace` or set MEMLINER_AGENT",
        exe.display()
    ))
}

/// The project checkout holding `java/src` (searched upwards from the executable and the
/// current folder), for building the workloads.
pub fn project_root() -> Result<PathBuf, String> {
    let marker = Path::new("java/src/memliner/workloads/Graph.java");
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for s in &starts {
        for dir in s.ancestors() {
            if dir.join(marker).is_file() {
                return Ok(dir.to_path_buf());
            }
        }
    }
    Err(
        "cannot find the memliner checkout (java/src/memliner/workloads); run from inside it"
            .into(),
    )
}

/// The GC-hook patched JDK's java, when scripts/build-jdk.sh has built it into the checkout.
pub fn patched_java() -> Option<PathBuf> {
    let java = project_root().ok()?.join("target/jdk-memliner/bin/java");
    java.is_file().then_some(java)
}

/// A `java` executable: `$JAVA_HOME/bin/java`, else `java` on the PATH.
pub fn java() -> PathBuf {
    match std::env::var_os("JAVA_HOME") {
        Some(h) if Path::new(&h).join("bin/java").is_file() => Path::new(&h).join("bin/java"),
        _ => PathBuf::from("java"),
    }
}
