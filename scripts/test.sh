#!/usr/bin/env bash
# The test command: builds the workspace (the agent is a cdylib that `cargo test` does not
# build), then runs every test: unit, transport conformance, pager races (under both fault
# deliveries), real JVMs.
# Ends with one line of totals over all test binaries: passed, failed, and skipped (tests that
# cannot run on this host, e.g. verbs without an RDMA device, listed above the totals; the
# harness counts them as passed, so they are taken out of that count).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
log=$(mktemp)
export MEMLINER_SKIP_LOG=$(mktemp)
trap 'rm -f "$log" "$MEMLINER_SKIP_LOG"' EXIT
cargo test --release --workspace "$@" 2>&1 | tee "$log"
# The pager's own tests once more with faults served by signal (the JVM's default; the run
# above used handler threads).
MEMLINER_TEST_FAULTS=signal cargo test --release -p memliner-agent --tests "$@" 2>&1 | tee -a "$log"
# fabric:// once more over reliable-datagram endpoints (FI_EP_RDM), as efa and verbs;ofi_rxm
# are used: over shm (one host) and over tcp through ofi_rxm, the conformance suite, the
# client's key tests and a JVM.
if [ $# -eq 0 ]; then
    for p in shm 'tcp;ofi_rxm'; do
        FI_PROVIDER=$p cargo test --release -p memliner-swap-backend --test fabric 2>&1 | tee -a "$log"
        FI_PROVIDER=$p cargo test --release -p memliner-swap-backend --lib fabric 2>&1 | tee -a "$log"
        FI_PROVIDER=$p cargo test --release -p memliner-cli --test jvm fabric_kv_g1_25 2>&1 | tee -a "$log"
    done
fi
skipped=$(wc -l <"$MEMLINER_SKIP_LOG")
sed 's/^/skipped: /' "$MEMLINER_SKIP_LOG"
awk -v s="$skipped" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed, %d skipped\n", p - s, f, s }' "$log"
