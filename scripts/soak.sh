#!/usr/bin/env bash
# The long failover checks, run before a release (CI runs short versions through test.sh):
#   1. kill -9 of one of two memory servers at a random moment of each of RUNS JVM runs
#      (graph and kv, G1 and Shenandoah, 25% local, two copies of every page); the server is
#      started again on its port and must rejoin the running JVM; checksums right, no page lost.
#   2. SOAK_SECS of kv JVMs one after another against two servers, one of them killed and
#      started again every RESTART_SECS.
# Usage: scripts/soak.sh [RUNS [SOAK_SECS [RESTART_SECS]]]   (defaults: 20, 1800, 180)
# Each test prints its MEMLINER_FAILOVER_SEED; set it to replay a run's random moments.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
soak=${2:-1800}
every=${3:-180}
cargo build --release --workspace
MEMLINER_FAILOVER_RUNS=$runs cargo test --release -p memliner-cli --test failover kill_nine_mid_run -- --nocapture
MEMLINER_SOAK_SECS=$soak MEMLINER_SOAK_RESTART_SECS=$every \
    cargo test --release -p memliner-cli --test failover soak -- --nocapture
