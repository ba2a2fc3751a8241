//! The one-sided transport (`fabric://`) against a real memory server, over libfabric's tcp
//! provider on 127.0.0.1: the conformance suite, plus what only a one-sided client can get
//! wrong. Skipped, with the reason printed, where libfabric is not installed.

use swap_backend::conformance::{self, pattern, MIN_CAPACITY_PAGES};
use swap_backend::fabric::FabricStore;
use swap_backend::server::{self, ServerConfig, ServerHandle};
use swap_backend::{PageStore, TcpOptions, PAGE_SIZE};

/// A server with a one-sided listener, or `None` (and why) without libfabric.
fn start(capacity_pages: u64) -> Option<ServerHandle> {
    if let Err(e) = swap_backend::fabric_ffi::load() {
        eprintln!("skipped: {e} (apt-get install libfabric1 to run the fabric tests)");
        return None;
    }
    Some(
        server::spawn(
            "127.0.0.1:0",
            ServerConfig {
                capacity_bytes: capacity_pages * PAGE_SIZE as u64,
                token: None,
                verbose: false,
                latency: None,
                fabric: true,
            },
        )
        .unwrap_or_else(|e| panic!("fabric server: {e}")),
    )
}

fn client(s: &ServerHandle, ns: &str) -> FabricStore {
    FabricStore::connect(
        &s.local_addr().to_string(),
        TcpOptions {
            token: String::new(),
            namespace: ns.into(),
            connections: 2,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn fabric_store_conforms() {
    let Some(s) = start(MIN_CAPACITY_PAGES * 2) else {
        return;
    };
    let c = client(&s, "a");
    assert_eq!(c.provider(), "tcp");
    conformance::run_all(&c);
    assert!(c.describe().starts_with("fabric://127.0.0.1:"));
}
