//! What our threads cost the machine's cores, and when they may spin: CPU time of a thread or
//! of the process, thread ids, and the spin governor (`spin`). The pager, the transports and
//! the memory server count their CPU and spin through it, as every thread we add competes
//! with the JVM for the cores.

#![allow(unsafe_code)]

pub mod spin;

use std::cell::Cell;
use std::sync::Once;
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

/// The kernel's id of the calling thread, asked of the kernel once per thread: every fault a
/// thread serves itself needs it, and the system call was 0.5% of a paging run's cycles (kv,
/// 1 GiB at 25%). A const thread-local, so that a signal handler may read it. A forked child
/// (one thread, the forking one's copy of its thread-locals) asks again.
pub fn gettid() -> u32 {
    thread_local! {
        static TID: Cell<u32> = const { Cell::new(0) };
    }
    static AT_FORK: Once = Once::new();
    let cached = TID.with(Cell::get);
    if cached != 0 {
        return cached;
    }
    AT_FORK.call_once(|| {
        extern "C" fn forget() {
            TID.with(|t| t.set(0));
        }
        // SAFETY: registers a child handler that only writes a thread-local of its own.
        unsafe { libc::pthread_atfork(None, None, Some(forget)) };
    });
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::gettid() as u32 };
    TID.with(|t| t.set(tid));
    tid
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

    #[test]
    fn each_thread_and_a_forked_child_know_their_own_id() {
        // SAFETY: gettid has no arguments and cannot fail.
        let kernel = || unsafe { libc::gettid() as u32 };
        assert_eq!(gettid(), kernel());
        assert_eq!(gettid(), kernel(), "cached");
        let other = std::thread::spawn(move || (gettid(), kernel()))
            .join()
            .unwrap();
        assert_eq!(other.0, other.1);
        assert_ne!(other.0, gettid());
        // SAFETY: the child only compares two ids and exits without unwinding.
        match unsafe { libc::fork() } {
            // SAFETY: _exit ends the child at once, running nothing of the parent's.
            0 => unsafe { libc::_exit(i32::from(gettid() != kernel())) },
            pid => {
                assert!(pid > 0, "fork failed");
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
                assert!(libc::WIFEXITED(status));
                assert_eq!(
                    libc::WEXITSTATUS(status),
                    0,
                    "the child saw its parent's id"
                );
            }
        }
    }
}
