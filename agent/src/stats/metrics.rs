//! The JVM's figures as a Prometheus page (`metrics=ADDR`, `GET /metrics`), for operators
//! who watch a fleet live: faults by thread class and kind, remote traffic, residency against
//! the budget, evictions, prefetch, fault latency, the GC's share, the GC hooks, replication
//! and the agent's own CPU.
//!
//! A scrape runs on the agent's metrics thread and reads counters: atomics, the lists' lengths
//! as the reclaimer last sampled them, the replicated store's counters without its page scan.
//! It takes no lock a fault takes, so no thread of the JVM waits for it. The stats document
//! (`stats=`, SIGQUIT) is the finer, costlier view of the same counters.

use memliner_contracts::metrics::jvm;
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

pub use memliner_contracts::targets::TargetGroup;

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
        jvm::INFO,
        "gauge",
        "The agent's settings: policy, collector, fault delivery, replacement (always 1).",
    )
    .sample(
        jvm::INFO,
        &[
            ("policy", options.policy.name()),
            ("collector", collector),
            ("delivery", delivery),
            ("reclaim", options.reclaim.name()),
        ],
        1.0,
    );
    e.single(
        jvm::PAGING,
        "gauge",
        "Whether the heap is paged (0: starting, policy=off, or running without far memory).",
        u8::from(pager.is_some()),
    );
    e.single(
        jvm::UPTIME_SECONDS,
        "gauge",
        "Seconds since the agent loaded.",
        uptime.as_secs_f64(),
    );
    e.single(
        jvm::GC_PAUSES_TOTAL,
        "counter",
        "Stop-the-world GC pauses (JVMTI GarbageCollectionStart/Finish).",
        ld(&gc.pauses),
    );
    e.single(
        jvm::GC_PAUSE_SECONDS_TOTAL,
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
        jvm::HEAP_BYTES,
        "gauge",
        "Bytes of the paged heap (its reserved size).",
        p.npages() as f64 * page,
    );
    e.single(
        jvm::BUDGET_BYTES,
        "gauge",
        "Local budget: bytes of the heap that may be resident.",
        p.budget_pages() as f64 * page,
    );
    e.single(
        jvm::RESIDENT_BYTES,
        "gauge",
        "Bytes charged against the budget: mapped, inactive, prefetched, in flight.",
        p.resident_pages() as f64 * page,
    );
    let lists = p.latest_lists();
    e.family(
        jvm::RESIDENT_PAGES,
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
        e.sample(jvm::RESIDENT_PAGES, &[("list", list)], n as f64);
    }

    e.family(
        jvm::FAULTS_TOTAL,
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
                jvm::FAULTS_TOTAL,
                &[("class", class.name()), ("kind", kind.name())],
                n,
            );
        }
    }
    e.single(
        jvm::GC_SHARE_OF_REMOTE_FAULTS,
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
        jvm::GC_REMOTE_FAULTS_TOTAL,
        "counter",
        "GC threads' remote faults by what the collector was doing (a pause's counted when \
         it ends).",
    );
    for (a, n) in crate::gc_activity::GcActivity::ALL.iter().zip(&gc_faults) {
        e.sample(
            jvm::GC_REMOTE_FAULTS_TOTAL,
            &[("activity", a.name())],
            n.remote as f64,
        );
    }
    e.family(
        jvm::GC_REMOTE_WAIT_SECONDS_TOTAL,
        "counter",
        "Time GC threads spent on those faults, by activity.",
    );
    for (a, n) in crate::gc_activity::GcActivity::ALL.iter().zip(&gc_faults) {
        e.sample(
            jvm::GC_REMOTE_WAIT_SECONDS_TOTAL,
            &[("activity", a.name())],
            n.wait_ns as f64 / 1e9,
        );
    }

    let (read, prefetched) = (ld(&c.pages_read), ld(&c.pages_prefetched));
    e.family(
        jvm::REMOTE_READ_PAGES_TOTAL,
        "counter",
        "Pages read from the store: by faults (demand) and by prefetching.",
    )
    .sample(
        jvm::REMOTE_READ_PAGES_TOTAL,
        &[("by", "demand")],
        read - prefetched,
    )
    .sample(
        jvm::REMOTE_READ_PAGES_TOTAL,
        &[("by", "prefetch")],
        prefetched,
    );
    e.single(
        jvm::REMOTE_READ_BYTES_TOTAL,
        "counter",
        "Page bytes read from the store.",
        read * page,
    );
    e.single(
        jvm::REMOTE_WRITTEN_BYTES_TOTAL,
        "counter",
        "Page bytes written to the store.",
        ld(&c.pages_written) * page,
    );
    e.single(
        jvm::REMOTE_FREED_PAGES_TOTAL,
        "counter",
        "Pages freed on the store.",
        ld(&c.pages_freed_remote),
    );
    e.family(
        jvm::EVICTIONS_TOTAL,
        "counter",
        "Pages evicted: clean (dropped), dirty (written back), zero (all zeros, dropped).",
    );
    for (state, n) in [
        ("clean", &c.evicted_clean),
        ("dirty", &c.evicted_dirty),
        ("zero", &c.evicted_zero),
    ] {
        e.sample(jvm::EVICTIONS_TOTAL, &[("state", state)], ld(n));
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
        jvm::PREFETCH_WINDOWS_TOTAL,
        "counter",
        "Prefetch windows issued.",
        windows,
    );
    e.single(
        jvm::PREFETCH_PAGES_TOTAL,
        "counter",
        "Pages prefetched.",
        pages,
    );
    e.single(
        jvm::PREFETCH_HIT_PAGES_TOTAL,
        "counter",
        "Prefetched pages of windows the program reached.",
        hits,
    );
    e.single(
        jvm::PREFETCH_WASTED_PAGES_TOTAL,
        "counter",
        "Prefetched pages evicted before any use.",
        ld(&p.reclaim_counters().prefetched_evicted_unused),
    );

    e.family(
        jvm::FAULT_LATENCY_SECONDS,
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
            jvm::FAULT_LATENCY_SECONDS,
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
            jvm::GC_HOOKS_MARK_CYCLES_TOTAL,
            "Concurrent marking cycles reported by a patched JDK's hooks (0 on a stock JDK).",
            hooks.mark_cycles,
        ),
        (
            jvm::GC_HOOKS_RECORDED_TOTAL,
            "Store-log entries concurrent marking processed.",
            hooks.recorded,
        ),
        (
            jvm::GC_HOOKS_DEFERRED_TOTAL,
            "Objects marking deferred because their page was not resident.",
            hooks.deferred,
        ),
        (
            jvm::GC_HOOKS_HINTED_PAGES_TOTAL,
            "Pages the collector hinted ahead of tracing them.",
            hooks.hinted_pages,
        ),
        (
            jvm::GC_HOOKS_HINT_FETCHED_PAGES_TOTAL,
            "Hinted pages that were remote and were fetched for the collector.",
            hooks.hint_pages_fetched,
        ),
        (
            jvm::GC_CONCURRENT_REMOTE_FAULTS_WHILE_MARKING_TOTAL,
            "Remote faults of concurrent GC threads while a patched JDK reported marking.",
            hooks.concurrent_remote_while_marking,
        ),
    ] {
        e.single(name, "counter", help, v as f64);
    }

    if let Some(i) = p.integrity() {
        e.single(
            jvm::PAGES_VERIFIED_TOTAL,
            "counter",
            "Pages read back and found as they were written (checksums=on).",
            i.pages_verified as f64,
        );
        e.single(
            jvm::PAGE_CHECKSUM_MISMATCHES_TOTAL,
            "counter",
            "Pages a memory server returned with other bytes than were written (never installed).",
            i.mismatches as f64,
        );
    }

    if let Some(r) = p.replication_counters() {
        e.family(
            jvm::SERVER_UP,
            "gauge",
            "Whether each memory server of a replicated store is connected.",
        );
        for s in &r.servers {
            e.sample(jvm::SERVER_UP, &[("server", &s.server)], u8::from(s.up));
        }
        for (name, help, get) in [
            (
                jvm::SERVER_LOSSES_TOTAL,
                "Times each server was lost.",
                (|s| s.losses) as fn(&swap_backend::replica::ServerReplicaStats) -> u64,
            ),
            (
                jvm::SERVER_REJOINS_TOTAL,
                "Times each server was connected again.",
                |s| s.rejoins,
            ),
            (
                jvm::SERVER_READ_PAGES_TOTAL,
                "Pages read from each server.",
                |s| s.pages_read,
            ),
            (
                jvm::SERVER_WRITTEN_PAGES_TOTAL,
                "Pages written to each server.",
                |s| s.pages_written,
            ),
            (
                jvm::SERVER_CHECKSUM_MISMATCHES_TOTAL,
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
            jvm::REPLICAS,
            "gauge",
            "Copies kept of each page.",
            r.replicas,
        );
        for (name, help, v) in [
            (
                jvm::PAGES_RECOPIED_TOTAL,
                "Pages copied again after a copy was lost.",
                r.pages_recopied,
            ),
            (
                jvm::READS_FAILED_OVER_TOTAL,
                "Pages read from another copy after the first one's server failed.",
                r.reads_failed_over,
            ),
            (
                jvm::PAGES_LOST_TOTAL,
                "Pages every copy of which was lost.",
                r.pages_lost,
            ),
        ] {
            e.single(name, "counter", help, v as f64);
        }
    }

    let times = p.cpu_times();
    e.family(
        jvm::AGENT_CPU_SECONDS_TOTAL,
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
        e.sample(jvm::AGENT_CPU_SECONDS_TOTAL, &[("role", role.name())], s);
    }
    e.sample(
        jvm::AGENT_CPU_SECONDS_TOTAL,
        &[("role", "signal_service")],
        ld(&c.signal_service_ns) / 1e9,
    );
}
