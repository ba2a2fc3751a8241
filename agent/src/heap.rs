//! Finding the Java heap: HotSpot's serviceability tables first, /proc/self/maps as a warned
//! fallback; then the anonymous mappings inside it, which are registered one by one (G1 maps
//! the CDS archive file-backed inside the heap, and registering across it fails).

use crate::maps::{anonymous_spans, parse_maps, Mapping, Span};
use crate::model::Discovery;
use crate::options::LogLevel;
use crate::vmstructs::{self, VmStructs};

/// The heap as found at VMInit.
#[derive(Debug)]
pub struct FoundHeap {
    pub start: usize,
    pub bytes: usize,
    pub collector: &'static str,
    pub discovery: Discovery,
    pub spans: Vec<Span>,
    /// `-Xms` equals `-Xmx` (the VM says so): the heap is committed whole for the VM's life,
    /// so structures committed with its regions (G1's card table) stay readable.
    pub fixed: bool,
    /// Where the collector holds nothing live after a collection; `Err` says why it cannot
    /// be read on this JVM.
    pub layout: Result<crate::gc_layout::GcLayout, String>,
}

fn read_maps() -> Result<Vec<Mapping>, String> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .map_err(|e| format!("cannot read /proc/self/maps: {e}"))
}

pub use memliner_contracts::ZGC_REFUSED;

/// Finds the reserved heap and its anonymous spans.
pub fn discover() -> Result<FoundHeap, String> {
    let maps = read_maps()?;
    let mut layout = Err("the VM's tables cannot be read".to_string());
    let vm = VmStructs::load();
    // Before the heap's bounds: ZGC leaves the shared heap's reserved region empty.
    if vm.as_ref().is_ok_and(|vm| vmstructs::collector(vm) == "Z") {
        return Err(ZGC_REFUSED.into());
    }
    let mut fixed = false;
    let (start, bytes, collector, discovery) = match vm
        .and_then(|vm| vm.reserved_heap().map(|h| (h, vm)))
    {
        Ok((h, vm)) => {
            let collector = vmstructs::collector(&vm);
            layout = crate::gc_layout::GcLayout::find(&vm, collector);
            let (init, max) = (vm.flag_u64("InitialHeapSize"), vm.flag_u64("MaxHeapSize"));
            if let (Ok(i), Ok(m)) = (init, max) {
                fixed = i == m;
                if i < m {
                    crate::logging::log!(
                        LogLevel::Info,
                        "-Xms ({i}) is below -Xmx ({m}): heap expansion and shrinking are followed through userfaultfd unmap events"
                    );
                }
            }
            (h.start, h.bytes, collector, Discovery::VmStructs)
        }
        Err(why) => {
            let (s, b) = largest_anonymous(&maps).ok_or_else(|| {
                format!("cannot find the heap: {why}, and /proc/self/maps has no candidate")
            })?;
            crate::logging::log!(
                LogLevel::Warn,
                "heap found by guessing from /proc/self/maps ({why}); check the stats' heap size"
            );
            (s, b, "unknown", Discovery::Maps)
        }
    };
    if start % swap_backend::PAGE_SIZE != 0 || bytes == 0 {
        return Err(format!("implausible heap at {start:#x} of {bytes} bytes"));
    }
    let spans = anonymous_spans(&maps, start, bytes);
    if spans.is_empty() {
        return Err(format!(
            "no anonymous mapping inside the heap at {start:#x}"
        ));
    }
    Ok(FoundHeap {
        start,
        bytes,
        collector,
        discovery,
        spans,
        fixed,
        layout,
    })
}

/// The largest run of adjacent anonymous mappings: the heap on a JVM we cannot ask.
fn largest_anonymous(maps: &[Mapping]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for m in maps {
        if !m.path.is_empty() {
            cur = None;
            continue;
        }
        cur = match cur {
            Some((s, e)) if e == m.start => Some((s, m.end)),
            _ => Some((m.start, m.end)),
        };
        let (s, e) = cur.unwrap();
        if best.is_none_or(|(_, b)| e - s > b) {
            best = Some((s, e - s));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_picks_the_largest_anonymous_run() {
        let maps = parse_maps(crate::maps::TEST_MAPS);
        assert_eq!(largest_anonymous(&maps), Some((0x7f0000000000, 0x200000)));
    }
}
