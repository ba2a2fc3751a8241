//! The latency probe: how long a remote fault takes as the faulting thread sees it —
//! delivery to the handler, service, and the wake — which the handlers' own clocks cannot
//! see. Every interval the probe reads one byte each of two remote pages, back to back (with
//! process_vm_readv, so a page the JVM unmaps meanwhile fails instead of crashing us), and
//! times the second read: the first only wakes the probe's core from idle, which a thread
//! that faults all the time does not pay. The pages it faults in are admitted like any
//! other; at the default interval that is 200 pages a second, noise next to the workload's
//! own faults.
//!
//! With `faults=signal` a system call cannot fault a heap page in (it gets EFAULT), and a
//! direct load from a heap page the JVM may uncommit meanwhile could crash. There the probe
//! loads from a page of its own, registered with the pager's userfaultfd: its SIGBUS handler
//! reads a remote heap page's stored copy and maps it there, which is a remote fault's whole
//! path as its thread sees it (trap, signal, store round trip, copy, return).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use swap_backend::PAGE_SIZE;

use super::context::Ctx;
use super::os;
use super::page_table::PageState;
use super::parts::Parts;
use super::signal::PROBE_LOCAL;

/// Pages looked at, from a pseudo-random start, to find two remote ones.
const SCAN: usize = 256;

/// The probe thread: every `every`, times a remote fault as a faulting thread sees it.
pub(super) fn run(parts: &Parts, every: Duration) {
    let ctx = &*parts.ctx;
    ctx.probe_tid
        .store(memliner_cpu::gettid(), Ordering::Relaxed);
    let own_page = if ctx.by_signal {
        match probe_page(parts) {
            Ok(p) => Some(p),
            Err(_) => return, // no probe rather than no pager
        }
    } else {
        None
    };
    let slot = ctx.latencies.len() - 1;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    loop {
        std::thread::park_timeout(every);
        if ctx.stop.load(Ordering::SeqCst) {
            return;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let start = (seed as usize) % ctx.npages.max(1);
        let mut remote = (0..SCAN.min(ctx.npages))
            .map(|k| (start + k) % ctx.npages)
            .filter(|&p| ctx.table.get(p) == PageState::Remote);
        let (Some(warm_up), Some(p)) = (remote.next(), remote.next()) else {
            continue;
        };
        let sample = match own_page {
            Some(page) => {
                load_own_page(ctx, page, warm_up);
                load_own_page(ctx, page, p)
            }
            None => {
                read_byte(ctx, warm_up);
                read_byte(ctx, p)
            }
        };
        if let Some(ns) = sample {
            parts.reclaim.sizer().costs.thread_remote(ns);
            let _ = ctx.latencies[slot]
                .lock()
                .unwrap()
                .thread_remote
                .record(ns.max(1));
        }
        // A local fault the same way (its page is served from memory, as a reactivation is):
        // what a sampled page that comes back costs its thread.
        if let Some(page) = own_page {
            if let Some(ns) = load_own_page(ctx, page, PROBE_LOCAL) {
                parts.reclaim.sizer().costs.thread_local(ns);
                let _ = ctx.latencies[slot]
                    .lock()
                    .unwrap()
                    .thread_local
                    .record(ns.max(1));
            }
        }
    }
}

/// Reads one byte of heap page `p`; how long it took (ns), `None` if it failed.
fn read_byte(ctx: &Ctx, p: usize) -> Option<u64> {
    let t = Instant::now();
    os::read_own_byte(ctx.page_addr(p)).map(|_| t.elapsed().as_nanos() as u64)
}

/// Maps and registers the probe's own page (`faults=signal`); SIGBUS is unblocked on
/// this thread for it.
fn probe_page(parts: &Parts) -> std::io::Result<usize> {
    let page = os::private_page()?;
    os::unblock_sigbus();
    parts.ctx.uffd.register(page, PAGE_SIZE)?;
    super::signal::set_probe_page(parts, page);
    Ok(page)
}

/// Loads from the probe's page, which faults in heap page `p`'s stored copy; how long
/// the load took (ns). The page is dropped again afterwards.
fn load_own_page(ctx: &Ctx, page: usize, p: usize) -> Option<u64> {
    ctx.probe_source.store(p, Ordering::SeqCst);
    let t = Instant::now();
    os::load_own_page(page);
    let ns = t.elapsed().as_nanos() as u64;
    os::discard(page, PAGE_SIZE); // the next load faults again
    Some(ns)
}
