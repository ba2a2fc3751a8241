//! The short report `memliner run` prints when the JVM exits.

use serde_json::Value;
use swap_backend::units::format_size;

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
}

/// Lines summarising a stats document.
pub fn lines(stats: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let policy = stats["policy"].as_str().unwrap_or("?");
    let wall = f(stats, &["wall_ms"]).unwrap_or(0.0) / 1e3;
    let Some(pager) = stats.get("pager").filter(|p| !p.is_null()) else {
        out.push(format!("policy {policy}: heap not paged; wall {wall:.2} s"));
        return out;
    };
    let heap = &stats["heap"];
    let budget = u(pager, &["budget_pages"]);
    let heap_pages = u(pager, &["heap_pages"]).max(1);
    out.push(format!(
        "{} heap {}, local {} ({:.0}%), policy {policy}, pages to {}",
        heap["collector"].as_str().unwrap_or("?"),
        format_size(u(heap, &["bytes"])),
        format_size(budget * 4096),
        100.0 * budget as f64 / heap_pages as f64,
        pager["store"].as_str().unwrap_or("?"),
    ));
    let faults = &stats["faults"];
    let total = u(faults, &["total"]).max(1);
    let mut classes = Vec::new();
    if let Some(m) = faults["by_class"].as_object() {
        for (name, c) in m {
            let t = u(c, &["total"]);
            if t > 0 {
                classes.push(format!("{name} {:.1}%", 100.0 * t as f64 / total as f64));
            }
        }
    }
    out.push(format!(
        "faults {} (zero {}, remote {}, write {}, prefetch hits {}); by thread: {}",
        u(faults, &["total"]),
        u(faults, &["zero"]),
        u(faults, &["remote"]),
        u(faults, &["write"]),
        u(faults, &["prefetch_hit"]),
        if classes.is_empty() {
            "none".into()
        } else {
            classes.join(", ")
        }
    ));
    if let Some(share) = f(faults, &["gc_share_of_remote"]) {
        out.push(format!(
            "GC threads caused {:.1}% of remote faults",
            share * 100.0
        ));
    }
    out.push(format!(
        "remote traffic: {} read, {} written; evictions: {} clean, {} dirty, {} zero; peak resident {} of {} pages",
        format_size(u(pager, &["remote", "pages_read"]) * 4096),
        format_size(u(pager, &["remote", "pages_written"]) * 4096),
        u(pager, &["evictions", "clean"]),
        u(pager, &["evictions", "dirty"]),
        u(pager, &["evictions", "zero"]),
        u(pager, &["peak_resident_pages"]),
        budget
    ));
    let pf = &stats["prefetch"];
    if !pf.is_null() {
        let pct = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{:.0}%", x * 100.0));
        out.push(format!(
            "prefetch: {} pages in {} windows; application accuracy {}, coverage {}; all threads accuracy {}, coverage {}",
            u(pf, &["all", "pages"]),
            u(pf, &["all", "windows"]),
            pct(f(pf, &["by_class", "application", "accuracy"])),
            pct(f(pf, &["by_class", "application", "coverage"])),
            pct(f(pf, &["all", "accuracy"])),
            pct(f(pf, &["all", "coverage"])),
        ));
    }
    if u(pager, &["cold", "evicted"]) > 0 {
        out.push(format!(
            "cold queue: {} GC-read pages evicted before application pages ({} after a pause ended), {} promoted by application writes",
            u(pager, &["cold", "evicted"]),
            u(pager, &["cold", "demoted_after_pause"]),
            u(pager, &["cold", "promoted"]),
        ));
    }
    let r = &pager["reclaim"];
    if r.is_object() {
        out.push(format!(
            "reclaim ({}): {} pages sampled, {} touched again (local faults), {} refaults a longer inactive list would have saved; {} direct-reclaim stalls",
            r["mode"].as_str().unwrap_or("?"),
            u(r, &["deactivated"]),
            u(r, &["reactivated"]),
            u(r, &["workingset_refaults"]),
            u(r, &["direct_reclaims"]),
        ));
    }
    let cpu = &pager["agent_cpu"];
    if cpu.is_object() {
        out.push(format!(
            "agent CPU {:.2} s (faults served by their own threads {:.2}, handlers {:.2}, reclaimer {:.2}, prefetch {:.2}), {:.1} us per remote fault",
            f(cpu, &["total_s"]).unwrap_or(0.0),
            f(cpu, &["signal_service_s"]).unwrap_or(0.0),
            f(cpu, &["fault_handlers_s"]).unwrap_or(0.0),
            f(cpu, &["reclaimer_s"]).unwrap_or(0.0),
            f(cpu, &["prefetch_s"]).unwrap_or(0.0),
            f(cpu, &["per_remote_fault_us"]).unwrap_or(0.0),
        ));
    }
    let lat = &pager["latency"]["all"];
    let thread = &pager["latency"]["thread_remote"];
    if u(thread, &["count"]) > 0 {
        out.push(format!(
            "remote fault as the faulting thread sees it (probe, {} samples): p50 {:.1} us, p99 {:.1} us",
            u(thread, &["count"]),
            f(thread, &["p50_us"]).unwrap_or(0.0),
            f(thread, &["p99_us"]).unwrap_or(0.0),
        ));
    }
    out.push(format!(
        "fault service (handler-side) p50 {:.1} us, p99 {:.1} us; GC pauses {} ({:.0} ms in all); wall {wall:.2} s",
        f(lat, &["p50_us"]).unwrap_or(0.0),
        f(lat, &["p99_us"]).unwrap_or(0.0),
        u(stats, &["gc", "pauses"]),
        f(stats, &["gc", "pause_total_ms"]).unwrap_or(0.0),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_document() {
        let doc = serde_json::json!({
            "policy": "baseline", "wall_ms": 1500.0,
            "heap": {"collector": "G1", "bytes": 67108864},
            "pager": {"budget_pages": 4096, "heap_pages": 16384, "store": "tcp://127.0.0.1:1",
                      "peak_resident_pages": 4000, "remote": {"pages_read": 10, "pages_written": 5},
                      "evictions": {"clean": 1, "dirty": 2, "zero": 3},
                      "latency": {"all": {"p50_us": 4.0, "p99_us": 20.0},
                                  "thread_remote": {"count": 7, "p50_us": 30.0, "p99_us": 90.0}},
                      "reclaim": {"mode": "clock", "deactivated": 900, "reactivated": 300,
                                  "workingset_refaults": 20, "direct_reclaims": 2},
                      "agent_cpu": {"total_s": 1.5, "fault_handlers_s": 1.0, "reclaimer_s": 0.4,
                                    "prefetch_s": 0.1, "per_remote_fault_us": 12.5}},
            "faults": {"total": 100, "zero": 50, "remote": 40, "write": 10, "gc_share_of_remote": 0.75,
                       "by_class": {"application": {"total": 25}, "gc": {"total": 75}}},
            "gc": {"pauses": 3, "pause_total_ms": 12.0},
            "prefetch": {"all": {"pages": 300, "windows": 40, "accuracy": 0.9, "coverage": 0.5},
                         "by_class": {"application": {"accuracy": 0.95, "coverage": null}}}
        });
        let text = lines(&doc).join("\n");
        assert!(
            text.contains("G1 heap 64.0 MiB, local 16.0 MiB (25%)"),
            "{text}"
        );
        assert!(text.contains("application 25.0%, gc 75.0%"), "{text}");
        assert!(text.contains("75.0% of remote faults"), "{text}");
        assert!(text.contains("peak resident 4000 of 4096"), "{text}");
        assert!(
            text.contains("prefetch: 300 pages in 40 windows; application accuracy 95%, coverage –; all threads accuracy 90%, coverage 50%"),
            "{text}"
        );
        assert!(!text.contains("cold queue"), "baseline: {text}");
        assert!(
            text.contains(
                "reclaim (clock): 900 pages sampled, 300 touched again (local faults), 20 refaults"
            ),
            "{text}"
        );
        assert!(text.contains("2 direct-reclaim stalls"), "{text}");
        assert!(text.contains("agent CPU 1.50 s (faults served by their own threads 0.00, handlers 1.00, reclaimer 0.40, prefetch 0.10), 12.5 us per remote fault"), "{text}");
        assert!(
            text.contains("(probe, 7 samples): p50 30.0 us, p99 90.0 us"),
            "{text}"
        );
        let off = lines(&serde_json::json!({"policy": "off", "wall_ms": 10.0, "pager": null}));
        assert!(off[0].contains("not paged"));
    }
}
