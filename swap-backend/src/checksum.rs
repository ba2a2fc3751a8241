//! End-to-end page checksums: what the client wrote is what it installs.
//!
//! TCP's 16-bit checksum misses some corruption, a server's RAM can flip a bit, a server with a
//! bug or a confused proxy can return another page's bytes. The client keeps a CRC-32 of every
//! page it writes (4 bytes a page and a presence bit, in segments allocated on first write) and checks every page a read returns before the caller sees it. A mismatch is never
//! installed: a replicated store reads another copy (`replica`), a single server is asked once
//! more (a flip on the wire reads right the second time) and then the read fails, naming the page
//! and the server, so that the pager stops the JVM rather than run it on wrong bytes.
//!
//! CRC-32 by `crc32fast` (SSE 4.2 / PCLMULQDQ where the CPU has them): about 0.2 us a page here,
//! against a remote read's 3 us in process and 10-100 us over TCP.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::protocol::PAGE_SIZE;
use crate::store::{PageStore, StoreError};

/// Pages per segment of the table (allocated when a page in it is first written).
const SEGMENT_SHIFT: u32 = 16;
const SEGMENT_MASK: u64 = (1 << SEGMENT_SHIFT) - 1;
/// Segments: 2^30 pages, a 4 TiB heap (ids beyond go to a map: tests only).
const SEGMENTS: usize = 1 << 14;
/// Mismatches logged one by one before the log falls silent (the counters go on).
const LOGGED: u64 = 20;

/// A page's checksum.
pub fn page_sum(page: &[u8]) -> u32 {
    crc32fast::hash(page)
}

/// A page whose bytes did not match what was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Its position in the request.
    pub pos: usize,
    pub id: u64,
    pub expected: u32,
    pub got: u32,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "page {} came back with checksum {:08x}, not the {:08x} it was written with",
            self.id, self.got, self.expected
        )
    }
}

pub use memliner_contracts::store_stats::IntegrityStats;

/// The sums of a segment's pages, and which of them hold one (a bit per page: a sum of zero
/// is a sum like any other).
struct Segment {
    sums: Box<[AtomicU32]>,
    known: Box<[AtomicU64]>,
}

impl Segment {
    fn new() -> Segment {
        Segment {
            sums: (0..=SEGMENT_MASK).map(|_| AtomicU32::new(0)).collect(),
            known: (0..=SEGMENT_MASK / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn set(&self, i: usize, sum: u32) {
        self.sums[i].store(sum, Ordering::Relaxed);
        // Release: whoever sees the bit sees the sum.
        self.known[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
    }

    fn clear(&self, i: usize) {
        self.known[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
    }

    fn get(&self, i: usize) -> Option<u32> {
        let known = self.known[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0;
        known.then(|| self.sums[i].load(Ordering::Relaxed))
    }
}

/// The checksum of every page written, by page id.
pub struct PageSums {
    /// Boxed: an empty entry is then 16 bytes, not 40 (the table is 256 KiB, not 640).
    segments: Box<[OnceLock<Box<Segment>>]>,
    beyond: Mutex<HashMap<u64, u32>>,
    verified: AtomicU64,
    mismatches: AtomicU64,
    unchecked: AtomicU64,
}

impl Default for PageSums {
    fn default() -> Self {
        PageSums {
            segments: (0..SEGMENTS).map(|_| OnceLock::new()).collect(),
            beyond: Mutex::new(HashMap::new()),
            verified: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
            unchecked: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for PageSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageSums")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PageSums {
    fn segment(&self, id: u64) -> Option<&Segment> {
        let seg = self.segments.get((id >> SEGMENT_SHIFT) as usize)?;
        Some(seg.get_or_init(|| Box::new(Segment::new())))
    }

    /// Pages `ids` are being written with `data` (`ids.len()` pages): their sums from now on.
    /// The pager never reads a page while it writes it, so the order against the write itself
    /// does not matter.
    pub fn record(&self, ids: &[u64], data: &[u8]) {
        for (&id, page) in ids.iter().zip(data.chunks_exact(PAGE_SIZE)) {
            let sum = page_sum(page);
            match self.segment(id) {
                Some(seg) => seg.set((id & SEGMENT_MASK) as usize, sum),
                None => {
                    self.beyond.lock().unwrap().insert(id, sum);
                }
            }
        }
    }

    /// Pages `ids` were freed: nothing is expected of them any more.
    pub fn forget(&self, ids: &[u64]) {
        for &id in ids {
            match self.segments.get((id >> SEGMENT_SHIFT) as usize) {
                Some(seg) => {
                    if let Some(s) = seg.get() {
                        s.clear((id & SEGMENT_MASK) as usize);
                    }
                }
                None => {
                    self.beyond.lock().unwrap().remove(&id);
                }
            }
        }
    }

    /// The checksum page `id` was last written with, if one was kept.
    pub fn expected(&self, id: u64) -> Option<u32> {
        match self.segments.get((id >> SEGMENT_SHIFT) as usize) {
            Some(seg) => seg.get()?.get((id & SEGMENT_MASK) as usize),
            None => self.beyond.lock().unwrap().get(&id).copied(),
        }
    }

    /// Checks the pages at `positions` of `ids`, their bytes at the same positions of `out`;
    /// returns those that do not match what was written (counted, and logged as coming from
    /// the server `server` names: asked only on a mismatch, so that a read pays no naming).
    pub fn check(
        &self,
        ids: &[u64],
        positions: impl IntoIterator<Item = usize>,
        out: &[u8],
        server: impl Fn() -> String,
    ) -> Vec<Mismatch> {
        let mut bad = Vec::new();
        let (mut ok, mut unchecked) = (0, 0);
        for pos in positions {
            let id = ids[pos];
            let Some(expected) = self.expected(id) else {
                unchecked += 1;
                continue;
            };
            let got = page_sum(&out[pos * PAGE_SIZE..(pos + 1) * PAGE_SIZE]);
            if got == expected {
                ok += 1;
            } else {
                bad.push(Mismatch {
                    pos,
                    id,
                    expected,
                    got,
                });
            }
        }
        self.verified.fetch_add(ok, Ordering::Relaxed);
        if unchecked > 0 {
            self.unchecked.fetch_add(unchecked, Ordering::Relaxed);
        }
        if !bad.is_empty() {
            let server = server();
            let before = self
                .mismatches
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            for (i, m) in bad.iter().enumerate() {
                let n = before + i as u64;
                if n < LOGGED {
                    eprintln!("memliner: memory server {server}: {m}; not installed");
                } else if n == LOGGED {
                    eprintln!(
                        "memliner: memory server {server}: more pages with wrong bytes; \
                         counted in the stats from now on"
                    );
                }
            }
        }
        bad
    }

    pub fn stats(&self) -> IntegrityStats {
        IntegrityStats {
            pages_verified: self.verified.load(Ordering::Relaxed),
            mismatches: self.mismatches.load(Ordering::Relaxed),
            pages_unchecked: self.unchecked.load(Ordering::Relaxed),
        }
    }
}

/// One server's store with every page checked (see the module's documentation).
pub struct Checked {
    inner: Box<dyn PageStore>,
    sums: PageSums,
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("server", &self.inner.describe())
            .field("sums", &self.sums)
            .finish()
    }
}

impl Checked {
    pub fn new(inner: Box<dyn PageStore>) -> Checked {
        Checked {
            inner,
            sums: PageSums::default(),
        }
    }
}

impl PageStore for Checked {
    fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
        self.inner.read_pages(ids, out)?;
        let server = || self.inner.describe();
        let bad = self.sums.check(ids, 0..ids.len(), out, server);
        if bad.is_empty() {
            return Ok(());
        }
        // Once more from the server: a flip on the way reads right the second time.
        let again: Vec<u64> = bad.iter().map(|m| m.id).collect();
        let mut buf = vec![0u8; again.len() * PAGE_SIZE];
        self.inner.read_pages(&again, &mut buf)?;
        let still = self.sums.check(&again, 0..again.len(), &buf, server);
        if let Some(m) = still.first() {
            return Err(StoreError::Corrupt {
                store: server(),
                page: m.id,
                message: format!("{m}, twice"),
            });
        }
        for (m, page) in bad.iter().zip(buf.chunks_exact(PAGE_SIZE)) {
            out[m.pos * PAGE_SIZE..(m.pos + 1) * PAGE_SIZE].copy_from_slice(page);
        }
        Ok(())
    }

    fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
        self.sums.record(ids, data);
        self.inner.write_pages(ids, data)
    }

    fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.inner.free_pages(ids)?;
        self.sums.forget(ids);
        Ok(())
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn describe_page(&self, id: u64) -> String {
        self.inner.describe_page(id)
    }

    fn replication(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        self.inner.replication()
    }

    fn replication_counters(&self) -> Option<memliner_contracts::store_stats::ReplicationStats> {
        self.inner.replication_counters()
    }

    fn integrity(&self) -> Option<IntegrityStats> {
        Some(self.sums.stats())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::conformance::pattern;
    use crate::store::LocalStore;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A store that flips a byte of page `bad` on reads while `on` is set (`once`: on the
    /// next read only).
    pub(crate) struct Flipper {
        pub inner: LocalStore,
        pub bad: u64,
        pub on: Arc<AtomicBool>,
        pub once: bool,
    }

    impl PageStore for Flipper {
        fn read_pages(&self, ids: &[u64], out: &mut [u8]) -> Result<(), StoreError> {
            self.inner.read_pages(ids, out)?;
            if let Some(pos) = ids.iter().position(|&i| i == self.bad) {
                let flip = if self.once {
                    self.on.swap(false, Ordering::SeqCst)
                } else {
                    self.on.load(Ordering::SeqCst)
                };
                if flip {
                    out[pos * PAGE_SIZE + 1234] ^= 0x10;
                }
            }
            Ok(())
        }
        fn write_pages(&self, ids: &[u64], data: &[u8]) -> Result<(), StoreError> {
            self.inner.write_pages(ids, data)
        }
        fn free_pages(&self, ids: &[u64]) -> Result<(), StoreError> {
            self.inner.free_pages(ids)
        }
        fn describe(&self) -> String {
            "flipper".into()
        }
    }

    fn store(once: bool) -> (Checked, Arc<AtomicBool>) {
        let on = Arc::new(AtomicBool::new(false));
        let s = Checked::new(Box::new(Flipper {
            inner: LocalStore::new(64),
            bad: 7,
            on: on.clone(),
            once,
        }));
        let ids: Vec<u64> = (0..16).collect();
        let data: Vec<u8> = ids.iter().flat_map(|&i| pattern(i, 1)).collect();
        s.write_pages(&ids, &data).unwrap();
        (s, on)
    }

    #[test]
    fn pages_read_as_written_are_verified() {
        let (s, _) = store(false);
        let mut out = vec![0u8; 4 * PAGE_SIZE];
        s.read_pages(&[3, 7, 9, 15], &mut out).unwrap();
        assert_eq!(&out[PAGE_SIZE..2 * PAGE_SIZE], &pattern(7, 1)[..]);
        let st = s.integrity().unwrap();
        assert_eq!((st.pages_verified, st.mismatches), (4, 0));
    }

    #[test]
    fn a_flip_on_the_way_is_read_again_and_never_returned() {
        let (s, on) = store(true);
        on.store(true, Ordering::SeqCst);
        let mut out = vec![0u8; 2 * PAGE_SIZE];
        s.read_pages(&[6, 7], &mut out).unwrap();
        assert_eq!(&out[PAGE_SIZE..], &pattern(7, 1)[..]);
        assert_eq!(&out[..PAGE_SIZE], &pattern(6, 1)[..]);
        assert_eq!(s.integrity().unwrap().mismatches, 1);
    }

    #[test]
    fn a_page_wrong_twice_fails_the_read_naming_page_and_server() {
        let (s, on) = store(false);
        on.store(true, Ordering::SeqCst);
        let mut out = vec![0u8; 2 * PAGE_SIZE];
        let e = s.read_pages(&[7, 8], &mut out).unwrap_err().to_string();
        assert!(e.contains("page 7") && e.contains("flipper"), "{e}");
        assert!(e.contains("twice"), "{e}");
        assert_eq!(s.integrity().unwrap().mismatches, 2);
    }

    #[test]
    fn a_rewrite_changes_what_is_expected_and_a_free_forgets_it() {
        let (s, _) = store(false);
        s.write_pages(&[7], &pattern(7, 2)).unwrap();
        assert_eq!(s.sums.expected(7), Some(page_sum(&pattern(7, 2))));
        s.free_pages(&[7]).unwrap();
        assert_eq!(s.sums.expected(7), None);
        // Ids beyond the table's range are kept too.
        let far = 1u64 << 40;
        s.write_pages(&[far], &pattern(far, 1)).unwrap();
        assert_eq!(s.sums.expected(far), Some(page_sum(&pattern(far, 1))));
    }
}
