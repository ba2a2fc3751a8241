//! Spark jobs (`scripts/spark-job.py` on PySpark from PyPI), in local mode, where the driver
//! JVM does the work and is paged (the agent handed over through
//! `spark.driver.extraJavaOptions`), or on Spark's `local-cluster` master, where separate
//! executor JVMs do it and each is paged (`spark.executor.extraJavaOptions`).

use std::path::{Path, PathBuf};

/// The environment variable the job script reads the `-agentpath:` argument from.
pub const AGENT_ENV: &str = "MEMLINER_AGENT_OPTS";

/// The smallest driver heap of a local-mode job (Spark refuses less than about 450 MiB); the
/// bench's heap when larger, with the job's data scaled alike (`--scale`, one step per 512 MiB).
pub const MIN_HEAP_MB: u64 = 512;

/// Executor JVMs of a cluster run (one core each: this machine has two).
pub const EXECUTORS: usize = 2;

/// Each executor's heap in a cluster run.
pub const EXECUTOR_HEAP: &str = "512m";

/// Where a Spark job's work runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deploy {
    /// `local[2]`: in the driver JVM, which the agent pages.
    Local,
    /// `local-cluster[EXECUTORS,1,...]`: in executor JVMs, each paged by an agent of its own
    /// (the driver is not).
    Cluster,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    PageRank,
    GroupBy,
    /// MLlib logistic regression (MemLiner's artifact runs Spark LR).
    LogisticRegression,
    /// MLlib KMeans.
    KMeans,
    /// Connected components by label propagation (a transitive closure).
    ConnectedComponents,
}

impl Job {
    pub const ALL: [Job; 5] = [
        Job::PageRank,
        Job::GroupBy,
        Job::LogisticRegression,
        Job::KMeans,
        Job::ConnectedComponents,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Job::PageRank => "pagerank",
            Job::GroupBy => "groupby",
            Job::LogisticRegression => "lr",
            Job::KMeans => "kmeans",
            Job::ConnectedComponents => "cc",
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
    /// The job's command; with `patched_jdk` (a JDK home), the JVMs run that JDK with its
    /// GC hooks on (PySpark starts the JVM of `JAVA_HOME`, and Spark's workers their
    /// executors with it).
    pub fn command(
        &self,
        job: Job,
        deploy: Deploy,
        collector: &str,
        heap_mb: u64,
        patched_jdk: Option<&Path>,
    ) -> Vec<String> {
        let heap_mb = heap_mb.max(MIN_HEAP_MB);
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
            format!("{heap_mb}m"),
            "--scale".into(),
            (heap_mb / MIN_HEAP_MB).to_string(),
        ]);
        if deploy == Deploy::Cluster {
            cmd.extend([
                "--executors".into(),
                EXECUTORS.to_string(),
                "--executor-heap".into(),
                EXECUTOR_HEAP.into(),
            ]);
        }
        if patched_jdk.is_some() {
            cmd.push("--jvm-flag=-XX:+MemLinerLineUp".into());
        }
        cmd
    }
}
