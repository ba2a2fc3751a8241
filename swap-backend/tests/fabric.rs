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

/// The environment variable that makes this binary's `serve_for_a_parent` serve.
const SERVE_AT: &str = "MEMLINER_TEST_FABRIC_SERVE_AT";

/// A server in a process of its own (this test binary again, running `serve_for_a_parent`
/// alone), for the tests that lose or restart a server: a server gone is a process gone, as
/// in a deployment. In one process libfabric's shm provider reaches a peer endpoint of the
/// same process through that endpoint's own region, which stopping the server frees under
/// the client (its next read crashed, 1 run in 25 here).
struct ChildServer {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl ChildServer {
    /// Starts one listening at `listen`, or `None` (and why) without libfabric.
    fn start(listen: &str) -> Option<ChildServer> {
        use std::io::BufRead;
        if !conformance::libfabric_or_skip("a fabric transport test") {
            return None;
        }
        let exe = std::env::current_exe().expect("this test binary");
        let mut child = std::process::Command::new(exe)
            .args(["--exact", "serve_for_a_parent", "--ignored", "--nocapture"])
            .env(SERVE_AT, listen)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("a fabric server process: {e}"));
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let addr = out
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("serving at ").map(str::to_owned))
            .unwrap_or_else(|| panic!("the fabric server process at {listen} did not start"));
        Some(ChildServer {
            child,
            addr: addr.parse().unwrap(),
        })
    }

    /// The server goes away: its input closed, it stops and its process ends. (Killed, its
    /// shm endpoints would leave their 16 MiB files in /dev/shm: libfabric removes them when
    /// it closes them.)
    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fabric server for a `ChildServer`: serves until its parent closes its input (or is
/// gone), then stops.
/// Ignored in a plain run: it serves only when started as a child, with `SERVE_AT` set.
#[test]
#[ignore = "a fabric server process for the loss and restart tests, started by them"]
fn serve_for_a_parent() {
    use std::io::Read;
    let listen = std::env::var(SERVE_AT).expect("started by a ChildServer");
    let s = server::spawn(&listen, config(MIN_CAPACITY_PAGES))
        .unwrap_or_else(|e| panic!("fabric server: {e}"));
    println!("serving at {}", s.local_addr());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    s.stop();
}

fn client(s: &ServerHandle, ns: &str) -> FabricStore {
    client_at(s.local_addr(), ns)
}

fn client_at(addr: std::net::SocketAddr, ns: &str) -> FabricStore {
    FabricStore::connect(
        &addr.to_string(),
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
    let Some(mut s) = ChildServer::start("127.0.0.1:0") else {
        return;
    };
    let c = client_at(s.addr, "gone");
    conformance::server_loss_is_an_error(&c, || s.stop());
}

#[test]
fn a_restarted_server_never_serves_stale_bytes() {
    let Some(mut s) = ChildServer::start("127.0.0.1:0") else {
        return;
    };
    let addr = s.addr;
    let c = client_at(addr, "restarted");
    let mut again = None;
    conformance::server_restart_serves_no_stale_bytes(&c, || {
        s.stop();
        again = ChildServer::start(&addr.to_string());
    });
    // The restarted server serves new clients.
    let again = again.unwrap();
    conformance::write_then_read_back(&client_at(again.addr, "new"));
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
    let (Some(mut a), Some(mut b)) = (
        ChildServer::start("127.0.0.1:0"),
        ChildServer::start("127.0.0.1:0"),
    ) else {
        return;
    };
    let member = |addr| conformance::reconnecting("fabric", addr, FabricStore::connect);
    let a_addr = a.addr;
    let store = ReplicatedStore::new(vec![member(a_addr), member(b.addr)], 2).unwrap();
    let mut restarted = None;
    conformance::replicas_survive_a_restart_then_a_loss(
        &store,
        || {
            a.stop();
            restarted = ChildServer::start(&a_addr.to_string());
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
