//! The behaviour every [`PageStore`] transport must show, as plain functions that panic on a
//! violation. Each transport's tests call [`run_all`] on a fresh, empty store with room for at
//! least [`MIN_CAPACITY_PAGES`] pages (`local`, `tcp`, `fabric`), and the remote ones also
//! [`server_loss_is_an_error`], [`server_restart_serves_no_stale_bytes`],
//! [`namespaces_are_isolated_and_freed_with_their_client`] and
//! [`capacity_is_enforced_with_a_clear_error`].

use crate::protocol::{MAX_BATCH, PAGE_SIZE};
use crate::store::PageStore;

/// Capacity the suite needs from the store under test.
pub const MIN_CAPACITY_PAGES: u64 = 4 * MAX_BATCH as u64;

/// A page whose every byte depends on its id and a version, so mixups are caught.
pub fn pattern(id: u64, version: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (id as usize).wrapping_mul(31).wrapping_add(i * 7) as u8 ^ version)
        .collect()
}

fn pages(ids: &[u64], version: u8) -> Vec<u8> {
    ids.iter().flat_map(|&id| pattern(id, version)).collect()
}

/// Runs the whole suite.
pub fn run_all(store: &dyn PageStore) {
    write_then_read_back(store);
    overwrite_replaces(store);
    batches_larger_than_a_frame(store);
    read_order_follows_request(store);
    free_then_read_fails(store);
    concurrent_callers_on_every_lane(store);
    a_write_is_visible_to_every_lane_once_it_returns(store);
}

/// Once `write_pages` returns, a read from any other connection sees the new bytes: the pager
/// drops its local copy then, and the next fault reads on another lane. (A transport whose
/// writes complete when sent rather than when placed fails this.)
pub fn a_write_is_visible_to_every_lane_once_it_returns(store: &dyn PageStore) {
    use crate::protocol::Lane;
    let ids: Vec<u64> = (30_000..30_064).collect();
    let mut out = vec![0u8; ids.len() * PAGE_SIZE];
    for round in 0..50u8 {
        std::thread::scope(|s| {
            s.spawn(|| {
                crate::store::set_thread_lane(Lane::Reclaim);
                store.write_pages(&ids, &pages(&ids, round)).unwrap();
            });
        });
        store.read_pages(&ids, &mut out).unwrap();
        assert!(
            out == pages(&ids, round),
            "{}: a read right after a write (round {round}) saw other bytes",
            store.describe()
        );
    }
    store.free_pages(&ids).unwrap();
}

/// Threads of every lane writing, rewriting and reading their own pages at once.
pub fn concurrent_callers_on_every_lane(store: &dyn PageStore) {
    use crate::protocol::Lane;
    std::thread::scope(|s| {
        for (t, lane) in [Lane::Demand, Lane::Demand, Lane::Prefetch, Lane::Reclaim]
            .into_iter()
            .enumerate()
        {
            s.spawn(move || {
                crate::store::set_thread_lane(lane);
                let ids: Vec<u64> = (0..8).map(|i| 20_000 + t as u64 * 100 + i).collect();
                for round in 0..8u8 {
                    store.write_pages(&ids, &pages(&ids, round)).unwrap();
                    let mut out = vec![0u8; ids.len() * PAGE_SIZE];
                    store.read_pages(&ids, &mut out).unwrap();
                    assert!(
                        out == pages(&ids, round),
                        "{}: thread {t} read back other bytes in round {round}",
                        store.describe()
                    );
                }
                store.free_pages(&ids).unwrap();
            });
        }
    });
}

/// Once the server behind `store` is gone (`stop`), reads and writes fail with an error that
/// names it; none returns bytes.
pub fn server_loss_is_an_error(store: &dyn PageStore, stop: impl FnOnce()) {
    store.write_pages(&[31], &pattern(31, 7)).unwrap();
    stop();
    let mut out = vec![0u8; PAGE_SIZE];
    let name = store.describe();
    let err = store.read_pages(&[31], &mut out).unwrap_err();
    assert!(err.to_string().contains(&name), "{name}: {err}");
    let err = store.write_pages(&[32], &pattern(32, 7)).unwrap_err();
    assert!(err.to_string().contains(&name), "{name}: {err}");
}

/// A server that restarts (`restart`: stopped and started again at the same address) has lost
/// what it held: reading a page written before is an error, never the new server's bytes.
pub fn server_restart_serves_no_stale_bytes(store: &dyn PageStore, restart: impl FnOnce()) {
    store.write_pages(&[41], &pattern(41, 8)).unwrap();
    restart();
    let mut out = vec![0u8; PAGE_SIZE];
    // The first attempt may fail on the dead connection itself; none may succeed.
    for attempt in 0..3 {
        let r = store.read_pages(&[41], &mut out);
        assert!(
            r.is_err(),
            "{}: read {attempt} after a restart returned bytes",
            store.describe()
        );
    }
}

/// Pages spread over two servers of `scheme` (`a` and `b`, one copy each) pass the whole
/// suite, and neighbouring runs of pages land on different servers.
pub fn striped_over_two_conform(a: Box<dyn PageStore>, b: Box<dyn PageStore>, scheme: &str) {
    let striped = crate::replica::ReplicatedStore::new(
        vec![
            crate::replica::Member::connected(a),
            crate::replica::Member::connected(b),
        ],
        1,
    )
    .unwrap();
    run_all(&striped);
    assert!(striped
        .describe_page(0)
        .starts_with(&format!("{scheme}://")));
    assert_ne!(striped.describe_page(0), striped.describe_page(64));
}

/// A member of a replicated store that (re)connects to `addr` with `connect`, in a namespace
/// of its own each time (`replicated.N` for incarnation N).
pub fn reconnecting<S: PageStore + 'static>(
    scheme: &str,
    addr: std::net::SocketAddr,
    connect: fn(&str, crate::store::ClientOptions) -> Result<S, crate::store::StoreError>,
) -> crate::replica::Member {
    crate::replica::Member::new(
        format!("{scheme}://{addr}"),
        Box::new(move |incarnation| {
            let options = crate::store::ClientOptions {
                token: String::new(),
                namespace: format!("replicated.{incarnation}"),
                connections: 2,
                deadline: None,
            };
            connect(&addr.to_string(), options).map(|s| Box::new(s) as Box<dyn PageStore>)
        }),
    )
}

/// Two servers holding two copies of every page: the first one restarted (what it held is
/// gone) while pages are read and rewritten, then the second stopped for good. Every page
/// reads back its last version throughout: the store failed over, reconnected to the restarted
/// server and copied the pages back onto it.
pub fn replicas_survive_a_restart_then_a_loss(
    store: &crate::replica::ReplicatedStore,
    restart_first: impl FnOnce(),
    stop_second: impl FnOnce(),
) {
    let ids: Vec<u64> = (0..512).collect();
    let (old, new) = ids.split_at(256);
    store.write_pages(&ids, &pages(&ids, 1)).unwrap();
    restart_first();
    let mut out = vec![0u8; ids.len() * PAGE_SIZE];
    store.read_pages(&ids, &mut out).unwrap();
    assert!(
        out == pages(&ids, 1),
        "{}: a failed-over read differs",
        store.describe()
    );
    store.write_pages(new, &pages(new, 2)).unwrap();
    assert!(
        store.wait_healthy(std::time::Duration::from_secs(30)),
        "{}: the restarted server did not rejoin: {:?}",
        store.describe(),
        store.stats()
    );
    stop_second();
    store.read_pages(&ids, &mut out).unwrap();
    let want: Vec<u8> = pages(old, 1).into_iter().chain(pages(new, 2)).collect();
    assert!(
        out == want,
        "{}: the copies restored differ",
        store.describe()
    );
    let s = store.stats();
    assert_eq!((s.pages_lost, s.servers[0].rejoins), (0, 1), "{s:?}");
    assert!(s.servers[0].pages >= ids.len() as u64, "{s:?}");
}

/// Two clients of one server, `a` and `b` (namespaces of their own, nothing stored yet), see
/// only their own pages; once `a` is dropped the server forgets its namespace and what it held,
/// and `b`'s pages stay as they were while new ones take the room `a` left. `server_stats`
/// asks the server for its counters (through `b`).
pub fn namespaces_are_isolated_and_freed_with_their_client<A: PageStore>(
    a: A,
    b: &dyn PageStore,
    server_stats: impl Fn() -> crate::protocol::ServerStats,
) {
    a.write_pages(&[1], &pattern(1, 1)).unwrap();
    b.write_pages(&[1], &pattern(1, 2)).unwrap();
    let mut out = vec![0u8; PAGE_SIZE];
    a.read_pages(&[1], &mut out).unwrap();
    assert_eq!(out, pattern(1, 1), "{}: a reads its own page", a.describe());
    b.read_pages(&[1], &mut out).unwrap();
    assert_eq!(out, pattern(1, 2), "{}: b reads its own page", b.describe());
    let before = server_stats();
    assert_eq!(before.namespaces, 2, "{before:?}");
    assert!(before.pages_stored >= 2, "each holds its page: {before:?}");
    drop(a);
    // The server frees a's namespace when it sees the close; poll its counters through b.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = server_stats();
        if now.namespaces == 1 && now.pages_stored < before.pages_stored {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: namespace a never freed: {now:?}",
            b.describe()
        );
        std::thread::yield_now();
    }
    let ids: Vec<u64> = (100..400).collect();
    b.write_pages(&ids, &pages(&ids, 3)).unwrap();
    let mut back = vec![0u8; ids.len() * PAGE_SIZE];
    b.read_pages(&ids, &mut back).unwrap();
    assert!(
        back == pages(&ids, 3),
        "{}: new pages mixed up",
        b.describe()
    );
    b.read_pages(&[1], &mut out).unwrap();
    assert_eq!(out, pattern(1, 2), "{}: b's page changed", b.describe());
}

/// A server holding `capacity` pages (`store` its only client, nothing stored yet) refuses
/// the next one with an error naming the server and its capacity, takes overwrites, and takes
/// a page again once one is freed.
pub fn capacity_is_enforced_with_a_clear_error(store: &dyn PageStore, capacity: u64) {
    let ids: Vec<u64> = (0..capacity).collect();
    store.write_pages(&ids, &pages(&ids, 0)).unwrap();
    let few = &ids[..ids.len().min(4)];
    store.write_pages(few, &pages(few, 1)).unwrap(); // overwrites need no room
    let err = store
        .write_pages(&[capacity], &pattern(capacity, 0))
        .unwrap_err();
    assert!(crate::tcp::is_capacity_error(&err), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("capacity of {capacity} pages")),
        "{text}"
    );
    assert!(text.contains(&store.describe()), "{text}");
    store.free_pages(&[1]).unwrap();
    store
        .write_pages(&[capacity], &pattern(capacity, 0))
        .unwrap();
    let mut out = vec![0u8; PAGE_SIZE];
    store.read_pages(&[capacity], &mut out).unwrap();
    assert_eq!(out, pattern(capacity, 0));
    assert!(
        store.read_pages(&[1], &mut out).is_err(),
        "a freed page read back"
    );
}

pub fn write_then_read_back(store: &dyn PageStore) {
    let ids = [0u64, 1, 7, 1 << 40];
    store.write_pages(&ids, &pages(&ids, 1)).unwrap();
    let mut out = vec![0u8; ids.len() * PAGE_SIZE];
    store.read_pages(&ids, &mut out).unwrap();
    assert!(
        out == pages(&ids, 1),
        "{}: bytes read back differ",
        store.describe()
    );
}

pub fn overwrite_replaces(store: &dyn PageStore) {
    let ids = [100u64, 101];
    store.write_pages(&ids, &pages(&ids, 1)).unwrap();
    store.write_pages(&ids[..1], &pages(&ids[..1], 2)).unwrap();
    let mut out = vec![0u8; 2 * PAGE_SIZE];
    store.read_pages(&ids, &mut out).unwrap();
    assert!(out[..PAGE_SIZE] == pattern(100, 2)[..], "overwrite lost");
    assert!(out[PAGE_SIZE..] == pattern(101, 1)[..], "neighbour changed");
}

pub fn batches_larger_than_a_frame(store: &dyn PageStore) {
    let ids: Vec<u64> = (1000..1000 + 3 * MAX_BATCH as u64 + 17).collect();
    store.write_pages(&ids, &pages(&ids, 3)).unwrap();
    let mut out = vec![0u8; ids.len() * PAGE_SIZE];
    store.read_pages(&ids, &mut out).unwrap();
    assert!(out == pages(&ids, 3), "multi-frame batch corrupted");
    store.free_pages(&ids).unwrap();
}

pub fn read_order_follows_request(store: &dyn PageStore) {
    let ids = [5000u64, 5001, 5002];
    store.write_pages(&ids, &pages(&ids, 4)).unwrap();
    let rev = [5002u64, 5000, 5001];
    let mut out = vec![0u8; 3 * PAGE_SIZE];
    store.read_pages(&rev, &mut out).unwrap();
    assert!(out == pages(&rev, 4), "pages returned out of request order");
}

pub fn free_then_read_fails(store: &dyn PageStore) {
    store.write_pages(&[9000], &pattern(9000, 5)).unwrap();
    store.free_pages(&[9000, 9001]).unwrap();
    let mut out = vec![0u8; PAGE_SIZE];
    let err = store.read_pages(&[9000], &mut out).unwrap_err();
    assert!(
        err.to_string().contains("9000"),
        "error should name the page: {err}"
    );
}

/// Whether libfabric loads, for the tests of the one-sided transport: without it they print
/// why they are skipped and pass, unless `MEMLINER_REQUIRE_FABRIC` is set (CI installs it, so
/// there a missing library fails rather than skips).
pub fn libfabric_or_skip(what: &str) -> bool {
    match memliner_fabric_sys::load() {
        Ok(_) => true,
        Err(e) if std::env::var_os("MEMLINER_REQUIRE_FABRIC").is_some() => {
            panic!("{what}: MEMLINER_REQUIRE_FABRIC is set, yet {e}")
        }
        Err(e) => {
            skip(what, &format!("{e} (apt-get install libfabric1 to run it)"));
            false
        }
    }
}

/// A test that cannot run here says so: on stderr, and as a line in the file named by
/// `MEMLINER_SKIP_LOG` (`scripts/test.sh` counts them apart from the tests that passed, since
/// the test harness counts a test that returned early as passed).
pub fn skip(what: &str, why: &str) {
    eprintln!("skipped: {what}: {why}");
    if let Some(path) = std::env::var_os("MEMLINER_SKIP_LOG") {
        use std::io::Write;
        let line = format!("{what}: {why}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}
