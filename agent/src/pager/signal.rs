//! Self-service faults (`faults=signal`): with `UFFD_FEATURE_SIGBUS` the kernel queues no fault
//! event; the faulting thread gets a SIGBUS and serves its own fault in the signal handler
//! (claims the page, reads it from the store or its local copy, maps it with UFFDIO_COPY or
//! unprotects it) and returns to retry the access. No handler thread has to wake and no
//! faulting thread has to be woken: on the VMs measured, those two wakes were ~90% of a
//! fault's latency (a bare uffd round trip through a handler thread 90 us, through SIGBUS
//! 4 us).
//!
//! The handler is installed over the JVM's own (after VMInit, when HotSpot's are in place)
//! and hands every SIGBUS outside a paged region to the handler it replaced, as
//! async-profiler does with its crash handler. It has to run first: HotSpot treats a SIGBUS
//! in a compiled method that uses `Unsafe` as a truncated mapped file.
//!
//! Why this is safe to do in a signal handler: the signal is synchronous, raised by a user-mode
//! load or store to the Java heap, and no code holds one of the locks the service takes while
//! it touches the heap (the agent's own threads read heap pages only with process_vm_readv,
//! which fails with EFAULT instead of faulting). errno is saved and restored. A fault raised
//! inside the service itself (a bug) stops the JVM with a message instead of deadlocking.
//!
//! The cost: a system call that reads a paged-out heap page from kernel mode gets EFAULT
//! instead of waiting (HotSpot copies heap arrays to native buffers before I/O; a JNI library
//! that passes a pinned heap array to the kernel would see the error). `faults=thread` keeps
//! the handler-thread delivery for such programs.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use swap_backend::PAGE_SIZE;

use super::context::Ctx;
use super::fault::Handler;
use super::parts::Parts;

/// Pagers that serve their faults by signal (one per JVM; tests run several at once).
const SLOTS: usize = 16;

struct Slot {
    base: AtomicUsize,
    end: AtomicUsize,
    shared: AtomicPtr<Parts>,
    /// The latency probe's own page (see `probe`), 0 if none.
    probe: AtomicUsize,
    /// Signal handlers using `shared` right now (unregistering waits for them).
    active: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    base: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    shared: AtomicPtr::new(std::ptr::null_mut()),
    probe: AtomicUsize::new(0),
    active: AtomicUsize::new(0),
};
static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Serialises registration (the signal handler only reads).
static REGISTERING: Mutex<()> = Mutex::new(());

/// The SIGBUS action we replaced, as installed (read by the handler to chain).
static mut PREVIOUS: Option<libc::sigaction> = None;

thread_local! {
    /// The heap address whose fault this thread serves (0: none): a fault inside the service
    /// is a bug, and a copy that faults in a memory file names the page.
    static SERVING: Cell<usize> = const { Cell::new(0) };
}

/// Installs the SIGBUS handler once per process (replacing, and chaining to, the current one),
/// and checks that it is the one the kernel will call: a library that interposes sigaction
/// (libjsig) would keep HotSpot's in front, which takes some heap faults for truncated files.
pub(super) fn install() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT.get_or_init(install_once).clone()
}

/// Runs once per process (`install`'s OnceLock), before any handler that reads PREVIOUS.
fn install_once() -> Result<(), String> {
    let last_error = || std::io::Error::last_os_error().to_string();
    // SAFETY: plain sigaction calls on zeroed structs; PREVIOUS is written once, here,
    // before the handler that reads it is installed.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return Err(last_error());
        }
        *std::ptr::addr_of_mut!(PREVIOUS) = Some(old);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        // NODEFER: a fault inside the service re-enters and is reported, instead of the
        // kernel killing the process for a blocked synchronous signal.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
            return Err(last_error());
        }
    }
    // Ask the kernel itself: libjsig answers sigaction from its own table.
    if kernel_handler(libc::SIGBUS) != Some(on_sigbus as *const () as usize) {
        return Err("another SIGBUS handler stays in front of ours (libjsig?)".into());
    }
    Ok(())
}

/// The handler the kernel has for `sig`, bypassing any interposed `sigaction`.
fn kernel_handler(sig: libc::c_int) -> Option<usize> {
    /// The kernel's `struct sigaction` on x86-64 (not libc's).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let mut k = KernelSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: rt_sigaction with no new action only writes the old one into `k`, whose layout
    // and size (8-byte mask) are the kernel's on x86-64.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            std::ptr::null::<KernelSigaction>(),
            &mut k as *mut KernelSigaction,
            8usize,
        )
    };
    (rc == 0).then_some(k.handler)
}

/// Makes `shared`'s region served by signal. The pointer stays valid until `unregister`.
pub(super) fn register(shared: &Parts) -> std::io::Result<()> {
    let _g = REGISTERING.lock().unwrap();
    let free = REGISTRY
        .iter()
        .find(|s| s.shared.load(Ordering::SeqCst).is_null())
        .ok_or_else(|| std::io::Error::other("too many pagers in one process"))?;
    let ctx = &shared.ctx;
    free.base.store(ctx.base, Ordering::SeqCst);
    free.end
        .store(ctx.base + ctx.npages * PAGE_SIZE, Ordering::SeqCst);
    free.shared
        .store(shared as *const Parts as *mut Parts, Ordering::SeqCst);
    Ok(())
}

/// Names `page` (registered with `shared`'s userfaultfd) as its latency probe's page.
pub(super) fn set_probe_page(shared: &Parts, page: usize) {
    let me = shared as *const Parts as *mut Parts;
    for s in &REGISTRY {
        if s.shared.load(Ordering::SeqCst) == me {
            s.probe.store(page, Ordering::SeqCst);
        }
    }
}

/// Removes `shared` and waits until no signal handler uses it.
pub(super) fn unregister(shared: &Parts) {
    let _g = REGISTERING.lock().unwrap();
    let me = shared as *const Parts as *mut Parts;
    for s in &REGISTRY {
        if s.shared.load(Ordering::SeqCst) == me {
            s.shared.store(std::ptr::null_mut(), Ordering::SeqCst);
            s.end.store(0, Ordering::SeqCst);
            s.probe.store(0, Ordering::SeqCst);
            while s.active.load(Ordering::SeqCst) != 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Whether signal delivery can tell the kind of a fault on this architecture.
pub(super) const SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// (write, present) of the access that raised this SIGBUS, from the page-fault error code the
/// kernel puts in the signal frame: a write to a present page is a write-protect fault,
/// anything else a missing page.
#[cfg(target_arch = "x86_64")]
fn access(uc: *mut libc::c_void) -> (bool, bool) {
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler; REG_ERR holds the
    // x86 page-fault error code: bit 0 set for a present page, bit 1 for a write.
    let err =
        unsafe { (*(uc as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    (err & 2 != 0, err & 1 != 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn access(_uc: *mut libc::c_void) -> (bool, bool) {
    unreachable!("faults=signal is refused where the fault kind cannot be told")
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &REGISTRY {
        let page = s.probe.load(Ordering::SeqCst);
        let probe = page != 0 && page == addr & !(PAGE_SIZE - 1);
        if !probe && (addr < s.base.load(Ordering::SeqCst) || addr >= s.end.load(Ordering::SeqCst))
        {
            continue;
        }
        s.active.fetch_add(1, Ordering::SeqCst);
        let shared = s.shared.load(Ordering::SeqCst);
        if !shared.is_null() {
            // SAFETY: `unregister` waits for `active` to drop before the pager goes away.
            let shared = unsafe { &*shared };
            if probe {
                serve_probe(&shared.ctx, addr & !(PAGE_SIZE - 1));
                s.active.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            if shared.ctx.page_of(addr).is_some() {
                let (write, present) = access(uc);
                serve(shared, addr, write, present);
                s.active.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
    if let Some(server) = swap_backend::memfile::server_at(addr) {
        emptied_under_us(server, addr);
    }
    chain(sig, info, uc);
}

/// A copy from a `unix://` server's memory file faulted: the server emptied a file this JVM
/// still has pages in. Those pages are gone; stop the JVM naming the server and the page.
fn emptied_under_us(server: &str, addr: usize) {
    let served = SERVING.with(|s| s.get());
    let what = if served != 0 {
        format!("serving heap page {:#x}", served & !(PAGE_SIZE - 1))
    } else {
        "reading or writing heap pages for the prefetcher or the reclaimer".to_string()
    };
    let msg = format!(
        "memory server {server} emptied a memory file this JVM still had pages in (a copy at {addr:#x} faulted, {what}): those pages are gone"
    );
    for s in &REGISTRY {
        let shared = s.shared.load(Ordering::SeqCst);
        if !shared.is_null() {
            // SAFETY: a registered pager's parts; the process stops here.
            unsafe { &*shared }.ctx.die(&msg);
        }
    }
}

/// Serves one fault on this thread; returning retries the access.
fn serve(shared: &Parts, addr: usize, write: bool, present: bool) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    if SERVING.with(|s| s.replace(addr)) != 0 {
        shared.ctx.die(&format!(
            "a heap access at {addr:#x} faulted while this thread was serving a fault"
        ));
    }
    let started = Instant::now();
    // A panic must not unwind out of a signal handler: stop the JVM naming it, as a crashed
    // handler thread does.
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Handler::for_signal(shared).serve(addr, write, present, started)
    }));
    let retry = served.unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        shared.ctx.die(&format!(
            "serving the fault at {addr:#x} on thread {} crashed: {why}",
            memliner_cpu::gettid()
        ))
    });
    shared
        .ctx
        .note_signal_fault(started.elapsed().as_nanos() as u64);
    SERVING.with(|s| s.set(0));
    if retry {
        // Another thread has the page in flight, or an unread event changes the mm (the
        // handler thread reads it): let them finish before the access faults again.
        std::thread::yield_now();
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands a SIGBUS that is not ours to the handler we replaced (the JVM's), or to the default
/// action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: PREVIOUS was written before this handler was installed and never again.
    let prev = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO: this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, uc);
            } else {
                // SAFETY: a plain handler: this signature.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // The default action: restore it and return; the access faults again and the
            // process stops as it would have without us.
            // SAFETY: sigaction with a zeroed (SIG_DFL) action.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
            }
        }
    }
}

/// `probe_source` naming no heap page: the probe's page is served from memory (a local fault).
pub(super) const PROBE_LOCAL: usize = usize::MAX;

/// The probe page's fault (in the probe thread's SIGBUS handler, see `probe`): the stored copy
/// of the heap page the probe named, or zeros if the store has none (or it named none).
fn serve_probe(ctx: &Ctx, page: usize) {
    let mut buf = [0u8; PAGE_SIZE];
    let p = ctx.probe_source.load(Ordering::SeqCst);
    if p != PROBE_LOCAL && ctx.store.read_pages(&[p as u64], &mut buf).is_err() {
        buf.fill(0);
    }
    // `page` is the probe's registered page, missing.
    let _ = super::os::copy_in(&ctx.uffd, page, &buf, false);
}
