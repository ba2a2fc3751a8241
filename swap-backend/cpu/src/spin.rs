//! When a thread of ours may spin instead of sleeping.
//!
//! On a virtual machine a sleeping thread takes tens of microseconds to wake, more than a
//! loopback round trip, so polling briefly for a reply or the next fault answers sooner. But
//! every microsecond we spin is taken from the application when it needs the core: on 2 cores,
//! three threads that each spun 50 us after every request left the JVM 15% of the CPU.
//!
//! The rule: spinning is free while a core is idle, i.e. while the runnable threads of the
//! whole machine (our spinners included) do not outnumber the cores; on a busy machine each
//! spinning thread may spin at most [`SHARE`] of the time (a token bucket refilled at that
//! rate, holding at most [`BURST`]), and blocks otherwise. Blocking outright on a busy
//! machine made a paged run over TCP 40% slower than spinning always (a wake costs 30-70 us
//! here, on the faulting thread's critical path), spinning always starves the JVM's other
//! threads; a bounded share keeps the wakes off the critical path and the JVM's cores its
//! own. The kernel's count of runnable
//! threads (the fourth field of /proc/loadavg, instantaneous; a read costs under a
//! microsecond) is read at most every 20 us by whichever spinner finds the sample stale, and
//! a spinner looks again on every turn, so it stops within about 20 us of another thread
//! becoming runnable. Without /proc/loadavg nobody spins.
//!
//! `MEMLINER_SPIN=always`, `never` or `idle` (free on an idle core, never on a busy one)
//! overrides the rule (to measure what it costs or saves); the default is `share`.
//!
//! Caveat: inside a container that does not virtualise /proc/loadavg the count is the host's,
//! which makes spinning rarer, never more frequent.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest one spin lasts before the caller sleeps.
pub const SPIN: Duration = Duration::from_micros(30);

/// Of the time on a busy machine, how much one thread may spend spinning.
pub const SHARE: f64 = 0.25;

/// The most spinning a thread may save up while it does not spin.
pub const BURST: Duration = Duration::from_millis(2);

/// How old a sample of the runnable count may be.
const REFRESH: Duration = Duration::from_micros(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Share,
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
            Ok("idle") => Mode::Idle,
            _ => Mode::Share,
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
            Mode::Idle | Mode::Share => {}
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

/// A thread's allowance of spinning on a busy machine.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    at: Instant,
    tokens: Duration,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.at).mul_f64(SHARE);
        self.tokens = (self.tokens + earned).min(BURST);
        self.at = now;
    }
}

thread_local! {
    static BUCKET: std::cell::Cell<Option<Bucket>> = const { std::cell::Cell::new(None) };
}

/// Calls `ready` until it returns true or [`SPIN`] passes, while spinning is allowed (see
/// the module docs); `true` if it became ready. The caller sleeps (blocks) when this returns
/// false.
pub fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    let g = governor();
    let start = Instant::now();
    let mut bucket = BUCKET.with(|b| b.get()).unwrap_or(Bucket {
        at: start,
        tokens: BURST,
    });
    bucket.refill(start);
    let mut charged = Duration::ZERO;
    let mut last = start;
    let done = loop {
        if ready() {
            break true;
        }
        let now = Instant::now();
        if now - start >= SPIN {
            break false;
        }
        // Free on an idle core; on a busy one, paid from the thread's share.
        if !g.idle_core() {
            match g.mode {
                Mode::Share => {
                    charged += now - last;
                    if charged >= bucket.tokens {
                        break false;
                    }
                }
                Mode::Always => {}
                Mode::Idle | Mode::Never => break false,
            }
        }
        last = now;
        std::hint::spin_loop();
    };
    bucket.tokens = bucket.tokens.saturating_sub(charged);
    BUCKET.with(|b| b.set(Some(bucket)));
    done
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
    fn a_bucket_earns_its_share_and_holds_at_most_a_burst() {
        let t = Instant::now();
        let mut b = Bucket {
            at: t,
            tokens: Duration::ZERO,
        };
        b.refill(t + Duration::from_millis(4));
        assert_eq!(b.tokens, Duration::from_millis(1));
        b.refill(t + Duration::from_secs(1));
        assert_eq!(b.tokens, BURST);
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
