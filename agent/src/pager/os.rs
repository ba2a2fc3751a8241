//! The pager's raw OS calls: discarding pages (madvise / process_madvise), mincore, copying
//! pages out of the heap without risking a fault, eventfds, anonymous memory for the slots,
//! and spawning threads with every signal blocked.

// Unsafe here: the raw OS calls themselves; each block says why it is sound.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use swap_backend::PAGE_SIZE;

use super::page_table::Claim;
use crate::uffd::{CopyOutcome, Uffd};

pub(super) fn spawn_blocking_signals(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // Threads inherit the creator's mask: block everything around the spawn so that no signal
    // (HotSpot's SIGSEGV probes, SIGQUIT, ...) is ever delivered to a fault handler.
    // SAFETY: sigset manipulation on local values; pthread_sigmask only changes this thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = std::thread::Builder::new().name(name).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Which pages of `[base, base + npages pages)` are resident, by mincore.
pub(super) fn mincore_resident(base: usize, npages: usize) -> Vec<bool> {
    let mut vec = vec![0u8; npages];
    // SAFETY: mincore only reads page tables; vec has one byte per page. Unmapped holes make it
    // fail with ENOMEM, in which case we fall back to per-page queries.
    let rc = unsafe { libc::mincore(base as *mut _, npages * PAGE_SIZE, vec.as_mut_ptr()) };
    if rc != 0 {
        for (i, v) in vec.iter_mut().enumerate() {
            // SAFETY: as above, one page at a time.
            let r =
                unsafe { libc::mincore((base + i * PAGE_SIZE) as *mut _, PAGE_SIZE, v as *mut u8) };
            if r != 0 {
                *v = 0;
            }
        }
    }
    vec.iter().map(|v| v & 1 == 1).collect()
}

/// How eviction discards pages: one process_madvise call for a whole batch where the kernel
/// allows MADV_DONTNEED there, else one madvise per run of pages.
pub(super) enum Madvise {
    Process(OwnedFd),
    PerRun,
}

impl std::fmt::Debug for Madvise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Madvise::Process(_) => "process_madvise",
            Madvise::PerRun => "madvise",
        })
    }
}

/// Maps one private anonymous page of our own (read-write); the caller owns it.
pub(super) fn private_page() -> std::io::Result<usize> {
    // SAFETY: a fresh anonymous private mapping, aliased by nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as usize)
}

/// Lets SIGBUS reach this thread (our threads start with every signal blocked).
pub(super) fn unblock_sigbus() {
    // SAFETY: sigset manipulation on a local value; pthread_sigmask changes this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGBUS);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Unlocks `len` bytes at `addr` (munlock(2)): the pages stay as they are, only evictable.
/// ENOMEM (part of the range is not mapped) is not an error: the mapped part is unlocked.
pub(super) fn munlock(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: munlock changes no contents and no mapping, only the VMA's lock flag.
    if unsafe { libc::munlock(addr as *const _, len) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOMEM) {
            return Err(e);
        }
    }
    Ok(())
}

/// Asks the kernel not to back `len` bytes at `addr` with huge pages (faults and eviction are
/// per 4 KiB page).
pub(super) fn no_huge_pages(addr: usize, len: usize) {
    // SAFETY: advice only; changes no contents.
    unsafe { libc::madvise(addr as *mut _, len, libc::MADV_NOHUGEPAGE) };
}

/// Reads the byte at `addr` of this process through the kernel (`process_vm_readv`), as the
/// agent's own threads read heap pages: a missing page is served by the fault handlers like
/// any fault, an unmapped one fails (`None`) instead of faulting this thread.
pub(super) fn read_own_byte(addr: usize) -> Option<u8> {
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: 1,
    };
    // SAFETY: writes one byte into a local; the kernel checks the remote address (an unmapped
    // page fails with EFAULT).
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 1).then_some(byte)
}

/// Loads the byte at `page`, a page of our own mapped by `private_page` (registered with
/// userfaultfd: a missing page raises SIGBUS on this thread, whose handler maps it).
pub(super) fn load_own_page(page: usize) {
    // SAFETY: `page` is a private page of ours that stays mapped (only its contents are
    // discarded); a volatile load of one byte of it.
    unsafe { std::ptr::read_volatile(page as *const u8) };
}

/// Maps a copy of `src` (whole pages) at the missing pages from `dst` on (UFFDIO_COPY), without
/// waking their waiters. The pager calls it through `Ctx::map`, which takes the pages' claims.
pub(super) fn copy_in(
    uffd: &Uffd,
    dst: usize,
    src: &[u8],
    write_protect: bool,
) -> std::io::Result<CopyOutcome> {
    debug_assert!(src.len().is_multiple_of(PAGE_SIZE) && dst.is_multiple_of(PAGE_SIZE));
    // SAFETY: `src` is a live slice of exactly the length copied. The kernel fills only pages
    // that are missing in a range registered with `uffd` (the JVM's heap, the probe's own
    // page) and refuses any other destination (EEXIST for a mapped page, ENOENT outside): no
    // memory a Rust reference can read changes under it.
    unsafe { uffd.copy(dst, src.as_ptr(), src.len(), write_protect, false) }
}

/// Page-sized slots of our own memory, where inactive pages keep their bytes while they are
/// unmapped from the heap. Which page holds which slot is `reclaim::slots`' business; this
/// type holds the bytes, reached only through the claim of the page concerned. A slot is
/// written once, by `fill`, right after it was allocated for a claimed page, and read while
/// that page (still inactive, or claimed) holds it; it is freed only by a holder of the
/// page's claim. So no slot is written while it is read.
pub(super) struct SlotMemory {
    mem: memliner_fabric_sys::memory::AnonMemory,
    slots: usize,
}

impl SlotMemory {
    pub fn new(slots: usize) -> std::io::Result<SlotMemory> {
        let slots = slots.max(1);
        Ok(SlotMemory {
            mem: memliner_fabric_sys::memory::AnonMemory::new(slots * PAGE_SIZE)?,
            slots,
        })
    }

    /// The bytes in `slot`, which the page `_holder` claims holds.
    pub fn bytes(&self, slot: u32, _holder: &Claim<'_>) -> &[u8] {
        assert!(
            (slot as usize) < self.slots,
            "slot {slot} of {}",
            self.slots
        );
        // SAFETY: in bounds (checked); the slot is held by the claimed page, so nothing writes
        // it while it is read (see the type's rule).
        unsafe { std::slice::from_raw_parts(self.mem.page(slot as usize), PAGE_SIZE) }
    }

    /// Where `slot` (in bounds) starts: for a copy into a slot just allocated, which nobody
    /// reads until it is filled (see the type's rule).
    pub fn page_ptr(&self, slot: u32) -> *mut u8 {
        assert!((slot as usize) < self.slots);
        self.mem.page(slot as usize)
    }

    /// Copies the heap pages at `srcs` into `slots` (just allocated, one per page), the pages
    /// being mapped and claimed by the caller (`holders`, in the same order): through
    /// process_vm_readv on ourselves, so that a page the JVM unmapped concurrently (heap
    /// shrink) reads as a failure instead of a SIGSEGV in our thread. Which were copied.
    pub fn fill(&self, srcs: &[usize], slots: &[u32], holders: &[&Claim<'_>]) -> Vec<bool> {
        assert!(srcs.len() == slots.len() && slots.len() == holders.len());
        assert!(slots.iter().all(|&s| (s as usize) < self.slots));
        let dsts: Vec<*mut u8> = slots.iter().map(|&s| self.mem.page(s as usize)).collect();
        copy_out(srcs, &dsts)
    }
}

/// Keeps `len` bytes at `addr` out of forked children (MADV_DONTFORK): a child never shares
/// a heap page copy-on-write, so a heap page is always its mapping's alone (`splice`).
pub(super) fn dont_fork(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: advice on a range of ours; changes no contents and no mapping of this process.
    if unsafe { libc::madvise(addr as *mut _, len, libc::MADV_DONTFORK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Drops the contents of `len` bytes at `addr` (the next access faults again).
pub(super) fn discard(addr: usize, len: usize) {
    // SAFETY: only called on memory the caller owns whose contents it wants gone.
    unsafe { libc::madvise(addr as *mut _, len, libc::MADV_DONTNEED) };
}

impl Madvise {
    pub(super) fn probe() -> Madvise {
        // SAFETY: pidfd_open on our own pid; the fd is owned right away.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as i32;
        if pidfd < 0 {
            return Madvise::PerRun;
        }
        // SAFETY: fresh fd owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        // Probe on a private page of our own.
        let Ok(page) = private_page() else {
            return Madvise::PerRun;
        };
        let p = page as *mut libc::c_void;
        let iov = libc::iovec {
            iov_base: p,
            iov_len: PAGE_SIZE,
        };
        // SAFETY: the iovec names our own mapping.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd.as_raw_fd(),
                &iov as *const libc::iovec,
                1usize,
                libc::MADV_DONTNEED,
                0u32,
            )
        };
        // SAFETY: unmapping the probe page we mapped.
        unsafe { libc::munmap(p, PAGE_SIZE) };
        if rc == PAGE_SIZE as i64 {
            Madvise::Process(pidfd)
        } else {
            Madvise::PerRun
        }
    }

    /// Discards `runs` (start address, length). Only called on pages the pager owns (`Busy`).
    pub(super) fn dontneed(&self, runs: &[(usize, usize)]) -> std::io::Result<()> {
        if let Madvise::Process(pidfd) = self {
            for chunk in runs.chunks(512) {
                let iov: Vec<libc::iovec> = chunk
                    .iter()
                    .map(|&(s, l)| libc::iovec {
                        iov_base: s as *mut _,
                        iov_len: l,
                    })
                    .collect();
                let want: usize = chunk.iter().map(|r| r.1).sum();
                // SAFETY: every iovec names Busy pages of the registered region.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        pidfd.as_raw_fd(),
                        iov.as_ptr(),
                        iov.len(),
                        libc::MADV_DONTNEED,
                        0u32,
                    )
                };
                if rc as usize != want {
                    return per_run(chunk);
                }
            }
            return Ok(());
        }
        per_run(runs)
    }
}

fn per_run(runs: &[(usize, usize)]) -> std::io::Result<()> {
    for &(s, l) in runs {
        // SAFETY: the run covers Busy pages of the registered region that the pager has
        // written back (or whose stored copy is current); their content may be discarded.
        if unsafe { libc::madvise(s as *mut _, l, libc::MADV_DONTNEED) } != 0 {
            let e = std::io::Error::last_os_error();
            // ENOMEM: part of the run was unmapped under us (the mapped part is discarded
            // all the same); the UNMAP event, not yet read, resets those pages.
            if e.raw_os_error() != Some(libc::ENOMEM) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// One iovec a page, for the pages at `addrs`.
pub(super) fn page_iovecs(addrs: impl IntoIterator<Item = usize>) -> Vec<libc::iovec> {
    addrs
        .into_iter()
        .map(|a| libc::iovec {
            iov_base: a as *mut _,
            iov_len: PAGE_SIZE,
        })
        .collect()
}

/// Coalesces sorted page indexes into (address, length) runs.
pub(super) fn runs(base: usize, pages: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        let a = base + p * PAGE_SIZE;
        match out.last_mut() {
            Some((s, l)) if *s + *l == a => *l += PAGE_SIZE,
            _ => out.push((a, PAGE_SIZE)),
        }
    }
    out
}

/// `SlotMemory::fill`'s copy: `dsts[i]` receives the page at `srcs[i]`; which were copied.
/// Every `dsts[i]` is a slot of `SlotMemory` in bounds, allocated to the claimed page at
/// `srcs[i]`; the source pages are mapped (claimed while mapped), so the read cannot wait for
/// our own fault handler.
fn copy_out(srcs: &[usize], dsts: &[*mut u8]) -> Vec<bool> {
    debug_assert_eq!(srcs.len(), dsts.len());
    let mut ok = vec![false; srcs.len()];
    let mut i = 0;
    while i < srcs.len() {
        let n = (srcs.len() - i).min(512);
        let local = page_iovecs(dsts[i..i + n].iter().map(|&d| d as usize));
        let remote = page_iovecs(srcs[i..i + n].iter().copied());
        // SAFETY: local iovecs name slots of ours, each a page in bounds and written by no one
        // else (see above); remote ones name our own heap pages, which the kernel reads with
        // fault checks.
        let got = unsafe {
            libc::process_vm_readv(
                libc::getpid(),
                local.as_ptr(),
                n as _,
                remote.as_ptr(),
                n as _,
                0,
            )
        };
        let whole = if got > 0 { got as usize / PAGE_SIZE } else { 0 };
        for flag in &mut ok[i..i + whole] {
            *flag = true;
        }
        // Skip the page that failed (if any) and go on after it.
        i += whole + usize::from(whole < n);
    }
    ok
}

/// A non-blocking eventfd, to wake a thread blocked in poll.
pub(super) fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd with constant flags; the fd is owned immediately.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: efd was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

/// Adds one to an eventfd's counter (wakes its poller).
pub(super) fn kick(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to our eventfd.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Empties an eventfd's counter.
pub(super) fn drain(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reads the 8-byte eventfd counter into a local.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// Waits until `fds` are readable; `timeout_ms` -1 blocks, 0 polls. Returns poll's count.
pub(super) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
    // SAFETY: polls the caller's pollfd array, whose length is passed with it.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, timeout_ms) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_coalesce_neighbours() {
        assert_eq!(
            runs(0x1000, &[0, 1, 2, 5, 6, 9]),
            vec![
                (0x1000, 3 * PAGE_SIZE),
                (0x1000 + 5 * PAGE_SIZE, 2 * PAGE_SIZE),
                (0x1000 + 9 * PAGE_SIZE, PAGE_SIZE)
            ]
        );
    }
}
