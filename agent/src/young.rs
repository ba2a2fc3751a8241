//! Fits the young generation to the local budget (`young=fit`), once, when the agent loads.
//!
//! A collector lets the young generation grow well past a small budget (G1 to 60% of the
//! heap, Parallel and Serial to a third). Where it is larger than the budget, eden cannot stay
//! local between collections: each eden page is written once by the allocating thread, evicted
//! (written to the memory server) while eden fills, and freed by the next collection after its
//! survivors were read back. Spark KMeans on G1 at 25% of 1 GiB wrote 2.84M pages this way,
//! 2.29M of them freed while remote; with the young generation at half the budget it wrote 48k
//! and ran 0.69x the time.
//!
//! `Agent_OnLoad` runs after HotSpot's ergonomics chose the collector and the heap's size and
//! before the heap is made; the generations are sized when it is made. G1 reads
//! `G1MaxNewSizePercent` then (and whenever the heap is resized); Parallel and Serial derive
//! the young generation's largest size, and with it the old generation's (`MaxOldSize`, not a
//! flag), from `MaxNewSize` then (`GenArguments`, `universe_init`): until that moment the flag
//! holds its default, and a value set ergonomically is taken like one from the command line.
//! So the agent lowers the one flag as ergonomics would. A young generation sized on the
//! command line (the flags the collector honours, and G1's two percentages) is left alone.

use memliner_contracts::options::{Budget, Options};
use memliner_contracts::stats::{YoungDoc, YoungSizing};

use crate::vmstructs::{FlagOrigin, VmStructs};

/// The young generation's flags, as `Agent_OnLoad` finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub layout: Layout,
    pub max_heap: u64,
    /// The command line (or an options file, or the environment) set one of them.
    pub user_sized: bool,
}

/// How the collector sizes its young generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// G1: in percent of the heap (`G1MaxNewSizePercent`, `G1NewSizePercent`).
    G1 { max_percent: u64, min_percent: u64 },
    /// Parallel or Serial: in bytes (`MaxNewSize`); `max_bytes` is what the JVM would make it
    /// (the heap over `NewRatio + 1`).
    Generational { max_bytes: u64 },
}

/// What to write: G1's `G1MaxNewSizePercent`, and `G1NewSizePercent` where it was above that;
/// Parallel's and Serial's `MaxNewSize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub doc: YoungDoc,
    pub max_percent: Option<u64>,
    pub min_percent: Option<u64>,
    pub max_bytes: Option<u64>,
}

/// The share of the budget the young generation may take, in percent of the budget.
const SHARE_OF_BUDGET: u64 = 50;

/// The generational collectors' alignment of a generation's size (`GenAlignment`: 64 KiB for
/// Parallel and Serial on x86-64); HotSpot rounds `MaxNewSize` down to it anyway.
const GEN_ALIGNMENT: u64 = 64 << 10;

/// Flags that, set by anyone but HotSpot, mean the user sized the young generation.
const USER_FLAGS: [&str; 5] = [
    "NewSize",
    "MaxNewSize",
    "NewRatio",
    "G1NewSizePercent",
    "G1MaxNewSizePercent",
];

/// Decides without touching the VM: at most `SHARE_OF_BUDGET`% of the budget (G1: in whole
/// percent of the heap, at least 1), and never more than the collector would have allowed;
/// nothing where the budget holds the whole heap.
pub fn plan(found: Found, budget: Budget, fit: bool) -> Plan {
    let heap = found.max_heap.max(1);
    let jvm_percent = match found.layout {
        Layout::G1 { max_percent, .. } => max_percent,
        Layout::Generational { max_bytes } => percent_of(max_bytes, heap),
    };
    let keep = |sizing| Plan {
        doc: YoungDoc {
            sizing,
            max_percent: jvm_percent,
            jvm_max_percent: jvm_percent,
        },
        max_percent: None,
        min_percent: None,
        max_bytes: None,
    };
    if !fit {
        return keep(YoungSizing::Kept);
    }
    if found.user_sized {
        return keep(YoungSizing::User);
    }
    let covers_heap = match budget {
        Budget::Percent(p) => p >= 100.0,
        Budget::Bytes(b) => b >= heap,
    };
    if covers_heap {
        // Nothing is paged.
        return keep(YoungSizing::Roomy);
    }
    let fitted = |max_percent| YoungDoc {
        sizing: YoungSizing::Fitted,
        max_percent,
        jvm_max_percent: jvm_percent,
    };
    match found.layout {
        Layout::G1 { min_percent, .. } => {
            // A share of the heap, in whole percent (a percentage budget without a round
            // trip through bytes, which turns 6% into 2.99...%).
            let target = match budget {
                Budget::Percent(p) => (p * SHARE_OF_BUDGET as f64 / 100.0) as u64,
                Budget::Bytes(b) => percent_of(share(b), heap),
            }
            .max(1);
            if target >= jvm_percent {
                return keep(YoungSizing::Roomy);
            }
            Plan {
                doc: fitted(target),
                max_percent: Some(target),
                min_percent: (min_percent > target).then_some(target),
                max_bytes: None,
            }
        }
        Layout::Generational { max_bytes } => {
            // Aligned as HotSpot would, and never below one alignment (HotSpot raises a
            // young generation too small for eden and two survivors itself).
            let target =
                (share(budget.bytes(heap)) / GEN_ALIGNMENT * GEN_ALIGNMENT).max(GEN_ALIGNMENT);
            if target >= max_bytes {
                return keep(YoungSizing::Roomy);
            }
            Plan {
                doc: fitted(percent_of(target, heap)),
                max_percent: None,
                min_percent: None,
                max_bytes: Some(target),
            }
        }
    }
}

/// `SHARE_OF_BUDGET`% of `bytes`.
fn share(bytes: u64) -> u64 {
    (u128::from(bytes) * u128::from(SHARE_OF_BUDGET) / 100) as u64
}

/// `part` in whole percent of `whole`, rounded down.
fn percent_of(part: u64, whole: u64) -> u64 {
    (u128::from(part) * 100 / u128::from(whole.max(1))) as u64
}

/// Reads the collector's young sizing flags; `Ok(None)` for collectors without a young
/// generation of their own (Shenandoah, Z) or not known.
fn find(vm: &VmStructs) -> Result<Option<Found>, String> {
    let collector = crate::vmstructs::collector(vm);
    let max_heap = vm.flag_u64("MaxHeapSize")?;
    let layout = match collector {
        "G1" => Layout::G1 {
            max_percent: vm.flag_uint("G1MaxNewSizePercent")?,
            min_percent: vm.flag_uint("G1NewSizePercent")?,
        },
        "Parallel" | "Serial" => {
            // Not sized yet: `MaxNewSize` holds its default (the largest value) until the
            // heap is made, unless someone set it.
            let ratio = max_heap / (vm.flag_uint("NewRatio")? + 1);
            Layout::Generational {
                max_bytes: ratio.min(vm.flag_uint("MaxNewSize")?),
            }
        }
        _ => return Ok(None),
    };
    let mut user_sized = false;
    for f in USER_FLAGS {
        // G1's percentages size G1's young generation only.
        if collector == "G1" || !f.starts_with("G1") {
            user_sized |= vm.flag_origin(f)? == FlagOrigin::User;
        }
    }
    Ok(Some(Found {
        layout,
        max_heap,
        user_sized,
    }))
}

/// The plan for this VM as `options` say; `Ok(None)` where the collector has no young
/// generation to size. The caller writes it with [`VmStructs::set_flag_uint_ergonomic`]
/// (`Plan::min_percent` before `Plan::max_percent`: G1 expects the minimum never above the
/// maximum).
pub fn plan_for(vm: &VmStructs, options: &Options) -> Result<Option<Plan>, String> {
    Ok(find(vm)?.map(|found| plan(found, options.budget, options.fits_young())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn found(max_heap: u64) -> Found {
        Found {
            layout: Layout::G1 {
                max_percent: 60,
                min_percent: 5,
            },
            max_heap,
            user_sized: false,
        }
    }

    /// Parallel's or Serial's layout of a heap of `max_heap`: a third of it young
    /// (`NewRatio=2`).
    fn generational(max_heap: u64) -> Found {
        Found {
            layout: Layout::Generational {
                max_bytes: max_heap / 3,
            },
            max_heap,
            user_sized: false,
        }
    }

    #[test]
    fn a_quarter_of_the_heap_lets_the_young_generation_have_an_eighth() {
        let p = plan(found(GIB), Budget::Percent(25.0), true);
        assert_eq!(p.max_percent, Some(12));
        assert_eq!(p.min_percent, None);
        assert_eq!(p.doc.sizing, YoungSizing::Fitted);
        assert_eq!((p.doc.max_percent, p.doc.jvm_max_percent), (12, 60));
        // A budget in bytes is the same budget.
        assert_eq!(plan(found(GIB), Budget::Bytes(GIB / 4), true), p);
    }

    #[test]
    fn a_small_budget_lowers_the_minimum_with_the_maximum_and_never_reaches_zero() {
        let p = plan(found(GIB), Budget::Percent(6.0), true);
        assert_eq!((p.max_percent, p.min_percent), (Some(3), Some(3)));
        let p = plan(found(GIB), Budget::Bytes(1 << 20), true);
        assert_eq!((p.max_percent, p.min_percent), (Some(1), Some(1)));
    }

    #[test]
    fn nothing_is_written_where_the_budget_is_roomy_or_the_user_sized_it_or_it_is_kept() {
        for (f, budget, fit, sizing) in [
            (found(GIB), Budget::Percent(100.0), true, YoungSizing::Roomy),
            (found(GIB), Budget::Bytes(4 * GIB), true, YoungSizing::Roomy),
            (
                Found {
                    user_sized: true,
                    ..found(GIB)
                },
                Budget::Percent(25.0),
                true,
                YoungSizing::User,
            ),
            (found(GIB), Budget::Percent(25.0), false, YoungSizing::Kept),
        ] {
            let p = plan(f, budget, fit);
            assert_eq!((p.max_percent, p.min_percent), (None, None), "{sizing:?}");
            assert_eq!(p.doc.sizing, sizing);
            assert_eq!(p.doc.max_percent, 60);
        }
    }

    #[test]
    fn a_maximum_the_jvm_already_set_lower_is_never_raised() {
        let f = Found {
            layout: Layout::G1 {
                max_percent: 10,
                min_percent: 5,
            },
            ..found(GIB)
        };
        assert_eq!(
            plan(f, Budget::Percent(25.0), true).doc.sizing,
            YoungSizing::Roomy
        );
    }

    #[test]
    fn parallel_and_serial_get_half_the_budget_in_bytes() {
        let p = plan(generational(GIB), Budget::Percent(25.0), true);
        assert_eq!(p.max_bytes, Some(128 << 20));
        assert_eq!((p.max_percent, p.min_percent), (None, None));
        assert_eq!(p.doc.sizing, YoungSizing::Fitted);
        assert_eq!((p.doc.max_percent, p.doc.jvm_max_percent), (12, 33));
        assert_eq!(plan(generational(GIB), Budget::Bytes(GIB / 4), true), p);
        // Aligned down, and never below one alignment.
        let odd = plan(generational(GIB), Budget::Bytes((100 << 20) + 12345), true);
        assert_eq!(odd.max_bytes, Some(50 << 20));
        let tiny = plan(generational(GIB), Budget::Bytes(4096), true);
        assert_eq!(tiny.max_bytes, Some(GEN_ALIGNMENT));
    }

    #[test]
    fn parallel_and_serial_are_left_alone_where_half_the_budget_holds_them_or_the_user_sized_them()
    {
        for (f, budget, fit, sizing) in [
            (
                generational(GIB),
                Budget::Percent(100.0),
                true,
                YoungSizing::Roomy,
            ),
            // Half of 70% of the heap holds a third of it.
            (
                generational(GIB),
                Budget::Percent(70.0),
                true,
                YoungSizing::Roomy,
            ),
            (
                Found {
                    user_sized: true,
                    ..generational(GIB)
                },
                Budget::Percent(25.0),
                true,
                YoungSizing::User,
            ),
            (
                generational(GIB),
                Budget::Percent(25.0),
                false,
                YoungSizing::Kept,
            ),
        ] {
            let p = plan(f, budget, fit);
            assert_eq!(p.max_bytes, None, "{sizing:?}");
            assert_eq!(p.doc.sizing, sizing);
            assert_eq!((p.doc.max_percent, p.doc.jvm_max_percent), (33, 33));
        }
    }
}
