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
 * to defer objects), and collects while it still runs. {@code marking_aborts} counts the full GCs issued so.
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
        boolean whitebox = args.length > 2 && args[2].equals("whitebox");
        int[] aborts = new int[1];
        Thread collector = new Thread(() -> {
            try {
                for (int i = 0; i < fullGcs; i++) {
                    if (whitebox) {
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

    /**
     * Starts a G1 concurrent cycle through the WhiteBox API (reflection: the API is on the boot
     * class path only when the test asks), waits until marking runs and has run for {@code
     * intoCycleMs} (bounded by the cycle's end), then runs a full GC. Returns whether the cycle
     * was still running just before the full GC.
     */
    static boolean fullGcDuringMarking(int intoCycleMs)
            throws InterruptedException, ReflectiveOperationException {
        Class<?> c = Class.forName("jdk.test.whitebox.WhiteBox");
        Object wb = c.getMethod("getWhiteBox").invoke(null);
        Method inMark = c.getMethod("g1InConcurrentMark");
        Method start = c.getMethod("g1StartConcMarkCycle");
        Method fullGc = c.getMethod("fullGC");
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!(Boolean) inMark.invoke(wb)) {
            start.invoke(wb);  // false while a cycle is already starting: wait for it
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no concurrent mark within 30 s");
            }
            Thread.sleep(1);
        }
        long until = System.nanoTime() + intoCycleMs * 1_000_000L;
        while (System.nanoTime() < until && (Boolean) inMark.invoke(wb)) {
            Thread.sleep(1);
        }
        boolean marking = (Boolean) inMark.invoke(wb);
        fullGc.invoke(wb);
        return marking;
    }
}
