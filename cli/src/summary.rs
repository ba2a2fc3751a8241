//! The short report `memliner run` prints when the JVM exits.

use memliner_contracts::stats::StatsDoc;
use swap_backend::units::format_size;

/// Lines summarising a stats document.
pub fn lines(stats: &StatsDoc) -> Vec<String> {
    let mut out = Vec::new();
    let policy = &stats.policy;
    let wall = stats.wall_ms / 1e3;
    let Some(pager) = &stats.pager else {
        out.push(format!("policy {policy}: heap not paged; wall {wall:.2} s"));
        return out;
    };
    let budget = pager.budget_pages;
    let heap_pages = pager.heap_pages.max(1);
    out.push(format!(
        "{} heap {}, local {} ({:.0}%), policy {policy}, pages to {}, faults served by {}",
        stats.heap.as_ref().map_or("?", |h| h.collector.as_str()),
        format_size(stats.heap.as_ref().map_or(0, |h| h.bytes)),
        format_size(budget * 4096),
        100.0 * budget as f64 / heap_pages as f64,
        pager.store,
        if pager.delivery == memliner_contracts::model::FaultDelivery::Signal {
            "the faulting threads"
        } else {
            "handler threads"
        },
    ));
    if let Some(r) = &pager.replication {
        out.push(replication_line(r));
    }
    let faults = &stats.faults;
    let total = faults.total.max(1);
    let classes: Vec<String> = faults
        .by_class
        .iter()
        .filter(|(_, c)| c.total > 0)
        .map(|(class, c)| {
            format!(
                "{} {:.1}%",
                class.name(),
                100.0 * c.total as f64 / total as f64
            )
        })
        .collect();
    out.push(format!(
        "faults {} (zero {}, remote {}, write {}, prefetch hits {}); by thread: {}",
        faults.total,
        faults.zero,
        faults.remote,
        faults.write,
        faults.prefetch_hit,
        if classes.is_empty() {
            "none".into()
        } else {
            classes.join(", ")
        }
    ));
    if let Some(share) = faults.gc_share_of_remote {
        // What the collector was doing, largest first: its remote faults and the time its
        // threads waited on them.
        let mut by: Vec<_> = stats
            .gc_faults
            .iter()
            .filter(|(_, a)| a.remote > 0)
            .collect();
        by.sort_by_key(|(_, a)| std::cmp::Reverse(a.remote));
        let by: Vec<String> = by
            .iter()
            .map(|(k, a)| format!("{k} {} ({:.2} s)", a.remote, a.wait_ms / 1e3))
            .collect();
        out.push(format!(
            "GC threads caused {:.1}% of remote faults{}{}",
            share * 100.0,
            if by.is_empty() { "" } else { ": " },
            by.join(", ")
        ));
    }
    let h = &stats.gc_hooks;
    if h.on {
        out.push(format!(
            "GC hooks ({}): {} marking cycles, {} objects deferred ({} resident when traced), {} pages hinted ({} fetched, {} dropped)",
            stats.jdk,
            h.mark_cycles,
            h.deferred,
            h.deferred_resident_share
                .map_or("–".to_string(), |x| format!("{:.0}%", x * 100.0)),
            h.hinted_pages,
            h.hint_pages_fetched,
            h.hint_pages_dropped
        ));
    }
    out.push(format!(
        "remote traffic: {} read, {} written; evictions: {} clean, {} dirty, {} zero; peak resident {} of {} pages",
        format_size(pager.remote.pages_read * 4096),
        format_size(pager.remote.pages_written * 4096),
        pager.evictions.clean,
        pager.evictions.dirty,
        pager.evictions.zero,
        pager.peak_resident_pages,
        budget
    ));
    if let Some(i) = &pager.integrity {
        out.push(format!(
            "page checksums: {} pages verified, {} came back with wrong bytes (not installed){}",
            i.pages_verified,
            i.mismatches,
            if i.pages_unchecked > 0 {
                format!(", {} read without a checksum", i.pages_unchecked)
            } else {
                String::new()
            }
        ));
    }
    if let Some(pf) = &stats.prefetch {
        let pct = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{:.0}%", x * 100.0));
        out.push(format!(
            "prefetch: {} pages in {} windows; application accuracy {}, coverage {}; all threads accuracy {}, coverage {}",
            pf.all.pages,
            pf.all.windows,
            pct(pf.by_class.application.accuracy),
            pct(pf.by_class.application.coverage),
            pct(pf.all.accuracy),
            pct(pf.all.coverage),
        ));
    }
    let dead = &pager.dead;
    if dead.collections > 0 {
        let left = match (dead.left_mapped(), dead.protected()) {
            (0, _) => String::new(),
            (n, 0) => format!("; {n} local pages left to the JVM, the budget having room"),
            (n, w) => format!(
                "; {n} local pages left to the JVM, {w} of them write-protected in young regions for eden to reuse"
            ),
        };
        out.push(format!(
            "dead space: {} pages dropped after {} collections ({} free-region, {} above top; {} fetches of dead bytes saved, {} local pages freed{left}), {:.1} ms in pauses",
            dead.pages(),
            dead.collections,
            dead.free_region.pages,
            dead.above_top.pages,
            dead.remote(),
            dead.mapped(),
            dead.pause_ms,
        ));
    }
    if pager.cold.evicted > 0 {
        let kept = match pager.reclaim.cold_rereads_kept {
            0 => String::new(),
            n => format!(", {n} collection-set pages read back soon kept on probation"),
        };
        out.push(format!(
            "cold queue: {} GC-read pages evicted before application pages ({} after a pause ended), {} promoted by application writes{kept}",
            pager.cold.evicted, pager.cold.demoted_after_pause, pager.cold.promoted,
        ));
    }
    let r = &pager.reclaim;
    out.push(format!(
        "reclaim ({}): {} pages sampled, {} touched again (local faults); refaults {} within the working set (activated), {} distant; {} prefetched pages evicted unused; {} direct-reclaim stalls",
        r.mode, r.deactivated, r.reactivated, r.workingset_activations, r.distant_refaults, r.prefetched_evicted_unused, r.direct_reclaims,
    ));
    let cpu = &pager.agent_cpu;
    out.push(format!(
        "agent CPU {:.2} s (faults served by their own threads {:.2}, handlers {:.2}, reclaimer {:.2}, prefetch {:.2}), {:.1} us per remote fault",
        cpu.total_s,
        cpu.signal_service_s,
        cpu.fault_handlers_s,
        cpu.reclaimer_s,
        cpu.prefetch_s,
        cpu.per_remote_fault_us.unwrap_or(0.0),
    ));
    let heap_bytes = (pager.heap_pages * swap_backend::PAGE_SIZE as u64).max(1) as f64;
    out.push(format!(
        "agent memory {} at most ({:.2}% of the heap; {} at the end), started in {:.1} ms",
        swap_backend::units::format_size(stats.process.agent_peak_bytes),
        stats.process.agent_peak_bytes as f64 * 100.0 / heap_bytes,
        swap_backend::units::format_size(stats.process.agent_bytes),
        pager.start_ms,
    ));
    let lat = &pager.latency.all;
    let thread = &pager.latency.thread_remote;
    if thread.count > 0 {
        out.push(format!(
            "remote fault as the faulting thread sees it (probe, {} samples): p50 {:.1} us, p99 {:.1} us",
            thread.count,
            thread.p50_us.unwrap_or(0.0),
            thread.p99_us.unwrap_or(0.0),
        ));
    }
    out.push(format!(
        "fault service p50 {:.1} us, p99 {:.1} us; GC pauses {} ({:.0} ms in all); wall {wall:.2} s",
        lat.p50_us.unwrap_or(0.0),
        lat.p99_us.unwrap_or(0.0),
        stats.gc.pauses,
        stats.gc.pause_total_ms,
    ));
    out
}

/// The memory servers' part: copies, each server's losses and rejoins, pages lost.
fn replication_line(r: &swap_backend::replica::ReplicationStats) -> String {
    let servers: Vec<String> = r
        .servers
        .iter()
        .map(|s| {
            let mut t = format!("{} {}", s.server, if s.up { "up" } else { "DOWN" });
            if s.losses > 0 {
                t += &format!(" (lost {}x, rejoined {}x)", s.losses, s.rejoins);
            }
            t
        })
        .collect();
    format!(
        "{} copies of each page on {}; pages copied again {}, reads failed over {}, pages lost {}",
        r.replicas,
        servers.join(", "),
        r.pages_recopied,
        r.reads_failed_over,
        r.pages_lost
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_document() {
        let mut doc = StatsDoc::sample();
        doc.policy = memliner_contracts::options::Policy::Baseline;
        let text = lines(&doc).join("\n");
        assert!(
            text.contains("G1 heap 64.0 MiB, local 16.0 MiB (25%), policy baseline, pages to tcp://127.0.0.1:1, faults served by the faulting threads"),
            "{text}"
        );
        assert!(text.contains("application 25.0%, gc 75.0%"), "{text}");
        assert!(text.contains("75.0% of remote faults"), "{text}");
        assert!(text.contains("peak resident 4000 of 4096"), "{text}");
        assert!(
            text.contains("prefetch: 300 pages in 40 windows; application accuracy 95%, coverage –; all threads accuracy 90%, coverage 50%"),
            "{text}"
        );
        assert!(!text.contains("cold queue"), "no cold evictions: {text}");
        assert!(
            text.contains(
                "reclaim (lru): 900 pages sampled, 300 touched again (local faults); refaults 20 within"
            ),
            "{text}"
        );
        assert!(text.contains("2 direct-reclaim stalls"), "{text}");
        assert!(text.contains("agent CPU 1.50 s (faults served by their own threads 0.20, handlers 0.80, reclaimer 0.40, prefetch 0.10), 12.5 us per remote fault"), "{text}");
        assert!(
            text.contains("agent memory 2.0 MiB at most (3.12% of the heap; 1.0 MiB at the end), started in 3.5 ms"),
            "{text}"
        );
        assert!(
            text.contains("(probe, 7 samples): p50 30.0 us, p99 90.0 us"),
            "{text}"
        );
        // Cold evictions, and collection-set pages read back soon kept (the sample keeps 4).
        let mut cold = StatsDoc::sample();
        cold.pager.as_mut().unwrap().cold.evicted = 50;
        let text = lines(&cold).join("\n");
        assert!(
            text.contains("cold queue: 50 GC-read pages evicted before application pages")
                && text.contains(", 4 collection-set pages read back soon kept on probation"),
            "{text}"
        );
        let off = StatsDoc {
            policy: memliner_contracts::options::Policy::Off,
            pager: None,
            ..StatsDoc::sample()
        };
        assert!(lines(&off)[0].contains("not paged"));
    }
}
