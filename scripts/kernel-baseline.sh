#!/usr/bin/env bash
# What users run instead of memliner: the kernel swapping to a zram device, the process held
# to a memory limit by a cgroup v1 memory controller. Runs COMMAND that way, with no agent.
#
#   scripts/kernel-baseline.sh LIMIT -- COMMAND...
#
# LIMIT is a byte count for memory.limit_in_bytes, or `none` to measure the command's peak
# usage (printed) without a limit. Creates a zram swap device (hot_add) and a cgroup, and
# removes both when the command ends, however it ends. Needs root.
#
# Prints on stderr, last: `kernel-baseline: max_usage=BYTES max_anon=BYTES max_heap=BYTES
# beside_heap=BYTES pgmajfault=N pswpin=N pswpout=N`: the cgroup's peak charge, its peak
# anonymous RSS and the peak RSS of the largest private read-write anonymous mapping of any of
# its processes (a JVM's heap, with -Xms = -Xmx, also under a launcher; sampled every 50 and
# 200 ms while it runs: what the limit actually left it), the most it needed beside that
# mapping at one sample (anonymous memory and mapped files less the mapping), its major faults,
# and the pages swapped in and out meanwhile (system-wide counters; run nothing else).
# Exit: the command's status; 3 with `SKIP: reason` on stderr when the setup is impossible.
# MEMLINER_ZRAM_SIZE sizes the zram device (default 4G: what it can hold uncompressed, so a
# heap with more than that swapped out needs more).
set -uo pipefail

skip() {
    echo "SKIP: $*" >&2
    exit 3
}

[ $# -ge 3 ] && [ "$2" = "--" ] || {
    echo "usage: $0 LIMIT_BYTES|none -- COMMAND..." >&2
    exit 2
}
limit=$1
shift 2
case "$limit" in
none | [0-9]*) ;;
*) echo "LIMIT must be a byte count or none, got '$limit'" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || skip "needs root to create a cgroup and a swap device"
memcg=/sys/fs/cgroup/memory
[ -w "$memcg/cgroup.procs" ] && [ -f "$memcg/memory.limit_in_bytes" ] ||
    skip "no writable cgroup v1 memory controller at $memcg (cgroup v2-only systems lack it)"
[ -w /sys/class/zram-control/hot_add ] ||
    { modprobe zram num_devices=0 2>/dev/null || true; }
[ -w /sys/class/zram-control/hot_add ] ||
    skip "no zram (load the zram module: modprobe zram)"
command -v mkswap >/dev/null && command -v swapon >/dev/null ||
    skip "mkswap/swapon missing (util-linux)"

cg="$memcg/memliner-kernel-baseline-$$"
dev=""
cleanup() {
    if [ -d "$cg" ]; then
        # The command has exited; anything left (stray children) goes back to the root.
        while read -r pid; do echo "$pid" >"$memcg/cgroup.procs" 2>/dev/null; done <"$cg/cgroup.procs"
        rmdir "$cg" 2>/dev/null || echo "kernel-baseline: could not remove $cg" >&2
    fi
    if [ -n "$dev" ]; then
        swapoff "/dev/zram$dev" 2>/dev/null
        echo 1 >"/sys/block/zram$dev/reset" 2>/dev/null
        echo "$dev" >/sys/class/zram-control/hot_remove 2>/dev/null ||
            echo "kernel-baseline: could not remove /dev/zram$dev" >&2
    fi
}
trap cleanup EXIT
trap '[ -n "${child:-}" ] && kill "$child" 2>/dev/null; exit 130' INT TERM

dev=$(cat /sys/class/zram-control/hot_add) || skip "cannot add a zram device"
zdev="/sys/block/zram$dev"
# lz4 where offered: what distributions pick for swap on zram.
grep -qw lz4 "$zdev/comp_algorithm" && echo lz4 >"$zdev/comp_algorithm"
echo "${MEMLINER_ZRAM_SIZE:-4G}" >"$zdev/disksize" ||
    skip "cannot size /dev/zram$dev to ${MEMLINER_ZRAM_SIZE:-4G}"
mkswap "/dev/zram$dev" >/dev/null 2>&1 || skip "mkswap /dev/zram$dev failed"
swapon -p 32000 "/dev/zram$dev" || skip "swapon /dev/zram$dev failed (swap disabled here?)"

mkdir "$cg" || skip "cannot create $cg"
if [ "$limit" != none ]; then
    echo "$limit" >"$cg/memory.limit_in_bytes" || skip "cannot set the memory limit"
fi
echo 100 >"$cg/memory.swappiness" 2>/dev/null
vmstat() { awk -v k="$1" '$1 == k {print $2}' /proc/vmstat; }
pswpin0=$(vmstat pswpin)
pswpout0=$(vmstat pswpout)

# The command runs in the cgroup; this shell stays outside it to clean up. A command that
# starts a client of its own (a load generator beside a service) moves the client back out
# through the procs file of this shell's memory cgroup, in MEMLINER_OUTSIDE_CGROUP_PROCS.
MEMLINER_OUTSIDE_CGROUP_PROCS="$memcg$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)/cgroup.procs"
MEMLINER_OUTSIDE_CGROUP_PROCS=${MEMLINER_OUTSIDE_CGROUP_PROCS/\/\/cgroup.procs/\/cgroup.procs}
export MEMLINER_OUTSIDE_CGROUP_PROCS
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "$@" &
child=$!
# The cgroup's anonymous RSS while it runs (memory.stat has no peak of it), and the RSS of the
# largest private read-write anonymous mapping of any process in the cgroup (smaps: Size comes
# before Rss): the JVM's heap whether it is the command or a launcher's child (PySpark's python
# starts Spark's JVM).
heap_rss() {
    local smaps=()
    while read -r pid; do smaps+=("/proc/$pid/smaps"); done <"$cg/cgroup.procs"
    awk 'FNR == 1 { anon = 0 }
         /^[0-9a-f]+-[0-9a-f]+ / { anon = (NF == 5 && $2 == "rw-p") }
         /^Size:/ { size = $2 }
         /^Rss:/ { if (anon && size > best) { best = size; rss = $2 } }
         END { printf "%.0f\n", rss * 1024 }' "${smaps[@]}" 2>/dev/null
}
# Sums print with %.0f: mawk prints a number from 2^31 up as 2.1e+09 with `print`, which the
# shell's arithmetic refuses (and a shell stops at), so a heap past 2 GiB ended the run.
# smaps walks the page tables (a millisecond or two for a 1 GiB heap): every 4th turn only.
max_anon=0
max_heap=0
beside_heap=0
turn=0
while kill -0 "$child" 2>/dev/null; do
    anon=$(awk '$1 == "total_rss" {print $2}' "$cg/memory.stat" 2>/dev/null)
    [ -n "$anon" ] && [ "$anon" -gt "$max_anon" ] && max_anon=$anon
    if [ $((turn++ % 4)) = 0 ]; then
        heap=$(heap_rss)
        [ -n "$heap" ] && [ "$heap" -gt "$max_heap" ] && max_heap=$heap
        # What it needs beside the heap, read at the same instant as the heap and only while
        # the heap is at its peak (not while an exiting process unmaps it): its anonymous
        # memory less the heap, plus the files it maps. Not the peak charge less the peak heap:
        # that puts the heap's growth after the last sample (hundreds of MiB a second) and any
        # page cache the run happened to charge (50 MiB of class and JDK files on a cold cache)
        # beside the heap, and the kernel then has room the agent's JVM does not.
        need=$(awk '$1 == "total_rss" || $1 == "total_mapped_file" {n += $2} END {printf "%.0f\n", n}' \
            "$cg/memory.stat" 2>/dev/null)
        if [ -n "$heap" ] && [ "$heap" -gt 0 ] && [ "$heap" -ge "$max_heap" ] && [ -n "$need" ] &&
            [ $((need - heap)) -gt "$beside_heap" ]; then
            beside_heap=$((need - heap))
        fi
    fi
    sleep 0.05
done
wait "$child"
status=$?

echo "kernel-baseline: max_usage=$(cat "$cg/memory.max_usage_in_bytes")" \
    "max_anon=$max_anon" \
    "max_heap=$max_heap" \
    "beside_heap=$beside_heap" \
    "pgmajfault=$(awk '/^total_pgmajfault/ {print $2}' "$cg/memory.stat")" \
    "pswpin=$(($(vmstat pswpin) - pswpin0))" \
    "pswpout=$(($(vmstat pswpout) - pswpout0))" >&2
exit $status
