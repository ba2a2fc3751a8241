#!/usr/bin/env bash
# One service run, as `memliner bench` runs Cassandra: a node (scripts/cassandra.sh, with
# --no-mlock so that every cell, the kernel's twin included, runs the same process) and the
# verifying load against it (scripts/ycsb.sh), then SIGTERM to the node and its exit awaited.
#
#   scripts/cassandra-ycsb.sh --heap 1024m --port 19042 --storage-port 19043 \
#       [--gc G1] [--records N] [--ops N] [--workloads a,b] [--threads N]
#
# The node's JVM takes the agent from $MEMLINER_AGENT_OPTS (memliner run --agent-env
# MEMLINER_AGENT_OPTS); the load generator never does, and when this runs inside the kernel
# baseline's memory cgroup it moves itself out first: the limit is the node's. Prints the load's
# `ycsb-result` lines and, last, `RESULT workload=cassandra checksum=... verified=true
# elapsed_ms=...` (the workload phases' time, not the load's) as the Java workloads do. Exit
# status 1 when a read came back wrong, a request failed or the node did not stop cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

heap=1024m gc=G1 port= storage_port= records=200000 ops=100000 workloads=a,b threads=8
while [ $# -gt 0 ]; do
  case $1 in
    --heap) heap=$2; shift 2 ;;
    --gc) gc=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --storage-port) storage_port=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "cassandra-ycsb.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$port" ] && [ -n "$storage_port" ] || { echo "cassandra-ycsb.sh: --port and --storage-port are needed" >&2; exit 2; }

data=$(mktemp -d "${TMPDIR:-/tmp}/memliner-cassandra-ycsb.XXXXXX")
node=
cleanup() {
  if [ -n "$node" ] && kill -0 "$node" 2>/dev/null; then
    kill -TERM "$node" 2>/dev/null || true
    wait "$node" 2>/dev/null || true
  fi
  rm -rf "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/cassandra.sh --heap "$heap" --gc "$gc" --port "$port" --storage-port "$storage_port" \
  --data "$data/node" --no-mlock &
node=$!

out=$data/ycsb.out
rc=0
(
  # Out of the kernel baseline's cgroup, back where the baseline script runs, and no agent.
  if [ -n "${MEMLINER_OUTSIDE_CGROUP_PROCS:-}" ]; then
    echo "$BASHPID" >"$MEMLINER_OUTSIDE_CGROUP_PROCS"
  fi
  unset MEMLINER_AGENT_OPTS JVM_EXTRA_OPTS MEMLINER_OUTSIDE_CGROUP_PROCS
  exec scripts/ycsb.sh --port "$port" --workloads "$workloads" --records "$records" \
    --ops "$ops" --threads "$threads" --wait 300
) >"$out" || rc=$?
cat "$out"

kill -TERM "$node"
node_rc=0
wait "$node" || node_rc=$?
node=
if [ "$rc" != 0 ]; then
  echo "cassandra-ycsb.sh: the load failed (exit $rc)" >&2
  exit 1
fi
# 143: the JVM ended by the SIGTERM it was sent, after its shutdown hooks drained the node.
if [ "$node_rc" != 0 ] && [ "$node_rc" != 143 ]; then
  echo "cassandra-ycsb.sh: the node exited with status $node_rc" >&2
  exit 1
fi
ms=$(awk '/^ycsb-result / { sub(/^ycsb-result /, ""); if ($0 !~ /"phase":"load"/) {
           match($0, /"seconds":[0-9.]+/); s += substr($0, RSTART + 10, RLENGTH - 10) } }
         END { printf "%.0f", s * 1000 }' "$out")
echo "RESULT workload=cassandra checksum=ycsb-$workloads-r$records-o$ops verified=true elapsed_ms=$ms"
