//! A TCP relay between an agent and a memory server that injects faults into the server's
//! replies, as a failing server, a confused proxy or a slow link would. The relay does not
//! parse the protocol: a read of 8 KiB or more from the server is page data (a reply to a
//! read), all but its first bytes; smaller reads are headers, acknowledgements and hellos.
//! Requests pass untouched.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Reads of this size or more carry page data.
const LARGE: usize = 8192;

/// What the relay does to the server's replies.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Every `every`th large read is corrupted, alternately by one flipped byte in its middle
    /// and by 512 bytes there taken from an earlier large read (another page's bytes).
    Corrupt { every: u64 },
    /// The first `count` reads (of any size) from the moment the relay starts arrive `base`
    /// plus up to `jitter` late, in order, as over a slow link; every `spike_every`th of them
    /// `spike` later still.
    Delay {
        base: Duration,
        jitter: Duration,
        count: u64,
        spike_every: u64,
        spike: Duration,
    },
    /// The `nth` large read is cut in half, and the connection then goes silent (open, its
    /// requests still passed to the server, no reply forwarded).
    CutShort { nth: u64 },
}

/// A running relay: where to connect, and how many faults it injected.
pub struct Relay {
    pub addr: SocketAddr,
    injected: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    /// Faults injected: corruptions (both kinds), delayed reads, replies cut.
    injected: AtomicU64,
    /// Of the corruptions, those that put another read's bytes in.
    foreign: AtomicU64,
    /// Large reads seen (what `every` and `nth` count).
    large: AtomicU64,
    /// Reads seen while delaying (what `count` counts).
    delayed: AtomicU64,
    /// The largest delay given a read, in microseconds.
    max_delay_us: AtomicU64,
    /// The last large read, for foreign bytes.
    last_large: Mutex<Vec<u8>>,
}

impl Relay {
    /// Listens on a loopback port of its own and relays every connection to `target`.
    pub fn start(target: u16, fault: Fault) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                relay(client, server, fault, shared.clone());
            }
        });
        Relay {
            addr,
            injected: counts,
        }
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.injected.load(Ordering::Relaxed)
    }

    /// Of the corruptions, those that were another read's bytes.
    pub fn foreign(&self) -> u64 {
        self.injected.foreign.load(Ordering::Relaxed)
    }

    /// The longest any read was held back.
    pub fn max_delay(&self) -> Duration {
        Duration::from_micros(self.injected.max_delay_us.load(Ordering::Relaxed))
    }
}

fn relay(client: TcpStream, server: TcpStream, fault: Fault, counts: Arc<Counts>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut c_in, c_out) = (client.try_clone().unwrap(), client);
    let (mut s_in, mut s_out) = (server.try_clone().unwrap(), server);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_in, &mut s_out);
        let _ = s_out.shutdown(Shutdown::Both);
    });
    // Replies go through a delay line: read here, written by `forward` when due.
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || forward(rx, c_out));
    std::thread::spawn(move || {
        // The delays' jitter: the same sequence for a connection from the same port.
        let mut rng =
            crate::Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(s_in.local_addr().unwrap().port()));
        let mut buf = vec![0u8; 256 * 1024];
        let mut due = Instant::now();
        let mut silent = false;
        loop {
            let n = match s_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if silent {
                continue;
            }
            let mut out = buf[..n].to_vec();
            let large = n >= LARGE;
            let nth = if large {
                counts.large.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                0
            };
            let now = Instant::now();
            let mut at = now;
            match fault {
                Fault::Corrupt { every } if large => {
                    if nth.is_multiple_of(every) {
                        corrupt(&mut out, nth / every, &counts);
                    }
                    *counts.last_large.lock().unwrap() = buf[..n].to_vec();
                }
                Fault::Corrupt { .. } => {}
                Fault::Delay {
                    base,
                    jitter,
                    count,
                    spike_every,
                    spike,
                } => {
                    let i = counts.delayed.fetch_add(1, Ordering::Relaxed) + 1;
                    if i <= count {
                        let mut d = rng.between(base, base + jitter);
                        if i.is_multiple_of(spike_every) {
                            d += spike;
                        }
                        at = now + d;
                        counts
                            .max_delay_us
                            .fetch_max(d.as_micros() as u64, Ordering::Relaxed);
                        counts.injected.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Fault::CutShort { nth: cut } if nth == cut => {
                    out.truncate(n / 2);
                    silent = true;
                    counts.injected.fetch_add(1, Ordering::Relaxed);
                }
                Fault::CutShort { .. } => {}
            }
            // In order: a read is never forwarded before the one ahead of it.
            due = due.max(at);
            if tx.send((due, out)).is_err() {
                break;
            }
        }
        // The server went away: so does the client's connection, once what is due is sent.
        drop(tx);
    });
}

/// Writes each read to the client when it is due; shuts the connection once the server's
/// side has ended and everything is written.
fn forward(rx: mpsc::Receiver<(Instant, Vec<u8>)>, mut out: TcpStream) {
    for (due, bytes) in rx {
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            // The injected delay itself: this thread holds the reply back.
            std::thread::sleep(wait);
        }
        if out.write_all(&bytes).is_err() {
            break;
        }
    }
    let _ = out.shutdown(Shutdown::Both);
}

/// Corrupts a large read: the `k`th corruption flips a byte when `k` is odd, else takes 512
/// bytes from the last large read (where they differ; otherwise it flips a byte).
fn corrupt(out: &mut [u8], k: u64, counts: &Counts) {
    let mid = out.len() / 2;
    let span = mid..(mid + 512).min(out.len());
    if k.is_multiple_of(2) {
        let last = counts.last_large.lock().unwrap();
        if last.len() >= span.end && last[span.clone()] != out[span.clone()] {
            out[span.clone()].copy_from_slice(&last[span]);
            counts.foreign.fetch_add(1, Ordering::Relaxed);
            counts.injected.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    out[mid] ^= 0x20;
    counts.injected.fetch_add(1, Ordering::Relaxed);
}
