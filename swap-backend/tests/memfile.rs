//! The one-sided transport on one host (`unix://`) against a real memory server over a real
//! Unix socket: the conformance suite, plus what only memory files can get wrong (a grant's
//! size, a released grant, two clients' files, a server that hangs up).

use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memliner_server::{self as server, ServerConfig, ServerHandle};
use swap_backend::conformance::{self, pattern, MIN_CAPACITY_PAGES};
use swap_backend::memfile::{FdReader, Hangup, MemfileStore};
use swap_backend::protocol::{read_frame, Hello, Lane, Reply, Request};
use swap_backend::{ClientOptions, Member, PageStore, ReplicatedStore, PAGE_SIZE};

/// A socket path of its own for each server of this process.
fn socket_path() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("memliner-memfile-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!(
        "s{}.sock",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

fn config(capacity_pages: u64) -> ServerConfig {
    ServerConfig::with_capacity(capacity_pages * PAGE_SIZE as u64)
}

fn start_at(path: &std::path::Path, capacity_pages: u64) -> ServerHandle {
    server::spawn_unix(path, config(capacity_pages))
        .unwrap_or_else(|e| panic!("unix server at {}: {e}", path.display()))
}

fn start(capacity_pages: u64) -> ServerHandle {
    start_at(&socket_path(), capacity_pages)
}

fn path_of(s: &ServerHandle) -> String {
    s.url().trim_start_matches("unix://").to_string()
}

fn options(ns: &str) -> ClientOptions {
    ClientOptions {
        token: String::new(),
        namespace: ns.into(),
        connections: 2,
        deadline: None,
    }
}

fn client(s: &ServerHandle, ns: &str) -> MemfileStore {
    MemfileStore::connect(&path_of(s), options(ns)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn memfile_store_conforms() {
    let s = start(MIN_CAPACITY_PAGES * 2);
    let c = client(&s, "a");
    conformance::run_all(&c);
    assert_eq!(c.describe(), s.url(), "the store is named by its URL");
    assert!(c.describe().starts_with("unix:///"), "{}", c.describe());
}

#[test]
fn clients_hold_their_own_files_and_the_server_frees_them_with_the_session() {
    let s = start(MIN_CAPACITY_PAGES);
    let b = client(&s, "b");
    conformance::namespaces_are_isolated_and_freed_with_their_client(client(&s, "a"), &b, || {
        b.server_stats().unwrap()
    });
}

#[test]
fn capacity_is_enforced_with_a_clear_error_and_freed_slots_are_reused() {
    // The smallest grant is 256 pages: a capacity of a few pages would refuse the first.
    conformance::capacity_is_enforced_with_a_clear_error(&client(&start(300), "a"), 300);
}

#[test]
fn a_lost_server_is_an_error_naming_it() {
    let s = start(MIN_CAPACITY_PAGES);
    let c = client(&s, "gone");
    let hangup = c.hangup();
    conformance::server_loss_is_an_error(&c, || {
        s.stop();
        assert!(hangup.wait(Duration::from_secs(10)), "no hang-up seen");
    });
}

#[test]
fn a_restarted_server_never_serves_stale_bytes() {
    let path = socket_path();
    let s = start_at(&path, MIN_CAPACITY_PAGES);
    let c = client(&s, "restarted");
    let hangup = c.hangup();
    let mut again = None;
    conformance::server_restart_serves_no_stale_bytes(&c, || {
        s.stop();
        assert!(hangup.wait(Duration::from_secs(10)), "no hang-up seen");
        again = Some(start_at(&path, MIN_CAPACITY_PAGES));
    });
    conformance::write_then_read_back(&client(&again.unwrap(), "new"));
}

#[test]
fn a_second_server_on_a_live_socket_is_refused_and_a_stale_one_replaced() {
    let path = socket_path();
    let s = start_at(&path, 16);
    let err = server::spawn_unix(&path, config(16))
        .unwrap_err()
        .to_string();
    assert!(err.contains("already listens"), "{err}");
    // A socket file whose server is gone (killed: nobody removed it) is taken over.
    drop(std::os::unix::net::UnixListener::bind(socket_path()));
    s.stop();
    let stale = socket_path();
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    conformance::write_then_read_back(&client(&start_at(&stale, 512), "x"));
    // A file that is not a socket is never removed.
    let file = socket_path();
    std::fs::write(&file, b"keep me").unwrap();
    let err = server::spawn_unix(&file, config(16))
        .unwrap_err()
        .to_string();
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[test]
fn a_token_is_asked_for_and_a_missing_socket_says_how_to_start_one() {
    let s = server::spawn_unix(
        &socket_path(),
        ServerConfig {
            token: Some("sesame".into()),
            ..config(512)
        },
    )
    .unwrap();
    let err = MemfileStore::connect(&path_of(&s), options("a"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad token") && err.contains("unix:///"),
        "{err}"
    );
    let ok = MemfileStore::connect(
        &path_of(&s),
        ClientOptions {
            token: "sesame".into(),
            ..options("a")
        },
    );
    conformance::write_then_read_back(&ok.unwrap());
    let err = MemfileStore::connect("/nonexistent/memliner.sock", options("a"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no server listens at /nonexistent/memliner.sock")
            && err.contains("memliner server --listen unix://"),
        "{err}"
    );
}

/// A raw client of the control protocol, which keeps the files it is given.
struct Raw {
    reader: FdReader,
    writer: UnixStream,
    payload: Vec<u8>,
    next: u64,
}

impl Raw {
    fn connect(s: &ServerHandle, ns: &str) -> Raw {
        let socket = UnixStream::connect(path_of(s)).unwrap();
        let mut raw = Raw {
            reader: FdReader::new(socket.try_clone().unwrap()),
            writer: socket,
            payload: Vec::new(),
            next: 0,
        };
        raw.ask(&Request::Hello(Hello {
            token: String::new(),
            namespace: ns.into(),
            lane: Lane::Demand,
            key: None,
        }));
        raw.ask(&Request::Attach);
        raw
    }

    /// Sends `r`; a grant's first slot, or `None` for any other answer but a refusal.
    fn ask(&mut self, r: &Request<'_>) -> Option<u64> {
        r.write_to(&mut self.writer, self.next).unwrap();
        self.next += 1;
        let h = read_frame(&mut self.reader, &mut self.payload).unwrap();
        match Reply::decode(h.op, &self.payload).unwrap() {
            Reply::AllocOk(g) => Some(g[0].slot),
            Reply::Error { message, .. } => panic!("refused: {message}"),
            _ => None,
        }
    }

    /// A grant of `pages` pages: its first slot and its file.
    fn alloc(&mut self, pages: u32) -> (u64, std::fs::File) {
        let slot = self
            .ask(&Request::Alloc {
                need: pages,
                want: pages,
            })
            .unwrap();
        (slot, std::fs::File::from(self.reader.take_fd().unwrap()))
    }
}

fn len(f: &std::fs::File) -> u64 {
    f.metadata().unwrap().len()
}

#[test]
fn a_released_grant_is_emptied_and_every_client_gets_files_of_its_own() {
    use std::os::unix::fs::FileExt;
    let s = start(4096);
    let mut a = Raw::connect(&s, "a");
    let (first, fa) = a.alloc(256);
    assert_eq!(
        len(&fa),
        256 * PAGE_SIZE as u64,
        "a grant's file is its size"
    );
    fa.write_all_at(&pattern(1, 1), 0).unwrap();
    // The client cannot grow its file past the grant.
    assert!(fa.set_len(1 << 30).is_err(), "a grant's file grew");
    let (_, fa2) = a.alloc(256);
    // Another client's grant is a file of its own: zeros, never a's bytes.
    let mut b = Raw::connect(&s, "b");
    let (_, fb) = b.alloc(256);
    let mut got = vec![1u8; PAGE_SIZE];
    fb.read_exact_at(&mut got, 0).unwrap();
    assert!(got.iter().all(|&x| x == 0), "b's new grant holds bytes");
    // Given back, a grant's memory is gone, also from a client that kept the file.
    a.ask(&Request::Release {
        grants: vec![first].into(),
    });
    assert_eq!(len(&fa), 0, "a released grant kept its memory");
    // Clients that close their sessions take their grants' memory with them...
    drop((a, b));
    assert!(
        s.wait_idle(Duration::from_secs(10)),
        "the sessions did not end"
    );
    assert_eq!(
        (len(&fa2), len(&fb)),
        (0, 0),
        "a closed session kept its memory"
    );
    // ...while a session the server cuts leaves what its client maps alone (a crash does,
    // and a client's threads must never fault on a file emptied under them).
    let mut c = Raw::connect(&s, "c");
    let (_, fc) = c.alloc(256);
    s.disconnect_all();
    assert!(
        s.wait_idle(Duration::from_secs(10)),
        "the cut session did not end"
    );
    assert_eq!(
        len(&fc),
        256 * PAGE_SIZE as u64,
        "a cut session emptied its file"
    );
}

#[test]
fn pages_striped_over_two_memory_file_servers_conform() {
    let (a, b) = (start(MIN_CAPACITY_PAGES), start(MIN_CAPACITY_PAGES));
    conformance::striped_over_two_conform(
        Box::new(client(&a, "x")),
        Box::new(client(&b, "x")),
        "unix",
    );
}

/// A member that (re)connects to the server at `path`, in a namespace of its own each time,
/// and leaves each incarnation's hang-up in `hangups`.
fn member(path: String, hangups: Arc<Mutex<Vec<Hangup>>>) -> Member {
    Member::new(
        format!("unix://{path}"),
        Box::new(move |incarnation| {
            let store =
                MemfileStore::connect(&path, options(&format!("replicated.{incarnation}")))?;
            hangups.lock().unwrap().push(store.hangup());
            Ok(Box::new(store) as Box<dyn PageStore>)
        }),
    )
}

#[test]
fn replicated_memory_file_pages_survive_a_restart_then_a_loss() {
    let (a, b) = (start(MIN_CAPACITY_PAGES), start(MIN_CAPACITY_PAGES));
    let (a_path, b_path) = (path_of(&a), path_of(&b));
    let (ha, hb) = (Arc::default(), Arc::default());
    let store = ReplicatedStore::new(
        vec![
            member(a_path.clone(), Arc::clone(&ha)),
            member(b_path, Arc::clone(&hb)),
        ],
        2,
    )
    .unwrap();
    let restarted = Mutex::new(None);
    let seen = |h: &Arc<Mutex<Vec<Hangup>>>| {
        let last = h.lock().unwrap().last().cloned().unwrap();
        assert!(last.wait(Duration::from_secs(10)), "no hang-up seen");
    };
    conformance::replicas_survive_a_restart_then_a_loss(
        &store,
        || {
            a.stop();
            seen(&ha);
            *restarted.lock().unwrap() =
                Some(start_at(std::path::Path::new(&a_path), MIN_CAPACITY_PAGES));
        },
        || {
            b.stop();
            seen(&hb);
        },
    );
}

#[test]
fn a_namespace_stops_at_its_quota_with_a_clear_error() {
    let s = server::spawn_unix(
        &socket_path(),
        ServerConfig {
            quota_pages: Some(512),
            ..config(4096)
        },
    )
    .unwrap();
    let c = client(&s, "q");
    let ids: Vec<u64> = (0..640).collect();
    let data: Vec<u8> = ids.iter().flat_map(|&i| pattern(i, 1)).collect();
    let err = ids
        .chunks(64)
        .zip(data.chunks(64 * PAGE_SIZE))
        .find_map(|(i, d)| c.write_pages(i, d).err())
        .expect("640 pages fit a quota of 512")
        .to_string();
    assert!(
        err.contains("quota of 512 pages") && err.contains(&s.url()),
        "{err}"
    );
    // What was stored before the refusal reads back.
    let mut out = vec![0u8; PAGE_SIZE];
    c.read_pages(&[511], &mut out).unwrap();
    assert_eq!(out, pattern(511, 1));
}
