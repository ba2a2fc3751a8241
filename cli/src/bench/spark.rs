//! Spark jobs in local mode (`scripts/spark-job.py` on PySpark from PyPI): the driver JVM is
//! paged, the agent handed over through `spark.driver.extraJavaOptions`.

use std::path::{Path, PathBuf};

/// The environment variable the job script reads the `-agentpath:` argument from.
pub const AGENT_ENV: &str = "MEMLINER_AGENT_OPTS";

/// Driver heap of the Spark jobs (Spark refuses less than about 450 MiB).
pub const HEAP: &str = "512m";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    PageRank,
    GroupBy,
}

impl Job {
    pub const ALL: [Job; 2] = [Job::PageRank, Job::GroupBy];

    pub fn name(self) -> &'static str {
        match self {
            Job::PageRank => "pagerank",
            Job::GroupBy => "groupby",
        }
    }
}

/// Where PySpark and the job script are.
#[derive(Clone, Debug)]
pub struct Env {
    python: PathBuf,
    script: PathBuf,
}

/// Checks that PySpark is installed (by `scripts/spark-setup.sh`).
pub fn prepare(root: &Path) -> Result<Env, String> {
    let python = root.join("target/spark-venv/bin/python");
    let script = root.join("scripts/spark-job.py");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import pyspark"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        return Err(format!(
            "PySpark is not installed in {}: run scripts/spark-setup.sh (downloads it from PyPI)",
            python
                .parent()
                .and_then(Path::parent)
                .unwrap_or(root)
                .display()
        ));
    }
    Ok(Env { python, script })
}

impl Env {
    /// The job's command; with `patched_jdk` (a JDK home), the driver runs that JDK with its
    /// GC hooks on (PySpark starts the JVM of `JAVA_HOME`).
    pub fn command(&self, job: Job, collector: &str, patched_jdk: Option<&Path>) -> Vec<String> {
        let mut cmd = Vec::new();
        if let Some(home) = patched_jdk {
            cmd.push("env".into());
            cmd.push(format!("JAVA_HOME={}", home.display()));
        }
        cmd.extend([
            self.python.display().to_string(),
            self.script.display().to_string(),
            job.name().into(),
            "--collector".into(),
            collector.into(),
            "--heap".into(),
            HEAP.into(),
        ]);
        if patched_jdk.is_some() {
            cmd.push("--jvm-flag=-XX:+MemLinerLineUp".into());
        }
        cmd
    }
}
