//! A connected endpoint with its own registered buffer, and the one-sided transfer that is
//! the only way to move bytes through it.
//!
//! A transfer's buffer must stay valid until the provider is done with it, which a borrow
//! cannot promise if the caller gives up waiting: so the registered buffer belongs to the
//! [`Channel`] that posts into it, [`Channel::transfer`] returns only when every operation it
//! posted has completed, and a channel whose transfer failed closes its endpoint (cancelling
//! whatever is still posted) before its buffer can be freed or reused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::layout::*;
use super::objects::*;
use super::Info;
use crate::memory::AnonMemory;

/// One one-sided operation of a transfer: `len` bytes between `offset` in the channel's buffer
/// and `addr` in the peer's region with `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rma {
    pub write: bool,
    pub offset: usize,
    pub len: usize,
    pub addr: u64,
    pub key: u64,
}

/// An endpoint (connected, or addressing its peer in an address vector), its completion queue
/// and its registered buffer.
pub struct Channel {
    // Field order is drop order: the endpoint (cancelling anything posted) before the region
    // and the memory it points into.
    ep: Endpoint,
    cq: Arc<CompletionQueue>,
    region: Option<MemoryRegion>,
    buffer: Arc<AnonMemory>,
    /// The peer's address in the endpoint's address vector (`FI_EP_RDM`; 0, unused, when
    /// connected).
    dest: u64,
    /// Whether completions are polled for rather than waited for: shm's blocking read yields
    /// without driving its progress (see [`super::blocking_read_progresses`]).
    poll_only: bool,
    /// Most operations the endpoint takes at once.
    depth: usize,
    /// Longest a transfer waits for its completions before the peer is declared gone.
    timeout: Duration,
}

impl Channel {
    /// Connects a new endpoint to `info`'s destination (`FI_EP_MSG`), sending `data` with the
    /// request, with a buffer of `buffer_len` bytes (registered when `register`, i.e.
    /// `FI_MR_LOCAL`); waits up to `timeout` for the server to accept (`ETIMEDOUT` after).
    pub fn connect(
        domain: &Arc<Domain>,
        info: &Info,
        data: &[u8],
        buffer_len: usize,
        register: bool,
        key: u64,
        timeout: Duration,
    ) -> Result<Channel, FabricError> {
        let eq = EventQueue::open(domain.fabric())?;
        let ch = Channel::open(
            domain,
            info,
            &Peers::Connected(eq.clone()),
            0,
            buffer_len,
            register,
            key,
        )?;
        ch.ep.connect(info, &eq, data, timeout)?;
        Ok(ch)
    }

    /// A reliable-datagram endpoint (`FI_EP_RDM`) whose transfers go to `dest` in `av`, with a
    /// buffer as [`Channel::connect`]'s. Nothing is sent until the first transfer.
    pub fn addressed(
        domain: &Arc<Domain>,
        info: &Info,
        av: &Arc<AddressVector>,
        dest: u64,
        buffer_len: usize,
        register: bool,
        key: u64,
    ) -> Result<Channel, FabricError> {
        let peers = Peers::Addressed(av.clone());
        Channel::open(domain, info, &peers, dest, buffer_len, register, key)
    }

    fn open(
        domain: &Arc<Domain>,
        info: &Info,
        peers: &Peers,
        dest: u64,
        buffer_len: usize,
        register: bool,
        key: u64,
    ) -> Result<Channel, FabricError> {
        let depth = info.tx_size().clamp(1, 256);
        let cq = CompletionQueue::open(domain, depth * 2)?;
        let ep = Endpoint::open(domain, info, peers, &cq)?;
        let buffer = Arc::new(
            AnonMemory::new(buffer_len)
                .map_err(|e| fail("mmap", e.raw_os_error().unwrap_or(0), e.to_string()))?,
        );
        let region = if register {
            Some(MemoryRegion::register(
                domain,
                &buffer,
                0,
                buffer.len(),
                Access::Local,
                key,
            )?)
        } else {
            None
        };
        Ok(Channel {
            ep,
            cq,
            region,
            buffer,
            dest,
            poll_only: !super::blocking_read_progresses(info),
            depth,
            timeout: Duration::from_secs(30),
        })
    }

    /// The longest a transfer waits without a completion before it fails (30 s unless set).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The channel's buffer, for filling before writes and reading after reads.
    pub fn buffer(&mut self) -> &mut [u8] {
        // SAFETY: no transfer is in flight outside `transfer` (which holds `&mut self`), so
        // nothing else touches these bytes while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.buffer.at(0), self.buffer.len()) }
    }

    /// Posts `ops` (at most the endpoint's depth in flight) and returns once all of them have
    /// completed; gives up early once `gone` says the peer is (checked every 100 ms while
    /// nothing completes: a reliable-datagram peer that went away says nothing itself). An
    /// error leaves the channel unusable: drop it (that closes the endpoint, cancelling what
    /// is still posted, before the buffer goes).
    pub fn transfer(&mut self, ops: &[Rma], gone: impl Fn() -> bool) -> Result<(), FabricError> {
        let desc = self
            .region
            .as_ref()
            .map_or(std::ptr::null_mut(), |r| r.desc());
        let (mut posted, mut done) = (0usize, 0usize);
        let mut last_progress = Instant::now();
        while done < ops.len() {
            while posted < ops.len() && posted - done < self.depth {
                let op = ops[posted];
                assert!(
                    op.offset + op.len <= self.buffer.len(),
                    "transfer outside the buffer"
                );
                // SAFETY: a live, connected endpoint (rma table checked at open); the range is
                // inside the buffer (asserted), which stays untouched by anything else until
                // every posted operation has completed or the endpoint is closed (see type).
                // The message structures are read during the call only.
                let rc = unsafe {
                    let rma = &*(*self.ep.raw).rma;
                    let buf = self.buffer.at(op.offset).cast();
                    if op.write {
                        // A write counts as done only once the bytes are in the peer's memory
                        // (FI_DELIVERY_COMPLETE): by default it completes when sent, and a
                        // read on another endpoint could then still see the old page.
                        let iov = libc::iovec {
                            iov_base: buf,
                            iov_len: op.len,
                        };
                        let mut d = desc;
                        let remote = RmaIov {
                            addr: op.addr,
                            len: op.len,
                            key: op.key,
                        };
                        let msg = MsgRma {
                            msg_iov: &iov,
                            desc: &mut d,
                            iov_count: 1,
                            addr: self.dest,
                            rma_iov: &remote,
                            rma_iov_count: 1,
                            context: std::ptr::null_mut(),
                            data: 0,
                        };
                        (rma.writemsg)(self.ep.raw, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)
                    } else {
                        (rma.read)(
                            self.ep.raw,
                            buf,
                            op.len,
                            desc,
                            self.dest,
                            op.addr,
                            op.key,
                            std::ptr::null_mut(),
                        )
                    }
                };
                if rc == -(FI_EAGAIN as isize) {
                    break; // the queue is full: reap first
                }
                check(if op.write { "fi_write" } else { "fi_read" }, rc)?;
                posted += 1;
            }
            // The faulting thread waits on this: spin while the governor allows, then block.
            let mut got = self.cq.poll()?;
            if got == 0 {
                let mut err = None;
                memliner_cpu::spin::spin_until(|| match self.cq.poll() {
                    Ok(0) => false,
                    Ok(n) => {
                        got = n;
                        true
                    }
                    Err(e) => {
                        err = Some(e);
                        true
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
            }
            if got == 0 {
                got = if self.poll_only {
                    // This side's progress is what completes a transfer: poll, sleeping
                    // between.
                    let until = Instant::now() + Duration::from_millis(100);
                    loop {
                        std::thread::sleep(Duration::from_micros(50));
                        match self.cq.poll()? {
                            0 if Instant::now() < until => {}
                            n => break n,
                        }
                    }
                } else {
                    self.cq.wait(Duration::from_millis(100))?
                };
            }
            if got > 0 {
                done += got;
                last_progress = Instant::now();
            } else if gone() {
                return Err(fail(
                    "one-sided transfer",
                    libc::ECONNRESET,
                    "the server hung up with this transfer in flight".into(),
                ));
            } else if last_progress.elapsed() > self.timeout {
                return Err(fail(
                    "one-sided transfer",
                    libc::ETIMEDOUT,
                    // Worded as a TCP store's: one deadline, one message, whatever the transport.
                    format!(
                        "no answer within the {} deadline (no completion)",
                        memliner_protocol::units::format_duration(self.timeout)
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("depth", &self.depth)
            .field("buffer", &self.buffer.len())
            .finish()
    }
}
