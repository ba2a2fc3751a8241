//! Which class a faulting thread belongs to: Java threads announce themselves through JVMTI
//! (ThreadStart, VMInit); VM-internal threads are known by their kernel names.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use memliner_cpu::gettid;

use crate::gc_activity::GcActivity;
use crate::model::{ThreadClass, ThreadClassifier, ThreadKind};

/// Kernel thread names (`/proc/self/task/TID/comm`, at most 15 bytes) of HotSpot's own threads.
pub fn kind_by_name(name: &str) -> Option<ThreadKind> {
    const GC_WORKERS: &[&str] = &["GC Thread#", "Shenandoah GC T", "ParGC Thread#"];
    // Concurrent GC threads by what they do.
    const GC_CONCURRENT: &[(&str, GcActivity)] = &[
        ("G1 Conc#", GcActivity::ConcurrentMark),
        ("G1 Main Marker", GcActivity::ConcurrentMark),
        ("G1 Refine#", GcActivity::ConcurrentRefinement),
    ];
    const GC_CONCURRENT_OTHER: &[&str] = &[
        "G1 Service",
        "G1 Uncommit",
        "Shenandoah Cont",
        "Shenandoah Unco",
        "ZDriver",
        "ZWorker",
    ];
    const JIT: &[&str] = &["C1 CompilerThre", "C2 CompilerThre", "Sweeper thread"];
    const VM: &[&str] = &[
        "VM Periodic Tas",
        "Safepoint Clean",
        "Monitor Deflati",
        "Service Thread",
        "Notification Th",
    ];
    let starts = |l: &[&str]| l.iter().any(|p| name.starts_with(p));
    if starts(GC_WORKERS) {
        Some(ThreadKind::GcWorker)
    } else if name == "VM Thread" {
        Some(ThreadKind::VmThread)
    } else if let Some(&(_, a)) = GC_CONCURRENT.iter().find(|(p, _)| name.starts_with(p)) {
        Some(ThreadKind::GcConcurrent(a))
    } else if starts(GC_CONCURRENT_OTHER) {
        Some(ThreadKind::GcConcurrent(GcActivity::ConcurrentOther))
    } else if starts(JIT) {
        Some(ThreadKind::Fixed(ThreadClass::Jit))
    } else if starts(VM) {
        Some(ThreadKind::Fixed(ThreadClass::Vm))
    } else if name.starts_with("memliner-") {
        Some(ThreadKind::Fixed(ThreadClass::Other))
    } else {
        None
    }
}

/// Thread knowledge shared by the JVMTI callbacks and the fault handlers.
#[derive(Debug, Default)]
pub struct JvmThreads {
    java: Mutex<HashSet<u32>>,
    asked: Mutex<HashMap<u32, u32>>,
    in_pause: AtomicBool,
    rebuilding: AtomicBool,
}

impl JvmThreads {
    /// Records the calling thread as a Java (application) thread.
    pub fn java_thread_started(&self) {
        self.java.lock().unwrap().insert(gettid());
    }

    pub fn set_in_pause(&self, v: bool) {
        self.in_pause.store(v, Ordering::SeqCst);
    }

    /// A pause ended with G1 between a remark and its cleanup (`v`) or not.
    pub fn set_rebuilding(&self, v: bool) {
        self.rebuilding.store(v, Ordering::Relaxed);
    }
}

impl ThreadClassifier for JvmThreads {
    fn kind_of(&self, tid: u32) -> ThreadKind {
        let name =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
        if let Some(k) = kind_by_name(name.trim_end()) {
            return k;
        }
        if self.java.lock().unwrap().contains(&tid) {
            return ThreadKind::Fixed(ThreadClass::Application);
        }
        // A Java thread may fault before its ThreadStart is seen: ask a few times before
        // settling on `other`.
        let mut asked = self.asked.lock().unwrap();
        let n = asked.entry(tid).or_insert(0);
        *n += 1;
        if *n >= 3 {
            ThreadKind::Fixed(ThreadClass::Other)
        } else {
            ThreadKind::Unknown
        }
    }

    fn in_gc_pause(&self) -> bool {
        self.in_pause.load(Ordering::Relaxed)
    }

    fn rebuilding_remsets(&self) -> bool {
        self.rebuilding.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotspot_thread_names() {
        assert_eq!(kind_by_name("GC Thread#0"), Some(ThreadKind::GcWorker));
        assert_eq!(kind_by_name("Shenandoah GC T"), Some(ThreadKind::GcWorker));
        assert_eq!(
            kind_by_name("G1 Conc#0"),
            Some(ThreadKind::GcConcurrent(GcActivity::ConcurrentMark))
        );
        assert_eq!(
            kind_by_name("G1 Main Marker"),
            Some(ThreadKind::GcConcurrent(GcActivity::ConcurrentMark))
        );
        assert_eq!(
            kind_by_name("G1 Refine#0"),
            Some(ThreadKind::GcConcurrent(GcActivity::ConcurrentRefinement))
        );
        assert_eq!(
            kind_by_name("G1 Service"),
            Some(ThreadKind::GcConcurrent(GcActivity::ConcurrentOther))
        );
        assert_eq!(
            kind_by_name("C2 CompilerThre"),
            Some(ThreadKind::Fixed(ThreadClass::Jit))
        );
        assert_eq!(kind_by_name("VM Thread"), Some(ThreadKind::VmThread));
        assert_eq!(
            kind_by_name("VM Periodic Tas"),
            Some(ThreadKind::Fixed(ThreadClass::Vm))
        );
        assert_eq!(kind_by_name("main"), None);
    }

    #[test]
    fn java_threads_and_unknowns() {
        let t = JvmThreads::default();
        let me = gettid();
        // This test thread's name is the test's name: not a HotSpot name, not yet Java.
        assert_eq!(t.kind_of(me), ThreadKind::Unknown);
        t.java_thread_started();
        assert_eq!(t.kind_of(me), ThreadKind::Fixed(ThreadClass::Application));
        let other = JvmThreads::default();
        for _ in 0..2 {
            assert_eq!(other.kind_of(me), ThreadKind::Unknown);
        }
        assert_eq!(other.kind_of(me), ThreadKind::Fixed(ThreadClass::Other));
    }
}
