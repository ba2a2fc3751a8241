//! The latency probe: how long a remote fault takes as the faulting thread sees it —
//! delivery to the handler, service, and the wake — which the handlers' own clocks cannot
//! see. Every interval the probe reads one byte each of two remote pages, back to back (with
//! process_vm_readv, so a page the JVM unmaps meanwhile fails instead of crashing us), and
//! times the second read: the first only wakes the probe's core from idle, which a thread
//! that faults all the time does not pay. The pages it faults in are admitted like any
//! other; at the default interval that is 200 pages a second, noise next to the workload's
//! own faults.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::page_table::PageState;
use super::Shared;

/// Pages looked at, from a pseudo-random start, to find two remote ones.
const SCAN: usize = 256;

impl Shared {
    pub(super) fn probe(&self, every: Duration) {
        self.probe_tid
            .store(swap_backend::cpu::gettid(), Ordering::Relaxed);
        let slot = self.latencies.len() - 1;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        loop {
            std::thread::park_timeout(every);
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let start = (seed as usize) % self.npages.max(1);
            let mut remote = (0..SCAN.min(self.npages))
                .map(|k| (start + k) % self.npages)
                .filter(|&p| self.table.get(p) == PageState::Remote);
            let (Some(warm_up), Some(p)) = (remote.next(), remote.next()) else {
                continue;
            };
            self.read_byte(warm_up);
            if let Some(ns) = self.read_byte(p) {
                self.reclaim.sizer().costs.thread_remote(ns);
                let _ = self.latencies[slot]
                    .lock()
                    .unwrap()
                    .thread_remote
                    .record(ns.max(1));
            }
        }
    }

    /// Reads one byte of heap page `p`; how long it took (ns), `None` if it failed.
    fn read_byte(&self, p: usize) -> Option<u64> {
        let mut byte = 0u8;
        let local = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        let remote = libc::iovec {
            iov_base: self.page_addr(p) as *mut _,
            iov_len: 1,
        };
        let t = Instant::now();
        // SAFETY: reads one byte of our own heap into a local; the kernel checks the address
        // (an unmapped page fails with EFAULT) and a missing page is served by the handlers
        // like any fault.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        (n == 1).then(|| t.elapsed().as_nanos() as u64)
    }
}
