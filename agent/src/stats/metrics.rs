//! The JVM's figures as a Prometheus page (`metrics=ADDR`, `GET /metrics`), for operators
//! who watch a fleet live: faults by thread class and kind, remote traffic, residency against
//! the budget, evictions, prefetch, fault latency, the GC's share, the GC hooks, replication
//! and the agent's own CPU.
//!
//! A scrape runs on the agent's metrics thread and reads counters: atomics, the lists' lengths
//! as the reclaimer last sampled them, the replicated store's counters without its page scan.
//! It takes no lock a fault takes, so no thread of the JVM waits for it. The stats document
//! (`stats=`, SIGQUIT) is the finer, costlier view of the same counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use swap_backend::metrics::Exposition;
use swap_backend::PAGE_SIZE;

use crate::model::{FaultKind, ThreadClass};
use crate::options::Options;
use crate::pager::{Pager, Role};

use super::{GcTimes, HeapInfo};

fn ld(a: &AtomicU64) -> f64 {
    a.load(Ordering::Relaxed) as f64
}

/// The metrics target file (`metrics_file=`): one group of Prometheus's file-based discovery
/// format, `[{"targets": ["HOST:PORT"], "labels": {...}}]`. Written by the agent, read by
/// `memliner stats --every`, `memliner top`, the bench and the tests: defined once here.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetGroup {
    pub targets: Vec<String>,
    /// `pid`, `host`, and `job`/`instance` when given.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl TargetGroup {
    /// The file's text: a list of one group.
    pub fn to_file(&self) -> String {
        serde_json::to_string(&[self]).unwrap_or_default() + "\n"
    }

    /// The group an agent wrote to `path`, once it has (`None` before, or for another file).
    pub fn read(path: &std::path::Path) -> Option<TargetGroup> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str::<Vec<TargetGroup>>(&text)
            .ok()?
            .into_iter()
            .next()
    }

    /// Where the JVM serves `/metrics`.
    pub fn addr(&self) -> Option<&str> {
        self.targets.first().map(String::as_str)
    }

    /// The JVM's pid.
    pub fn pid(&self) -> Option<u32> {
        self.labels.get("pid")?.parse().ok()
    }
}

/// What the page's every series carries: who this JVM is.
#[derive(Clone, Debug)]
pub struct Identity {
    pub pid: u32,
    pub host: String,
}

/// The `/metrics` page now.
pub fn page(
    id: &Identity,
    options: &Options,
    heap: Option<&HeapInfo>,
    pager: Option<&Pager>,
    gc: &GcTimes,
    uptime: Duration,
) -> String {
    let pid = id.pid.to_string();
    let store = pager.map_or_else(|| "none".to_string(), Pager::store_description);
    let mut common: Vec<(&str, &str)> = vec![("pid", &pid), ("host", &id.host), ("store", &store)];
    if let Some(j) = &options.job {
        common.push(("job", j));
    }
    if let Some(i) = &options.instance {
        common.push(("instance", i));
    }
    let mut e = Exposition::new(&common);
    let collector = heap.map_or("", |h| h.collector.as_str());
    let delivery = pager.map_or("", |p| p.delivery().name());
    e.family(
        "memliner_jvm_info",
        "gauge",
        "The agent's settings: policy, collector, fault delivery, replacement (always 1).",
    )
    .sample(
        "memliner_jvm_info",
        &[
            ("policy", options.policy.name()),
            ("collector", collector),
            ("delivery", delivery),
            ("reclaim", options.reclaim.name()),
        ],
        1.0,
    );
    e.single(
        "memliner_jvm_paging",
        "gauge",
        "Whether the heap is paged (0: starting, policy=off, or running without far memory).",
        u8::from(pager.is_some()),
    );
    e.single(
        "memliner_jvm_uptime_seconds",
        "gauge",
        "Seconds since the agent loaded.",
        uptime.as_secs_f64(),
    );
    e.single(
        "memliner_jvm_gc_pauses_total",
        "counter",
        "Stop-the-world GC pauses (JVMTI GarbageCollectionStart/Finish).",
        ld(&gc.pauses),
    );
    e.single(
        "memliner_jvm_gc_pause_seconds_total",
        "counter",
        "Time in stop-the-world GC pauses.",
        ld(&gc.total_ns) / 1e9,
    );
    if let Some(p) = pager {
        paged(&mut e, p);
    }
    e.finish()
}

/// The families of a paged heap.
fn paged(e: &mut Exposition, p: &Pager) {
    let page = PAGE_SIZE as f64;
    let c = p.counters();
    e.single(
        "memliner_jvm_heap_bytes",
        "gauge",
        "Bytes of the paged heap (its reserved size).",
        p.npages() as f64 * page,
    );
    e.single(
        "memliner_jvm_budget_bytes",
        "gauge",
        "Local budget: bytes of the heap that may be resident.",
        p.budget_pages() as f64 * page,
    );
    e.single(
        "memliner_jvm_resident_bytes",
        "gauge",
        "Bytes charged against the budget: mapped, inactive, prefetched, in flight.",
        p.resident_pages() as f64 * page,
    );
    let lists = p.latest_lists();
    e.family(
        "memliner_jvm_resident_pages",
        "gauge",
        "Resident pages by replacement list, as the reclaimer last sampled them.",
    );
    for (list, n) in [
        ("cold", lists.cold),
        ("probation", lists.probation),
        ("active", lists.active),
        ("inactive", lists.inactive),
        ("writeback", lists.writeback),
        ("other", lists.other),
    ] {
        e.sample("memliner_jvm_resident_pages", &[("list", list)], n as f64);
    }

    e.family(
        "memliner_jvm_faults_total",
        "counter",
        "Faults by thread class and by how they were served (remote: read from the store).",
    );
    let (mut remote, mut gc_remote) = (0.0, 0.0);
    for &class in ThreadClass::ALL {
        for &kind in FaultKind::ALL {
            let n = ld(&c.faults[class as usize][kind as usize]);
            if kind == FaultKind::Remote {
                remote += n;
                if class.is_gc() {
                    gc_remote += n;
                }
            }
            e.sample(
                "memliner_jvm_faults_total",
                &[("class", class.name()), ("kind", kind.name())],
                n,
            );
        }
    }
    e.single(
        "memliner_jvm_gc_share_of_remote_faults",
        "gauge",
        "Share of remote faults taken by GC threads since the start (NaN before the first).",
        if remote > 0.0 {
            gc_remote / remote
        } else {
            f64::NAN
        },
    );

    let gc_faults = p.gc_faults_attributed();
    e.family(
        "memliner_jvm_gc_remote_faults_total",
        "counter",
        "GC threads' remote faults by what the collector was doing (a pause's counted when \
         it ends).",
    );
    for (a, n) in crate::gc_activity::GcActivity::ALL.iter().zip(&gc_faults) {
        e.sample(
            "memliner_jvm_gc_remote_faults_total",
            &[("activity", a.name())],
            n.remote as f64,
        );
    }
    e.family(
        "memliner_jvm_gc_remote_wait_seconds_total",
        "counter",
        "Time GC threads spent on those faults, by activity.",
    );
    for (a, n) in crate::gc_activity::GcActivity::ALL.iter().zip(&gc_faults) {
        e.sample(
            "memliner_jvm_gc_remote_wait_seconds_total",
            &[("activity", a.name())],
            n.wait_ns as f64 / 1e9,
        );
    }

    let (read, prefetched) = (ld(&c.pages_read), ld(&c.pages_prefetched));
    e.family(
        "memliner_jvm_remote_read_pages_total",
        "counter",
        "Pages read from the store: by faults (demand) and by prefetching.",
    )
    .sample(
        "memliner_jvm_remote_read_pages_total",
        &[("by", "demand")],
        read - prefetched,
    )
    .sample(
        "memliner_jvm_remote_read_pages_total",
        &[("by", "prefetch")],
        prefetched,
    );
    e.single(
        "memliner_jvm_remote_read_bytes_total",
        "counter",
        "Page bytes read from the store.",
        read * page,
    );
    e.single(
        "memliner_jvm_remote_written_bytes_total",
        "counter",
        "Page bytes written to the store.",
        ld(&c.pages_written) * page,
    );
    e.single(
        "memliner_jvm_remote_freed_pages_total",
        "counter",
        "Pages freed on the store.",
        ld(&c.pages_freed_remote),
    );
    e.family(
        "memliner_jvm_evictions_total",
        "counter",
        "Pages evicted: clean (dropped), dirty (written back), zero (all zeros, dropped).",
    );
    for (state, n) in [
        ("clean", &c.evicted_clean),
        ("dirty", &c.evicted_dirty),
        ("zero", &c.evicted_zero),
    ] {
        e.sample("memliner_jvm_evictions_total", &[("state", state)], ld(n));
    }

    let (mut windows, mut pages, mut hits) = (0.0, 0.0, 0.0);
    if let Some(pc) = p.prefetch_counters() {
        for cc in &pc.by_class {
            windows += ld(&cc.windows);
            pages += ld(&cc.pages);
            hits += ld(&cc.hit_pages);
        }
    }
    e.single(
        "memliner_jvm_prefetch_windows_total",
        "counter",
        "Prefetch windows issued.",
        windows,
    );
    e.single(
        "memliner_jvm_prefetch_pages_total",
        "counter",
        "Pages prefetched.",
        pages,
    );
    e.single(
        "memliner_jvm_prefetch_hit_pages_total",
        "counter",
        "Prefetched pages of windows the program reached.",
        hits,
    );
    e.single(
        "memliner_jvm_prefetch_wasted_pages_total",
        "counter",
        "Prefetched pages evicted before any use.",
        ld(&p.reclaim_counters().prefetched_evicted_unused),
    );

    e.family(
        "memliner_jvm_fault_latency_seconds",
        "histogram",
        "Service time of a fault, from its delivery to its page mapped: on the faulting \
         thread itself with faults=signal; by source of the page (local: zero-filled, \
         prefetched, kept; remote: read from the store).",
    );
    for (source, b) in [
        ("local", &c.fault_latency[0]),
        ("remote", &c.fault_latency[1]),
    ] {
        let (buckets, count) = b.cumulative();
        e.histogram(
            "memliner_jvm_fault_latency_seconds",
            &[("source", source)],
            &buckets,
            ld(&b.sum_ns) / 1e9,
            count,
        );
    }

    let hooks = crate::hooks::doc(
        p.prefetch_counters().map(|c| &c.hints),
        c.gc_concurrent_remote_while_marking.load(Ordering::Relaxed),
    );
    for (name, help, v) in [
        (
            "memliner_jvm_gc_hooks_mark_cycles_total",
            "Concurrent marking cycles reported by a patched JDK's hooks (0 on a stock JDK).",
            hooks.mark_cycles,
        ),
        (
            "memliner_jvm_gc_hooks_recorded_total",
            "Store-log entries concurrent marking processed.",
            hooks.recorded,
        ),
        (
            "memliner_jvm_gc_hooks_deferred_total",
            "Objects marking deferred because their page was not resident.",
            hooks.deferred,
        ),
        (
            "memliner_jvm_gc_hooks_hinted_pages_total",
            "Pages the collector hinted ahead of tracing them.",
            hooks.hinted_pages,
        ),
        (
            "memliner_jvm_gc_hooks_hint_fetched_pages_total",
            "Hinted pages that were remote and were fetched for the collector.",
            hooks.hint_pages_fetched,
        ),
        (
            "memliner_jvm_gc_concurrent_remote_faults_while_marking_total",
            "Remote faults of concurrent GC threads while a patched JDK reported marking.",
            hooks.concurrent_remote_while_marking,
        ),
    ] {
        e.single(name, "counter", help, v as f64);
    }

    if let Some(i) = p.integrity() {
        e.single(
            "memliner_jvm_pages_verified_total",
            "counter",
            "Pages read back and found as they were written (checksums=on).",
            i.pages_verified as f64,
        );
        e.single(
            "memliner_jvm_page_checksum_mismatches_total",
            "counter",
            "Pages a memory server returned with other bytes than were written (never installed).",
            i.mismatches as f64,
        );
    }

    if let Some(r) = p.replication_counters() {
        e.family(
            "memliner_jvm_server_up",
            "gauge",
            "Whether each memory server of a replicated store is connected.",
        );
        for s in &r.servers {
            e.sample(
                "memliner_jvm_server_up",
                &[("server", &s.server)],
                u8::from(s.up),
            );
        }
        for (name, help, get) in [
            (
                "memliner_jvm_server_losses_total",
                "Times each server was lost.",
                (|s| s.losses) as fn(&swap_backend::replica::ServerReplicaStats) -> u64,
            ),
            (
                "memliner_jvm_server_rejoins_total",
                "Times each server was connected again.",
                |s| s.rejoins,
            ),
            (
                "memliner_jvm_server_read_pages_total",
                "Pages read from each server.",
                |s| s.pages_read,
            ),
            (
                "memliner_jvm_server_written_pages_total",
                "Pages written to each server.",
                |s| s.pages_written,
            ),
            (
                "memliner_jvm_server_checksum_mismatches_total",
                "Pages each server returned with other bytes than were written.",
                |s| s.mismatches,
            ),
        ] {
            e.family(name, "counter", help);
            for s in &r.servers {
                e.sample(name, &[("server", &s.server)], get(s) as f64);
            }
        }
        e.single(
            "memliner_jvm_replicas",
            "gauge",
            "Copies kept of each page.",
            r.replicas,
        );
        for (name, help, v) in [
            (
                "memliner_jvm_pages_recopied_total",
                "Pages copied again after a copy was lost.",
                r.pages_recopied,
            ),
            (
                "memliner_jvm_reads_failed_over_total",
                "Pages read from another copy after the first one's server failed.",
                r.reads_failed_over,
            ),
            (
                "memliner_jvm_pages_lost_total",
                "Pages every copy of which was lost.",
                r.pages_lost,
            ),
        ] {
            e.single(name, "counter", help, v as f64);
        }
    }

    let times = p.cpu_times();
    e.family(
        "memliner_jvm_agent_cpu_seconds_total",
        "counter",
        "CPU time of the agent's threads by role; signal_service: time application threads \
         spent serving their own faults (faults=signal, wall time).",
    );
    for &role in Role::ALL {
        let s: f64 = times
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, t)| t.as_secs_f64())
            .sum();
        e.sample(
            "memliner_jvm_agent_cpu_seconds_total",
            &[("role", role.name())],
            s,
        );
    }
    e.sample(
        "memliner_jvm_agent_cpu_seconds_total",
        &[("role", "signal_service")],
        ld(&c.signal_service_ns) / 1e9,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_file_reads_back_as_written() {
        let mut g = TargetGroup {
            targets: vec!["127.0.0.1:9400".into()],
            ..Default::default()
        };
        g.labels.insert("pid".into(), "42".into());
        let path =
            std::env::temp_dir().join(format!("memliner-target-{}.json", std::process::id()));
        std::fs::write(&path, g.to_file()).unwrap();
        let back = TargetGroup::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, g);
        assert_eq!(
            (back.pid(), back.addr()),
            (Some(42), Some("127.0.0.1:9400"))
        );
        assert!(g
            .to_file()
            .starts_with("[{\"targets\":[\"127.0.0.1:9400\"]"));
        assert_eq!(TargetGroup::read(&path), None);
    }
}
