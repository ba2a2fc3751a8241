//! A live server under hostile input: over 100,000 malformed, truncated, oversized and
//! out-of-order frames, plus connections that stall mid-frame or half-close, while a real
//! client keeps writing and reading pages. The server must stay up, serve the client the right
//! bytes throughout, and keep its connections (hence threads) within its limit.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memliner_server::{self as server, Limits, ServerConfig};
use swap_backend::conformance::pattern;
use swap_backend::protocol::{encode_ids, Header, Hello, Lane, Op, Request, HEADER_LEN};
use swap_backend::{ClientOptions, PageStore, TcpStore, PAGE_SIZE};

/// xorshift64*: reproducible noise without a dependency.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn header(op: Op, request: u64, len: u32) -> [u8; HEADER_LEN] {
    Header {
        op,
        flags: 0,
        request,
        len,
    }
    .encode()
}

/// Frames a well-behaved server answers and keeps the connection for: requests out of
/// order (alloc and release before attach, attach on a TCP-only server), reads of pages never
/// written, frees of nothing, stats.
fn refused_but_kept(n: &mut Noise, request: u64, out: &mut Vec<u8>) {
    match n.below(5) {
        0 => Request::Alloc { need: 1, want: 8 }.write_to(out, request),
        1 => Request::Release {
            grants: vec![n.next()].into(),
        }
        .write_to(out, request),
        2 => Request::Attach.write_to(out, request),
        3 => Request::Read {
            ids: vec![n.next(), n.next()].into(),
        }
        .write_to(out, request),
        _ => Request::Free {
            ids: vec![n.next()].into(),
        }
        .write_to(out, request),
    }
    .unwrap();
}

/// A frame that ends the connection: garbage, a wrong magic or version, an unknown op, a
/// length over the limit, a count that lies, a second hello.
fn fatal(n: &mut Noise, out: &mut Vec<u8>) {
    match n.below(7) {
        0 => out.extend((0..n.below(64) + 1).map(|_| n.next() as u8)),
        1 => {
            let mut h = header(Op::Read, 1, 12);
            h[0] ^= 0x5a;
            out.extend_from_slice(&h);
        }
        2 => {
            let mut h = header(Op::Read, 1, 12);
            h[4] = 200;
            out.extend_from_slice(&h);
        }
        3 => {
            let mut h = header(Op::Read, 1, 0);
            h[5] = 0x42;
            out.extend_from_slice(&h);
        }
        4 => out.extend_from_slice(&header(Op::Write, 1, u32::MAX)),
        5 => {
            out.extend_from_slice(&header(Op::Write, 1, 12));
            let mut ids = encode_ids(&[1]);
            ids[0] = 200; // 200 ids announced, one sent
            out.extend_from_slice(&ids);
        }
        _ => Request::Hello(hello("again")).write_to(out, 9).unwrap(),
    }
}

fn hello(ns: &str) -> Hello {
    Hello {
        token: String::new(),
        namespace: ns.into(),
        lane: Lane::Demand,
        key: None,
    }
}

/// This process's resident memory, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_server_under_a_barrage_of_bad_frames_keeps_serving_the_right_bytes() {
    let limit = 48;
    let s = server::spawn(
        "127.0.0.1:0",
        ServerConfig {
            limits: Limits {
                connections: limit,
                connections_per_client: 8,
                hello_deadline: std::time::Duration::from_millis(300),
            },
            ..ServerConfig::with_capacity(4096 * PAGE_SIZE as u64)
        },
    )
    .unwrap();
    let addr = s.local_addr();
    let client = TcpStore::connect(
        &addr.to_string(),
        ClientOptions {
            namespace: "honest".into(),
            connections: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let rss_before = rss_kib();
    let done = AtomicBool::new(false);
    let frames = AtomicUsize::new(0);
    let most_open = AtomicUsize::new(0);
    std::thread::scope(|t| {
        // The honest client: rewrite and read back its pages for as long as the attack lasts.
        let honest = t.spawn(|| {
            let ids: Vec<u64> = (0..32).collect();
            let mut rounds = 0u32;
            while !done.load(Ordering::SeqCst) || rounds < 10 {
                let v = rounds as u8;
                let data: Vec<u8> = ids.iter().flat_map(|&i| pattern(i, v)).collect();
                client.write_pages(&ids, &data).unwrap();
                let mut back = vec![0u8; data.len()];
                client.read_pages(&ids, &mut back).unwrap();
                assert!(
                    back == data,
                    "round {rounds}: the honest client read other bytes"
                );
                most_open.fetch_max(s.open_connections(), Ordering::SeqCst);
                rounds += 1;
            }
            rounds
        });
        // Attackers: connections that say hello, send refused requests and end in a fatal
        // frame; connections that send garbage first; connections that stall mid-frame or
        // half-close.
        let attackers: Vec<_> = (0..3u64)
            .map(|a| {
                let frames = &frames;
                t.spawn(move || {
                    let mut n = Noise(0x9e37_79b9_7f4a_7c15 ^ (a + 1));
                    let mut conns = 0;
                    while frames.load(Ordering::SeqCst) < 100_000 {
                        let Ok(mut c) = TcpStream::connect(addr) else {
                            continue;
                        };
                        conns += 1;
                        let mut out = Vec::new();
                        let mut sent = 0;
                        match n.below(10) {
                            0 => {
                                fatal(&mut n, &mut out);
                                sent += 1;
                            }
                            1 => {
                                // Half a header, then silence: the hello deadline ends it.
                                out.extend_from_slice(&header(Op::Hello, 0, 4)[..7]);
                                sent += 1;
                            }
                            _ => {
                                Request::Hello(hello(&format!("mallory-{a}-{conns}")))
                                    .write_to(&mut out, 0)
                                    .unwrap();
                                for r in 0..60 {
                                    refused_but_kept(&mut n, r + 1, &mut out);
                                }
                                fatal(&mut n, &mut out);
                                sent += 62;
                            }
                        }
                        let _ = c.write_all(&out);
                        if n.below(2) == 0 {
                            let _ = c.shutdown(std::net::Shutdown::Write);
                        }
                        frames.fetch_add(sent, Ordering::SeqCst);
                        // Never read: the server must not wait on an attacker's socket.
                        drop(c);
                    }
                    conns
                })
            })
            .collect();
        let conns: usize = attackers.into_iter().map(|h| h.join().unwrap()).sum();
        done.store(true, Ordering::SeqCst);
        let rounds = honest.join().unwrap();
        assert!(rounds >= 10, "the honest client made {rounds} rounds");
        assert!(conns > 1000, "{conns} attacking connections");
        eprintln!("hostile: {conns} attacking connections, {rounds} honest rounds");
    });
    assert!(frames.load(Ordering::SeqCst) >= 100_000);
    let most = most_open.load(Ordering::SeqCst);
    assert!(
        most <= limit,
        "{most} connections open at once, limit {limit}"
    );
    // Connections cost their buffers only while open: memory stays bounded (the honest
    // client's pages are 128 KiB; 48 connections' buffers at most 24 MiB).
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 64 << 10, "resident memory grew by {grown} KiB");
    eprintln!(
        "hostile: {} frames, at most {most} connections open (limit {limit}), resident memory +{grown} KiB",
        frames.load(Ordering::SeqCst)
    );
    // Still serving, and the attackers' namespaces are gone with their connections.
    let mut out = vec![0u8; PAGE_SIZE];
    client.read_pages(&[3], &mut out).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client.server_stats().unwrap().namespaces != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "attackers' namespaces left behind"
        );
        std::thread::yield_now();
    }
}
