#!/usr/bin/env bash
# A JVM over each one-sided path to an embedded server, interleaved, REPS times (default 3):
# unix:// memory files, tcp://, and fabric:// over libfabric's tcp (connected endpoints), shm and
# tcp;ofi_rxm (reliable datagrams). kv, G1, 256 MiB heap at 25% local. Prints one line per run:
# rep, path, wall seconds, the workload's checksum, the agent's fault service p50.
# Usage: scripts/fabric-providers.sh   (after cargo build --release --workspace)
set -euo pipefail
cd "$(dirname "$0")/.."
java=${JAVA:-java}
cmd=("$java" -XX:+UseG1GC -Xms256m -Xmx256m -cp target/java-classes memliner.workloads.KvCache
    --keys 800000 --capacity 400000 --ops 1200000)
[ -d target/java-classes/memliner/workloads ] ||
    { echo "fabric-providers: build the workloads first (scripts/test.sh or memliner demo does)" >&2; exit 1; }
for rep in $(seq "${REPS:-3}"); do
    for path in unix tcp fabric-tcp fabric-shm fabric-rxm; do
        case $path in
            unix) env=(); t=(--transport unix) ;;
            tcp) env=(); t=(--transport tcp) ;;
            fabric-tcp) env=(); t=(--transport fabric) ;;
            fabric-shm) env=(FI_PROVIDER=shm); t=(--transport fabric) ;;
            fabric-rxm) env=("FI_PROVIDER=tcp;ofi_rxm"); t=(--transport fabric) ;;
        esac
        start=$(date +%s.%N)
        out=$(env "${env[@]}" ./target/release/memliner run "${t[@]}" --local 25% -- "${cmd[@]}" 2>&1) ||
            { echo "$rep $path failed:"; echo "$out" | tail -3; continue; }
        end=$(date +%s.%N)
        echo "$rep $path $(echo "$end - $start" | bc) $(echo "$out" | grep -o 'checksum=[0-9a-f]*') $(echo "$out" | grep -o 'fault service p50 [0-9.]* us')"
    done
done
