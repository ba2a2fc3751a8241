#!/usr/bin/env bash
# The silent-server targets, measured side by side on one machine (a Markdown table on stdout):
#   1. two memory servers, two copies of every page, a kv JVM at 25% local: undisturbed, then
#      with one server stopped (SIGSTOP: connections open, no answer) STOP_AT seconds into the
#      run, for each moment given; the run must finish with the undisturbed checksum, within the
#      undisturbed wall plus 5 s;
#   2. one server, stopped the same way: the JVM must end with the FATAL line naming the page
#      and the server within the deadline plus 1 s of the stop.
# Usage: scripts/failover-targets.sh [REPS [DEADLINE [STOP_AT...]]]  (defaults: 3, 2s, 1 3 5:
# moments inside the undisturbed run, about 7 s here)
# Needs `cargo build --release --workspace` (done here) and a JDK 17 `java` on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
deadline=${2:-2s}
if [ $# -gt 2 ]; then shift 2; moments=("$@"); else moments=(1 3 5); fi
cargo build --release --workspace >&2
memliner=target/release/memliner
classes=$(mktemp -d)
javac -d "$classes" java/src/memliner/workloads/*.java
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  rm -rf "$classes" "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A server on a fresh port, its pid and port in server_pid and server_port, once it accepts
# connections (polled, at most 10 s).
server() {
  server_port=$(port)
  "$memliner" server --listen "127.0.0.1:$server_port" --capacity 2g 2>/dev/null &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$server_port") 2>/dev/null && return
    sleep 0.1
  done
  echo "server on $server_port never came up" >&2
  exit 1
}
now() { date +%s.%N; }
jvm=(java -XX:+UseG1GC -Xms32m -Xmx32m -cp "$classes" memliner.workloads.KvCache
     --keys 60000 --ops 200000 --capacity 30000)
checksum() { grep -o 'checksum=[^ ]*' "$1" | head -1; }

# One run: $1 = servers, $2 = pid to stop (or -), $3 = seconds into the run; prints
# "wall_s stop_to_end_s exit fatal=N checksum" (stop_to_end_s 0: the run ended first).
run() {
  local out="$work/out.$RANDOM" rc=0 stopper=
  local t0 t1
  t0=$(now)
  "$memliner" run --server "$1" --local 25% --deadline "$deadline" -- "${jvm[@]}" >"$out" 2>&1 &
  local j=$!
  if [ "$2" != - ]; then
    # The injected moment, not a synchronisation: the stop lands wherever the run is then.
    (sleep "$3" && kill -STOP "$2" && now >"$out.stopped") &
    stopper=$!
  fi
  wait "$j" || rc=$?
  t1=$(now)
  if [ -n "$stopper" ]; then
    kill "$stopper" 2>/dev/null || true
    wait "$stopper" 2>/dev/null || true
    kill -CONT "$2"
  fi
  local ts=0 fatal
  [ -s "$out.stopped" ] && ts=$(cat "$out.stopped")
  fatal=$(grep -c 'memliner: FATAL' "$out" || true)
  python3 -c "import sys; t0,t1,ts=map(float,sys.argv[1:4]); print(f'{t1-t0:.1f} {t1-ts if ts else 0:.1f}', end=' ')" "$t0" "$t1" "$ts"
  echo "$rc fatal=$fatal $(checksum "$out")"
  cp "$out" "$work/last.log"
}

server; a=$server_pid; pa=$server_port
server; pb=$server_port
two="tcp://127.0.0.1:$pa+tcp://127.0.0.1:$pb"
reference=$("${jvm[@]}" | grep -o 'checksum=[^ ]*' | head -1)
echo "| run | wall s (each) | median | x undisturbed | end after stop s | checksums right |"
echo "|---|---|---|---|---|---|"
median() { tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
row() { # name, lines of run output
  local name=$1 lines=$2 walls stops right
  walls=$(awk '{print $1}' <<<"$lines" | xargs)
  stops=$(awk '{print $2}' <<<"$lines" | xargs)
  right=$(grep -c -- "$reference" <<<"$lines" || true)
  local m
  m=$(median <<<"$walls")
  echo "| $name | $walls | $m | $(python3 -c "print(f'{$m/$base:.2f}')") | $stops | $right of $(wc -l <<<"$lines") |"
}
lines=$(for _ in $(seq "$reps"); do run "$two" - 0; done)
base=$(awk '{print $1}' <<<"$lines" | xargs | median)
row "two copies, undisturbed" "$lines"
for t in "${moments[@]}"; do
  lines=$(for _ in $(seq "$reps"); do run "$two" "$a" "$t"; done)
  row "two copies, one server stopped at ${t} s" "$lines"
done
server; c=$server_pid; pc=$server_port
lines=$(for _ in $(seq "$reps"); do run "tcp://127.0.0.1:$pc" "$c" 3; done)
echo
echo "One server stopped 3 s into the run (deadline $deadline): seconds from the stop to the JVM's end, exit status, FATAL lines:"
echo
awk '{print "- " $2 " s, exit " $3 ", " $4}' <<<"$lines"
echo
echo "A FATAL line: $(grep -m1 'memliner: FATAL' "$work/last.log" || echo none)"
