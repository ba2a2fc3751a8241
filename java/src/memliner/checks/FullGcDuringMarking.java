package memliner.checks;

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
        Thread collector = new Thread(() -> {
            for (int i = 0; i < fullGcs; i++) {
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    return;
                }
                System.gc();
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
                + " mutations=" + mutations + " checksum=" + Long.toHexString(sum));
    }
}
