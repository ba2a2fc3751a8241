//! What our threads cost the machine's cores, and when they may spin: CPU time of a thread or
//! of the process, thread ids, and the spin governor (`spin`). The pager, the transports and
//! the memory server count their CPU and spin through it, as every thread we add competes
//! with the JVM for the cores.

#![allow(unsafe_code)]

pub mod spin;

use std::time::Duration;

/// CPU time the calling thread has used so far.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time all threads of this process have used so far.
pub fn process_cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec into a local.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The kernel's id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// CPU time used so far by thread `tid` of this process (from /proc, so any thread can ask);
/// `None` once the thread has exited.
pub fn cpu_time_of(tid: u32) -> Option<Duration> {
    // schedstat: nanoseconds on the CPU, first field.
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_uses_cpu_time() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(thread_cpu_time() > before);
        assert!(process_cpu_time() >= thread_cpu_time());
        assert!(cpu_time_of(gettid()).unwrap() > Duration::ZERO);
    }
}
