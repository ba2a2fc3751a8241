#!/usr/bin/env bash
# The frame decoder under libFuzzer (fuzz/fuzz_targets/frame.rs) for SECS seconds (default 60;
# CI runs this). cargo-fuzz needs a nightly compiler; both are installed if missing. A crash
# leaves its input under fuzz/artifacts/frame/ and fails the script; replay it with
#   cargo +nightly fuzz run frame fuzz/artifacts/frame/crash-...
# Usage: scripts/fuzz.sh [SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
mkdir -p fuzz/corpus/frame
# One job: this machine's other core is the system's.
cargo +nightly fuzz run frame fuzz/corpus/frame -- \
    -max_total_time="$secs" -dict=fuzz/frame.dict -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1
