//! The agent's runtime in the JVM: loading (`Agent_OnLoad`: options, the memory server), the
//! JVMTI callbacks (VMInit starts paging, GC events, VMDeath writes the stats) and the one
//! runtime object they share.
//!
//! Life cycle: `Agent_OnLoad` parses options and connects to the memory server (so a bad
//! option or an unreachable server stops the JVM before it runs); VMInit finds the reserved
//! heap and starts the pager; VMDeath writes the stats. The pager is never stopped: the heap
//! stays paged until the process exits.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::logging::log;
use crate::options::{self, LogLevel, Options, Policy};
use crate::pager::{Pager, PagerConfig};
use crate::{
    gc_activity, gc_layout, heap, hooks, jvmti, model, perfdata, policy, stats, threads, young,
};
use crate::{host_name, FATAL_EXIT_CODE};
use memliner_contracts::stats::YoungDoc;
use swap_backend::{
    ClientOptions, LocalStore, Member, PageStore, ReplicatedStore, ServerUrl, PAGE_SIZE,
};

/// Smallest budget the pager runs with: eviction batches and fill-ahead need some room.
const MIN_BUDGET_PAGES: usize = 256;

/// Stops the process: a page could not be served correctly, so the JVM must not run on.
pub fn fatal(msg: &str) -> ! {
    eprintln!("memliner: FATAL: {msg}; stopping the JVM rather than let it run on wrong bytes");
    // SAFETY: _exit ends the process without running atexit handlers or unwinding, which is
    // what we want while other threads may be blocked in heap faults.
    unsafe { libc::_exit(FATAL_EXIT_CODE) }
}

struct Runtime {
    options: Options,
    store: Mutex<Option<Box<dyn PageStore>>>,
    threads: &'static threads::JvmThreads,
    pager: OnceLock<Pager>,
    heap: OnceLock<stats::HeapInfo>,
    /// The collector's dead space, read at the end of each collection (`dead=drop`).
    layout: OnceLock<gc_layout::GcLayout>,
    /// The JVM's collector counters: which kind of pause ended.
    pause_counters: OnceLock<perfdata::PauseCounters>,
    gc: stats::GcTimes,
    started: Instant,
    /// The `/metrics` listener and the target file naming it (`metrics=`).
    metrics: OnceLock<(swap_backend::metrics::MetricsListener, String)>,
    /// G1's young generation as `Agent_OnLoad` left it (`young=`).
    young: Option<YoungDoc>,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The classifier lives for the whole process; the pager gets this forwarding handle.
struct StaticClassifier(&'static threads::JvmThreads);

impl model::ThreadClassifier for StaticClassifier {
    fn kind_of(&self, tid: u32) -> model::ThreadKind {
        self.0.kind_of(tid)
    }
    fn in_gc_pause(&self) -> bool {
        self.0.in_gc_pause()
    }
    fn rebuilding_remsets(&self) -> bool {
        self.0.rebuilding_remsets()
    }
}

/// Demand connections per server: one per handler thread; with faults served by their own
/// threads, enough for the threads that fault at once (opened when first needed), so that
/// one thread's read does not queue behind another's (graph at 25%: 1 connection 7.96 s,
/// 4: 6.29 s, 8: 5.98 s, medians of 3, benchmarks/pager-compare.py).
fn demand_connections(options: &Options) -> usize {
    match options.faults {
        model::FaultDelivery::Signal => options.handlers.max(8),
        model::FaultDelivery::Thread => options.handlers,
    }
}

fn connect(options: &Options) -> Result<Box<dyn PageStore>, String> {
    let store = connect_servers(options)?;
    // A replicated store checks each server's copies itself (a bad one is read elsewhere).
    let store: Box<dyn PageStore> =
        if options.checksums == options::Checksums::On && store.integrity().is_none() {
            Box::new(swap_backend::checksum::Checked::new(store))
        } else {
            store
        };
    Ok(match options.latency {
        Some(l) => Box::new(swap_backend::LatencyStore::new(store, l)),
        None => store,
    })
}

fn connect_servers(options: &Options) -> Result<Box<dyn PageStore>, String> {
    if options.servers.is_empty() {
        return Ok(Box::new(LocalStore::new(u64::MAX / PAGE_SIZE as u64)));
    }
    let host = host_name();
    // One namespace per JVM: host, pid and start time tell restarts with a reused pid apart.
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let namespace = format!("{host}/{}/{started:x}", std::process::id());
    let token =
        swap_backend::auth::load_token(options.token_file.as_deref().map(std::path::Path::new))?
            .unwrap_or_default();
    let connections = demand_connections(options);
    let deadline = options.deadline;
    let open = move |url: &ServerUrl, namespace: String| {
        let client = ClientOptions {
            token: token.clone(),
            namespace,
            connections,
            deadline,
        };
        swap_backend::connect(url, client).map(swap_backend::Connected::into_store)
    };
    if let [url] = options.servers.as_slice() {
        return open(url, namespace).map_err(|e| format!("cannot use memory server {url}: {e}"));
    }
    let open = std::sync::Arc::new(open);
    let members = options
        .servers
        .iter()
        .map(|url| {
            let (open, url, namespace) = (open.clone(), url.clone(), namespace.clone());
            // After a loss, a namespace of its own: nothing the server kept from before (a
            // namespace in its grace period) can be read as current.
            Member::new(
                url.to_string(),
                Box::new(move |incarnation| {
                    let ns = match incarnation {
                        0 => namespace.clone(),
                        n => format!("{namespace}/{n}"),
                    };
                    open(&url, ns)
                }),
            )
        })
        .collect();
    Ok(Box::new(ReplicatedStore::with_checksums(
        members,
        options.replicas(),
        options.checksums == options::Checksums::On,
    )?))
}

fn load(options_str: &str) -> Result<(), String> {
    let env = std::env::var("MEMLINER_OPTIONS").unwrap_or_default();
    let options = options::parse(&env, options_str).map_err(|e| e.to_string())?;
    crate::logging::set_level(options.log);
    let young = fit_young(&options);
    let store = if options.policy == Policy::Off {
        None
    } else {
        if !options.server_given {
            log!(
                LogLevel::Warn,
                "no server= given: evicted pages stay in this process's memory; give server=HOST:PORT for far memory (or server=local to silence this)"
            );
        }
        match connect(&options) {
            Ok(store) => Some(store),
            Err(e) if options.fallback == options::Fallback::Local => {
                eprintln!(
                    "memliner: {e}; fallback=local: the JVM runs without far memory (evicted pages stay in its own memory)"
                );
                Some(Box::new(LocalStore::new(u64::MAX / PAGE_SIZE as u64)) as Box<dyn PageStore>)
            }
            Err(e) => return Err(e),
        }
    };
    let rt = Runtime {
        options,
        store: Mutex::new(store),
        threads: Box::leak(Box::default()),
        pager: OnceLock::new(),
        heap: OnceLock::new(),
        layout: OnceLock::new(),
        pause_counters: OnceLock::new(),
        gc: stats::GcTimes::default(),
        started: Instant::now(),
        metrics: OnceLock::new(),
        young,
    };
    RUNTIME
        .set(rt)
        .map_err(|_| "the agent is loaded twice; give -agentpath once".to_string())?;
    if let Some(rt) = RUNTIME.get() {
        serve_metrics(rt);
    }
    Ok(())
}

/// Fits the young generation to the budget (`young=fit`, see `young`): G1, Parallel, Serial.
/// Runs in `Agent_OnLoad`, before the VM makes the heap; a VM whose flags cannot be read or
/// written keeps its own sizing, with a warning.
fn fit_young(options: &Options) -> Option<YoungDoc> {
    let vm = crate::vmstructs::VmStructs::load()
        .map_err(|e| log!(LogLevel::Debug, "young=: no VM tables ({e})"))
        .ok()?;
    let plan = match young::plan_for(&vm, options) {
        Ok(plan) => plan?,
        Err(e) if options.fits_young() => {
            log!(
                LogLevel::Warn,
                "young=fit: the young generation's flags cannot be read ({e}); the collector sizes it alone"
            );
            return None;
        }
        Err(_) => return None,
    };
    // SAFETY: this is Agent_OnLoad: the VM is starting on this one thread and makes the heap
    // (where the collector reads these flags) after the agent returns.
    let written = unsafe {
        plan.min_percent
            .map_or(Ok(()), |p| {
                vm.set_flag_uint_ergonomic("G1NewSizePercent", p)
            })
            .and_then(|()| {
                plan.max_percent.map_or(Ok(()), |p| {
                    vm.set_flag_uint_ergonomic("G1MaxNewSizePercent", p)
                })
            })
            .and_then(|()| {
                plan.max_bytes
                    .map_or(Ok(()), |b| vm.set_flag_uint_ergonomic("MaxNewSize", b))
            })
    };
    let collector = crate::vmstructs::collector(&vm);
    if let Err(e) = written {
        log!(
            LogLevel::Warn,
            "young=fit: the young generation's flags cannot be set ({e}); {collector} sizes it alone"
        );
        return None;
    }
    if plan.max_percent.is_some() {
        log!(
            LogLevel::Info,
            "young=fit: G1's young generation may take at most {}% of the heap (half the local budget; G1 would allow {}%); young=keep leaves it to G1",
            plan.doc.max_percent,
            plan.doc.jvm_max_percent
        );
    }
    if let Some(b) = plan.max_bytes {
        log!(
            LogLevel::Info,
            "young=fit: {collector}'s young generation may take at most {} MiB (half the local budget, MaxNewSize; {collector} would allow {}% of the heap); young=keep leaves it to {collector}",
            b >> 20,
            plan.doc.jvm_max_percent
        );
    }
    Some(plan.doc)
}

/// Starts `/metrics` (`metrics=`) and writes its target file. Never stops the JVM: a listener
/// that cannot start is one line on stderr.
fn serve_metrics(rt: &'static Runtime) {
    let Some(addr) = rt.options.metrics else {
        return;
    };
    let id = stats::metrics::Identity {
        pid: std::process::id(),
        host: host_name(),
    };
    let target_host = id.host.clone();
    let page = move || {
        stats::metrics::page(
            &id,
            &rt.options,
            rt.heap.get(),
            rt.pager.get(),
            &rt.gc,
            rt.started.elapsed(),
        )
    };
    let listener = match swap_backend::metrics::MetricsListener::start_text(
        &addr.to_string(),
        "memliner-metrics",
        page,
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("memliner: {e}; the JVM runs without /metrics");
            return;
        }
    };
    let bound = listener.local_addr();
    if addr.port() == 0 {
        eprintln!("memliner: metrics at http://{bound}/metrics");
    } else {
        log!(LogLevel::Info, "metrics at http://{bound}/metrics");
    }
    // Scrapers on other hosts cannot reach 0.0.0.0: name this host then.
    let target = if bound.ip().is_unspecified() {
        format!("{target_host}:{}", bound.port())
    } else {
        bound.to_string()
    };
    let path = options::metrics_path(
        rt.options.metrics_file.as_deref(),
        std::process::id(),
        &target_host,
        std::env::var("TMPDIR").ok().as_deref(),
    );
    let mut group = stats::metrics::TargetGroup {
        targets: vec![target],
        ..Default::default()
    };
    group
        .labels
        .insert("pid".into(), std::process::id().to_string());
    group.labels.insert("host".into(), target_host);
    for (k, v) in [("job", &rt.options.job), ("instance", &rt.options.instance)] {
        if let Some(v) = v {
            group.labels.insert(k.into(), v.clone());
        }
    }
    if let Some(dir) = std::path::Path::new(&path).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let tmp = format!("{path}.tmp{}", std::process::id());
    if let Err(e) = std::fs::write(&tmp, group.to_file()).and_then(|_| std::fs::rename(&tmp, &path))
    {
        eprintln!("memliner: cannot write the metrics target file {path}: {e}");
    }
    let _ = rt.metrics.set((listener, path));
}

/// The pager's policy for the options given (`Off` never reaches the pager).
fn policy_for(o: &Options) -> std::sync::Arc<dyn policy::PagingPolicy> {
    let prefetch = o.prefetch > 0;
    match o.policy {
        Policy::MemLiner => std::sync::Arc::new(policy::MemLiner {
            prefetch,
            adaptive_dirty: o.dirty.adaptive().then(policy::WriteRatio::default),
            scope: if o.streams == options::Streams::Thread {
                policy::StreamScope::Thread
            } else {
                policy::StreamScope::Class
            },
        }),
        Policy::Baseline | Policy::Off => std::sync::Arc::new(policy::Baseline { prefetch }),
    }
}

/// Finds the heap and starts paging it (VMInit).
fn start_paging(rt: &'static Runtime) -> Result<(), String> {
    let found = heap::discover()?;
    let budget_asked = rt.options.budget.pages(found.bytes, PAGE_SIZE);
    let budget = budget_asked.max(MIN_BUDGET_PAGES);
    if budget != budget_asked {
        log!(
            LogLevel::Warn,
            "local budget of {budget_asked} pages raised to the minimum of {MIN_BUDGET_PAGES}"
        );
    }
    let store = rt
        .store
        .lock()
        .unwrap()
        .take()
        .ok_or("no page store (started twice?)")?;
    let store_name = store.describe();
    let pager = Pager::start(
        found.start,
        found.bytes,
        &found.spans,
        PagerConfig {
            budget_pages: budget,
            handlers: rt.options.handlers,
            track_dirty: rt.options.dirty.tracks(),
            policy: policy_for(&rt.options),
            prefetch_depth: rt.options.prefetch,
            replacement: rt.options.reclaim,
            delivery: rt.options.faults,
            probe_every: (rt.options.probe_ms > 0)
                .then(|| std::time::Duration::from_millis(rt.options.probe_ms)),
            ..PagerConfig::default()
        },
        store,
        Box::new(StaticClassifier(rt.threads)),
        fatal,
    )
    .map_err(|e| format!("cannot register the heap with userfaultfd: {e}"))?;
    log!(
        LogLevel::Info,
        "paging the {} heap at {:#x} ({}, found by {}): {} local of {}, pages go to {}, faults served by {}",
        found.collector,
        found.start,
        swap_backend::units::format_size(found.bytes as u64),
        found.discovery,
        swap_backend::units::format_size((budget * PAGE_SIZE) as u64),
        swap_backend::units::format_size(found.bytes as u64),
        store_name,
        match pager.delivery() {
            model::FaultDelivery::Signal => "the faulting threads (SIGBUS)",
            model::FaultDelivery::Thread => "handler threads",
        }
    );
    if pager.delivery() != rt.options.faults {
        log!(
            LogLevel::Warn,
            "faults=signal is not available here (kernel without UFFD_FEATURE_SIGBUS, not \
             x86-64, or a library such as libjsig keeps another SIGBUS handler in front): \
             fault-handler threads serve faults"
        );
    }

    let fixed_heap = found.fixed;
    let dead_why_not = match found.layout {
        Ok(l) => {
            let _ = rt.layout.set(l);
            None
        }
        Err(why) => {
            log!(
                LogLevel::Info,
                "dead heap space is not dropped after collections: {why}"
            );
            Some(why)
        }
    };
    let _ = rt.heap.set(stats::HeapInfo {
        base: found.start,
        bytes: found.bytes,
        collector: found.collector.to_string(),
        discovery: found.discovery,
        spans: found.spans.len(),
        dead_why_not,
        young: rt.young,
    });
    match perfdata::PauseCounters::open() {
        Ok(c) => {
            let _ = rt.pause_counters.set(c);
        }
        Err(why) => log!(
            LogLevel::Info,
            "full collections are not told from young ones in the GC fault attribution: {why}"
        ),
    }
    let _ = rt.pager.set(pager);
    if let Some(p) = rt.pager.get() {
        if rt.pause_counters.get().is_some_and(|c| c.tells_cycles()) {
            p.concurrent_cycle_ends_known();
        }
        // Refinement's cards are read ahead under card_hold, which holds them while dirty.
        hooks::attach(p, rt.options.holds_cards());
        let order = rt
            .layout
            .get()
            .map_or(gc_activity::ScanOrder::Up, |l| l.card_scan_order());
        p.set_card_reader(
            Box::new(|spans, out| {
                match RUNTIME.get().and_then(|rt| rt.layout.get()) {
                    // SAFETY: the pager calls this from a GC thread's fault inside a pause,
                    // with the committed regions the pause started with.
                    Some(l) => unsafe { l.dirty_card_pages(spans, out) },
                    None => false,
                }
            }),
            order,
        );
        // Outside pauses the reclaimer reads cards of pages it is about to evict: only where
        // the card table is committed whole for the VM's life.
        // SAFETY: VMInit has run (this is its callback): the barrier set is set up.
        let cards = rt.layout.get().and_then(|l| unsafe { l.pending_cards() });
        match cards {
            Some(c) if fixed_heap => {
                let end = rt.heap.get().map_or(0, |h| h.base + h.bytes);
                p.set_pending_cards(
                    // SAFETY: the reclaimer asks about pages of the paged heap only, all of it
                    // committed (and its cards with it) for the VM's life: -Xms equals -Xmx;
                    // the next page's card only when that page is in the heap too.
                    Box::new(move |page| unsafe {
                        c.page_is_pending(page, page + swap_backend::PAGE_SIZE < end)
                    }),
                    rt.options.holds_cards(),
                );
            }
            Some(_) => log!(
                LogLevel::Info,
                "pages with dirty cards are not held (card_hold): -Xms is below -Xmx, so G1 may uncommit card table pages"
            ),
            None => {}
        }
    }
    Ok(())
}

/// When the stats document is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StatsMoment {
    /// At VM death: to the `stats=` file, if any.
    VmDeath,
    /// On SIGQUIT (`memliner stats PID`, `kill -QUIT`): to the `stats=` file, else to the
    /// JVM's temporary directory, where `memliner stats PID` looks.
    Requested,
}

fn write_stats(rt: &Runtime, moment: StatsMoment) {
    let template = rt.options.stats.as_deref();
    if template.is_none() && moment == StatsMoment::VmDeath {
        return;
    }
    let tmpdir = std::env::var("TMPDIR").ok();
    let path = &options::dump_path(
        template,
        std::process::id(),
        &host_name(),
        tmpdir.as_deref(),
    );
    if let Some(dir) = std::path::Path::new(path).parent() {
        // A stats directory shared by a job's executors may not exist yet.
        let _ = std::fs::create_dir_all(dir);
    }
    let doc = stats::document(
        &rt.options,
        rt.heap.get(),
        rt.pager.get(),
        &rt.gc,
        rt.started.elapsed(),
    );
    let tmp = format!("{path}.tmp{}", std::process::id());
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    if let Err(e) = std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, path)) {
        log!(LogLevel::Error, "cannot write stats to {path}: {e}");
    }
}

/// Runs a callback body, turning a panic into a fatal stop (unwinding into the JVM is undefined).
fn guarded(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        fatal(&format!("internal error in the {what} callback"));
    }
}

unsafe extern "C" fn on_vm_init(_: *mut jvmti::JvmtiEnv, _: *mut jvmti::JniEnv, _: jvmti::JThread) {
    guarded("VMInit", || {
        let Some(rt) = RUNTIME.get() else { return };
        rt.threads.java_thread_started();
        if rt.options.policy == Policy::Off {
            return;
        }
        if let Err(e) = start_paging(rt) {
            if rt.options.fallback == options::Fallback::Local {
                // The usual failures (no heap found, ZGC, no userfaultfd or no permission for
                // it) come before anything is registered: the heap simply stays local.
                eprintln!(
                    "memliner: cannot page the Java heap: {e}; fallback=local: the JVM runs with its whole heap local"
                );
                return;
            }
            eprintln!("memliner: cannot page the Java heap: {e}");
            // SAFETY: see `fatal`; nothing is paged yet, but the user asked for paging.
            unsafe { libc::_exit(1) }
        }
    })
}

unsafe extern "C" fn on_vm_death(_: *mut jvmti::JvmtiEnv, _: *mut jvmti::JniEnv) {
    guarded("VMDeath", || {
        if let Some(rt) = RUNTIME.get() {
            if let Some((_, target)) = rt.metrics.get() {
                // The JVM is going: scrapers and `memliner top` should stop looking for it.
                let _ = std::fs::remove_file(target);
            }
            write_stats(rt, StatsMoment::VmDeath);
        }
    })
}

unsafe extern "C" fn on_thread_start(
    _: *mut jvmti::JvmtiEnv,
    _: *mut jvmti::JniEnv,
    _: jvmti::JThread,
) {
    guarded("ThreadStart", || {
        if let Some(rt) = RUNTIME.get() {
            rt.threads.java_thread_started();
        }
    })
}

unsafe extern "C" fn on_data_dump(_: *mut jvmti::JvmtiEnv) {
    guarded("DataDumpRequest", || {
        if let Some(rt) = RUNTIME.get() {
            write_stats(rt, StatsMoment::Requested);
        }
    })
}

unsafe extern "C" fn on_gc_start(_: *mut jvmti::JvmtiEnv) {
    // No allocation or locking beyond a short mutex: the VM is at a safepoint.
    guarded("GarbageCollectionStart", || {
        if let Some(rt) = RUNTIME.get() {
            if let Some(l) = rt.layout.get() {
                // SAFETY: this is the GarbageCollectionStart callback, which HotSpot runs at
                // the safepoint that starts the collection.
                let regions = unsafe { l.region_map() };
                let read = rt.options.policy == options::Policy::MemLiner
                    && rt.options.pause_reads == options::PauseReads::On;
                if let Some(p) = rt.pager.get() {
                    p.gc_pause_started(regions, read);
                }
            }
            rt.threads.set_in_pause(true);
            rt.gc.pause_started();
        }
    })
}

unsafe extern "C" fn on_gc_finish(_: *mut jvmti::JvmtiEnv) {
    guarded("GarbageCollectionFinish", || {
        if let Some(rt) = RUNTIME.get() {
            rt.threads.set_in_pause(false);
            let (end, rebuilding) = rt.pause_counters.get().map_or(
                (
                    perfdata::PauseEnd {
                        kind: gc_activity::PauseKind::Incremental,
                        cycle_ended: false,
                    },
                    false,
                ),
                |c| (c.pause_ended(), c.rebuilding()),
            );
            let kind = end.kind;
            rt.threads.set_rebuilding(rebuilding);
            if let Some(p) = rt.pager.get() {
                if end.cycle_ended {
                    p.concurrent_cycle_ended();
                }
                let mut dead = Vec::new();
                let mut after = gc_activity::RegionMap::default();
                if let Some(l) = rt.layout.get() {
                    // SAFETY: this is the GarbageCollectionFinish callback, which HotSpot runs
                    // at the safepoint that ends the collection.
                    unsafe {
                        l.dead_ranges(&mut dead);
                        after = l.region_map();
                    }
                    p.release_dead(&dead);
                }
                let free: Vec<(usize, usize)> = dead
                    .iter()
                    .filter(|r| r.reason == gc_layout::Reason::FreeRegion)
                    .map(|r| (r.start, r.end))
                    .collect();
                let refined = rt.layout.get().is_some_and(|l| l.refines_cards());
                if rt.options.holds_cards() && refined {
                    p.read_cards_left(&after);
                }
                p.gc_pause_finished(Some((kind, &free)), after);
            }
            rt.gc.pause_finished(kind);
        }
    })
}

/// The JVM calls this when it loads the agent (`-agentpath:...=options`).
///
/// # Safety
/// Called by the JVM with its `JavaVM*` and a NUL-terminated option string (or null).
#[no_mangle]
pub unsafe extern "C" fn Agent_OnLoad(
    vm: *mut jvmti::JavaVm,
    options: *const c_char,
    _reserved: *mut c_void,
) -> i32 {
    let opts = if options.is_null() {
        String::new()
    } else {
        // SAFETY: the JVM passes a NUL-terminated string.
        unsafe { CStr::from_ptr(options) }
            .to_string_lossy()
            .into_owned()
    };
    let result = std::panic::catch_unwind(|| -> Result<(), String> {
        load(&opts)?;
        // SAFETY: vm is the JavaVM* of this Agent_OnLoad call.
        let env = unsafe { jvmti::JavaVm::jvmti(vm) }?;
        // SAFETY: env is live and we are in the OnLoad phase.
        unsafe { jvmti::JvmtiEnv::add_capabilities(env) }?;
        let cbs = jvmti::EventCallbacks {
            vm_init: Some(on_vm_init),
            vm_death: Some(on_vm_death),
            thread_start: Some(on_thread_start),
            data_dump_request: Some(on_data_dump),
            garbage_collection_start: Some(on_gc_start),
            garbage_collection_finish: Some(on_gc_finish),
            ..jvmti::EventCallbacks::NONE
        };
        // SAFETY: env is live and we are in the OnLoad phase.
        unsafe { jvmti::JvmtiEnv::set_callbacks(env, &cbs) }
    });
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("memliner: {e}");
            1
        }
        Err(_) => {
            eprintln!("memliner: internal error while loading the agent");
            1
        }
    }
}
