#!/usr/bin/env python3
"""How the agent scales with the heap: the kv workload sized to each heap (3.2 M keys per GiB,
half of them cached, 1.5 operations per key), all-local and under memliner at 25% on the
embedded server, one after the other for each size.

    benchmarks/scale.py [--heaps 1,4,8,16] [--local 25%] [--kernel] [--out DIR]

Per heap: wall all-local and paged, their ratio; remote faults; the agent's CPU per remote
fault; the agent's own memory (every allocation of its code, at its peak) as a share of the
heap; how long the pager took to start (per-page tables, threads, registration, adoption); and
the ratios of those figures to the smallest heap's. With --kernel, also the kernel twin: the
JVM alone under scripts/kernel-baseline.sh, first without a limit (what it holds beside the
heap) and then limited to that plus memliner's budget, swapping to a zram device as large as
the heap; its wall, the heap RSS it left the heap and its swap-ins beside memliner's. Writes scale.md and scale.csv into --out
(default benchmarks/results/<date>-scale) and prints the table. Needs `cargo build --release
--workspace` and the Java workloads (`javac -d target/java-classes $(find java/src -name
'*.java')`, which this does when they are missing). Nothing else should run meanwhile: a 16 GiB
heap all-local takes 16 GiB of this machine's memory, and paged its memory files take as much.
"""

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMLINER = os.path.join(ROOT, "target/release/memliner")
CLASSES = os.path.join(ROOT, "target/java-classes")


def kv_args(gib):
    keys = 3_200_000 * gib
    return ["memliner.workloads.KvCache", "--keys", str(keys), "--capacity", str(keys // 2),
            "--ops", str(keys * 3 // 2)]


def java_cmd(gib):
    return ["java", "-XX:+UseG1GC", f"-Xms{gib}g", f"-Xmx{gib}g", "-cp", CLASSES] + kv_args(gib)


def checksum(stdout):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            kv = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
            if kv.get("verified") != "true":
                sys.exit(f"scale: the workload did not verify: {line}")
            return kv["checksum"]
    sys.exit(f"scale: no RESULT line in:\n{stdout[-2000:]}")


def run(cmd, env=None):
    t = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t
    if out.returncode != 0:
        sys.exit(f"scale: {' '.join(cmd[:6])} ... failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return wall, checksum(out.stdout), out.stderr


def kernel_figures(stderr):
    """The last `kernel-baseline: KEY=N ...` line, as a dict of ints."""
    lines = [l for l in stderr.splitlines() if l.startswith("kernel-baseline: max_usage=")]
    if not lines:
        sys.exit(f"scale: kernel-baseline printed no figures:\n{stderr[-2000:]}")
    return {k: int(v) for k, v in (p.split("=", 1) for p in lines[-1].split()[1:])}


def kernel_twin(gib, budget_bytes):
    """The kernel at memliner's heap memory: a run without a limit says what the JVM holds
    beside its heap, then one limited to that plus the budget."""
    script = os.path.join(ROOT, "scripts/kernel-baseline.sh")
    env = dict(os.environ, MEMLINER_ZRAM_SIZE=f"{gib}G")
    print(f"scale: {gib} GiB kernel, no limit ...", file=sys.stderr, flush=True)
    _, free_sum, err = run([script, "none", "--"] + java_cmd(gib), env)
    free = kernel_figures(err)
    limit = free["beside_heap"] + min(budget_bytes, free["max_heap"])
    print(f"scale: {gib} GiB kernel at {limit >> 20} MiB ...", file=sys.stderr, flush=True)
    wall, twin_sum, err = run([script, str(limit), "--"] + java_cmd(gib), env)
    twin = kernel_figures(err)
    return {"wall": wall, "checksums": (free_sum, twin_sum), "limit": limit,
            "max_heap": twin["max_heap"], "pswpin": twin["pswpin"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heaps", default="1,4,8,16", help="heap sizes in GiB, comma-separated")
    ap.add_argument("--local", default="25%", help="memliner's local budget (default 25%%)")
    ap.add_argument("--kernel", action="store_true",
                    help="also run the kernel twin at memliner's heap memory (needs root and zram)")
    ap.add_argument("--out", default=None, help="output folder")
    a = ap.parse_args()
    heaps = [int(h) for h in a.heaps.split(",")]
    out_dir = a.out or os.path.join(
        ROOT, "benchmarks/results", datetime.date.today().strftime("%Y%m%d") + "-scale")
    os.makedirs(out_dir, exist_ok=True)
    if not os.path.exists(MEMLINER):
        sys.exit("scale: build first: cargo build --release --workspace")
    if not os.path.isdir(os.path.join(CLASSES, "memliner/workloads")):
        srcs = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, "java/src"))
                for f in fs if f.endswith(".java")]
        subprocess.run(["javac", "-d", CLASSES] + srcs, check=True)

    rows = []
    for gib in heaps:
        print(f"scale: {gib} GiB all-local ...", file=sys.stderr, flush=True)
        local_wall, local_sum, _ = run(java_cmd(gib))
        stats = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        print(f"scale: {gib} GiB at {a.local} ...", file=sys.stderr, flush=True)
        paged_wall, paged_sum, _ = run([MEMLINER, "run", "--quiet", "--local", a.local,
                                     "--stats", stats, "--"] + java_cmd(gib))
        if paged_sum != local_sum:
            sys.exit(f"scale: {gib} GiB: checksum {paged_sum} paged, {local_sum} all-local")
        with open(stats) as f:
            doc = json.load(f)
        os.unlink(stats)
        pager = doc["pager"]
        heap = pager["heap_pages"] * 4096
        rows.append({
            "heap_gib": gib,
            "all_local_s": round(local_wall, 2),
            "paged_s": round(paged_wall, 2),
            "x_all_local": round(paged_wall / local_wall, 3),
            "remote_faults": pager["remote"]["pages_read"],
            "agent_cpu_s": round(pager["agent_cpu"]["total_s"], 2),
            "cpu_per_remote_fault_us": round(pager["agent_cpu"].get("per_remote_fault_us") or 0, 2),
            "agent_peak_mib": round(doc["process"]["agent_peak_bytes"] / 2**20, 1),
            "agent_pct_heap": round(doc["process"]["agent_peak_bytes"] * 100 / heap, 3),
            "start_ms": round(pager["start_ms"], 1),
            "checksum": local_sum,
        })
        if a.kernel:
            k = kernel_twin(gib, pager["budget_pages"] * 4096)
            if any(c != local_sum for c in k["checksums"]):
                sys.exit(f"scale: {gib} GiB: kernel checksums {k['checksums']}, {local_sum} all-local")
            rows[-1].update({
                "kernel_limit_mib": k["limit"] >> 20,
                "kernel_heap_mib": k["max_heap"] >> 20,
                "kernel_s": round(k["wall"], 2),
                "kernel_x_all_local": round(k["wall"] / local_wall, 3),
                "kernel_swap_ins": k["pswpin"],
                "paged_over_kernel": round(paged_wall / k["wall"], 3),
            })
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    base = rows[0]
    with open(os.path.join(out_dir, "scale.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    md = [
        f"# The agent at heaps of {', '.join(str(h) for h in heaps)} GiB\n",
        f"kv sized to the heap (3.2 M keys per GiB, half cached, 1.5 operations per key), G1, "
        f"all-local and then memliner at {a.local} on the embedded server, one run each; "
        f"checksums equal in every pair. Command: `benchmarks/scale.py --heaps {a.heaps} "
        f"--local {a.local}`. Agent memory: every allocation of the agent's code at its peak "
        f"(per-page tables, lists, checksums, logs, histograms, buffers). Start: the pager's "
        f"start (tables, threads, registration with userfaultfd, adoption).\n",
        "| heap | all-local s | paged s | x all-local | (/ {0} GiB) | remote faults | agent CPU s "
        "| us per remote fault | (/ {0} GiB) | agent memory MiB | % of heap | start ms |".format(
            base["heap_gib"]),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['heap_gib']} GiB | {r['all_local_s']:.1f} | {r['paged_s']:.1f} | "
            f"{r['x_all_local']:.2f}x | {r['x_all_local'] / base['x_all_local']:.2f} | "
            f"{r['remote_faults']:,} | {r['agent_cpu_s']:.1f} | {r['cpu_per_remote_fault_us']:.1f} | "
            f"{r['cpu_per_remote_fault_us'] / max(base['cpu_per_remote_fault_us'], 1e-9):.2f} | "
            f"{r['agent_peak_mib']:.1f} | {r['agent_pct_heap']:.2f}% | {r['start_ms']:.1f} |")
    if a.kernel:
        md += [
            "",
            f"The kernel twin: the JVM alone, limited to what it held beside the heap without a "
            f"limit plus memliner's budget, swapping to zram (lz4) as large as the heap. Kernel "
            f"heap: the heap RSS the kernel left the heap (memliner's is its budget).",
            "",
            "| heap | limit MiB | kernel heap MiB | kernel s | kernel x all-local | swap-ins "
            "| memliner remote faults | memliner / kernel wall |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            md.append(
                f"| {r['heap_gib']} GiB | {r['kernel_limit_mib']:,} | {r['kernel_heap_mib']:,} | "
                f"{r['kernel_s']:.1f} | {r['kernel_x_all_local']:.2f}x | {r['kernel_swap_ins']:,} | "
                f"{r['remote_faults']:,} | **{r['paged_over_kernel']:.2f}x** |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(out_dir, "scale.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
