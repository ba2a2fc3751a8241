#!/usr/bin/env python3
"""Writes memliner.json beside this script: a Grafana dashboard of the paged JVMs' /metrics
(the agent's metrics=ADDR) and the memory servers' (memliner server --metrics ADDR).

Edit the panels here and run it again; cli/tests/observing.rs checks that every memliner_jvm_*
metric the dashboard queries is on a paging JVM's page, and swap-backend's metrics tests the
server's."""
import json
import os

SEL = 'job=~"$job",host=~"$host",pid=~"$pid"'
panels = []
row_y = [0]


def panel(title, exprs, unit, desc=""):
    x = 0 if len(panels) % 2 == 0 else 12
    panels.append({
        "type": "timeseries", "title": title, "description": desc,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": row_y[0], "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": l}
                    for i, (e, l) in enumerate(exprs)],
    })
    if x == 12:
        row_y[0] += 8


def rate(metric, by="host, pid", extra=""):
    sel = f"{extra},{SEL}" if extra else SEL
    return f"sum by ({by}) (rate({metric}{{{sel}}}[1m]))"


J = "{{host}}/{{pid}}"
panel("Remote faults/s by thread class",
      [(rate("memliner_jvm_faults_total", "host, pid, class", 'kind="remote"'), J + " {{class}}")],
      "ops", "Faults that read a page from the memory server, by who faulted: application, "
             "gc (pauses), gc-concurrent, jit, vm, other.")
panel("GC share of remote faults",
      [(rate("memliner_jvm_faults_total", extra='kind="remote",class=~"gc|gc-concurrent"') + " / "
        + rate("memliner_jvm_faults_total", extra='kind="remote"'), J)], "percentunit")
panel("GC remote faults/s by activity",
      [(rate("memliner_jvm_gc_remote_faults_total", "host, pid, activity"), J + " {{activity}}")],
      "ops", "What the collector was doing when its threads read a remote page: young and "
             "mixed evacuation, card scan, humongous, remark/cleanup, full GC (a pause's, "
             "counted when it ends), concurrent marking and refinement.")
panel("GC threads waiting on remote pages (cores)",
      [(rate("memliner_jvm_gc_remote_wait_seconds_total", "host, pid, activity"),
        J + " {{activity}}")], "none")
panel("Remote traffic",
      [(rate("memliner_jvm_remote_read_bytes_total"), J + " in"),
       ("-" + rate("memliner_jvm_remote_written_bytes_total"), J + " out")], "Bps")
panel("Remote fault latency p50 / p99 (service time)",
      [(f"histogram_quantile({q}, "
        + rate("memliner_jvm_fault_latency_seconds_bucket", "host, pid, le", 'source="remote"')
        + ")", f"{J} p{int(q * 100)}") for q in (0.5, 0.99)], "s")
panel("Resident vs budget",
      [(f"memliner_jvm_resident_bytes{{{SEL}}}", J + " resident"),
       (f"memliner_jvm_budget_bytes{{{SEL}}}", J + " budget")], "bytes")
panel("Resident pages by list",
      [(f"sum by (list) (memliner_jvm_resident_pages{{{SEL}}})", "{{list}}")], "short",
      "The replacement's lists as the reclaimer last sampled them: active (working set), "
      "probation, inactive (sampled), cold (GC-read), writeback, other (prefetched, in flight).")
panel("Evictions/s",
      [(rate("memliner_jvm_evictions_total", "host, pid, state"), J + " {{state}}")], "ops")
panel("Prefetch",
      [(rate("memliner_jvm_prefetch_pages_total"), J + " prefetched"),
       (rate("memliner_jvm_prefetch_hit_pages_total"), J + " hit"),
       (rate("memliner_jvm_prefetch_wasted_pages_total"), J + " wasted")], "ops")
panel("Agent CPU (cores)",
      [(rate("memliner_jvm_agent_cpu_seconds_total", "host, pid, role"), J + " {{role}}")], "short")
panel("GC pauses (share of time)",
      [(rate("memliner_jvm_gc_pause_seconds_total"), J)], "percentunit")
panel("GC hooks (patched JDK)",
      [(rate("memliner_jvm_gc_hooks_deferred_total"), J + " deferred/s"),
       (rate("memliner_jvm_gc_hooks_hinted_pages_total"), J + " hinted pages/s")], "ops")
panel("Replicated stores: servers up",
      [(f"memliner_jvm_server_up{{{SEL}}}", J + " {{server}}")], "short",
      "1 while the JVM is connected to the server; 0 after a loss, until it rejoins.")
panel("Memory servers: storage",
      [("memliner_server_used_bytes", "{{instance}} used"),
       ("memliner_server_capacity_bytes", "{{instance}} capacity")], "bytes")
panel("Memory servers: pages held per JVM",
      [("memliner_namespace_pages * 4096", "{{instance}} {{namespace}}")], "bytes")
panel("Memory servers: traffic over TCP",
      [("rate(memliner_server_read_bytes_total[1m])", "{{instance}} read"),
       ("-rate(memliner_server_written_bytes_total[1m])", "{{instance}} written")], "Bps")
panel("Memory servers: connections",
      [("memliner_server_connections", "{{instance}}"),
       ("memliner_server_namespaces", "{{instance}} namespaces")], "short")


def variable(name):
    q = f"label_values(memliner_jvm_info, {name})"
    return {"name": name, "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": q, "refId": "StandardVariableQuery"}, "definition": q,
            "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "refresh": 2}


dashboard = {
    "title": "memliner: paged JVMs and memory servers",
    "uid": "memliner",
    "description": "Far-memory paging live: the JVMs' /metrics (agent metrics=ADDR) and the memory "
                   "servers' (memliner server --metrics ADDR). Generated by "
                   "scripts/grafana/make-dashboard.py.",
    "tags": ["memliner", "jvm", "far-memory"],
    "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": True,
    "time": {"from": "now-30m", "to": "now"}, "refresh": "10s",
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {},
         "label": "Prometheus"},
        variable("job"), variable("host"), variable("pid")]},
    "panels": panels,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memliner.json")
with open(out, "w") as f:
    f.write(json.dumps(dashboard, indent=2) + "\n")
print(f"{out}: {len(panels)} panels")
