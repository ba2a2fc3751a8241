#!/usr/bin/env bash
# What a one-sided read through libfabric's shm provider (FI_EP_RDM) costs the target's CPU:
# builds benchmarks/probes/shm_rma.c against Debian's libfabric-dev headers (downloaded into
# target/, not installed) and runs it with the server idle, polling, and polling then idle.
# Usage: scripts/shm-rma-probe.sh [PROVIDER]   (default shm; needs libfabric1)
set -euo pipefail
cd "$(dirname "$0")/.."
prov=${1:-shm}
dir=target/shm-rma-probe
mkdir -p "$dir"
if [ ! -f "$dir/root/usr/include/rdma/fabric.h" ]; then
    (cd "$dir" && apt-get download libfabric-dev >/dev/null 2>&1 && dpkg -x libfabric-dev_*.deb root) ||
        { echo "shm-rma-probe: cannot fetch libfabric-dev's headers (apt-get download libfabric-dev)" >&2; exit 1; }
fi
lib=$(ldconfig -p | awk '/libfabric.so.1 /{print $NF; exit}')
[ -n "$lib" ] || { echo "shm-rma-probe: libfabric.so.1 is not installed (apt-get install libfabric1)" >&2; exit 1; }
gcc -O2 -I "$dir/root/usr/include" benchmarks/probes/shm_rma.c -o "$dir/probe" "$lib"
for mode in idle warm poll; do
    echo "== server $mode"
    timeout 60 "$dir/probe" "$prov" "$mode" || echo "(exit $?)"
done
