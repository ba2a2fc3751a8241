//! Single-page read latency over TCP loopback: `cargo run --release --example latency`.
use memliner_server::{spawn, ServerConfig};
use std::time::Instant;
use swap_backend::{ClientOptions, PageStore, TcpStore, PAGE_SIZE};

fn main() {
    let s = spawn("127.0.0.1:0", ServerConfig::with_capacity(1 << 30)).unwrap();
    let c = TcpStore::connect(
        &s.local_addr().to_string(),
        ClientOptions {
            connections: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let ids: Vec<u64> = (0..1024).collect();
    c.write_pages(&ids, &vec![7u8; 1024 * PAGE_SIZE]).unwrap();
    let mut buf = vec![0u8; PAGE_SIZE];
    let mut lat = Vec::new();
    for i in 0..20000u64 {
        let t = Instant::now();
        c.read_pages(&[i % 1024], &mut buf).unwrap();
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat.sort();
    println!(
        "single-page read over TCP loopback: p50 {:.1} us, p99 {:.1} us",
        lat[lat.len() / 2] as f64 / 1e3,
        lat[lat.len() * 99 / 100] as f64 / 1e3
    );
}
