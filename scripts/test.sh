#!/usr/bin/env bash
# The test command: builds the workspace (the agent is a cdylib that `cargo test` does not
# build), then runs every test: unit, transport conformance, pager races, real JVMs.
# Ends with one line of totals over all test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --release --workspace "$@" 2>&1 | tee "$log"
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
