#!/usr/bin/env bash
# The test command: builds the workspace (the agent is a cdylib that `cargo test` does not
# build), then runs every test: unit, transport conformance, pager races, real JVMs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
cargo test --release --workspace "$@"
