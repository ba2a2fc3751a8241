//! Fits G1's young generation to the local budget (`young=fit`), once, when the agent loads.
//!
//! G1 lets the young generation grow to 60% of the heap. Where that is larger than the
//! budget, eden cannot stay local between collections: each eden page is written once by
//! the allocating thread, evicted (written to the memory server) while eden fills, and freed
//! by the next collection after its survivors were read back. Spark KMeans at 25% of 1 GiB
//! wrote 2.84M pages this way, 2.29M of them freed while remote; with the young generation
//! at half the budget it wrote 48k and ran 0.69x the time.
//!
//! `Agent_OnLoad` runs after HotSpot's ergonomics and before the heap is made, and G1 reads
//! `G1MaxNewSizePercent` when it sizes the heap's regions (whenever the heap is resized too),
//! so the agent lowers that flag as ergonomics would. A young generation sized on the command
//! line (the flags G1's sizer honours, and the two percentages) is left alone.

use memliner_contracts::options::{Budget, Options};
use memliner_contracts::stats::{YoungDoc, YoungSizing};

use crate::vmstructs::{FlagOrigin, VmStructs};

/// G1's flags that size the young generation, as `Agent_OnLoad` finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub max_heap: u64,
    pub max_percent: u64,
    pub min_percent: u64,
    /// The command line (or an options file, or the environment) set one of them.
    pub user_sized: bool,
}

/// What to write: `G1MaxNewSizePercent`, and `G1NewSizePercent` where it was above that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub doc: YoungDoc,
    pub max_percent: Option<u64>,
    pub min_percent: Option<u64>,
}

/// The share of the budget the young generation may take, in percent of the budget.
const SHARE_OF_BUDGET: u64 = 50;

/// Flags that, set by anyone but HotSpot, mean the user sized the young generation.
const USER_FLAGS: [&str; 5] = [
    "NewSize",
    "MaxNewSize",
    "NewRatio",
    "G1NewSizePercent",
    "G1MaxNewSizePercent",
];

/// Decides without touching the VM: at most `SHARE_OF_BUDGET`% of the budget, in whole
/// percent of the heap (at least 1), and never more than G1 would have allowed; nothing where
/// the budget holds the whole heap.
pub fn plan(found: Found, budget: Budget, fit: bool) -> Plan {
    let keep = |sizing| Plan {
        doc: YoungDoc {
            sizing,
            max_percent: found.max_percent,
            jvm_max_percent: found.max_percent,
        },
        max_percent: None,
        min_percent: None,
    };
    if !fit {
        return keep(YoungSizing::Kept);
    }
    if found.user_sized {
        return keep(YoungSizing::User);
    }
    let heap = found.max_heap.max(1);
    // A share of the heap, in whole percent (a percentage budget without a round trip
    // through bytes, which turns 6% into 2.99...%).
    let (covers_heap, target) = match budget {
        Budget::Percent(p) => (p >= 100.0, (p * SHARE_OF_BUDGET as f64 / 100.0) as u64),
        Budget::Bytes(b) => (
            b >= heap,
            (u128::from(b) * u128::from(SHARE_OF_BUDGET) / u128::from(heap)) as u64,
        ),
    };
    if covers_heap {
        // Nothing is paged.
        return keep(YoungSizing::Roomy);
    }
    let target = target.max(1);
    if target >= found.max_percent {
        return keep(YoungSizing::Roomy);
    }
    Plan {
        doc: YoungDoc {
            sizing: YoungSizing::Fitted,
            max_percent: target,
            jvm_max_percent: found.max_percent,
        },
        max_percent: Some(target),
        min_percent: (found.min_percent > target).then_some(target),
    }
}

/// Reads G1's young sizing flags; `Ok(None)` for other collectors.
fn find(vm: &VmStructs) -> Result<Option<Found>, String> {
    if crate::vmstructs::collector(vm) != "G1" {
        return Ok(None);
    }
    let mut user_sized = false;
    for f in USER_FLAGS {
        user_sized |= vm.flag_origin(f)? == FlagOrigin::User;
    }
    Ok(Some(Found {
        max_heap: vm.flag_u64("MaxHeapSize")?,
        max_percent: vm.flag_uint("G1MaxNewSizePercent")?,
        min_percent: vm.flag_uint("G1NewSizePercent")?,
        user_sized,
    }))
}

/// The plan for this VM as `options` say; `Ok(None)` where the collector is not G1. The
/// caller writes it (`Plan::max_percent`, `Plan::min_percent`, the minimum first: G1 expects
/// it never above the maximum) with [`VmStructs::set_flag_uint_ergonomic`].
pub fn plan_for(vm: &VmStructs, options: &Options) -> Result<Option<Plan>, String> {
    Ok(find(vm)?.map(|found| plan(found, options.budget, options.fits_young())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn found(max_heap: u64) -> Found {
        Found {
            max_heap,
            max_percent: 60,
            min_percent: 5,
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
            max_percent: 10,
            ..found(GIB)
        };
        assert_eq!(
            plan(f, Budget::Percent(25.0), true).doc.sizing,
            YoungSizing::Roomy
        );
    }
}
