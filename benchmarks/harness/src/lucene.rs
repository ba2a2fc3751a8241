//! Lucene in the bench: indexing and search with the index in the heap
//! (`java/lucene/src/memliner/lucene/Search.java`, lucene-core from Maven Central through
//! `scripts/lucene.sh`). A plain JVM printing a RESULT line, as the Java workloads do.

use std::path::Path;

/// Documents per MiB of heap: at 1 GiB about half the heap is the index and its writer's
/// buffers at their peak.
const DOCS_PER_MIB: u64 = 600;

/// Fetches lucene-core (once), compiles the workload; returns the classpath.
pub fn prepare(root: &Path) -> Result<String, String> {
    super::service::fetch(root, "scripts/lucene.sh", &[], "Lucene")
}

/// The JVM command for a `heap_mb` heap under `collector`; `java` is the JVM to run.
pub fn command(java: &str, classpath: &str, heap_mb: u64, collector: &str) -> Vec<String> {
    let docs = heap_mb * DOCS_PER_MIB;
    vec![
        java.to_string(),
        format!("-XX:+Use{collector}GC"),
        format!("-Xms{heap_mb}m"),
        format!("-Xmx{heap_mb}m"),
        "-cp".into(),
        classpath.into(),
        "memliner.lucene.Search".into(),
        "--docs".into(),
        docs.to_string(),
        "--queries".into(),
        (docs / 40).to_string(),
    ]
}
