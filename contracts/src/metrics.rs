//! The name of every metric memliner serves, defined once: the agent's `/metrics` (`jvm`) and
//! the memory server's (`server`). The agent and the server write them, `memliner top`, `memliner
//! stats --every`, the bench and the tests read them, and a test holds the Grafana dashboard's
//! generator (`scripts/grafana/make-dashboard.py`) to them. A renamed metric is one edit here;
//! a family dropped from a page fails the tests that scrape every name below.

/// Constants and the list of them all, from one list.
macro_rules! names {
    ($($id:ident = $name:literal;)*) => {
        $(pub const $id: &str = $name;)*
        /// Every name above, in order.
        pub const ALL: &[&str] = &[$($id),*];
    };
}

/// A paged JVM's families (`metrics=ADDR`). Served from the agent's start, paged or not:
/// `INFO`, `PAGING`, `UPTIME_SECONDS` and the GC pause families; the others once the heap is
/// paged; the integrity families with `checksums=on`; the per-server and replica families with
/// a replicated store (`server=A+B`).
pub mod jvm {
    names! {
        INFO = "memliner_jvm_info";
        PAGING = "memliner_jvm_paging";
        UPTIME_SECONDS = "memliner_jvm_uptime_seconds";
        GC_PAUSES_TOTAL = "memliner_jvm_gc_pauses_total";
        GC_PAUSE_SECONDS_TOTAL = "memliner_jvm_gc_pause_seconds_total";
        HEAP_BYTES = "memliner_jvm_heap_bytes";
        BUDGET_BYTES = "memliner_jvm_budget_bytes";
        RESIDENT_BYTES = "memliner_jvm_resident_bytes";
        RESIDENT_PAGES = "memliner_jvm_resident_pages";
        FAULTS_TOTAL = "memliner_jvm_faults_total";
        GC_SHARE_OF_REMOTE_FAULTS = "memliner_jvm_gc_share_of_remote_faults";
        GC_REMOTE_FAULTS_TOTAL = "memliner_jvm_gc_remote_faults_total";
        GC_REMOTE_WAIT_SECONDS_TOTAL = "memliner_jvm_gc_remote_wait_seconds_total";
        REMOTE_READ_PAGES_TOTAL = "memliner_jvm_remote_read_pages_total";
        REMOTE_READ_BYTES_TOTAL = "memliner_jvm_remote_read_bytes_total";
        REMOTE_WRITTEN_BYTES_TOTAL = "memliner_jvm_remote_written_bytes_total";
        REMOTE_FREED_PAGES_TOTAL = "memliner_jvm_remote_freed_pages_total";
        EVICTIONS_TOTAL = "memliner_jvm_evictions_total";
        PREFETCH_WINDOWS_TOTAL = "memliner_jvm_prefetch_windows_total";
        PREFETCH_PAGES_TOTAL = "memliner_jvm_prefetch_pages_total";
        PREFETCH_HIT_PAGES_TOTAL = "memliner_jvm_prefetch_hit_pages_total";
        PREFETCH_WASTED_PAGES_TOTAL = "memliner_jvm_prefetch_wasted_pages_total";
        FAULT_LATENCY_SECONDS = "memliner_jvm_fault_latency_seconds";
        GC_HOOKS_MARK_CYCLES_TOTAL = "memliner_jvm_gc_hooks_mark_cycles_total";
        GC_HOOKS_RECORDED_TOTAL = "memliner_jvm_gc_hooks_recorded_total";
        GC_HOOKS_DEFERRED_TOTAL = "memliner_jvm_gc_hooks_deferred_total";
        GC_HOOKS_HINTED_PAGES_TOTAL = "memliner_jvm_gc_hooks_hinted_pages_total";
        GC_HOOKS_HINT_FETCHED_PAGES_TOTAL = "memliner_jvm_gc_hooks_hint_fetched_pages_total";
        GC_CONCURRENT_REMOTE_FAULTS_WHILE_MARKING_TOTAL = "memliner_jvm_gc_concurrent_remote_faults_while_marking_total";
        PAGES_VERIFIED_TOTAL = "memliner_jvm_pages_verified_total";
        PAGE_CHECKSUM_MISMATCHES_TOTAL = "memliner_jvm_page_checksum_mismatches_total";
        SERVER_UP = "memliner_jvm_server_up";
        SERVER_LOSSES_TOTAL = "memliner_jvm_server_losses_total";
        SERVER_REJOINS_TOTAL = "memliner_jvm_server_rejoins_total";
        SERVER_READ_PAGES_TOTAL = "memliner_jvm_server_read_pages_total";
        SERVER_WRITTEN_PAGES_TOTAL = "memliner_jvm_server_written_pages_total";
        SERVER_CHECKSUM_MISMATCHES_TOTAL = "memliner_jvm_server_checksum_mismatches_total";
        REPLICAS = "memliner_jvm_replicas";
        PAGES_RECOPIED_TOTAL = "memliner_jvm_pages_recopied_total";
        READS_FAILED_OVER_TOTAL = "memliner_jvm_reads_failed_over_total";
        PAGES_LOST_TOTAL = "memliner_jvm_pages_lost_total";
        AGENT_CPU_SECONDS_TOTAL = "memliner_jvm_agent_cpu_seconds_total";
    }

    /// Served with `checksums=on` only.
    pub const INTEGRITY: &[&str] = &[PAGES_VERIFIED_TOTAL, PAGE_CHECKSUM_MISMATCHES_TOTAL];

    /// Served with a replicated store (`server=A+B`) only.
    pub const REPLICATED: &[&str] = &[
        SERVER_UP,
        SERVER_LOSSES_TOTAL,
        SERVER_REJOINS_TOTAL,
        SERVER_READ_PAGES_TOTAL,
        SERVER_WRITTEN_PAGES_TOTAL,
        SERVER_CHECKSUM_MISMATCHES_TOTAL,
        REPLICAS,
        PAGES_RECOPIED_TOTAL,
        READS_FAILED_OVER_TOTAL,
        PAGES_LOST_TOTAL,
    ];

    /// Served by every paged JVM.
    pub fn always_when_paged() -> impl Iterator<Item = &'static str> {
        ALL.iter()
            .copied()
            .filter(|n| !INTEGRITY.contains(n) && !REPLICATED.contains(n))
    }
}

/// The memory server's families (`memliner server --metrics ADDR`); the `NAMESPACE_` ones carry
/// one series per client namespace.
pub mod server {
    names! {
        CAPACITY_BYTES = "memliner_server_capacity_bytes";
        USED_BYTES = "memliner_server_used_bytes";
        CONNECTIONS = "memliner_server_connections";
        NAMESPACES = "memliner_server_namespaces";
        READ_BYTES_TOTAL = "memliner_server_read_bytes_total";
        WRITTEN_BYTES_TOTAL = "memliner_server_written_bytes_total";
        NAMESPACE_PAGES = "memliner_namespace_pages";
        NAMESPACE_CONNECTIONS = "memliner_namespace_connections";
        NAMESPACE_READ_PAGES_TOTAL = "memliner_namespace_read_pages_total";
        NAMESPACE_WRITTEN_PAGES_TOTAL = "memliner_namespace_written_pages_total";
        NAMESPACE_READ_BYTES_TOTAL = "memliner_namespace_read_bytes_total";
        NAMESPACE_WRITTEN_BYTES_TOTAL = "memliner_namespace_written_bytes_total";
        NAMESPACE_FREED_PAGES_TOTAL = "memliner_namespace_freed_pages_total";
        NAMESPACE_ERRORS_TOTAL = "memliner_namespace_errors_total";
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The dashboard's generator names metrics in Python: each must be one served here (a
    /// histogram's `_bucket`, `_sum` and `_count` series are its family's).
    #[test]
    fn the_dashboard_reads_only_metrics_that_exist() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/grafana/make-dashboard.py"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let known: BTreeSet<&str> = super::jvm::ALL
            .iter()
            .chain(super::server::ALL)
            .copied()
            .collect();
        let mut read = BTreeSet::new();
        for (i, _) in text.match_indices("memliner_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // A prefix the generator completes (`memliner_jvm_` + a suffix) is not a name.
            if name.ends_with('_') {
                continue;
            }
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| known.contains(f)))
                .unwrap_or(&name)
                .to_string();
            read.insert(family);
        }
        assert!(
            read.len() >= 20,
            "the generator names {} metrics: {read:?}",
            read.len()
        );
        let unknown: Vec<&String> = read
            .iter()
            .filter(|n| !known.contains(n.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "the dashboard reads metrics nobody serves: {unknown:?}"
        );
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let all: Vec<&str> = super::jvm::ALL
            .iter()
            .chain(super::server::ALL)
            .copied()
            .collect();
        let set: BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(set.len(), all.len());
        assert!(super::jvm::ALL
            .iter()
            .all(|n| n.starts_with("memliner_jvm_")));
        assert!(super::server::ALL
            .iter()
            .all(|n| n.starts_with("memliner_server_") || n.starts_with("memliner_namespace_")));
    }
}
