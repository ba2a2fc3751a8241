//! Each transport's page store alone, outside any JVM: the latency of one page read at queue
//! depth 1 and the throughput of full batches, side by side in one run (`--transports`).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use swap_backend::fabric::FabricStore;
use swap_backend::memfile::MemfileStore;
use swap_backend::{ClientOptions, LocalStore, PageStore, TcpStore, PAGE_SIZE};

use super::median;
use memliner_cli::run::{embedded_config, embedded_server, Transport};

/// One transport's figures (medians over the repetitions).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreFigures {
    /// `in-process`, `tcp`, `fabric (tcp provider)`.
    pub transport: String,
    pub read_p50_us: f64,
    pub read_p99_us: f64,
    pub write_p50_us: f64,
    /// Batches of [`BATCH`] pages.
    pub read_gbs: f64,
    pub write_gbs: f64,
}

/// Pages per batch in the throughput figures: one pager write-back or prefetch batch.
pub const BATCH: usize = 256;
/// Single-page requests timed per repetition.
const SINGLES: usize = 2000;

fn figures(
    name: String,
    store: &dyn PageStore,
    mib: usize,
    reps: usize,
) -> Result<StoreFigures, String> {
    let e = |e: swap_backend::StoreError| e.to_string();
    let pages = (mib * 256).max(BATCH);
    let data: Vec<u8> = (0..BATCH * PAGE_SIZE).map(|i| (i % 251) as u8).collect();
    let mut buf = vec![0u8; BATCH * PAGE_SIZE];
    let (mut r50, mut r99, mut w50, mut rg, mut wg) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let t = Instant::now();
        for start in (0..pages).step_by(BATCH) {
            let ids: Vec<u64> = (start as u64..(start + BATCH) as u64).collect();
            store.write_pages(&ids, &data).map_err(e)?;
        }
        wg.push((pages * PAGE_SIZE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for start in (0..pages).step_by(BATCH) {
            let ids: Vec<u64> = (start as u64..(start + BATCH) as u64).collect();
            store.read_pages(&ids, &mut buf).map_err(e)?;
        }
        rg.push((pages * PAGE_SIZE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        if buf != data {
            return Err(format!("{name}: pages read back differ from those written"));
        }
        // Depth 1: one page at a time, ids spread over what was written.
        let mut reads = Vec::with_capacity(SINGLES);
        let mut writes = Vec::with_capacity(SINGLES);
        let mut one = vec![0u8; PAGE_SIZE];
        for i in 0..SINGLES {
            let id = (i * 7919 % pages) as u64;
            let t = Instant::now();
            store.read_pages(&[id], &mut one).map_err(e)?;
            reads.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            store.write_pages(&[id], &one).map_err(e)?;
            writes.push(t.elapsed().as_secs_f64() * 1e6);
        }
        reads.sort_by(f64::total_cmp);
        r50.push(reads[SINGLES / 2]);
        r99.push(reads[SINGLES * 99 / 100]);
        w50.push(median(writes));
        let ids: Vec<u64> = (0..pages as u64).collect();
        store.free_pages(&ids).map_err(e)?;
    }
    Ok(StoreFigures {
        transport: name,
        read_p50_us: median(r50),
        read_p99_us: median(r99),
        write_p50_us: median(w50),
        read_gbs: median(rg),
        write_gbs: median(wg),
    })
}

/// The in-process store, TCP to the embedded server, memory files of the embedded server
/// (where the host hands them out), and (where libfabric loads) one-sided reads through
/// libfabric to it, `mib` MiB each, `reps` times.
pub fn measure(mib: usize, reps: usize) -> Result<Vec<StoreFigures>, String> {
    let options = || ClientOptions {
        namespace: "bench".into(),
        connections: 1,
        ..ClientOptions::default()
    };
    let mut out = vec![figures(
        "in-process".into(),
        &LocalStore::new(u64::MAX / PAGE_SIZE as u64),
        mib,
        reps,
    )?];
    let server = embedded_server(Transport::Tcp)?;
    let tcp = TcpStore::connect(&server.handle.local_addr().to_string(), options())
        .map_err(|e| e.to_string())?;
    out.push(figures("tcp".into(), &tcp, mib, reps)?);
    drop(tcp);
    server.stop();
    match Transport::Auto.resolve() {
        (Transport::Unix, _) => {
            let server = embedded_server(Transport::Unix)?;
            let url = server.url();
            let unix = MemfileStore::connect(url.trim_start_matches("unix://"), options())
                .map_err(|e| e.to_string())?;
            out.push(figures("unix (memory files)".into(), &unix, mib, reps)?);
            drop(unix);
            server.stop();
        }
        (_, why) => eprintln!(
            "memliner bench: no unix figures: {}",
            why.unwrap_or_default()
        ),
    }
    if let Err(e) = memliner_fabric_sys::load() {
        eprintln!("memliner bench: no fabric figures: {e}");
        return Ok(out);
    }
    // The host's choice (connected endpoints), then, unless FI_PROVIDER narrows the choice,
    // reliable datagrams on one host (shm) and over tcp through ofi_rxm, as efa and
    // verbs;ofi_rxm are used.
    let mut providers = vec![None];
    if std::env::var_os("FI_PROVIDER").is_none() {
        providers.extend([Some("shm"), Some("tcp;ofi_rxm")]);
    }
    for provider in providers {
        let config = memliner_server::ServerConfig {
            fabric_provider: provider.map(str::to_string),
            ..embedded_config(Transport::Fabric)
        };
        let server = match memliner_server::spawn("127.0.0.1:0", config) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("memliner bench: no fabric figures over {provider:?}: {e}");
                continue;
            }
        };
        let fabric = FabricStore::connect(&server.local_addr().to_string(), options())
            .map_err(|e| e.to_string())?;
        let name = format!("fabric ({}, {})", fabric.provider(), fabric.endpoint_type());
        out.push(figures(name, &fabric, mib, reps)?);
        drop(fabric);
        server.stop();
    }
    Ok(out)
}
