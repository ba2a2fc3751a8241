//! Prefetch I/O: windows asked for by the streams are fetched by worker threads, so the
//! faulting thread does not wait for them; except a window along a trend that a demand fault
//! asks for, which the faulting thread reads itself right after its own page (its stream has
//! fallen behind it: on 2 cores the worker is often not running when the thread gets there).
//!
//! A handler queues a window on a crossbeam injector and wakes a worker. The worker claims the
//! window's remote pages (`Remote -> Busy`, skipping any page that changed meanwhile),
//! charges them to the local budget (a blind window is dropped rather than evict when the
//! reclaimer's reserve is low: demand faults come first; a window along a trend reclaims for
//! its pages as the faults it foresees would, within a cap on the pages windows hold unread,
//! beyond which it keeps what fits the reserve), reads them in one
//! batch (the TCP store pipelines it), maps all but the marker write-protected and keeps the
//! marker's copy here (`Cached`). A fault that lands on a page while it is `Busy` is retried
//! by its handler until the page is mapped or cached, so it never sees wrong bytes.
//!
//! Memory stays bounded: pages queued or in flight are capped (a window over the cap is
//! dropped and counted), and markers are capped (the oldest is dropped, counted as a miss of
//! its stream, and its page is `Remote` again: the store's copy is current).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_deque::{Injector, Steal, Worker};
use swap_backend::PAGE_SIZE;

use super::attribution::Attribution;
use super::context::Ctx;
use super::page_table::budget::{Budget, Charge};
use super::page_table::{Claim, PageState};
use super::reclaim::{Arrival, Reclaimer};
use crate::model::ThreadClass;
use crate::policy::{Admission, Source};
use crate::prefetch::{window_dir, Asker, Governor, Guess, PrefetchCounters, StreamKey, Streams};
use crate::uffd::CopyOutcome;

/// A window to fetch: pages in stream order. A window of a stream keeps a marker; a GC hint
/// (`stream: None`) maps all its pages, since the collector reads them whatever happens.
struct Job {
    pages: Vec<u32>,
    /// The stream (and its lane) that asked for the window.
    stream: Option<Asker>,
    class: ThreadClass,
    /// Why a window that is no stream's is read (counted apart).
    certain: Certain,
    /// A stream's window: along a trend or blind (its marker resolves that accuracy).
    /// Certain reads keep no marker: `Trend`, unused.
    guess: Guess,
    /// Charged as the demand faults it foresees are, reclaiming when the budget is full (a
    /// window along a trend that found the reserve low; hints and pause reads always).
    reclaims: bool,
}

/// Why pages are read for certain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Certain {
    /// A stream's window (not certain), or a patched collector's hint.
    Hint,
    /// For the pause under way (`read_for_pause`): capped apart and held hot until it ends.
    Pause,
    /// What the pause under way scans next (`read_ahead_of_scan`): as `Pause`, read before
    /// any other window and capped on their own.
    ScanAhead,
    /// For the dirty cards a pause left (`read_for_cards`).
    Cards,
    /// For the cards a refinement pass reads next (`read_for_refinement`): read by the pass's
    /// own thread before it starts, never queued.
    Refine,
}

impl Certain {
    /// Read for the pause under way (admitted by their region, held until it ends).
    fn is_pause(self) -> bool {
        matches!(self, Certain::Pause | Certain::ScanAhead)
    }

    /// Read before any other window: a thread waits on these pages in turn (a pause's scan).
    fn first(self) -> bool {
        self == Certain::ScanAhead
    }
}

/// A prefetched page kept unmapped so that its use is seen.
pub(super) struct Marker {
    pub data: Box<[u8]>,
    stream: StreamKey,
    class: ThreadClass,
    guess: Guess,
    /// Pages of the window it stands for.
    window: u32,
    /// The window's direction: 1 up, -1 down, 0 a window of one page.
    dir: i8,
}

#[derive(Default)]
struct Markers {
    map: HashMap<u32, Marker>,
    /// Arrival order, for dropping the oldest (may hold pages no longer cached).
    order: VecDeque<u32>,
}

impl Marker {
    /// Pages its window holds unread that count against `Prefetcher::max_awaiting`: a window
    /// along a trend's (blind ones never reclaim, and go unread at random).
    fn awaited(&self) -> usize {
        match self.guess {
            Guess::Trend => self.window as usize,
            Guess::Blind => 0,
        }
    }
}

/// Keeps `Prefetcher::awaiting` with the markers it counts.
impl Markers {
    fn insert(&mut self, p: u32, m: Marker, awaiting: &AtomicUsize) {
        awaiting.fetch_add(m.awaited(), Ordering::Relaxed);
        if let Some(old) = self.map.insert(p, m) {
            awaiting.fetch_sub(old.awaited(), Ordering::Relaxed);
        }
    }

    fn remove(&mut self, p: u32, awaiting: &AtomicUsize) -> Option<Marker> {
        let m = self.map.remove(&p)?;
        awaiting.fetch_sub(m.awaited(), Ordering::Relaxed);
        Some(m)
    }
}

/// The streams' decisions, under one lock: every window touches them.
struct Engine {
    streams: Streams,
    /// One per stream class.
    governors: [Governor; ThreadClass::COUNT],
}

pub(super) struct Prefetcher {
    ctx: Arc<Ctx>,
    budget: Arc<Budget>,
    reclaim: Arc<Reclaimer>,
    /// The pause's regions, for admitting its pages by their region.
    attribution: Arc<Attribution>,
    engine: Mutex<Engine>,
    jobs: Injector<Job>,
    /// Windows read before those of `jobs`: what a pause scans next.
    first: Injector<Job>,
    /// Pages queued or being fetched.
    inflight: AtomicUsize,
    max_inflight: usize,
    /// The same for GC hints, which have their own cap: a burst of deferrals must not crowd
    /// out the streams' windows, nor the reverse.
    hint_inflight: AtomicUsize,
    max_hint_inflight: usize,
    /// The same for a pause's bulk reads.
    pause_inflight: AtomicUsize,
    max_pause_inflight: usize,
    /// The same for what a pause scans next (capped as `max_pause_inflight`).
    scan_ahead_inflight: AtomicUsize,
    markers: Mutex<Markers>,
    max_markers: usize,
    /// Pages of the windows along a trend whose marker is still held: read for a stream and
    /// not yet reached by it (changed under the markers' lock).
    awaiting: AtomicUsize,
    /// The most `awaiting` may grow to by windows that reclaim for their pages.
    max_awaiting: usize,
    pub counters: PrefetchCounters,
    workers: OnceLock<Vec<std::thread::Thread>>,
}

impl Prefetcher {
    pub fn new(
        ctx: Arc<Ctx>,
        budget: Arc<Budget>,
        reclaim: Arc<Reclaimer>,
        attribution: Arc<Attribution>,
    ) -> Self {
        let config = &ctx.config;
        // Prefetched pages displace resident ones: a window, and all windows in flight
        // together, stay small next to the budget.
        let depth = config.prefetch_depth.min(config.budget_pages / 8).max(1);
        Prefetcher {
            engine: Mutex::new(Engine {
                streams: Streams::new(depth),
                governors: Default::default(),
            }),
            jobs: Injector::new(),
            first: Injector::new(),
            max_inflight: (depth * 4 * config.prefetch_workers.max(1))
                .min(config.budget_pages / 4)
                .max(depth),
            inflight: AtomicUsize::new(0),
            hint_inflight: AtomicUsize::new(0),
            max_hint_inflight: (config.budget_pages / 8).max(32),
            pause_inflight: AtomicUsize::new(0),
            scan_ahead_inflight: AtomicUsize::new(0),
            // A pause reads these pages whatever happens; a quarter of the budget leaves the
            // rest to the application's working set and the pause's own copies.
            max_pause_inflight: (config.budget_pages / 4).max(32),
            markers: Mutex::new(Markers::default()),
            // Markers are a small part of the budget: one per window in use.
            max_markers: (config.budget_pages / 32).clamp(8, 256),
            awaiting: AtomicUsize::new(0),
            // Windows that reclaim must leave room for each other's unread pages and markers:
            // three threads scanning 1024 pages with 96 local, their windows reclaiming
            // freely, dropped each other's markers unreached at the cap (accuracy 0.62-0.68
            // on a loaded machine, 1.0 when windows went only into free pages).
            max_awaiting: config.budget_pages / 4,
            counters: PrefetchCounters::default(),
            workers: OnceLock::new(),
            ctx,
            budget,
            reclaim,
            attribution,
        }
    }

    pub fn set_workers(&self, threads: Vec<std::thread::Thread>) {
        let _ = self.workers.set(threads);
    }

    pub fn wake_workers(&self) {
        for t in self.workers.get().into_iter().flatten() {
            t.unpark();
        }
    }

    /// Takes the marker of page `p` (which the caller has claimed `Cached -> Busy`).
    pub fn take_marker(&self, p: usize) -> Option<Marker> {
        self.markers
            .lock()
            .unwrap()
            .remove(p as u32, &self.awaiting)
    }

    /// Gives back a marker taken by `take_marker` whose page could not be mapped.
    pub fn put_back_marker(&self, p: usize, m: Marker) {
        self.markers
            .lock()
            .unwrap()
            .insert(p as u32, m, &self.awaiting);
    }

    /// Counts the window of marker `m`, at page `p`, as used. Its stream's markers it has
    /// just gone past on its way here (within four windows: other threads' of a shared stream
    /// are farther) are dropped as unused: windows read after their thread had got into them
    /// (a busy machine's worker reads late), which nobody will reach, and which would
    /// otherwise stay counted as pages awaited.
    pub fn credit_hit(&self, m: &Marker, p: usize) {
        self.engine.lock().unwrap().governors[m.class as usize].resolved(true, m.guess);
        let c = &self.counters.by_class[m.class as usize];
        c.marker_hits.fetch_add(1, Ordering::Relaxed);
        c.hit_pages.fetch_add(m.window as u64, Ordering::Relaxed);
        if m.guess != Guess::Trend || m.dir == 0 {
            return;
        }
        let passed = {
            let mut markers = self.markers.lock().unwrap();
            let behind: Vec<u32> = markers
                .map
                .iter()
                .filter(|(&q, o)| {
                    let back = (p as i64 - q as i64) * m.dir as i64;
                    o.stream == m.stream
                        && o.guess == Guess::Trend
                        && o.dir != -m.dir
                        && back > 0
                        && back <= 4 * m.window.max(o.window) as i64
                })
                .map(|(&q, _)| q)
                .collect();
            let mut out = Vec::new();
            for q in behind {
                if let Some(c) = self.ctx.table.claim(q as usize, PageState::Cached) {
                    if let Some(o) = markers.remove(q, &self.awaiting) {
                        out.push((c, o));
                    }
                }
            }
            out
        };
        self.unreached(passed, false);
    }

    /// Markers claimed and taken out of the map, unreached: their pages are `Remote` again
    /// (the store's copy is current) and their windows count as unused; `shrink`: their
    /// streams' windows shrink too (not when the stream has just hit a later marker).
    fn unreached(&self, markers: Vec<(Claim<'_>, Marker)>, shrink: bool) {
        for (c, mk) in markers {
            let page = c.page() as u64;
            c.finish(PageState::Remote);
            self.counters.by_class[mk.class as usize]
                .marker_misses
                .fetch_add(1, Ordering::Relaxed);
            let mut engine = self.engine.lock().unwrap();
            engine.governors[mk.class as usize].resolved(false, mk.guess);
            if shrink {
                engine.streams.on_wasted(mk.stream, page);
            }
        }
    }

    /// Trains the stream of a remote fault (or marker hit, `hit`) at page `p` by thread `tid`
    /// and queues the window it asks for. A window along a trend that a demand fault asks for
    /// (the stream fell behind its thread: the worker did not get to its last window in time,
    /// or it was dropped) is read at once into `inline` by the caller, the faulting thread
    /// itself, as the kernel's synchronous readahead reads on a miss.
    pub fn after_fault(
        &self,
        tid: u32,
        class: ThreadClass,
        p: usize,
        hit: bool,
        inline: Option<&mut Vec<u8>>,
    ) {
        let pf = self;
        let Some(key) = self.ctx.config.policy.stream(tid, class) else {
            return;
        };
        let bar = self.reclaim.pressure();
        let c = &pf.counters.by_class[class as usize];
        let (guess, lane, mut pages) = {
            let mut guard = pf.engine.lock().unwrap();
            let Engine { streams, governors } = &mut *guard;
            let governor = &mut governors[class as usize];
            streams.blind = governor.blind_allowed();
            let window = if hit {
                streams.on_hit(key, p as u64, self.ctx.npages as u64)
            } else {
                streams.on_demand(key, p as u64, self.ctx.npages as u64)
            };
            if !window.pages.is_empty() && !governor.worth(bar, window.guess) {
                c.gated.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let pages: Vec<u32> = window
                .pages
                .into_iter()
                .filter(|&q| self.ctx.table.get(q as usize) == PageState::Remote)
                .map(|q| q as u32)
                .collect();
            (window.guess, window.lane, pages)
        };
        if pages.is_empty() {
            return;
        }
        // A guess backs off while the reserve is low: the free pages are the demand faults'.
        // A window along a trend that is worth its pages goes on and reclaims for them, as
        // the faults it foresees would (the reserve is low most of the time once the budget
        // is full: G1's marking thread rebuilding remembered sets, page after page, had 90%
        // of its windows dropped here); unless windows already hold a quarter of the budget
        // unread (they would push out each other's pages).
        let short = !self.budget.has_room_for(pages.len());
        let may_reclaim = guess == Guess::Trend
            && self.awaiting.load(Ordering::Relaxed) + pages.len() <= self.max_awaiting;
        if short {
            self.budget.wake_reclaimer();
            if may_reclaim {
                c.reclaimed_for.fetch_add(1, Ordering::Relaxed);
            } else {
                // The trend's nearest pages that the reserve has room for still go.
                let room = match guess {
                    Guess::Trend => self.budget.room(),
                    Guess::Blind => 0,
                };
                if room == 0 {
                    c.dropped_low_reserve.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                pages.truncate(room);
            }
        }
        let inline = inline.filter(|_| !hit && may_reclaim);
        let job = Job {
            pages,
            stream: Some(Asker { key, lane }),
            class,
            certain: Certain::Hint,
            guess,
            // Read inline, charged as the demand faults it foresees (the thread takes them next).
            reclaims: (short && may_reclaim) || inline.is_some(),
        };
        if let Some(buf) = inline {
            c.sync_windows.fetch_add(1, Ordering::Relaxed);
            return self.fetch_window(job, buf, false);
        }
        let n = job.pages.len();
        if pf.inflight.fetch_add(n, Ordering::SeqCst) + n > pf.max_inflight {
            pf.inflight.fetch_sub(n, Ordering::SeqCst);
            c.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pf.jobs.push(job);
        pf.wake_workers();
    }

    /// A patched collector will trace objects on `pages` soon: fetches the remote ones for
    /// the concurrent GC's stream (admitted as the policy admits GC prefetches: cold under
    /// `memliner`). Called on GC worker threads: it never blocks and never reclaims; pages
    /// beyond the hints' in-flight cap are dropped (counted), lowest addresses kept, and the
    /// collector faults those itself. Unlike a stream's guess, a hinted page is read for
    /// certain (its object was just deferred): the prefetch worker charges it as a demand
    /// fault would, reclaiming (cold pages first) when the budget is full. (Fetching only into
    /// the free pages above the low watermark dropped 70% of the hints on the graph workload.)
    /// `pages` are heap page numbers (`Pager::hint` converts and bounds the addresses).
    pub fn hint(&self, pages: &mut Vec<u32>) {
        self.queue_certain(pages, ThreadClass::GcConcurrent, Certain::Hint);
    }

    /// A pause left `pages` with dirty cards (G1 redirties the cards it scanned that still
    /// point into young regions, for refinement to add to remembered sets): the remote ones are
    /// read for the refinement threads, admitted as their reads are, within the hints' cap.
    pub fn read_for_cards(&self, pages: &mut Vec<u32>) {
        self.queue_certain(pages, ThreadClass::GcConcurrent, Certain::Cards);
    }

    /// A refinement pass (a patched G1's refinement thread, or an application thread
    /// refining) is about to read the cards of `pages`, in this order: the caller, the pass's
    /// own thread, reads the remote ones now, in one request, admitted as the reads of
    /// `read_for_cards` are; past the hints' cap (a budget's eighth) the rest are left to the
    /// pass's faults. Blocks for that one read. Queued for a prefetch worker, they were read
    /// in time for less than half of the pass's faults: the pass starts at once, and on two
    /// cores the worker waits for a core (hooks on, 25% of 1 GiB: refinement's remote faults
    /// graph 95k, kv 54k; read by the pass's thread: 40k and 29k).
    pub fn read_for_refinement(&self, pages: &mut Vec<u32>) {
        let h = self.certain_counters(Certain::Refine);
        h.requests.fetch_add(1, Ordering::Relaxed);
        h.pages.fetch_add(pages.len() as u64, Ordering::Relaxed);
        pages.retain(|&q| self.ctx.table.get(q as usize) == PageState::Remote);
        let (_, cap) = self.certain_cap(Certain::Refine);
        if pages.len() > cap {
            h.dropped
                .fetch_add((pages.len() - cap) as u64, Ordering::Relaxed);
            pages.truncate(cap);
        }
        if pages.is_empty() {
            return;
        }
        let job = Job {
            pages: std::mem::take(pages),
            stream: None,
            class: ThreadClass::GcConcurrent,
            certain: Certain::Refine,
            guess: Guess::Trend,
            reclaims: true,
        };
        self.fetch_window(job, &mut Vec::new(), false);
    }

    /// A stop-the-world pause is about to read `pages` (its collection set's, its cards'):
    /// the remote ones are read in bulk, in address order, by the prefetch workers, while the
    /// pause's threads work on what is local; admitted for the pause and cold when it ends.
    /// Never blocks; pages beyond a quarter of the budget in flight are left to the pause's
    /// own faults (counted as dropped).
    pub fn read_for_pause(&self, pages: &mut Vec<u32>) {
        self.queue_certain(pages, ThreadClass::Gc, Certain::Pause);
    }

    /// As `read_for_pause`, for the pages the pause scans next: read before anything else
    /// queued (a stream's window, a hint, the rest of the pause's list), within a cap of their
    /// own, so that the pages just ahead of its scan do not wait behind pages it reads later.
    pub fn read_ahead_of_scan(&self, pages: &mut Vec<u32>) {
        self.queue_certain(pages, ThreadClass::Gc, Certain::ScanAhead);
    }

    /// Queues pages that will be read for certain (a hint or a pause's), in windows of the
    /// prefetch depth, within their cap, lowest address first: the collector traces its
    /// deferred objects, and claims its regions and cards, in that order.
    fn queue_certain(&self, pages: &mut Vec<u32>, class: ThreadClass, certain: Certain) {
        let pf = self;
        let h = self.certain_counters(certain);
        let (inflight, cap) = pf.certain_cap(certain);
        h.requests.fetch_add(1, Ordering::Relaxed);
        h.pages.fetch_add(pages.len() as u64, Ordering::Relaxed);
        pages.sort_unstable();
        pages.dedup();
        pages.retain(|&q| self.ctx.table.get(q as usize) == PageState::Remote);
        if pages.is_empty() {
            return;
        }
        let had = inflight.fetch_add(pages.len(), Ordering::SeqCst);
        let room = cap.saturating_sub(had);
        if room < pages.len() {
            let over = pages.len() - room;
            inflight.fetch_sub(over, Ordering::SeqCst);
            h.dropped.fetch_add(over as u64, Ordering::Relaxed);
            pages.truncate(room);
        }
        if pages.is_empty() {
            return;
        }
        // In windows, each fetched and mapped as a unit: a fault on a page of a window waits
        // for that window only, not for the whole hint.
        let queue = if certain.first() { &pf.first } else { &pf.jobs };
        for w in pages.chunks(self.ctx.config.prefetch_depth.max(1)) {
            queue.push(Job {
                pages: w.to_vec(),
                stream: None,
                class,
                certain,
                guess: Guess::Trend,
                reclaims: true,
            });
        }
        pages.clear();
        pf.wake_workers();
    }

    /// The counters of a hint's, a pause read's or a card read's job.
    fn certain_counters(&self, certain: Certain) -> &crate::prefetch::HintCounters {
        match certain {
            Certain::Hint => &self.counters.hints,
            Certain::Pause => &self.counters.pause_reads,
            Certain::ScanAhead => &self.counters.scan_ahead,
            Certain::Cards => &self.counters.card_reads,
            Certain::Refine => &self.counters.refine_reads,
        }
    }

    /// Pages a pause's bulk read may still queue before its cap.
    pub fn pause_room(&self) -> usize {
        let (inflight, cap) = self.certain_cap(Certain::Pause);
        cap.saturating_sub(inflight.load(Ordering::SeqCst))
    }

    /// The in-flight counter and cap of windows read for `certain`.
    fn certain_cap(&self, certain: Certain) -> (&AtomicUsize, usize) {
        match certain {
            Certain::Pause => (&self.pause_inflight, self.max_pause_inflight),
            Certain::ScanAhead => (&self.scan_ahead_inflight, self.max_pause_inflight),
            // A refinement pass's reads are never queued: the cap bounds one pass's read.
            Certain::Hint | Certain::Cards | Certain::Refine => {
                (&self.hint_inflight, self.max_hint_inflight)
            }
        }
    }

    /// A prefetch worker: fetches queued windows until the pager stops.
    pub fn worker(&self) {
        let pf = self;
        swap_backend::set_thread_lane(swap_backend::Lane::Prefetch);
        let local = Worker::new_fifo();
        let mut buf = Vec::new();
        loop {
            if self.ctx.stop.load(Ordering::SeqCst) {
                return;
            }
            let first = || loop {
                match pf.first.steal() {
                    Steal::Success(j) => break Some(j),
                    Steal::Empty => break None,
                    Steal::Retry => {}
                }
            };
            let job = first().or_else(|| local.pop()).or_else(|| loop {
                match pf.jobs.steal_batch_and_pop(&local) {
                    Steal::Success(j) => break Some(j),
                    Steal::Empty => break None,
                    Steal::Retry => {}
                }
            });
            match job {
                Some(mut job) => {
                    let n = job.pages.len();
                    let counter = match job.stream {
                        Some(_) => &pf.inflight,
                        None => pf.certain_cap(job.certain).0,
                    };
                    // Got to late, a window reads none of the pages its thread has passed.
                    if let (Some(asker), Guess::Trend) = (job.stream, job.guess) {
                        let engine = pf.engine.lock().unwrap();
                        engine.streams.drop_passed(asker, &mut job.pages);
                    }
                    self.fetch_window(job, &mut buf, true);
                    counter.fetch_sub(n, Ordering::SeqCst);
                }
                // Never spin: a window is not worth a core the application may need (an
                // unpark between the empty check and the park makes the park return at once).
                None => std::thread::park(),
            }
        }
    }

    /// Reads `job`'s window and maps it. `queued`: a prefetch worker reads it, which its
    /// thread may overtake meanwhile (not one its faulting thread reads itself).
    fn fetch_window(&self, job: Job, buf: &mut Vec<u8>, queued: bool) {
        let pf = self;
        let ctx = &*self.ctx;
        // In stream order; charged now, so that the budget holds while they are in flight.
        let mut claims: Vec<_> = job
            .pages
            .iter()
            .filter_map(|&p| ctx.table.claim(p as usize, PageState::Remote))
            .collect();
        if claims.is_empty() {
            return;
        }
        // Guesses never take the reserve that demand faults are served from; a hint, and a
        // window along a trend that found the reserve low, are charged like the demand faults
        // they replace (reclaiming when the budget is full).
        let mut charged = 0;
        for c in claims.iter_mut() {
            // The worker does the reclaim (cold pages first) the thread's own fault would
            // have done.
            let ok = match job.reclaims {
                false => self.budget.charge(c, Charge::Prefetch),
                true => {
                    self.budget.charge(c, Charge::Demand)
                        || (self.reclaim.direct(false) && self.budget.charge(c, Charge::Demand))
                }
            };
            if !ok {
                break;
            }
            charged += 1;
        }
        if charged < claims.len() {
            // Faults took the reserve meanwhile: give the pages back (dropping the claims
            // restores them and their charges). A hint keeps the pages that fit.
            self.budget.wake_reclaimer();
            let hint = job.stream.is_none();
            if hint {
                pf.certain_counters(job.certain)
                    .dropped
                    .fetch_add((claims.len() - charged) as u64, Ordering::Relaxed);
            }
            if !hint || charged == 0 {
                pf.counters.by_class[job.class as usize]
                    .dropped_low_reserve
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            claims.truncate(charged);
        }
        // The marker is the middle of the window in stream order: reached, it says the
        // stream got halfway, with half a window left to hide the next window's fetch.
        let mut marker = job.stream.map(|_| claims[claims.len() / 2].page());
        claims.sort_unstable_by_key(|c| c.page());
        let pages: Vec<usize> = claims.iter().map(|c| c.page()).collect();
        let ids: Vec<u64> = pages.iter().map(|&p| p as u64).collect();
        buf.resize(pages.len() * PAGE_SIZE, 0);
        if let Err(e) = ctx.store.read_pages(&ids, buf) {
            ctx.die(&format!(
                "cannot prefetch {} heap pages starting at page {} ({:#x}) from {}: {e}",
                ids.len(),
                ids[0],
                ctx.page_addr(pages[0]),
                ctx.store.describe_page(ids[0])
            ));
        }
        ctx.counters
            .pages_read
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        ctx.counters
            .pages_prefetched
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        // Its thread may have got past the marker meanwhile (the worker preempted on a busy
        // machine): a marker there would never be touched, and would count as pages awaited.
        let dir = window_dir(&job.pages);
        if let (true, Some(asker), Some(m)) = (queued, job.stream, marker) {
            if pf
                .engine
                .lock()
                .unwrap()
                .streams
                .passed(asker, m as u32, dir)
            {
                marker = None;
            }
        }
        // A pause's pages serve the pause: admitted as its own faults' are, by their region;
        // other windows' on probation (or cold, as the policy says).
        let admission = |p: usize| {
            let region = job
                .certain
                .is_pause()
                .then(|| self.attribution.region_at(ctx.page_addr(p)))
                .flatten();
            match ctx
                .config
                .policy
                .admission(job.class, Source::Prefetch, region)
            {
                Admission::ColdAfterPause | Admission::HeldForPause if !job.certain.is_pause() => {
                    Admission::Hot
                }
                a => a,
            }
        };
        let arrival = if job.certain.is_pause() {
            Arrival::Fault
        } else {
            Arrival::Prefetched
        };
        let protect = ctx.tracks_dirty(job.class);
        let state = if protect {
            PageState::Clean
        } else {
            PageState::Dirty
        };
        let mut mapped = 0usize;
        let mut gone = 0usize;
        let mut marker_claim = None;
        // Map runs of neighbouring pages (the marker excluded) with one ioctl each.
        let mut claims = claims.into_iter().enumerate().peekable();
        while let Some((i, c)) = claims.next() {
            if Some(c.page()) == marker {
                marker_claim = Some((i, c));
                continue;
            }
            let mut run = vec![c];
            while let Some((_, next)) = claims.peek() {
                let last = run.last().unwrap().page();
                if next.page() != last + 1 || Some(next.page()) == marker {
                    break;
                }
                run.push(claims.next().unwrap().1);
            }
            // One ioctl for the run; if it did not map them all, page by page.
            let whole = ctx.map_run(
                &run[0],
                &run[1..],
                &buf[i * PAGE_SIZE..(i + run.len()) * PAGE_SIZE],
                protect,
            ) == CopyOutcome::Copied;
            for (k, c) in run.into_iter().enumerate() {
                let p = c.page();
                let o = if whole {
                    CopyOutcome::Copied
                } else {
                    ctx.map(
                        &c,
                        &buf[(i + k) * PAGE_SIZE..(i + k + 1) * PAGE_SIZE],
                        protect,
                    )
                };
                match o {
                    CopyOutcome::Copied | CopyOutcome::Exists => {
                        // On probation, not active: a guess never pushes out proven pages.
                        self.reclaim.admit(p, arrival, admission(p));
                        c.finish(state);
                        mapped += 1;
                    }
                    // The mm is changing (an unread event): the store's copy is current, and
                    // dropping the claim makes the page Remote again.
                    CopyOutcome::Again | CopyOutcome::Gone => {
                        drop(c);
                        gone += 1;
                    }
                }
            }
        }
        let c = &pf.counters.by_class[job.class as usize];
        let (Some(marker), Some(asker)) = (marker, job.stream) else {
            // A hint, or a window its thread got into before it was read: every page mapped,
            // none kept back.
            if job.stream.is_none() {
                pf.certain_counters(job.certain)
                    .fetched
                    .fetch_add(mapped as u64, Ordering::Relaxed);
            } else {
                c.windows.fetch_add(1, Ordering::Relaxed);
            }
            c.pages.fetch_add(mapped as u64, Ordering::Relaxed);
            self.note_tracked_pages(protect, job.class, mapped);
            self.budget.note_peak();
            return;
        };
        let (mi, mc) = marker_claim.expect("the marker is one of the claimed pages");
        let data: Box<[u8]> = buf[mi * PAGE_SIZE..(mi + 1) * PAGE_SIZE].into();
        let evicted = {
            let mut m = pf.markers.lock().unwrap();
            m.insert(
                marker as u32,
                Marker {
                    data,
                    stream: asker.key,
                    class: job.class,
                    guess: job.guess,
                    window: (pages.len() - gone) as u32,
                    dir: dir as i8,
                },
                &pf.awaiting,
            );
            m.order.push_back(marker as u32);
            mc.finish(PageState::Cached);
            let mut out = Vec::new();
            while m.map.len() > pf.max_markers {
                let Some(old) = m.order.pop_front() else {
                    break;
                };
                if let Some(c) = ctx.table.claim(old as usize, PageState::Cached) {
                    if let Some(mk) = m.remove(old, &pf.awaiting) {
                        out.push((c, mk));
                    }
                }
            }
            out
        };
        self.unreached(evicted, true);
        self.note_tracked_pages(protect, job.class, mapped);
        c.windows.fetch_add(1, Ordering::Relaxed);
        c.pages.fetch_add((mapped + 1) as u64, Ordering::Relaxed);
        self.budget.note_peak();
    }

    /// `tracks_dirty` counted one page of a window that mapped `mapped` pages write-protected
    /// (a stream's window: and a marker).
    fn note_tracked_pages(&self, protect: bool, class: ThreadClass, mapped: usize) {
        if protect {
            for _ in 1..mapped {
                self.ctx.config.policy.note_tracked(class);
            }
        }
    }

    /// Forgets the marker copy of page `p` (the caller has moved it out of `Cached`).
    pub fn drop_marker(&self, p: usize) {
        self.markers
            .lock()
            .unwrap()
            .remove(p as u32, &self.awaiting);
    }
}
