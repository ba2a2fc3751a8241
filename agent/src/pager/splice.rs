//! Heap pages held by a pipe across their discard, so that a deactivation batch is copied out
//! after its one discard instead of behind a write-protect of every run of dirty pages.
//!
//! Why: each write-protect ioctl flushes the other CPU's TLB with an IPI (a VM exit here,
//! 7-11 us), and a batch's dirty victims are scattered pages, so a batch of 47 paid about 20 of
//! them; in process the reclaimer thread took 29% of the machine's CPU, most of it in
//! `smp_call_function_many_cond` under `UFFDIO_WRITEPROTECT` (kv at 25% of 1 GiB). The discard
//! (`process_madvise`) flushes once for the whole batch.
//!
//! How: vmsplice(2) without `SPLICE_F_GIFT` puts references to the pages themselves into a
//! pipe, no copy. A write that lands before the discard's TLB flush has completed lands in the
//! page the pipe holds; once the discard returns, no CPU maps the page, and a thread that
//! touches it faults and waits on the page's claim. Reading the pipe afterwards copies the
//! page as it was last written.
//!
//! When: only for a page that its mapping owns alone. A write to a page shared
//! copy-on-write (the zero page a read fault maps before the heap was registered, a page
//! shared with a forked child) goes to a fresh copy, which the discard would drop. The pager
//! installs every page itself (`UFFDIO_COPY`: a fresh page), keeps the heap out of forked
//! children (`MADV_DONTFORK`), and sends pages adopted at registration the write-protect way
//! (`reclaim`).

// Unsafe here: pipe2, fcntl, vmsplice and readv on our own pipe and memory.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use swap_backend::PAGE_SIZE;

use super::os::page_iovecs;

/// Pages one pipe holds at most (a deactivation batch is 32-64 pages).
const PIPE_PAGES: usize = 64;

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Pages it can hold (what the kernel granted).
    pages: usize,
}

impl Pipe {
    fn new() -> std::io::Result<Pipe> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into the local array; both are owned right away.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh fds owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A pipe holds 16 pages by default; ask for a batch's worth (refused past the user's
        // pipe limits: then the default stands, and the rest of a batch goes the other way).
        // SAFETY: fcntl on our own pipe with integer arguments.
        unsafe {
            libc::fcntl(
                write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                (PIPE_PAGES * PAGE_SIZE) as i32,
            )
        };
        // SAFETY: as above.
        let bytes = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
        if bytes < PAGE_SIZE as i32 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Pipe {
            read,
            write,
            pages: bytes as usize / PAGE_SIZE,
        })
    }

    /// Puts references to the pages at `srcs` (page-aligned, mapped, readable) into the
    /// pipe, in order; how many it holds (fewer at a page that cannot be read, or none).
    fn hold(&self, srcs: &[usize]) -> usize {
        let n = srcs.len().min(self.pages);
        if n == 0 {
            return 0;
        }
        let iov = page_iovecs(srcs[..n].iter().copied());
        // SAFETY: the iovecs name whole pages of our own memory, only read by the kernel (a
        // reference to each page goes into our pipe), and the pipe is empty with room for
        // `n` pages, so the call does not block. The caller's pages are claimed and mapped,
        // so the kernel finds them without a fault into our handler; one the JVM unmapped
        // meanwhile ends the hold there (EFAULT, or a page of the new mapping, which its
        // UNMAP event resets, as with process_vm_readv).
        let got = unsafe {
            libc::vmsplice(
                self.write.as_raw_fd(),
                iov.as_ptr(),
                n,
                libc::SPLICE_F_NONBLOCK,
            )
        };
        if got <= 0 {
            return 0;
        }
        if !(got as usize).is_multiple_of(PAGE_SIZE) {
            // Part of a page (not seen: whole pages go in whole): let it all go.
            self.discard(got as usize);
            return 0;
        }
        got as usize / PAGE_SIZE
    }

    /// Reads as many held pages out of the pipe as there are pages at `dsts`; `Err` if the
    /// pipe did not give them all.
    fn copy_out(&self, dsts: &[*mut u8]) -> std::io::Result<()> {
        let iov = page_iovecs(dsts.iter().map(|&d| d as usize));
        let mut done = 0usize;
        let want = dsts.len() * PAGE_SIZE;
        while done < want {
            // Resume within the iovec array after a short read (a pipe read returns what
            // its buffers hold; all of it is there already).
            let first = done / PAGE_SIZE;
            let mut rest: Vec<libc::iovec> = iov[first..].to_vec();
            let skip = done % PAGE_SIZE;
            // SAFETY: offsetting within the first destination page.
            rest[0].iov_base = unsafe { rest[0].iov_base.cast::<u8>().add(skip) }.cast();
            rest[0].iov_len -= skip;
            // SAFETY: every iovec names a destination page the caller owns and nobody else
            // reads or writes meanwhile; readv writes at most their lengths.
            let got =
                unsafe { libc::readv(self.read.as_raw_fd(), rest.as_ptr(), rest.len() as i32) };
            if got <= 0 {
                let e = std::io::Error::last_os_error();
                if got < 0 && e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(if got == 0 {
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "pipe empty")
                } else {
                    e
                });
            }
            done += got as usize;
        }
        Ok(())
    }

    /// Lets go of `bytes` held in the pipe (reads them into a scratch page).
    fn discard(&self, bytes: usize) {
        let mut scratch = vec![0u8; PAGE_SIZE];
        let mut left = bytes;
        while left > 0 {
            // SAFETY: reads at most a page into a local buffer of a page.
            let got = unsafe {
                libc::read(
                    self.read.as_raw_fd(),
                    scratch.as_mut_ptr().cast(),
                    left.min(PAGE_SIZE),
                )
            };
            if got <= 0 {
                return;
            }
            left -= got as usize;
        }
    }
}

/// Pipes for holding pages, one per deactivation under way (the reclaimer's, a fault's direct
/// reclaim), kept for reuse.
pub(super) struct Pipes {
    free: Mutex<Vec<Pipe>>,
}

impl Pipes {
    /// `None` where the kernel refuses to hold a page of ours in a pipe (vmsplice filtered
    /// out, say): deactivations then write-protect and copy as before.
    pub fn probe() -> Option<Pipes> {
        let pipe = Pipe::new().ok()?;
        let page = super::os::private_page().ok()?;
        // SAFETY: `page` is our own fresh read-write mapping of one page.
        unsafe { std::ptr::write_bytes(page as *mut u8, 0x5a, PAGE_SIZE) };
        let held = pipe.hold(&[page]);
        super::os::discard(page, PAGE_SIZE);
        let mut out = vec![0u8; PAGE_SIZE];
        let dst = out.as_mut_ptr();
        let ok = held == 1 && pipe.copy_out(&[dst]).is_ok() && out.iter().all(|&b| b == 0x5a);
        // SAFETY: unmapping the probe page we mapped.
        unsafe { libc::munmap(page as *mut _, PAGE_SIZE) };
        ok.then(|| Pipes {
            free: Mutex::new(vec![pipe]),
        })
    }

    /// Holds the pages at `srcs` (mapped, claimed by the caller), in order: the first
    /// `Held::pages` of them.
    pub fn hold(&self, srcs: &[usize]) -> Held<'_> {
        let pipe = self.free.lock().unwrap().pop().or_else(|| Pipe::new().ok());
        let pages = pipe.as_ref().map_or(0, |p| p.hold(srcs));
        Held {
            pipes: self,
            pipe,
            pages,
        }
    }
}

/// Pages a pipe holds for a deactivation; dropped unread, they are let go.
pub(super) struct Held<'a> {
    pipes: &'a Pipes,
    pipe: Option<Pipe>,
    pages: usize,
}

impl Held<'_> {
    /// How many of the pages asked for are held (the first ones).
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Copies the held pages, as last written, the `i`-th into the page at `dsts[i]` (one
    /// per held page, owned by the caller), after their discard.
    pub fn copy_out(mut self, dsts: &[*mut u8]) -> std::io::Result<()> {
        assert_eq!(dsts.len(), self.pages);
        self.pages = 0;
        let Some(pipe) = self.pipe.take() else {
            return Ok(());
        };
        pipe.copy_out(dsts)?; // on failure the pipe is closed, not reused
        self.pipes.free.lock().unwrap().push(pipe);
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        pipe.discard(self.pages * PAGE_SIZE);
        self.pipes.free.lock().unwrap().push(pipe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A fresh private page of ours; unmapped on drop.
    struct Page(usize);
    impl Page {
        fn new() -> Page {
            Page(super::super::os::private_page().unwrap())
        }
        fn word(&self) -> &AtomicU64 {
            // SAFETY: an aligned word of our own mapped page, only accessed atomically.
            unsafe { &*(self.0 as *const AtomicU64) }
        }
        fn other_word(&self) -> &AtomicU64 {
            // SAFETY: as above, the page's second word.
            unsafe { &*((self.0 + 8) as *const AtomicU64) }
        }
    }
    impl Drop for Page {
        fn drop(&mut self) {
            // SAFETY: unmapping the page this value mapped.
            unsafe { libc::munmap(self.0 as *mut _, PAGE_SIZE) };
        }
    }

    /// Discards `page` over and over while a thread adds to a word of it; `copy` takes the
    /// page's bytes around each discard. How many of the values the writer saw vanish (the
    /// discarded page comes back as a fresh zero page here, where no userfaultfd catches the
    /// fault) are in none of the copies: writes lost. `write` (else read) is how this thread
    /// maps the page back before each copy: a read maps the shared zero page, as a read did in
    /// a heap before the agent registered it.
    fn race_discards(page: &Page, write: bool, mut copy: impl FnMut() -> u64) -> usize {
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let writer = sc.spawn(|| {
                // The last value written before each reset to zero, in order.
                let mut before_reset = Vec::new();
                let mut last = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let seen = page.word().fetch_add(1, Ordering::SeqCst);
                    if seen < last {
                        before_reset.push(last);
                    }
                    last = seen + 1;
                }
                before_reset
            });
            let mut copies = Vec::new();
            for _ in 0..3000 {
                // Mapped again, by a write to another word (an add of 0 compiles to a load),
                // or by a read.
                if write {
                    page.other_word().store(1, Ordering::SeqCst);
                } else {
                    page.word().load(Ordering::SeqCst);
                }
                copies.push(copy());
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
            let before_reset = writer.join().unwrap();
            assert!(before_reset.len() > 10, "the writer must race the discards");
            let mut c = copies.iter();
            before_reset
                .iter()
                .filter(|&&v| !c.any(|&x| x == v))
                .count()
        })
    }

    /// Held across the discard, every copy holds the last value written before it. The page
    /// is kept from forked children, as the heap is (a page shared copy-on-write loses writes
    /// as the zero page does, below).
    #[test]
    fn a_held_page_is_copied_as_last_written_before_its_discard() {
        let pipes = Pipes::probe().expect("this kernel holds pages in pipes");
        let page = Page::new();
        super::super::os::dont_fork(page.0, PAGE_SIZE).unwrap();
        let lost = race_discards(&page, true, || held_copy(&pipes, &page));
        assert_eq!(lost, 0, "writes fell between a copy and its discard");
    }

    /// Holds `page` in a pipe, gives the writer its turn, discards the page and returns the
    /// pipe's copy of its first word.
    fn held_copy(pipes: &Pipes, page: &Page) -> u64 {
        let mut out = [0u64; PAGE_SIZE / 8];
        let dst = out.as_mut_ptr().cast::<u8>();
        let held = pipes.hold(&[page.0]);
        assert_eq!(held.pages(), 1);
        std::thread::yield_now(); // the writer's turn, on this core or its own
        super::super::os::discard(page.0, PAGE_SIZE);
        held.copy_out(&[dst]).unwrap();
        out[0]
    }

    /// Why pages adopted at registration are not held in a pipe: the zero page a read mapped
    /// is shared, a write goes to a fresh copy, and the discard drops that copy.
    #[test]
    fn a_held_zero_page_loses_writes() {
        let pipes = Pipes::probe().unwrap();
        let page = Page::new();
        super::super::os::dont_fork(page.0, PAGE_SIZE).unwrap();
        let lost = race_discards(&page, false, || held_copy(&pipes, &page));
        assert!(lost > 0, "the race never hit");
    }

    /// The control: copied before the discard, with nothing to stop a writer in between (what
    /// the write-protect does on the other path), writes are lost.
    #[test]
    fn a_page_copied_before_its_discard_loses_writes() {
        let page = Page::new();
        let lost = race_discards(&page, true, || {
            let v = page.word().load(Ordering::SeqCst);
            std::thread::yield_now(); // the writer's turn, as in the test above
            super::super::os::discard(page.0, PAGE_SIZE);
            v
        });
        assert!(
            lost > 0,
            "the race never hit: the test above proves nothing"
        );
    }

    /// A page that cannot be read ends what a pipe holds; the ones before it are held.
    #[test]
    fn holding_stops_at_an_unmapped_page() {
        let pipes = Pipes::probe().unwrap();
        let a = Page::new();
        let gone = Page::new();
        let addr = gone.0;
        drop(gone);
        a.word().store(7, Ordering::SeqCst);
        let held = pipes.hold(&[a.0, addr, a.0]);
        assert_eq!(held.pages(), 1);
        let mut out = vec![0u8; PAGE_SIZE];
        let dst = out.as_mut_ptr();
        held.copy_out(&[dst]).unwrap();
        assert_eq!(u64::from_ne_bytes(out[..8].try_into().unwrap()), 7);
        // The pipe went back empty: the next batch reads its own pages.
        let held = pipes.hold(&[a.0]);
        a.word().store(9, Ordering::SeqCst);
        held.copy_out(&[dst]).unwrap();
        assert_eq!(u64::from_ne_bytes(out[..8].try_into().unwrap()), 9);
    }
}
