//! `scripts/kernel-baseline.sh`, through which every comparison with kernel swap runs: its
//! figures for a process past 2 GiB. mawk printed sums from 2^31 up as `2.15e+09`, which the
//! shell's arithmetic refused: the heap's peak stopped at 2 GiB, and under a limit the script
//! stopped and took the process with it.
//!
//! Needs root, a cgroup v1 memory controller and zram; where the script says SKIP, so does the
//! test.

use std::process::Command;

use memliner_cli::locate;

/// Touches every page of one private 2.25 GiB mapping and holds it for the script's sampler
/// (a heap sample every 200 ms).
const HOLD: &str = "import time
n = 2304 << 20
b = bytearray(n)
b[::4096] = b'\\x01' * (n // 4096)
time.sleep(1.5)
print('held', len(b))";

#[test]
fn a_mapping_past_2_gib_is_measured_under_a_limit() {
    let script = locate::project_root()
        .expect("run from the checkout")
        .join("scripts/kernel-baseline.sh");
    let limit: u64 = 3 << 30;
    let out = Command::new(script)
        .args([&limit.to_string(), "--", "python3", "-c", HOLD])
        .output()
        .expect("run kernel-baseline.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        swap_backend::conformance::skip("kernel-baseline past 2 GiB", stderr.trim());
        return;
    }
    assert!(
        out.status.success(),
        "the script or its process failed:\n{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("held"));
    let figures = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("kernel-baseline: max_usage="))
        .unwrap_or_else(|| panic!("no figures in:\n{stderr}"));
    let max_heap: u64 = figures
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("max_heap="))
        .expect("a max_heap figure")
        .parse()
        .unwrap_or_else(|e| panic!("max_heap is not a count ({e}): {figures}"));
    assert!(
        max_heap >= 2200 << 20,
        "the 2.25 GiB mapping was read as {max_heap} bytes: {figures}"
    );
}
