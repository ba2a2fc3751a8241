//! The JVM's own collector counters, read from its performance-data file (hsperfdata,
//! `/tmp/hsperfdata_USER/PID`, what `jstat` reads): how many full collections and how many
//! of G1's remark and cleanup pauses have run. Compared at the end of each pause, they say
//! which kind of pause it was; JVMTI's GarbageCollectionStart/Finish do not.
//!
//! G1 counts its remark and its cleanup pause alike; a cycle has one of each, in that order,
//! with the remembered-set rebuild between them, so the counts since the last full collection
//! say whether the marking threads are rebuilding (`rebuilding`).
//!
//! The counters are incremented when a pause starts its collection, so at the pause's
//! GarbageCollectionFinish they count it. The file is the JVM's shared mapping: a read of it
//! sees the counters as they are. A JVM started with `-XX:-UsePerfData` (or
//! `-XX:+PerfDisableSharedMem`) has no file; then every pause is `Incremental`.
//!
//! The layout is HotSpot's `PerfDataPrologue` and `PerfDataEntry` (perfMemory.hpp), in the
//! machine's byte order.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use crate::gc_activity::PauseKind;

/// `PerfDataPrologue::magic`, as the bytes read on a little-endian machine.
const MAGIC: u32 = 0xc0c0_feca;

/// What the performance counters say of a pause that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseEnd {
    pub kind: PauseKind,
    /// It ended G1's concurrent cycle under way (its cleanup, or a full collection).
    pub cycle_ended: bool,
}

/// The collector counters of one JVM.
#[derive(Debug)]
pub struct PauseCounters {
    file: File,
    /// Offsets of the `invocations` longs of the full collector and of G1's concurrent cycle
    /// pauses (remark and cleanup).
    full: Option<u64>,
    concurrent: Option<u64>,
    /// Their values when the last pause ended, and whether G1 was between remark and cleanup.
    last: Mutex<((u64, u64), bool)>,
}

impl PauseCounters {
    /// Opens this process's performance-data file. `Err` says why there is none.
    pub fn open() -> Result<PauseCounters, String> {
        let path = our_file().ok_or_else(|| {
            format!(
                "no /tmp/hsperfdata_*/{} (-XX:-UsePerfData or -XX:+PerfDisableSharedMem?)",
                std::process::id()
            )
        })?;
        let path = path.display().to_string();
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(|e| format!("{path}: {e}"))?;
        let (full, concurrent) = collector_counters(&bytes).map_err(|e| format!("{path}: {e}"))?;
        let c = PauseCounters {
            file,
            full,
            concurrent,
            last: Mutex::new(((0, 0), false)),
        };
        c.last.lock().unwrap().0 = c.values();
        Ok(c)
    }

    fn read(&self, at: Option<u64>) -> u64 {
        let mut b = [0u8; 8];
        match at {
            Some(off) if self.file.read_exact_at(&mut b, off).is_ok() => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    fn values(&self) -> (u64, u64) {
        (self.read(self.full), self.read(self.concurrent))
    }

    /// What the pause ending now was (call from its GarbageCollectionFinish).
    pub fn pause_ended(&self) -> PauseEnd {
        let now = self.values();
        let mut last = self.last.lock().unwrap();
        let before = std::mem::replace(&mut last.0, now);
        let kind = if now.0 != before.0 {
            PauseKind::Full
        } else if now.1 != before.1 {
            PauseKind::RemarkCleanup
        } else {
            PauseKind::Incremental
        };
        let cycle_pauses = now.1.wrapping_sub(before.1);
        let cycle_ended = cycle_ended(last.1, kind, cycle_pauses);
        last.1 = rebuilding_after(last.1, kind, cycle_pauses);
        PauseEnd { kind, cycle_ended }
    }

    /// Whether the counters tell G1's concurrent cycle pauses (so its cycles' ends).
    pub fn tells_cycles(&self) -> bool {
        self.concurrent.is_some()
    }

    /// Whether G1's last concurrent-cycle pause was a remark: its marking threads are
    /// rebuilding remembered sets until the cleanup pause.
    pub fn rebuilding(&self) -> bool {
        self.last.lock().unwrap().1
    }
}

/// Whether a pause of `kind` that counted `cycle_pauses` concurrent-cycle pauses, G1
/// rebuilding before it or not (`was`), ended a concurrent cycle: a full collection aborts
/// one; the cleanup (the pause after a remark) ends it.
fn cycle_ended(was: bool, kind: PauseKind, cycle_pauses: u64) -> bool {
    match kind {
        PauseKind::Full => true,
        PauseKind::RemarkCleanup => cycle_pauses >= if was { 1 } else { 2 },
        PauseKind::Incremental => false,
    }
}

/// Whether G1 is between a remark and its cleanup after a pause of `kind` that counted
/// `cycle_pauses` concurrent-cycle pauses, `was` before it. A full collection aborts the
/// cycle (no cleanup follows); an odd count flips (a remark that restarts marking on a mark
/// stack overflow counts as one too, and is taken for one: rare, and the next full
/// collection puts it right).
fn rebuilding_after(was: bool, kind: PauseKind, cycle_pauses: u64) -> bool {
    match kind {
        PauseKind::Full => false,
        _ => was ^ (cycle_pauses % 2 == 1),
    }
}

/// This process's file: `/tmp/hsperfdata_USER/PID`, USER the effective user's name (any
/// such directory holding a file named by our pid is ours: pids are unique on the host).
fn our_file() -> Option<std::path::PathBuf> {
    let pid = std::process::id().to_string();
    std::fs::read_dir("/tmp").ok()?.flatten().find_map(|e| {
        let name = e.file_name();
        let p = e.path().join(&pid);
        (name.to_string_lossy().starts_with("hsperfdata_") && p.is_file()).then_some(p)
    })
}

fn i32_at(b: &[u8], off: usize) -> Result<i32, String> {
    b.get(off..off + 4)
        .map(|s| i32::from_ne_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("truncated at byte {off}"))
}

/// Finds the `invocations` counters of the full collector and of G1's concurrent cycle
/// pauses (`sun.gc.collector.N.name` says which N is which).
fn collector_counters(b: &[u8]) -> Result<(Option<u64>, Option<u64>), String> {
    if i32_at(b, 0)? as u32 != MAGIC {
        return Err("not a performance-data file (bad magic)".into());
    }
    let (first, count) = (i32_at(b, 24)?, i32_at(b, 28)?);
    let mut names: Vec<(String, String)> = Vec::new(); // (collector.N, name)
    let mut invocations: Vec<(String, u64)> = Vec::new();
    let mut at = usize::try_from(first).map_err(|_| "bad entry offset")?;
    for _ in 0..count {
        let len = usize::try_from(i32_at(b, at)?).map_err(|_| "bad entry length")?;
        if len == 0 {
            break;
        }
        let name_at = at + i32_at(b, at + 4)? as usize;
        let data_at = at + i32_at(b, at + 16)? as usize;
        let vector = i32_at(b, at + 8)? as usize;
        let name = c_str(b, name_at);
        if let Some(rest) = name.strip_prefix("sun.gc.collector.") {
            if let Some(n) = rest.strip_suffix(".name") {
                names.push((
                    n.to_string(),
                    c_str(&b[..(data_at + vector).min(b.len())], data_at),
                ));
            } else if let Some(n) = rest.strip_suffix(".invocations") {
                invocations.push((n.to_string(), data_at as u64));
            }
        }
        at += len;
    }
    let find = |what: &str| {
        let n = names.iter().find(|(_, name)| name.contains(what))?;
        invocations.iter().find(|(m, _)| *m == n.0).map(|i| i.1)
    };
    Ok((find("full"), find("concurrent cycle")))
}

fn c_str(b: &[u8], at: usize) -> String {
    let s = b.get(at..).unwrap_or_default();
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as HotSpot lays it out: the prologue, then entries of (header, name, data).
    fn file(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
        b[24..28].copy_from_slice(&32i32.to_ne_bytes());
        b[28..32].copy_from_slice(&(entries.len() as i32).to_ne_bytes());
        for (name, data) in entries {
            let name_off = 20;
            let data_off = (name_off + name.len() + 1).next_multiple_of(8);
            let len = (data_off + data.len()).next_multiple_of(8);
            let mut e = vec![0u8; len];
            e[0..4].copy_from_slice(&(len as i32).to_ne_bytes());
            e[4..8].copy_from_slice(&(name_off as i32).to_ne_bytes());
            e[8..12].copy_from_slice(&(data.len() as i32).to_ne_bytes());
            e[16..20].copy_from_slice(&(data_off as i32).to_ne_bytes());
            e[name_off..name_off + name.len()].copy_from_slice(name.as_bytes());
            e[data_off..data_off + data.len()].copy_from_slice(data);
            b.extend(e);
        }
        b
    }

    #[test]
    fn finds_the_full_and_concurrent_pause_counters_by_their_collectors_names() {
        let b = file(&[
            ("sun.gc.collector.0.invocations", &7u64.to_ne_bytes()),
            ("sun.gc.collector.0.name", b"G1 young collection pauses\0"),
            ("sun.gc.collector.1.invocations", &1u64.to_ne_bytes()),
            ("sun.gc.collector.1.name", b"G1 full collection pauses\0"),
            ("sun.gc.collector.2.invocations", &2u64.to_ne_bytes()),
            ("sun.gc.collector.2.name", b"G1 concurrent cycle pauses\0"),
        ]);
        let (full, conc) = collector_counters(&b).unwrap();
        let at =
            |o: Option<u64>| u64::from_ne_bytes(b[o.unwrap() as usize..][..8].try_into().unwrap());
        assert_eq!((at(full), at(conc)), (1, 2));
        // Parallel has no concurrent pauses; a file that is not one says so.
        let p = file(&[
            (
                "sun.gc.collector.1.name",
                b"Parallel full collection pauses\0",
            ),
            ("sun.gc.collector.1.invocations", &3u64.to_ne_bytes()),
        ]);
        let (full, conc) = collector_counters(&p).unwrap();
        assert!(full.is_some() && conc.is_none());
        assert!(collector_counters(&[0u8; 64])
            .unwrap_err()
            .contains("magic"));
        assert!(collector_counters(&b[..40])
            .unwrap_err()
            .contains("truncated"));
    }

    #[test]
    fn the_rebuild_runs_from_a_remark_to_its_cleanup() {
        use PauseKind::*;
        let mut r = false;
        let mut seen = Vec::new();
        // young, remark, young (during the rebuild), cleanup, young, remark, full
        for (kind, n) in [
            (Incremental, 0),
            (RemarkCleanup, 1),
            (Incremental, 0),
            (RemarkCleanup, 1),
            (Incremental, 0),
            (RemarkCleanup, 1),
            (Full, 0),
        ] {
            r = rebuilding_after(r, kind, n);
            seen.push(r);
        }
        assert_eq!(seen, [false, true, true, false, false, true, false]);
        // Both pauses of a cycle seen at one pause's end: not rebuilding after them.
        assert!(!rebuilding_after(false, RemarkCleanup, 2));
    }

    #[test]
    fn a_cycle_ends_at_its_cleanup_or_a_full_collection() {
        use PauseKind::*;
        assert!(!cycle_ended(false, RemarkCleanup, 1), "a remark");
        assert!(cycle_ended(true, RemarkCleanup, 1), "the cleanup after it");
        assert!(
            cycle_ended(false, RemarkCleanup, 2),
            "both at one pause's end"
        );
        assert!(
            !cycle_ended(true, Incremental, 0),
            "a young pause in the rebuild"
        );
        assert!(cycle_ended(false, Full, 0) && cycle_ended(true, Full, 0));
    }

    /// This test process has no JVM: no file, and the reason names the path.
    #[test]
    fn a_process_without_performance_data_says_where_it_looked() {
        if let Err(e) = PauseCounters::open() {
            assert!(e.contains("hsperfdata"), "{e}");
        }
    }
}
