//! When a thread of ours may spin instead of sleeping.
//!
//! On a virtual machine a sleeping thread takes tens of microseconds to wake, more than a
//! loopback round trip, so polling briefly for a reply or the next fault answers sooner. But
//! every microsecond we spin is taken from the application when it needs the core: on 2 cores,
//! three threads that each spun 50 us after every request left the JVM 15% of the CPU.
//!
//! The rule: spin only while a core is idle, i.e. while the runnable threads of the whole
//! machine (our spinners included) do not outnumber the cores. The kernel's count of runnable
//! threads (the fourth field of /proc/loadavg, instantaneous) is read at most once a
//! millisecond by whichever spinner finds the sample stale, so a decision costs one atomic
//! load. Without /proc/loadavg nobody spins.
//!
//! `MEMLINER_SPIN=always` or `never` overrides the rule (to measure what it costs or saves);
//! the default is `idle`.
//!
//! Caveat: inside a container that does not virtualise /proc/loadavg the count is the host's,
//! which makes spinning rarer, never more frequent.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest one spin lasts before the caller sleeps.
pub const SPIN: Duration = Duration::from_micros(30);

/// How old a sample of the runnable count may be.
const REFRESH: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Idle,
    Always,
    Never,
}

struct Governor {
    mode: Mode,
    epoch: Instant,
    cores: u64,
    sampled_ns: AtomicU64,
    idle_core: AtomicBool,
    loadavg: Mutex<Option<std::fs::File>>,
}

fn governor() -> &'static Governor {
    static G: OnceLock<Governor> = OnceLock::new();
    G.get_or_init(|| Governor {
        mode: match std::env::var("MEMLINER_SPIN").as_deref() {
            Ok("always") => Mode::Always,
            Ok("never") => Mode::Never,
            _ => Mode::Idle,
        },
        epoch: Instant::now(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        sampled_ns: AtomicU64::new(0),
        idle_core: AtomicBool::new(false),
        loadavg: Mutex::new(std::fs::File::open("/proc/loadavg").ok()),
    })
}

/// Parses the runnable count out of /proc/loadavg text (`0.80 0.42 0.17 1/79 3450`).
pub fn runnable_in_loadavg(text: &str) -> Option<u64> {
    text.split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

impl Governor {
    fn idle_core(&self) -> bool {
        match self.mode {
            Mode::Always => return true,
            Mode::Never => return false,
            Mode::Idle => {}
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let last = self.sampled_ns.load(Ordering::Relaxed);
        if now.saturating_sub(last) < REFRESH.as_nanos() as u64 && last != 0 {
            return self.idle_core.load(Ordering::Relaxed);
        }
        // One spinner refreshes; the others use the previous sample meanwhile.
        let Ok(mut file) = self.loadavg.try_lock() else {
            return self.idle_core.load(Ordering::Relaxed);
        };
        let idle = match file.as_mut() {
            Some(f) => {
                let mut buf = [0u8; 128];
                use std::io::Seek;
                let n = f
                    .seek(std::io::SeekFrom::Start(0))
                    .and_then(|_| f.read(&mut buf))
                    .unwrap_or(0);
                std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(runnable_in_loadavg)
                    .is_some_and(|r| r <= self.cores)
            }
            None => false,
        };
        self.idle_core.store(idle, Ordering::Relaxed);
        self.sampled_ns.store(now.max(1), Ordering::Relaxed);
        idle
    }
}

/// Whether spinning now would take no core from anyone.
pub fn may_spin() -> bool {
    governor().idle_core()
}

/// Calls `ready` until it returns true or [`SPIN`] passes, while a core is idle; `true` if it
/// became ready. The caller sleeps (blocks) when this returns false.
pub fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    if !may_spin() {
        return ready();
    }
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= SPIN {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_read_from_loadavg() {
        assert_eq!(runnable_in_loadavg("0.80 0.42 0.17 1/79 3450\n"), Some(1));
        assert_eq!(runnable_in_loadavg("1.00 1.00 1.00 12/800 99"), Some(12));
        assert_eq!(runnable_in_loadavg("garbage"), None);
    }

    #[test]
    fn spinning_stops_at_once_when_ready() {
        let mut n = 0;
        assert!(spin_until(|| {
            n += 1;
            true
        }));
        assert_eq!(n, 1);
    }
}
