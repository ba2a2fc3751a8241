//! The prefetch engine's decisions: Leap's majority-trend detector, one per stream, and the
//! window each fault asks for. Pure logic; the pager does the I/O (`pager::prefetch_io`).
//!
//! # Detector
//! Each stream keeps the last 32 page deltas. The trend is the Boyer-Moore majority of the
//! newest 8 deltas, else of the newest 16, else of all 32 (a majority must hold more than
//! half of its window). A fault with a trend `d` at page `x` asks for `x+d, x+2d, ...,
//! x+depth*d`; without a trend it asks for the `depth`-aligned block around `x` (kernel
//! swap readahead's cluster).
//!
//! # Depth
//! Starts at [`START_DEPTH`], doubles on a prefetch hit (a fault served from a page this
//! stream prefetched) up to the configured maximum, halves on a miss (a demand fault the
//! stream did not foresee, or a prefetched window nobody reached).
//!
//! # Blind windows back off
//! A window without a trend is a guess about neighbours. A [`Governor`] follows the accuracy
//! of blind windows and of windows along a trend apart (resolved markers); while the blind
//! ones' is below [`Governor::BLIND_MIN_ACCURACY`] only trends are followed, plus one blind
//! window in [`Governor::PROBE_EVERY`] so that the accuracy can recover. Kept apart because
//! one thread does both: G1's concurrent marking thread faults at random while it traces
//! (its blind windows mostly wasted) and page after page when it rebuilds remembered sets;
//! judged by one accuracy, the sequential scan's windows were gated with the random ones. A
//! wasted prefetch evicts a page that was probably going to be used: on a random-access
//! workload (kv) blind windows were 88% wasted.
//!
//! # Hits are observed on markers
//! A prefetched page that is mapped costs no fault when touched, so its use is invisible from
//! user space. One page per window, the one in the middle, is kept unmapped (the *marker*,
//! like the kernel's `PG_readahead` page): touching it faults, is served locally, counts as a
//! hit of the whole window and prefetches the next window while the second half is consumed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Page deltas remembered per stream.
pub const HISTORY: usize = 32;
/// Depth of a new stream.
pub const START_DEPTH: usize = 4;
/// Fewest deltas a trend is called on.
const MIN_DELTAS: usize = 4;
/// Streams remembered at once; the least recently used goes first.
const MAX_STREAMS: usize = 512;

/// Leap's trend detector over one stream's page deltas.
#[derive(Clone, Debug)]
pub struct Detector {
    deltas: [i64; HISTORY],
    /// Deltas recorded so far (capped at HISTORY).
    len: usize,
    /// Next slot to write.
    head: usize,
    last: Option<u64>,
}

impl Default for Detector {
    fn default() -> Self {
        Detector {
            deltas: [0; HISTORY],
            len: 0,
            head: 0,
            last: None,
        }
    }
}

impl Detector {
    /// Records an access to `page`. Repeated faults on one page are not a movement.
    pub fn record(&mut self, page: u64) {
        if let Some(last) = self.last {
            let d = page as i64 - last as i64;
            if d == 0 {
                return;
            }
            self.deltas[self.head] = d;
            self.head = (self.head + 1) % HISTORY;
            self.len = (self.len + 1).min(HISTORY);
        }
        self.last = Some(page);
    }

    /// The newest `n` deltas, newest first.
    fn newest(&self, n: usize) -> impl Iterator<Item = i64> + '_ {
        (1..=n.min(self.len)).map(move |k| self.deltas[(self.head + HISTORY - k) % HISTORY])
    }

    /// The majority delta of the newest 8, 16 or 32 deltas, trying the shortest window first.
    pub fn trend(&self) -> Option<i64> {
        let mut w = HISTORY / 4;
        loop {
            let n = w.min(self.len);
            if n >= MIN_DELTAS {
                if let Some(d) = majority(self.newest(n)) {
                    if self.newest(n).filter(|x| *x == d).count() * 2 > n {
                        return Some(d);
                    }
                }
            }
            if w >= self.len || w >= HISTORY {
                return None;
            }
            w *= 2;
        }
    }
}

/// Boyer-Moore majority vote: the only candidate that can hold more than half (unverified).
fn majority(xs: impl Iterator<Item = i64>) -> Option<i64> {
    let mut cand = None;
    let mut count = 0usize;
    for x in xs {
        if count == 0 {
            cand = Some(x);
            count = 1;
        } else if cand == Some(x) {
            count += 1;
        } else {
            count -= 1;
        }
    }
    cand
}

/// The direction of a window's pages in stream order: 1 up, -1 down, 0 a window of one page.
pub fn window_dir(pages: &[u32]) -> i64 {
    match pages {
        [a, b, ..] => (*b as i64 - *a as i64).signum(),
        _ => 0,
    }
}

/// What a window's pages are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guess {
    /// The next steps of the stream's trend.
    Trend = 0,
    /// The aligned block around a fault without a trend.
    Blind = 1,
}

/// The pages a fault asks for, and on what grounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub pages: Vec<u64>,
    pub guess: Guess,
    /// The lane that asked (see [`Streams::drop_passed`]).
    pub lane: LaneId,
}

/// Names one lane of a stream for as long as it lives: a lane started in place of another gets
/// a new id, so a window asked for by the old one is never taken for the new one's.
pub type LaneId = u64;

/// Who asked for a window: a stream, and which of its lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asker {
    pub key: StreamKey,
    pub lane: LaneId,
}

/// One prefetch stream: a detector and an adaptive depth.
#[derive(Clone, Debug)]
pub struct Stream {
    id: LaneId,
    det: Detector,
    depth: usize,
    max_depth: usize,
    last_used: u64,
}

impl Stream {
    pub fn new(max_depth: usize) -> Self {
        Self::with_id(max_depth, 0)
    }

    fn with_id(max_depth: usize, id: LaneId) -> Self {
        Stream {
            id,
            det: Detector::default(),
            depth: START_DEPTH.min(max_depth).max(1),
            max_depth: max_depth.max(1),
            last_used: 0,
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn hit(&mut self) {
        self.depth = (self.depth * 2).min(self.max_depth);
    }

    pub fn miss(&mut self) {
        self.depth = (self.depth / 2).max(1);
    }

    /// Whether a fault at `page` is one of the next `depth` steps of the trend: the stream
    /// foresaw it and its window was late (not yet read when its thread got there, or dropped)
    /// rather than wrong.
    fn foresaw(&self, page: u64) -> bool {
        let (Some(d), Some(last)) = (self.det.trend(), self.det.last) else {
            return false;
        };
        let gap = page as i64 - last as i64;
        gap % d == 0 && (1..=self.depth as i64).contains(&(gap / d))
    }

    /// Records the accesses a hit at `page` implies: the pages between the last fault and
    /// `page` along the trend were mapped by prefetch and touched without faulting. Leap, in
    /// the kernel, sees them as minor faults; without them the deltas between markers would
    /// grow with the window and hide the trend.
    pub fn record_skipped(&mut self, page: u64) {
        let (Some(d), Some(last)) = (self.det.trend(), self.det.last) else {
            return;
        };
        let gap = page as i64 - last as i64;
        if gap % d != 0 || gap / d <= 1 {
            return;
        }
        let steps = (gap / d).min(HISTORY as i64);
        for k in (1..steps).rev() {
            self.det.record((page as i64 - k * d) as u64);
        }
    }

    /// Records an access at `page` and returns the pages to prefetch after it (they may be
    /// outside `0..npages`; the caller keeps only pages that are remote). Without a trend,
    /// the aligned block around `page` if `blind`, else nothing.
    pub fn window(&mut self, page: u64, npages: u64, blind: bool) -> Window {
        self.det.record(page);
        let depth = self.depth as i64;
        match self.det.trend() {
            Some(d) => Window {
                pages: (1..=depth)
                    .map(|k| page as i64 + k * d)
                    .take_while(|q| *q >= 0 && (*q as u64) < npages)
                    .map(|q| q as u64)
                    .collect(),
                guess: Guess::Trend,
                lane: self.id,
            },
            None if !blind => Window {
                pages: Vec::new(),
                guess: Guess::Blind,
                lane: self.id,
            },
            None => {
                let start = page - page % self.depth as u64;
                Window {
                    pages: (start..(start + self.depth as u64).min(npages))
                        .filter(|q| *q != page)
                        .collect(),
                    guess: Guess::Blind,
                    lane: self.id,
                }
            }
        }
    }
}

/// Per-class prefetch counters ("stream class" = the class of the thread whose stream asked).
#[derive(Debug, Default)]
pub struct ClassCounters {
    /// Windows sent to the prefetch workers.
    pub windows: AtomicU64,
    /// Pages fetched and mapped (or kept as markers).
    pub pages: AtomicU64,
    /// Markers touched before they were dropped: the window was reached.
    pub marker_hits: AtomicU64,
    /// Markers dropped untouched.
    pub marker_misses: AtomicU64,
    /// Pages of windows whose marker was hit.
    pub hit_pages: AtomicU64,
    /// Windows dropped because too many pages were in flight.
    pub dropped: AtomicU64,
    /// Windows dropped because the reclaimer's reserve of free budget was low.
    pub dropped_low_reserve: AtomicU64,
    /// Windows not sent: the class's accuracy was below the chance that a page they would
    /// push out comes back (see [`Governor::worth`]).
    pub gated: AtomicU64,
    /// Windows along a trend that found the reserve low and were read all the same, the
    /// worker reclaiming for their pages as the demand faults they foresee would.
    pub reclaimed_for: AtomicU64,
    /// Windows along a trend that a demand fault asked for, read by the faulting thread
    /// itself right after its own page (the stream had fallen behind its thread).
    pub sync_windows: AtomicU64,
}

/// All counters of the engine, indexed by `ThreadClass as usize`.
#[derive(Debug, Default)]
pub struct PrefetchCounters {
    pub by_class: [ClassCounters; crate::model::ThreadClass::COUNT],
    pub hints: HintCounters,
    /// Pages read in bulk for a stop-the-world pause (what its collection set and cards
    /// name), the same figures.
    pub pause_reads: HintCounters,
    /// Of a pause's, the pages read just ahead of its card scan (apart from `pause_reads`).
    pub scan_ahead: HintCounters,
    /// Pages read after a pause for the dirty cards it left (refinement's), the same figures.
    pub card_reads: HintCounters,
    /// Pages read ahead of refinement passes, as a patched G1 named them, the same figures.
    pub refine_reads: HintCounters,
}

/// Pages a patched collector asked for ahead of tracing them (gc-hooks).
#[derive(Debug, Default)]
pub struct HintCounters {
    /// Hint calls.
    pub requests: AtomicU64,
    /// Pages named in them.
    pub pages: AtomicU64,
    /// Of those, pages that were remote and were fetched.
    pub fetched: AtomicU64,
    /// Remote pages not fetched: the reserve was low or too many pages were in flight.
    pub dropped: AtomicU64,
}

/// The stream a fault belongs to.
pub type StreamKey = u64;

/// The streams of one pager. Each key (thread, class or global, as the policy says) holds up
/// to [`LANES`] streams told apart by address: a fault joins the lane whose last page is
/// nearest (within [`LANE_REACH`] pages), else starts a lane in place of the least recently
/// used. One thread scanning two arrays at once thus keeps two clean trends, as hardware
/// stream prefetchers do; Leap's single history per process would see neither.
#[derive(Debug)]
pub struct Streams {
    max_depth: usize,
    streams: HashMap<StreamKey, Vec<Stream>>,
    clock: u64,
    /// The id the next lane started gets.
    next_lane: LaneId,
    /// Whether a window without a trend is asked for (the governor's say).
    pub blind: bool,
}

/// Follows how many of one stream class's prefetched windows are used, blind ones and those
/// along a trend apart, and says whether its windows are still worth their pages: guesses
/// without a trend, and any window at all.
#[derive(Clone, Debug)]
pub struct Governor {
    /// Moving averages of resolved windows' outcomes (1 = used), in thousandths, by
    /// [`Guess`].
    accuracy: [u32; 2],
    resolved: u64,
    asked: u64,
    weighed: [u64; 2],
}

impl Default for Governor {
    fn default() -> Self {
        Governor {
            accuracy: [1000; 2],
            resolved: 0,
            asked: 0,
            weighed: [0; 2],
        }
    }
}

impl Governor {
    /// Accuracy below which blind windows stop.
    pub const BLIND_MIN_ACCURACY: f64 = 0.3;
    /// One blind window in this many is still issued while they are stopped.
    pub const PROBE_EVERY: u64 = 16;

    /// A window of `guess` was resolved: its marker was touched (`used`) or dropped
    /// untouched.
    pub fn resolved(&mut self, used: bool, guess: Guess) {
        let v = if used { 1000 } else { 0 };
        let a = &mut self.accuracy[guess as usize];
        *a = *a - *a / 32 + v / 32;
        self.resolved += 1;
    }

    pub fn accuracy(&self, guess: Guess) -> f64 {
        self.accuracy[guess as usize] as f64 / 1000.0
    }

    /// Whether the next window may be blind.
    pub fn blind_allowed(&mut self) -> bool {
        self.asked += 1;
        self.accuracy(Guess::Blind) >= Self::BLIND_MIN_ACCURACY
            || self.asked.is_multiple_of(Self::PROBE_EVERY)
    }

    /// Whether a window is worth the pages it displaces. Once the budget is full every
    /// prefetched page pushes one out, and `bar` is the chance that a page pushed out comes
    /// back (refaults per eviction, `Reclaimer::pressure`).
    /// - A blind window whose pages are used less often than that brings in fewer pages than
    ///   it sends back for later.
    /// - A window along a trend holds the pages its thread reads next: a used one would have
    ///   come in (and pushed a page out) on its own fault a moment later, so only the unused
    ///   ones cost a page that comes back. It goes while `a > (1 - a) * bar`, its accuracy
    ///   `a` above `bar / (1 + bar)` (0.47 where nine evicted pages in ten come back).
    ///
    /// Below the bar one window in [`Self::PROBE_EVERY`] still goes, so that the accuracy can
    /// recover.
    pub fn worth(&mut self, bar: f64, guess: Guess) -> bool {
        let bar = match guess {
            Guess::Blind => bar,
            Guess::Trend => bar / (1.0 + bar),
        };
        self.weighed[guess as usize] += 1;
        self.accuracy(guess) >= bar
            || self.weighed[guess as usize].is_multiple_of(Self::PROBE_EVERY)
    }
}

/// Address-separated streams per key.
pub const LANES: usize = 8;
/// Farthest a fault may be from a lane's last page and still join it.
pub const LANE_REACH: u64 = 512;

impl Streams {
    pub fn new(max_depth: usize) -> Self {
        Streams {
            max_depth,
            streams: HashMap::new(),
            clock: 0,
            next_lane: 0,
            blind: true,
        }
    }

    fn lane(&mut self, key: StreamKey, page: u64) -> &mut Stream {
        self.clock += 1;
        if self.streams.len() >= MAX_STREAMS && !self.streams.contains_key(&key) {
            let oldest = self
                .streams
                .iter()
                .min_by_key(|(_, l)| l.iter().map(|s| s.last_used).max().unwrap_or(0))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.streams.remove(&k);
            }
        }
        let (max, now, id) = (self.max_depth, self.clock, self.next_lane);
        let lanes = self.streams.entry(key).or_default();
        let near = lanes
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.det.last.map(|l| (i, l.abs_diff(page))))
            .filter(|(_, d)| *d <= LANE_REACH)
            .min_by_key(|(_, d)| *d)
            .map(|(i, _)| i);
        let i = match near {
            Some(i) => i,
            None if lanes.len() < LANES => {
                self.next_lane += 1;
                lanes.push(Stream::with_id(max, id));
                lanes.len() - 1
            }
            None => {
                let (i, _) = lanes
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.last_used)
                    .unwrap();
                self.next_lane += 1;
                lanes[i] = Stream::with_id(max, id);
                i
            }
        };
        lanes[i].last_used = now;
        &mut lanes[i]
    }

    /// A demand fault at `page`: the stream asks for a window, shrunk unless the fault is
    /// along its trend (a late window is no reason for a smaller one).
    pub fn on_demand(&mut self, key: StreamKey, page: u64, npages: u64) -> Window {
        let blind = self.blind;
        let s = self.lane(key, page);
        if !s.foresaw(page) {
            s.miss();
        }
        s.window(page, npages, blind)
    }

    /// A fault served from a marker at `page`: the stream grows and asks for the next window.
    pub fn on_hit(&mut self, key: StreamKey, page: u64, npages: u64) -> Window {
        let blind = self.blind;
        let s = self.lane(key, page);
        s.hit();
        s.record_skipped(page);
        s.window(page, npages, blind)
    }

    /// The marker at `page` of stream `key` was dropped untouched.
    pub fn on_wasted(&mut self, key: StreamKey, page: u64) {
        if let Some(lanes) = self.streams.get_mut(&key) {
            if let Some(s) = lanes
                .iter_mut()
                .filter(|s| s.det.last.is_some_and(|l| l.abs_diff(page) <= LANE_REACH))
                .min_by_key(|s| s.det.last.unwrap().abs_diff(page))
            {
                s.miss();
            }
        }
    }

    /// Where stream `key` has got to, near page `first`, moving in direction `dir` (1 up,
    /// -1 down, 0 either): the last page and trend of the lane that has gone farthest that way,
    /// among the lanes within reach of `first` and `asker`, the lane that asked, wherever it
    /// is. A sequential thread's faults move to another lane when they come nearer to its last
    /// page, leaving the old lane behind, so the nearest lane may not be it; and a worker kept
    /// off the cores reads a window after its lane has gone on by more than the reach.
    fn frontier(&self, asker: Asker, first: u32, dir: i64) -> Option<(u64, i64)> {
        self.streams
            .get(&asker.key)?
            .iter()
            .filter_map(|s| Some((s.id, s.det.last?, s.det.trend()?.signum())))
            .filter(|&(id, last, d)| {
                (dir == 0 || d == dir)
                    && (id == asker.lane || last.abs_diff(first as u64) <= LANE_REACH)
            })
            .map(|(_, last, d)| (last, d))
            .max_by_key(|&(last, d)| (last as i64 - first as i64) * d)
    }

    /// Whether `asker`'s stream has reached or gone past `page` along its trend, moving in
    /// direction `dir` (see [`window_dir`]), since `asker` asked for it.
    pub fn passed(&self, asker: Asker, page: u32, dir: i64) -> bool {
        self.frontier(asker, page, dir)
            .is_some_and(|(last, d)| (page as i64 - last as i64) * d <= 0)
    }

    /// Drops from a window that `asker` asked for (pages in stream order) those that its
    /// stream has reached or gone past along its trend since: a window the
    /// prefetch worker gets to late would read pages its thread has used and left behind
    /// (pushed out since), and keep a marker there that nobody touches (its pages counted as
    /// awaited, which keeps the stream's next windows from reclaiming).
    pub fn drop_passed(&self, asker: Asker, pages: &mut Vec<u32>) {
        let Some(&first) = pages.first() else {
            return;
        };
        if let Some((last, d)) = self.frontier(asker, first, window_dir(pages)) {
            pages.retain(|&q| (q as i64 - last as i64) * d > 0);
        }
    }

    /// Depth of the lane of `key` nearest to `page`.
    pub fn depth(&self, key: StreamKey, page: u64) -> Option<usize> {
        self.streams.get(&key).and_then(|l| {
            l.iter()
                .filter(|s| s.det.last.is_some())
                .min_by_key(|s| s.det.last.unwrap().abs_diff(page))
                .map(|s| s.depth)
        })
    }
}

/// Accuracy and coverage of one class's prefetching, from its counters and its demand faults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effect {
    pub prefetched: u64,
    /// Estimated pages used: pages of windows whose marker was reached.
    pub hits: u64,
    /// hits / prefetched pages whose window was resolved (marker hit or dropped).
    pub accuracy: Option<f64>,
    /// hits / (hits + demand faults).
    pub coverage: Option<f64>,
}

impl ClassCounters {
    pub fn effect(&self, demand_faults: u64) -> Effect {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (hits, mh, mm) = (
            ld(&self.hit_pages),
            ld(&self.marker_hits),
            ld(&self.marker_misses),
        );
        let prefetched = ld(&self.pages);
        // Accuracy by windows resolved, weighted by pages: hit windows' pages over the pages
        // of all resolved windows (approximated by the hit share of markers).
        let accuracy = (mh + mm > 0).then(|| mh as f64 / (mh + mm) as f64);
        let coverage =
            (hits + demand_faults > 0).then(|| hits as f64 / (hits + demand_faults) as f64);
        Effect {
            prefetched,
            hits,
            accuracy,
            coverage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trained(pages: impl IntoIterator<Item = u64>) -> Detector {
        let mut d = Detector::default();
        for p in pages {
            d.record(p);
        }
        d
    }

    #[test]
    fn forward_and_backward_strides_are_trends() {
        assert_eq!(trained((0..20).map(|i| 100 + i)).trend(), Some(1));
        assert_eq!(trained((0..20).map(|i| 1000 - 3 * i)).trend(), Some(-3));
        assert_eq!(trained((0..12).map(|i| 7 * i)).trend(), Some(7));
    }

    #[test]
    fn too_short_a_history_has_no_trend() {
        assert_eq!(trained([5, 6, 7]).trend(), None);
        assert_eq!(trained([5]).trend(), None);
    }

    #[test]
    fn random_accesses_have_no_trend() {
        // A fixed LCG: deltas all differ, so no delta can hold a majority.
        let mut x = 12345u64;
        let pages: Vec<u64> = (0..64)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) % 100_000
            })
            .collect();
        assert_eq!(trained(pages).trend(), None);
    }

    #[test]
    fn a_majority_survives_noise() {
        // 6 of the newest 8 deltas are +2.
        let mut d = trained((0..10).map(|i| 2 * i));
        d.record(500);
        d.record(20);
        for p in [22, 24, 26, 28, 30, 32] {
            d.record(p);
        }
        assert_eq!(d.trend(), Some(2));
    }

    #[test]
    fn a_longer_window_finds_a_trend_the_newest_deltas_hide() {
        // Old history: +1 stride for 24 deltas; newest 8 deltas are noise with no majority.
        let mut d = trained(0..25);
        for p in [900, 40, 700, 60, 300, 10, 800, 20] {
            d.record(p);
        }
        assert_eq!(d.trend(), Some(1));
    }

    #[test]
    fn one_thread_scanning_two_arrays_keeps_two_lanes() {
        let mut s = Streams::new(16);
        let mut last = (vec![], vec![]);
        for i in 0..12 {
            last.0 = s.on_demand(1, 1000 + i, 1 << 20).pages;
            last.1 = s.on_demand(1, 90_000 + i, 1 << 20).pages;
        }
        assert_eq!(last.0, vec![1012]);
        assert_eq!(last.1, vec![90_012]);
    }

    #[test]
    fn interleaved_streams_confuse_one_detector_but_not_two() {
        // Two threads scanning forward in different places, faults interleaved.
        let a = (0..32).map(|i| 1000 + i);
        let b = (0..32).map(|i| 50_000 + 2 * i);
        let mixed: Vec<(u64, u64)> = a.zip(b).collect();
        let global = trained(mixed.iter().flat_map(|(x, y)| [*x, *y]));
        assert_eq!(global.trend(), None, "interleaving hides both trends");
        let mut s = Streams::new(16);
        let mut last = (vec![], vec![]);
        for (x, y) in &mixed {
            last.0 = s.on_demand(1, *x, 1 << 20).pages;
            last.1 = s.on_demand(2, *y, 1 << 20).pages;
        }
        assert_eq!(last.0, vec![1032], "depth halved to 1 by repeated misses");
        assert_eq!(last.1, vec![50_064]);
    }

    #[test]
    fn depth_doubles_on_hits_and_halves_on_misses() {
        let mut s = Streams::new(32);
        for p in 0..10 {
            s.on_demand(9, p, 1000);
        }
        assert_eq!(s.depth(9, 9), Some(1));
        let w = s.on_hit(9, 10, 1000);
        assert_eq!(w.pages, vec![11, 12]);
        assert_eq!(w.guess, Guess::Trend);
        s.on_hit(9, 12, 1000);
        s.on_hit(9, 14, 1000);
        assert_eq!(s.depth(9, 14), Some(8));
        for _ in 0..5 {
            s.on_hit(9, 16, 1000);
        }
        assert_eq!(s.depth(9, 16), Some(32), "capped");
        s.on_wasted(9, 40);
        assert_eq!(s.depth(9, 16), Some(16));
    }

    #[test]
    fn a_demand_fault_along_the_trend_keeps_the_depth_and_one_off_it_halves_it() {
        let mut s = Streams::new(32);
        for p in 0..10 {
            s.on_demand(9, p, 1000);
        }
        for p in [10, 12, 16, 24] {
            s.on_hit(9, p, 1000);
        }
        assert_eq!(s.depth(9, 24), Some(16));
        // Its window was late: the thread got to page 25 before it did.
        let w = s.on_demand(9, 25, 1000);
        assert_eq!(s.depth(9, 25), Some(16));
        assert_eq!((w.guess, w.pages.len()), (Guess::Trend, 16));
        // Beyond the window: not foreseen.
        s.on_demand(9, 25 + 17, 1000);
        assert_eq!(s.depth(9, 42), Some(8));
    }

    #[test]
    fn a_window_reached_late_keeps_only_the_pages_ahead_of_its_stream() {
        let mut s = Streams::new(32);
        for p in 100..110 {
            s.on_demand(4, p, 1000);
        }
        // Asked for at page 110; the thread got on to page 115 before the worker got to it.
        let lane = s.on_demand(4, 110, 1000).lane;
        let mut window: Vec<u32> = (111..127).collect();
        for p in 111..=115 {
            s.on_demand(4, p, 1000);
        }
        s.drop_passed(Asker { key: 4, lane }, &mut window);
        assert_eq!(window, (116..127).collect::<Vec<u32>>());
        // Backwards, the same.
        for p in (500..520).rev() {
            s.on_demand(5, p, 1000);
        }
        let mut back = vec![499, 498, 497];
        let lane = s.on_demand(5, 499, 1000).lane;
        s.drop_passed(Asker { key: 5, lane }, &mut back);
        assert_eq!(back, vec![498, 497]);
        // A thread's faults move to another lane when they come nearer to its last page: the
        // lane they leave behind does not decide.
        let mut s = Streams::new(32);
        s.on_demand(7, 2000, 4000);
        s.on_demand(7, 1400, 4000); // a lane of its own, 600 pages away
        let mut lane = 0;
        for p in 800..=1500 {
            lane = s.on_demand(7, p, 4000).lane; // from 1400 on, in the lane that had 1400
        }
        let left = s.on_demand(7, 2000, 4000).lane;
        let mut asked_at_1395: Vec<u32> = (1396..1428).collect();
        s.drop_passed(Asker { key: 7, lane: left }, &mut asked_at_1395);
        assert_eq!(asked_at_1395, Vec::<u32>::new());
        let mut ahead: Vec<u32> = (1490..1530).collect();
        s.drop_passed(Asker { key: 7, lane }, &mut ahead);
        assert_eq!(ahead, (1501..1530).collect::<Vec<u32>>());
        // No trend, nothing to tell: the window is left as it is.
        for p in [7, 300, 40, 900] {
            s.on_demand(6, p, 1000);
        }
        let mut blind = vec![901, 902];
        let lane = s.on_demand(6, 900, 1000).lane;
        s.drop_passed(Asker { key: 6, lane }, &mut blind);
        assert_eq!(blind, vec![901, 902]);
    }

    /// A prefetch worker kept off the cores gets to a window after its thread has gone on
    /// farther than a lane reaches: the lane that asked still says it has passed, and no
    /// other lane of the thread's (behind or far ahead) decides for it.
    #[test]
    fn a_window_its_lane_left_far_behind_is_dropped_whole() {
        let mut s = Streams::new(32);
        let mut asker = 0;
        for p in 1000..=1300 {
            asker = s.on_demand(3, p, 8000).lane;
        }
        let window: Vec<u32> = (1301..1333).collect();
        for p in 1301..=1900 {
            assert_eq!(s.on_demand(3, p, 8000).lane, asker, "one lane all along");
        }
        let mut late = window.clone();
        s.drop_passed(
            Asker {
                key: 3,
                lane: asker,
            },
            &mut late,
        );
        assert_eq!(late, Vec::<u32>::new(), "read 600 pages behind its thread");
        assert!(s.passed(
            Asker {
                key: 3,
                lane: asker
            },
            window[16],
            1
        ));
        // Another lane far ahead of a window does not count as having passed it: two scans
        // of one thread, 3000 pages apart.
        let mut s = Streams::new(32);
        let mut low = 0;
        for p in 0..40 {
            low = s.on_demand(3, 100 + p, 8000).lane;
            s.on_demand(3, 4000 + p, 8000);
        }
        let mut ahead: Vec<u32> = (140..172).collect();
        s.drop_passed(Asker { key: 3, lane: low }, &mut ahead);
        assert_eq!(ahead, (140..172).collect::<Vec<u32>>());
        // A lane started in place of the asker is not the asker.
        let mut s = Streams::new(32);
        let first = s.on_demand(2, 10, 100_000).lane;
        for k in 1..=LANES as u64 {
            assert_ne!(s.on_demand(2, 10 + k * 2 * LANE_REACH, 100_000).lane, first);
        }
    }

    #[test]
    fn hits_far_along_the_trend_keep_it() {
        let mut s = Streams::new(32);
        for p in 0..6 {
            s.on_demand(1, 3 * p, 10_000);
        }
        // Markers hit further and further ahead as windows grow.
        for p in [24, 45, 90, 180, 400] {
            let w = s.on_hit(1, p, 10_000);
            assert_eq!(
                w.pages.first(),
                Some(&(p + 3)),
                "trend kept after a hit at {p}"
            );
        }
    }

    #[test]
    fn without_a_trend_the_aligned_block_is_read() {
        let mut s = Stream::new(8);
        // depth 4 at start: block of 4 around page 13 = 12..16 less 13.
        assert_eq!(s.window(13, 1000, true).pages, vec![12, 14, 15]);
    }

    #[test]
    fn windows_stay_inside_the_region() {
        let mut s = Stream::new(8);
        for p in 990..1000 {
            s.window(p, 1000, true);
        }
        assert!(s.window(999, 1000, true).pages.is_empty());
        let mut s = Stream::new(8);
        for p in (0..10).rev() {
            s.window(p, 1000, true);
        }
        assert!(s.window(0, 1000, true).pages.is_empty());
    }

    #[test]
    fn old_streams_are_forgotten() {
        let mut s = Streams::new(8);
        for k in 0..(MAX_STREAMS as u64 + 10) {
            s.on_demand(k, k, 1 << 20);
        }
        assert!(s.streams.len() <= MAX_STREAMS);
        assert_eq!(s.depth(0, 0), None, "least recently used went first");
        let k = MAX_STREAMS as u64 + 9;
        assert!(s.depth(k, k).is_some());
    }

    #[test]
    fn effect_is_computed_from_counters() {
        let c = ClassCounters::default();
        assert_eq!(c.effect(0).accuracy, None);
        c.pages.store(100, Ordering::Relaxed);
        c.marker_hits.store(8, Ordering::Relaxed);
        c.marker_misses.store(2, Ordering::Relaxed);
        c.hit_pages.store(80, Ordering::Relaxed);
        let e = c.effect(20);
        assert_eq!(e.accuracy, Some(0.8));
        assert_eq!(e.coverage, Some(0.8));
    }

    #[test]
    fn blind_windows_stop_when_windows_go_unused_and_come_back_when_they_are() {
        let mut g = Governor::default();
        assert!(g.blind_allowed());
        for _ in 0..100 {
            g.resolved(false, Guess::Blind);
        }
        assert!(g.accuracy(Guess::Blind) < Governor::BLIND_MIN_ACCURACY);
        let allowed = (0..64).filter(|_| g.blind_allowed()).count();
        assert_eq!(allowed as u64, 64 / Governor::PROBE_EVERY, "only probes");
        // Windows along a trend being used says nothing of the blind ones.
        for _ in 0..100 {
            g.resolved(true, Guess::Trend);
        }
        assert_eq!((0..64).filter(|_| g.blind_allowed()).count(), 4);
        for _ in 0..100 {
            g.resolved(true, Guess::Blind);
        }
        assert!(g.blind_allowed());
        // Without blind windows a stream without a trend asks for nothing.
        let mut s = Stream::new(8);
        assert!(s.window(13, 1000, false).pages.is_empty());
        assert!(!s.window(14, 1000, true).pages.is_empty());
    }

    #[test]
    fn windows_go_while_they_are_used_more_often_than_what_they_push_out_comes_back() {
        let mut g = Governor::default();
        // Six windows in ten used.
        for i in 0..400 {
            g.resolved(i % 10 < 6, Guess::Blind);
        }
        let blind = g.accuracy(Guess::Blind);
        assert!((blind - 0.6).abs() < 0.1, "{blind}");
        // Memory not full yet (nothing comes back): every window goes.
        assert!((0..64).all(|_| g.worth(0.0, Guess::Blind)));
        assert!((0..64).all(|_| g.worth(0.4, Guess::Blind)));
        // Nine evicted pages in ten come back: only probes go.
        let sent = (0..64).filter(|_| g.worth(0.9, Guess::Blind)).count();
        assert_eq!(sent as u64, 64 / Governor::PROBE_EVERY);
        // Windows along a trend, as often used, still go: a used page of theirs would have
        // come in on its own fault (one thread tracing at random and scanning in order, as
        // G1's marking thread does, has both kinds).
        for i in 0..400 {
            g.resolved(i % 10 < 6, Guess::Trend);
        }
        assert!((0..64).all(|_| g.worth(0.9, Guess::Trend)));
        // Fewer than half used: only probes go.
        for i in 0..400 {
            g.resolved(i % 10 < 4, Guess::Trend);
        }
        assert_eq!((0..64).filter(|_| g.worth(0.9, Guess::Trend)).count(), 4);
        assert_eq!((0..64).filter(|_| g.worth(0.9, Guess::Blind)).count(), 4);
        // The probes find the blind windows used again: all go.
        for _ in 0..200 {
            g.resolved(true, Guess::Blind);
        }
        assert!((0..64).all(|_| g.worth(0.9, Guess::Blind)));
    }
}
