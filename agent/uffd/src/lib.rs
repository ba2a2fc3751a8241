//! A narrow wrapper over the userfaultfd ioctls the pager needs.
//!
//! Why our own: the pager needs write-protect faults, the faulting thread id, DONTWAKE copies,
//! UNMAP events and a non-blocking batched read in one place; the `userfaultfd` crate covers
//! these only partly and behind feature flags tied to kernel versions.
//!
//! Result policy (written once, used by the fault loop):
//! - `EEXIST` from COPY: the page is already mapped (a stale or duplicate fault): not an error,
//!   but the waiting thread still needs an explicit wake.
//! - `EAGAIN` from COPY/WRITEPROTECT: the mm is changing (an UNMAP/REMAP event is pending);
//!   the caller retries after reading events.
//! - `ENOENT`/`ESRCH`: the range is no longer registered or the process is exiting: skip.
//! - anything else: a bug or a kernel we cannot work with: fatal.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const UFFD_API: u64 = 0xAA;
const IOC_TYPE: u64 = 0xAA;

const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (IOC_TYPE << 8) | nr
}
const fn ior(nr: u64, size: u64) -> u64 {
    (2 << 30) | (size << 16) | (IOC_TYPE << 8) | nr
}

const UFFDIO_API: u64 = iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = iowr(0x00, 32);
const UFFDIO_UNREGISTER: u64 = ior(0x01, 16);
const UFFDIO_WAKE: u64 = ior(0x02, 16);
const UFFDIO_COPY: u64 = iowr(0x03, 40);
const UFFDIO_WRITEPROTECT: u64 = iowr(0x06, 24);
/// `USERFAULTFD_IOC_NEW` on /dev/userfaultfd.
const USERFAULTFD_IOC_NEW: u64 = 0xAA << 8;

pub const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
pub const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
/// Faults raise SIGBUS in the faulting thread instead of queueing an event.
pub const FEATURE_SIGBUS: u64 = 1 << 7;
pub const FEATURE_THREAD_ID: u64 = 1 << 8;

const REGISTER_MODE_MISSING: u64 = 1;
const REGISTER_MODE_WP: u64 = 2;

const COPY_MODE_DONTWAKE: u64 = 1;
const COPY_MODE_WP: u64 = 2;
const WP_MODE_WP: u64 = 1;
const WP_MODE_DONTWAKE: u64 = 2;

const EVENT_PAGEFAULT: u8 = 0x12;
const EVENT_REMAP: u8 = 0x14;
const EVENT_REMOVE: u8 = 0x15;
const EVENT_UNMAP: u8 = 0x16;

const PAGEFAULT_FLAG_WRITE: u64 = 1;
const PAGEFAULT_FLAG_WP: u64 = 2;

const UFFD_USER_MODE_ONLY: i32 = 1;

#[repr(C)]
#[derive(Default)]
struct ApiArg {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct RegisterArg {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct CopyArg {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct WriteProtectArg {
    range: Range,
    mode: u64,
}

/// The raw `struct uffd_msg` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
struct RawMsg {
    event: u8,
    _reserved: [u8; 7],
    arg: [u64; 3],
}

/// One event read from the userfaultfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A thread touched a missing page (`wp == false`) or wrote to a write-protected one.
    Fault {
        addr: usize,
        write: bool,
        wp: bool,
        tid: u32,
    },
    /// `[start, end)` was unmapped (munmap, or mmap MAP_FIXED over it).
    Unmap { start: usize, end: usize },
    /// An event the pager does not ask for; logged.
    Other(u8),
}

/// How a COPY ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    Copied,
    /// Already mapped: wake the range explicitly.
    Exists,
    /// The mm is changing; read events, then retry.
    Again,
    /// The range is gone (unregistered, unmapped, process exiting).
    Gone,
}

/// An open userfaultfd with the API handshake done.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    features: u64,
    user_mode_only: bool,
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

impl Uffd {
    /// Opens a userfaultfd and negotiates `wanted` features (all must be granted).
    ///
    /// Tries the syscall, then /dev/userfaultfd (works for unprivileged users given access to
    /// the device), then the syscall restricted to user-mode faults (unprivileged kernels with
    /// `vm.unprivileged_userfaultfd=0`): then a system call that reads a paged-out heap page
    /// fails with EFAULT instead of waiting, which HotSpot rarely does, hence only a warning.
    pub fn open(wanted: u64) -> io::Result<Uffd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: plain syscall with integer arguments; a returned fd is owned below.
        let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as RawFd;
        let mut user_mode_only = false;
        if fd < 0 {
            let first = last_err();
            fd = open_dev(flags).unwrap_or(-1);
            if fd < 0 {
                // SAFETY: as above.
                fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY) }
                    as RawFd;
                if fd < 0 {
                    return Err(first);
                }
                user_mode_only = true;
            }
        }
        // SAFETY: fd was just returned by the kernel and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut api = ApiArg {
            api: UFFD_API,
            features: wanted,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes exactly one ApiArg.
        if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &mut api) } != 0 {
            return Err(last_err());
        }
        if api.features & wanted != wanted {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "kernel lacks userfaultfd features {:#x}",
                    wanted & !api.features
                ),
            ));
        }
        Ok(Uffd {
            fd,
            features: api.features,
            user_mode_only,
        })
    }

    pub fn features(&self) -> u64 {
        self.features
    }

    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Registers `[start, start+len)` for missing and write-protect faults.
    /// Does not touch memory.
    pub fn register(&self, start: usize, len: usize) -> io::Result<()> {
        let mut arg = RegisterArg {
            range: Range {
                start: start as u64,
                len: len as u64,
            },
            mode: REGISTER_MODE_MISSING | REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads/writes one RegisterArg; registering changes no memory.
        if unsafe { libc::ioctl(self.raw_fd(), UFFDIO_REGISTER as _, &mut arg) } != 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// Unregisters a range (faults there are then served by the kernel again).
    pub fn unregister(&self, start: usize, len: usize) -> io::Result<()> {
        let mut r = Range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: reads one Range.
        if unsafe { libc::ioctl(self.raw_fd(), UFFDIO_UNREGISTER as _, &mut r) } != 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// Wakes threads waiting on faults in the range.
    pub fn wake(&self, start: usize, len: usize) -> io::Result<()> {
        let mut r = Range {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: reads one Range; waking changes no memory.
        if unsafe { libc::ioctl(self.raw_fd(), UFFDIO_WAKE as _, &mut r) } != 0 {
            let e = last_err();
            if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::ESRCH) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Atomically maps a copy of `src` at the missing page(s) `dst`.
    ///
    /// # Safety
    /// `src` must be valid for `len` bytes; `dst` must lie in a range registered with this fd
    /// whose current contents the caller owns (the pager's page table says they are missing).
    pub unsafe fn copy(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        write_protect: bool,
        wake: bool,
    ) -> io::Result<CopyOutcome> {
        let mut arg = CopyArg {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: if write_protect { COPY_MODE_WP } else { 0 }
                | if wake { 0 } else { COPY_MODE_DONTWAKE },
            copy: 0,
        };
        // SAFETY: the caller upholds the contract above; the ioctl reads/writes one CopyArg.
        let rc = unsafe { libc::ioctl(self.raw_fd(), UFFDIO_COPY as _, &mut arg) };
        if rc == 0 {
            return Ok(CopyOutcome::Copied);
        }
        let e = last_err();
        match e.raw_os_error() {
            Some(libc::EEXIST) => Ok(CopyOutcome::Exists),
            Some(libc::EAGAIN) => Ok(CopyOutcome::Again),
            Some(libc::ENOENT) | Some(libc::ESRCH) => Ok(CopyOutcome::Gone),
            _ => Err(e),
        }
    }

    /// Sets (`protect`) or clears write protection on present pages of a range. Clearing wakes
    /// the writers waiting there unless `wake` is false. `Ok(false)`: EAGAIN, the mm is
    /// changing under an unread event; read events, then retry.
    pub fn write_protect(
        &self,
        start: usize,
        len: usize,
        protect: bool,
        wake: bool,
    ) -> io::Result<bool> {
        let mut arg = WriteProtectArg {
            range: Range {
                start: start as u64,
                len: len as u64,
            },
            // Setting protection never wakes, and the kernel refuses DONTWAKE together with WP.
            mode: if protect {
                WP_MODE_WP
            } else if wake {
                0
            } else {
                WP_MODE_DONTWAKE
            },
        };
        // SAFETY: reads one WriteProtectArg; changes page protection bits only.
        let rc = unsafe { libc::ioctl(self.raw_fd(), UFFDIO_WRITEPROTECT as _, &mut arg) };
        if rc == 0 {
            return Ok(true);
        }
        let e = last_err();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(false),
            Some(libc::ENOENT) | Some(libc::ESRCH) => Ok(true),
            _ => Err(e),
        }
    }

    /// Reads up to `out.len()` pending events without blocking; returns how many.
    pub fn read_events(&self, out: &mut [Event]) -> io::Result<usize> {
        const MAX: usize = 64;
        let mut raw = [RawMsg {
            event: 0,
            _reserved: [0; 7],
            arg: [0; 3],
        }; MAX];
        let want = out.len().min(MAX);
        // SAFETY: reads at most `want` whole messages into our buffer.
        let n = unsafe {
            libc::read(
                self.raw_fd(),
                raw.as_mut_ptr().cast(),
                want * std::mem::size_of::<RawMsg>(),
            )
        };
        if n < 0 {
            let e = last_err();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        let count = n as usize / std::mem::size_of::<RawMsg>();
        for (m, o) in raw[..count].iter().zip(out.iter_mut()) {
            *o = match m.event {
                EVENT_PAGEFAULT => Event::Fault {
                    addr: m.arg[1] as usize,
                    write: m.arg[0] & PAGEFAULT_FLAG_WRITE != 0,
                    wp: m.arg[0] & PAGEFAULT_FLAG_WP != 0,
                    tid: m.arg[2] as u32,
                },
                EVENT_UNMAP => Event::Unmap {
                    start: m.arg[0] as usize,
                    end: m.arg[1] as usize,
                },
                EVENT_REMAP | EVENT_REMOVE => Event::Other(m.event),
                other => Event::Other(other),
            };
        }
        Ok(count)
    }
}

fn open_dev(flags: i32) -> Option<RawFd> {
    // SAFETY: open with a constant NUL-terminated path.
    let dev = unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if dev < 0 {
        return None;
    }
    // SAFETY: USERFAULTFD_IOC_NEW takes the flags as its integer argument.
    let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW as _, flags) };
    // SAFETY: dev is ours to close.
    unsafe { libc::close(dev) };
    (fd >= 0).then_some(fd)
}

const _: () = assert!(std::mem::size_of::<RawMsg>() == 32);
