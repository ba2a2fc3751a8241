#!/usr/bin/env python3
"""Side-by-side runs of the pager's data-path variants on one workload, interleaved, with
medians: `benchmarks/pager-compare.py [--reps N] [--workload graph|kv] [--also LABEL=PATH]
[--option KEY=VALUE] [--only WORDS] [--out FILE]` (after `cargo build --release` and compiling java/src into
target/java-classes, as `memliner demo` does). `--also` adds the TCP and in-process runs of
another build's `memliner` (say, a checkout of an earlier commit) to the same interleaving.

Each variant is one `memliner run` (embedded TCP server unless the variant says `local`);
the report gives wall-time medians, the ratio to the no-agent run, and from the stats:
remote faults, local reactivation faults, direct reclaims, agent CPU per remote fault,
handler-side and faulting-thread (probe) latency."""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMLINER = os.path.join(ROOT, "target/release/memliner")
CLASSES = os.path.join(ROOT, "target/java-classes")
WORKLOADS = {
    "graph": ["memliner.workloads.Graph", "--nodes", "30000"],
    "kv": ["memliner.workloads.KvCache", "--keys", "100000", "--capacity", "50000", "--ops", "150000"],
}
JAVA = []

VARIANTS = [
    ("no agent (all local)", None, {}),
    ("memliner, tcp (reclaim=fifo)", ["--policy", "memliner"], {}),
    ("memliner, tcp, reclaim=clock", ["--policy", "memliner", "--reclaim", "clock"], {}),
    ("baseline, tcp", ["--policy", "baseline"], {}),
    ("memliner, in-process store", ["--policy", "memliner", "--server", "local"], {}),
    ("memliner, tcp, MEMLINER_SPIN=always", ["--policy", "memliner"], {"MEMLINER_SPIN": "always"}),
]


def run(flags, env, binary=MEMLINER):
    stats = tempfile.mktemp(suffix=".json")
    cmd = JAVA if flags is None else [binary, "run", "-q", "--local", "25%", "--stats", stats] + flags + ["--"] + JAVA
    t = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    wall = time.monotonic() - t
    result = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
    if out.returncode != 0 or not result or "verified=true" not in result[0]:
        sys.exit(f"run failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    checksum = [f for f in result[0].split() if f.startswith("checksum=")][0]
    doc = None
    if flags is not None:
        with open(stats) as f:
            doc = json.load(f)
        os.remove(stats)
    return wall, checksum, doc


def pick(doc, *path):
    for p in path:
        if doc is None:
            return None
        doc = doc.get(p)
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="-")
    ap.add_argument("--workload", default="graph", choices=sorted(WORKLOADS))
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PATH")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="add tcp and in-process variants with this agent option (MEMLINER_OPTIONS)")
    ap.add_argument("--only", default="", metavar="WORDS",
                    help="comma-separated: keep only variants whose name contains one of them (and no-agent)")
    a = ap.parse_args()
    for opt in a.option:
        VARIANTS.append((f"memliner, tcp, {opt}", ["--policy", "memliner"], {"MEMLINER_OPTIONS": opt}))
        VARIANTS.append((f"memliner, in-process store, {opt}", ["--policy", "memliner", "--server", "local"], {"MEMLINER_OPTIONS": opt}))
    for spec in os.environ.get("PC_ENV", "").split():
        k, v = spec.split("=", 1)
        VARIANTS.append((f"memliner, tcp, {spec}", ["--policy", "memliner"], {k: v}))
        VARIANTS.append((f"memliner, in-process store, {spec}", ["--policy", "memliner", "--server", "local"], {k: v}))
    if a.only:
        words = a.only.split(",")
        VARIANTS[1:] = [v for v in VARIANTS[1:] if any(w in v[0] for w in words)]
    JAVA.extend(["java", "-XX:+UseG1GC", "-Xms32m", "-Xmx32m", "-cp", CLASSES] + WORKLOADS[a.workload])
    for spec in a.also:
        label, path = spec.split("=", 1)
        VARIANTS.append((f"{label}: memliner, tcp", ["--policy", "memliner"], {"BINARY": path}))
        VARIANTS.append((f"{label}: memliner, in-process store", ["--policy", "memliner", "--server", "local"], {"BINARY": path}))
    rows = {v[0]: [] for v in VARIANTS}
    checksums = set()
    for rep in range(a.reps):
        order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
        for name, flags, env in order:
            env = dict(env)
            binary = env.pop("BINARY", MEMLINER)
            wall, cs, doc = run(flags, env, binary)
            checksums.add(cs)
            rows[name].append((wall, doc))
            print(f"rep {rep + 1}/{a.reps} {name}: {wall:.2f} s", file=sys.stderr)
    if len(checksums) != 1:
        sys.exit(f"checksums differ: {checksums}")
    base = statistics.median(w for w, _ in rows[VARIANTS[0][0]])
    med = lambda xs: statistics.median(xs) if xs else None
    lines = ["| variant | wall s (median) | x all-local | remote faults | reactivations | direct reclaims | agent CPU s | CPU us / remote fault | handler p50/p99 us | thread p50/p99 us |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, flags, _ in VARIANTS:
        walls = [w for w, _ in rows[name]]
        docs = [d for _, d in rows[name] if d]
        m = lambda *p: med([pick(d, *p) for d in docs if pick(d, *p) is not None])
        fmt = lambda v, f="{:.0f}": "–" if v is None else f.format(v)
        lines.append("| {} | {:.2f} | {:.1f} | {} | {} | {} | {} | {} | {}/{} | {}/{} |".format(
            name, med(walls), med(walls) / base,
            fmt(m("faults", "remote")), fmt(m("faults", "reactivate")),
            fmt(m("pager", "reclaim", "direct_reclaims")),
            fmt(m("pager", "agent_cpu", "total_s"), "{:.2f}"),
            fmt(m("pager", "agent_cpu", "per_remote_fault_us"), "{:.1f}"),
            fmt(m("pager", "latency", "remote", "p50_us"), "{:.1f}"), fmt(m("pager", "latency", "remote", "p99_us"), "{:.0f}"),
            fmt(m("pager", "latency", "thread_remote", "p50_us"), "{:.1f}"), fmt(m("pager", "latency", "thread_remote", "p99_us"), "{:.0f}")))
    text = "\n".join(lines) + "\n"
    if a.out == "-":
        print(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)
        print(text)


if __name__ == "__main__":
    main()
