package memliner.checks;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Full collections that abort concurrent marking while the patched collector holds deferred
 * objects: a linked structure most of the heap, rewired while marking runs, and a thread
 * calling System.gc() (a full GC that aborts G1's cycle and Shenandoah's, which upgrade to a
 * degenerated or full cycle). Every node's value and link are checked at the end against
 * arrays that recorded what was written.
 *
 * <p>With a third argument {@code whitebox} (G1, and HotSpot's WhiteBox API on the boot class
 * path: {@code -Xbootclasspath/a:.../memliner-whitebox.jar -XX:+UnlockDiagnosticVMOptions
 * -XX:+WhiteBoxAPI}), each full GC is issued while concurrent marking runs: the collector
 * thread starts a cycle, waits until marking is under way and has run 300, 600, 900 ms (time
 * to defer objects; a cycle that ends sooner is followed by another, waited on a quarter as
 * long), and collects while it still runs. {@code marking_aborts} counts the full GCs issued so.
 *
 * <p>With {@code shenandoah-whitebox} (Shenandoah, the same API), each of the collections is an
 * allocation failure inside concurrent marking, which Shenandoah answers with a degenerated
 * cycle that finishes the mark (or a full GC): the collector thread holds a cycle just after
 * marking started (a WhiteBox breakpoint) until the application has filled the heap to
 * {@code FILL} of its maximum, then lets marking go on while the application allocates the
 * rest (run it with {@code -XX:-ShenandoahPacing}, which would slow the allocations down,
 * {@code -XX:+ShenandoahImplicitGCInvokesConcurrent}, so that the breakpoint's cycle is a
 * concurrent one, and {@code -XX:ShenandoahGCHeuristics=static -XX:ShenandoahMinFreeThreshold=0},
 * so that no other cycle starts).
 * System.gc() cannot do it: Shenandoah answers it after the running cycle, never inside it.
 * {@code marking_aborts} then counts the cycles so driven; the GC log tells how each ended.
 *
 * Prints {@code RESULT check=full-gc-during-marking verified=true|false checksum=...}.
 */
public final class FullGcDuringMarking {
    static final class Node {
        final int id;
        long value;
        Node next;
        Node other;

        Node(int id) {
            this.id = id;
            this.value = id * 2_654_435_761L;
        }
    }

    public static void main(String[] args) throws Exception {
        int nodes = args.length > 0 ? Integer.parseInt(args[0]) : 300_000;
        int fullGcs = args.length > 1 ? Integer.parseInt(args[1]) : 6;
        Node[] all = new Node[nodes];
        // What each node must hold at the end, kept apart from the nodes.
        long[] value = new long[nodes];
        int[] other = new int[nodes];
        Random r = new Random(42);
        for (int i = 0; i < nodes; i++) {
            all[i] = new Node(i);
            value[i] = all[i].value;
        }
        for (int i = 0; i < nodes; i++) {
            all[i].next = all[(i + 1) % nodes];
            other[i] = r.nextInt(nodes);
            all[i].other = all[other[i]];
        }
        String mode = args.length > 2 ? args[2] : "timed";
        boolean whitebox = mode.equals("whitebox");
        boolean breakpoints = mode.equals("shenandoah-whitebox");
        int[] aborts = new int[1];
        Thread collector = new Thread(() -> {
            try {
                for (int i = 0; i < fullGcs; i++) {
                    if (breakpoints) {
                        aborts[0] += allocationFailureDuringMarking() ? 1 : 0;
                    } else if (whitebox) {
                        // Later full GCs come later in their cycle, after more deferrals.
                        aborts[0] += fullGcDuringMarking(300 * (i + 1)) ? 1 : 0;
                    } else {
                        Thread.sleep(200);
                        System.gc();
                    }
                }
            } catch (InterruptedException e) {
                return;
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("WhiteBox API: " + e, e);
            }
        });
        collector.start();
        // Rewiring and garbage while the full GCs come: concurrent cycles keep starting (run
        // it with a low initiating occupancy) and the barriers stay busy.
        List<long[]> garbage = new ArrayList<>();
        long mutations = 0;
        while (collector.isAlive()) {
            for (int k = 0; k < 4096; k++) {
                int i = r.nextInt(nodes);
                int o = r.nextInt(nodes);
                all[i].other = all[o];
                other[i] = o;
                all[i].value += 1;
                value[i] += 1;
                mutations++;
                if ((k & 3) == 0) {
                    garbage.add(new long[256]);
                    if (garbage.size() > 64) {
                        garbage.clear();
                    }
                }
            }
        }
        collector.join();
        boolean ok = true;
        long sum = 0;
        Node n = all[0];
        for (int i = 0; i < nodes && ok; i++) {
            ok = n == all[i] && n.id == i && n.value == value[i] && n.other == all[other[i]];
            sum = sum * 31 + n.value + other[i];
            n = n.next;
        }
        System.out.println("RESULT check=full-gc-during-marking verified=" + ok
                + " mutations=" + mutations + " marking_aborts=" + aborts[0]
                + " checksum=" + Long.toHexString(sum));
    }

    /** How full the heap gets while a Shenandoah cycle is held before marking goes on. */
    static final double FILL = 0.93;

    /**
     * Drives one Shenandoah cycle into an allocation failure during concurrent marking (see the
     * class comment). Returns true once the cycle and the collections it led to are done.
     */
    static boolean allocationFailureDuringMarking()
            throws InterruptedException, ReflectiveOperationException {
        Class<?> c = Class.forName("jdk.test.whitebox.WhiteBox");
        Object wb = c.getMethod("getWhiteBox").invoke(null);
        Method runTo = c.getMethod("concurrentGCRunTo", String.class);
        Method runToIdle = c.getMethod("concurrentGCRunToIdle");
        c.getMethod("concurrentGCAcquireControl").invoke(wb);
        // While the cycle is held this thread must not allocate: the application may fill the
        // heap between two looks, and an allocation that fails then waits for the held cycle,
        // which only this thread can let go (hangs seen in getHeapMemoryUsage, then in the
        // first call of runToIdle, which creates its reflective accessor). So the look reads
        // two longs, and the call that lets go is made once before (the cycle is idle: it
        // returns at once) and takes no varargs array.
        Runtime rt = Runtime.getRuntime();
        Object[] none = new Object[0];
        runToIdle.invoke(wb, none);
        try {
            // Requests a cycle and returns once it holds just after marking started.
            runTo.invoke(wb, "AFTER MARKING STARTED");
            long fill = (long) (rt.maxMemory() * FILL);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (rt.totalMemory() - rt.freeMemory() < fill) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("the heap did not fill within 30 s");
                }
                Thread.sleep(1);
            }
            // Marking goes on; the allocation failure cancels it, and the cycle ends (the
            // degenerated cycle then runs at the next pause).
            runToIdle.invoke(wb, none);
        } finally {
            c.getMethod("concurrentGCReleaseControl").invoke(wb);
        }
        // Waits (blocked, as a safepoint allows) until the degenerated cycle and a full GC
        // after it are done: JDK 17's breakpoint request spins inside the VM until the control
        // thread starts the next cycle, so a cycle still running at the next request, needing
        // a safepoint, would never finish. Run it with a heuristic that starts no cycle of its
        // own (static, no free threshold).
        System.gc();
        return true;
    }

    /**
     * Starts a G1 concurrent cycle through the WhiteBox API (reflection: the API is on the boot
     * class path only when the test asks), waits until marking runs and has run for {@code
     * intoCycleMs} (bounded by the cycle's end: then another cycle, waited on for a quarter as
     * long, down to 1 ms), then runs a full GC. Returns whether the cycle was still running
     * just before the full GC.
     */
    static boolean fullGcDuringMarking(int intoCycleMs)
            throws InterruptedException, ReflectiveOperationException {
        Class<?> c = Class.forName("jdk.test.whitebox.WhiteBox");
        Object wb = c.getMethod("getWhiteBox").invoke(null);
        Method inMark = c.getMethod("g1InConcurrentMark");
        Method start = c.getMethod("g1StartConcMarkCycle");
        Method fullGc = c.getMethod("fullGC");
        long deadline = System.nanoTime() + 30_000_000_000L;
        // A cycle whose marking ends before the wait is over (a heap mostly local marks in
        // 50-150 ms) is followed by another, waited on a quarter as long.
        for (int wait = intoCycleMs; ; wait = Math.max(1, wait / 4)) {
            while (!(Boolean) inMark.invoke(wb)) {
                start.invoke(wb);  // false while a cycle is already starting: wait for it
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("no concurrent mark within 30 s");
                }
                Thread.sleep(1);
            }
            long until = System.nanoTime() + wait * 1_000_000L;
            while (System.nanoTime() < until && (Boolean) inMark.invoke(wb)) {
                Thread.sleep(1);
            }
            boolean marking = (Boolean) inMark.invoke(wb);
            if (marking || wait == 1 || System.nanoTime() > deadline) {
                fullGc.invoke(wb);
                return marking;
            }
        }
    }
}
