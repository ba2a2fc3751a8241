#!/usr/bin/env bash
# The frame decoder under libFuzzer (fuzz/fuzz_targets/frame.rs) for SECS seconds (default 60;
# CI runs this). cargo-fuzz is installed from crates.io if missing. The machine's one (stable)
# toolchain builds the target without a sanitizer: the decoder is safe Rust, so what is looked
# for is a panic (a bad index, an overflow: debug assertions are on), a loop or an allocation
# past the frame limit. A crash leaves its input under fuzz/artifacts/frame/ and fails the
# script; replay it with
#   cargo fuzz run frame --sanitizer none fuzz/artifacts/frame/crash-...
# Usage: scripts/fuzz.sh [SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
mkdir -p fuzz/corpus/frame
cargo fuzz run frame --sanitizer none fuzz/corpus/frame -- \
    -max_total_time="$secs" -dict=fuzz/frame.dict -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1
