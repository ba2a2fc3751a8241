//! The OS calls behind `unix://`: memory files (memfd) sealed against growing, handed over a
//! Unix socket (SCM_RIGHTS), mapped by the client. The one `unsafe` block is the mapping.

#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::protocol::PAGE_SIZE;

/// File descriptors one reply may carry (an alloc reply carries one per grant).
pub const MAX_FDS: usize = 8;

/// A memory file of `pages` pages for one grant, its memory allocated now (charged to the
/// server, as a memory server's pool is, and a full machine refuses here rather than when the
/// client writes), sealed so that the client cannot grow it and cannot seal it further: the
/// server can still shrink it to nothing when the grant is given back.
pub fn grant_file(name: &str, pages: u64) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let len = pages * PAGE_SIZE as u64;
    rustix::fs::ftruncate(&fd, len)?;
    rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, len)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// Takes a given-back grant's memory away, also from a client that still maps it (its next
/// access faults): the file shrinks to nothing.
pub fn revoke(fd: &OwnedFd) -> std::io::Result<()> {
    Ok(rustix::fs::ftruncate(fd, 0)?)
}

/// The size of a memory file, in bytes.
pub fn file_len(fd: &OwnedFd) -> std::io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_size as u64)
}

/// Sends `bytes` with `fds` attached to the first byte.
pub fn send_with_fds(socket: &UnixStream, bytes: &[u8], fds: &[OwnedFd]) -> std::io::Result<()> {
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !borrowed.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(std::io::Error::other(format!(
            "{} descriptors in one reply, more than {MAX_FDS}",
            fds.len()
        )));
    }
    let mut sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    while sent < bytes.len() {
        let n = rustix::net::send(socket, &bytes[sent..], SendFlags::NOSIGNAL)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        sent += n;
    }
    Ok(())
}

/// Reads a Unix socket keeping the descriptors that arrive with the bytes, in order.
#[derive(Debug)]
pub struct FdReader {
    socket: UnixStream,
    fds: std::collections::VecDeque<OwnedFd>,
}

impl FdReader {
    pub fn new(socket: UnixStream) -> FdReader {
        FdReader {
            socket,
            fds: Default::default(),
        }
    }

    /// The oldest descriptor received and not yet taken.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }
}

impl Read for FdReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                self.fds.extend(fds);
            }
        }
        Ok(got.bytes)
    }
}

/// Mappings a signal handler can look an address up in: a copy that faults in one means the
/// server emptied a file this process still uses (ours never does; a broken or hostile one
/// could), and the agent then stops the JVM naming the server instead of crashing in a copy.
const GUARDED: usize = 1024;

struct Guarded {
    start: AtomicUsize,
    end: AtomicUsize,
    server: AtomicPtr<&'static str>,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNGUARDED: Guarded = Guarded {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    server: AtomicPtr::new(std::ptr::null_mut()),
};
static GUARDS: [Guarded; GUARDED] = [UNGUARDED; GUARDED];

/// The server whose memory file is mapped at `addr`, if one is: atomics only, safe to call
/// from a signal handler.
pub fn server_at(addr: usize) -> Option<&'static str> {
    GUARDS.iter().find_map(|g| {
        let end = g.end.load(Ordering::Acquire);
        let start = g.start.load(Ordering::Acquire);
        let server = g.server.load(Ordering::Acquire);
        // SAFETY: `server` points to a leaked `&'static str` (see `Mapping::new`), set before
        // `end` and cleared after it.
        (addr >= start && addr < end && !server.is_null()).then(|| unsafe { *server })
    })
}

/// A grant's memory file mapped into this process, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Its entry in `GUARDS`, if one was free.
    guard: Option<usize>,
}

// SAFETY: the mapping is plain shared memory; callers copy disjoint pages in and out and order
// the accesses to one page among themselves (the pager never reads a page while writing it).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all of `fd`, which must be `pages` pages long (a server that says otherwise is
    /// refused: a short file would fault on the first access beyond its end), as a file of
    /// `server` (`unix:///…`, named if a copy from it ever faults).
    pub fn new(
        fd: &OwnedFd,
        pages: u64,
        server: &'static &'static str,
    ) -> std::io::Result<Mapping> {
        let len = pages as usize * PAGE_SIZE;
        let actual = file_len(fd)?;
        if actual != len as u64 {
            return Err(std::io::Error::other(format!(
                "the server's memory file holds {actual} bytes, not the {len} of its grant"
            )));
        }
        // SAFETY: a fresh shared mapping of a whole file at an address the kernel picks; it
        // overlaps nothing of ours, and `Drop` unmaps exactly it.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let start = ptr as usize;
        let guard = GUARDS.iter().position(|g| {
            g.start
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if let Some(i) = guard {
            let server: *const &'static str = server;
            GUARDS[i].server.store(server.cast_mut(), Ordering::Release);
            GUARDS[i].end.store(start + len, Ordering::Release);
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            guard,
        })
    }

    /// Copies page `index` of the mapping into `dst`.
    pub fn read(&self, index: u64, dst: &mut [u8]) {
        dst.copy_from_slice(self.page(index));
    }

    /// Copies `src` into page `index` of the mapping.
    pub fn write(&self, index: u64, src: &[u8]) {
        assert_eq!(src.len(), PAGE_SIZE);
        let at = self.offset(index);
        // SAFETY: `offset` checked that the page lies inside the mapping, which lives as
        // long as `self`; no reference to these bytes exists while they are written (reads
        // go through `page` and are ordered against writes of the same page by the pager).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(at), PAGE_SIZE) };
    }

    fn offset(&self, index: u64) -> usize {
        let at = index as usize * PAGE_SIZE;
        assert!(
            at + PAGE_SIZE <= self.len,
            "page {index} is past the mapping"
        );
        at
    }

    fn page(&self, index: u64) -> &[u8] {
        let at = self.offset(index);
        // SAFETY: inside the mapping (checked), alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), PAGE_SIZE) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(i) = self.guard {
            GUARDS[i].end.store(0, Ordering::Release);
            GUARDS[i]
                .server
                .store(std::ptr::null_mut(), Ordering::Release);
            GUARDS[i].start.store(0, Ordering::Release);
        }
        // SAFETY: exactly the range `new` mapped; no copy is in flight (they borrow `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}
