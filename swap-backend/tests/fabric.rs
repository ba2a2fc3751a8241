//! The one-sided transport (`fabric://`) against a real memory server, over libfabric's tcp
//! provider on 127.0.0.1: the conformance suite, plus what only a one-sided client can get
//! wrong. Skipped, with the reason printed, where libfabric is not installed. (Wrong keys and
//! out-of-bounds addresses, which the client cannot produce through `PageStore`, are tested
//! inside the crate, in `fabric::client`.)

use memliner_fabric_sys as fabric_ffi;
use memliner_server::{self as server, ServerConfig, ServerHandle};
use swap_backend::conformance::{self, MIN_CAPACITY_PAGES};
use swap_backend::fabric::FabricStore;
use swap_backend::{ClientOptions, PageStore, ReplicatedStore, PAGE_SIZE};

fn config(capacity_pages: u64) -> ServerConfig {
    ServerConfig {
        fabric: true,
        ..ServerConfig::with_capacity(capacity_pages * PAGE_SIZE as u64)
    }
}

/// A server with a one-sided listener, or `None` (and why) without libfabric.
fn start(capacity_pages: u64) -> Option<ServerHandle> {
    if !conformance::libfabric_or_skip("a fabric transport test") {
        return None;
    }
    Some(
        server::spawn("127.0.0.1:0", config(capacity_pages))
            .unwrap_or_else(|e| panic!("fabric server: {e}")),
    )
}

fn client(s: &ServerHandle, ns: &str) -> FabricStore {
    FabricStore::connect(
        &s.local_addr().to_string(),
        ClientOptions {
            token: String::new(),
            namespace: ns.into(),
            connections: 2,
            deadline: None,
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
    // The provider FI_PROVIDER names (scripts/test.sh runs this file again over shm and
    // tcp;ofi_rxm), else tcp, which has connected endpoints.
    let provider = std::env::var("FI_PROVIDER").unwrap_or_else(|_| "tcp".into());
    assert_eq!(c.provider(), provider);
    assert_eq!(s.fabric().map(|f| f.0), Some(provider.as_str()));
    let ep_type = if provider == "tcp" {
        "FI_EP_MSG"
    } else {
        "FI_EP_RDM"
    };
    assert_eq!(c.endpoint_type(), ep_type);
    conformance::run_all(&c);
    assert_eq!(
        c.describe(),
        format!("fabric://{}", s.local_addr()),
        "the store is named by its URL"
    );
}

#[test]
fn clients_hold_their_own_slots_and_the_server_frees_them_with_the_control_channel() {
    let Some(s) = start(MIN_CAPACITY_PAGES) else {
        return;
    };
    let b = client(&s, "b");
    conformance::namespaces_are_isolated_and_freed_with_their_client(client(&s, "a"), &b, || {
        b.server_stats().unwrap()
    });
}

#[test]
fn capacity_is_enforced_with_a_clear_error_and_freed_slots_are_reused() {
    // Slots are granted in chunks: a capacity of a few pages would be all in one.
    let Some(s) = start(300) else {
        return;
    };
    conformance::capacity_is_enforced_with_a_clear_error(&client(&s, "a"), 300);
}

#[test]
fn a_lost_server_is_an_error_naming_it() {
    let Some(s) = start(MIN_CAPACITY_PAGES) else {
        return;
    };
    let c = client(&s, "gone");
    conformance::server_loss_is_an_error(&c, || s.stop());
}

#[test]
fn a_restarted_server_never_serves_stale_bytes() {
    let Some(s) = start(MIN_CAPACITY_PAGES) else {
        return;
    };
    let addr = s.local_addr();
    let c = client(&s, "restarted");
    let mut again = None;
    conformance::server_restart_serves_no_stale_bytes(&c, || {
        s.stop();
        again = Some(server::spawn(&addr.to_string(), config(MIN_CAPACITY_PAGES)).unwrap());
    });
    // The restarted server serves new clients.
    let again = again.unwrap();
    conformance::write_then_read_back(&client(&again, "new"));
}

#[test]
fn a_tcp_only_server_refuses_one_sided_clients_with_the_fix() {
    let s = server::spawn(
        "127.0.0.1:0",
        ServerConfig {
            fabric: false,
            ..config(16)
        },
    )
    .unwrap();
    let err = FabricStore::connect(&s.local_addr().to_string(), ClientOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("--listen fabric://"), "{err}");
}

/// On a host with an RDMA device the server picks libfabric's verbs provider (FI_PROVIDER
/// unset), and the suite runs over it; elsewhere the test says why it does not run.
#[test]
fn the_verbs_provider_conforms_where_a_device_exists() {
    let devices = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count())
        .unwrap_or(0);
    if devices == 0 || std::env::var_os("FI_PROVIDER").is_some() {
        conformance::skip(
            "the_verbs_provider_conforms_where_a_device_exists",
            "the verbs provider needs an RDMA device, and /sys/class/infiniband lists none (or FI_PROVIDER chooses another)",
        );
        return;
    }
    let Some(s) = start(MIN_CAPACITY_PAGES * 2) else {
        return;
    };
    let c = client(&s, "verbs");
    assert_eq!(c.provider(), "verbs");
    conformance::run_all(&c);
}

#[test]
fn pages_striped_over_two_one_sided_servers_conform() {
    let (Some(a), Some(b)) = (start(MIN_CAPACITY_PAGES), start(MIN_CAPACITY_PAGES)) else {
        return;
    };
    conformance::striped_over_two_conform(
        Box::new(client(&a, "x")),
        Box::new(client(&b, "x")),
        "fabric",
    );
}

#[test]
fn replicated_one_sided_pages_survive_a_restart_then_a_loss() {
    let (Some(a), Some(b)) = (start(MIN_CAPACITY_PAGES), start(MIN_CAPACITY_PAGES)) else {
        return;
    };
    let member = |addr| conformance::reconnecting("fabric", addr, FabricStore::connect);
    let a_addr = a.local_addr();
    let store = ReplicatedStore::new(vec![member(a_addr), member(b.local_addr())], 2).unwrap();
    let restarted = std::sync::Mutex::new(None);
    conformance::replicas_survive_a_restart_then_a_loss(
        &store,
        || {
            a.stop();
            let again = server::spawn(&a_addr.to_string(), config(MIN_CAPACITY_PAGES))
                .unwrap_or_else(|e| panic!("fabric server again: {e}"));
            *restarted.lock().unwrap() = Some(again);
        },
        || b.stop(),
    );
}

#[test]
fn the_tcp_provider_offers_one_sided_reads_where_libfabric_is_installed() {
    if !conformance::libfabric_or_skip("the provider listing test") {
        return;
    }
    if std::env::var("FI_PROVIDER").is_ok_and(|p| p != "tcp") {
        return; // FI_PROVIDER hides tcp from every query
    }
    let lib = fabric_ffi::load().unwrap();
    assert!(lib.version() >= (1, 17), "{lib:?}");
    let p = lib
        .providers(
            fabric_ffi::FI_RMA | fabric_ffi::FI_MSG,
            fabric_ffi::EpType::Msg,
        )
        .unwrap();
    assert!(
        p.iter()
            .any(|p| p.provider == "tcp" && p.rma && p.ep_type == "FI_EP_MSG"),
        "{p:?}"
    );
    // A capability nobody has (bit 63 is reserved): an empty list, not an error.
    assert!(lib
        .providers(1 << 63, fabric_ffi::EpType::Msg)
        .unwrap()
        .is_empty());
    assert!(!lib.strerror(-61).is_empty());
}
