package memliner.checks;

/**
 * Reference stores while concurrent marking runs, for the patched JDK's store recording: a
 * thread keeps concurrent cycles coming (System.gc() starts one and waits for it under G1's
 * -XX:+ExplicitGCInvokesConcurrent and Shenandoah's default), while the main thread fills
 * fresh arrays with references to long-lived nodes. A fresh array's slots hold null, so the
 * collector's own snapshot barrier records nothing for these stores: what the store log holds
 * from them, the hooks put there. At the end every node and the last array are checked.
 *
 * Prints {@code RESULT check=stores-during-marking verified=true|false stores=... checksum=...}.
 */
public final class StoresDuringMarking {
    static final class Node {
        final int id;
        final long value;

        Node(int id) {
            this.id = id;
            this.value = id * 2_654_435_761L;
        }
    }

    /** A fresh array of references to the nodes: null slots overwritten, nothing else. */
    static Node[] fill(Node[] all, int round) {
        Node[] fresh = new Node[4096];
        int base = (int) ((round * 7_919L) % all.length);
        for (int i = 0; i < fresh.length; i++) {
            fresh[i] = all[(base + i * 31) % all.length];
        }
        return fresh;
    }

    public static void main(String[] args) throws Exception {
        int nodes = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        int cycles = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        Node[] all = new Node[nodes];
        for (int i = 0; i < nodes; i++) {
            all[i] = new Node(i);
        }
        // The nodes are old before the cycles the check counts, and fill() is compiled
        // before them (with -Xbatch, by the compiler the run allows): the stores the hooks
        // record then come from the code under test.
        System.gc();
        Node[] last = null;
        for (int i = 0; i < 500; i++) {
            last = fill(all, i);
        }
        Thread collector = new Thread(() -> {
            for (int i = 0; i < cycles; i++) {
                System.gc();
            }
        });
        collector.start();
        long stores = 0;
        int round = 0;
        while (collector.isAlive()) {
            last = fill(all, round);
            stores += last.length;
            round++;
        }
        collector.join();
        boolean ok = true;
        long sum = 0;
        for (int i = 0; i < nodes && ok; i++) {
            ok = all[i].id == i && all[i].value == i * 2_654_435_761L;
            sum = sum * 31 + all[i].value;
        }
        int base = (int) (((round == 0 ? 499 : round - 1) * 7_919L) % nodes);
        for (int i = 0; i < last.length && ok; i++) {
            ok = last[i] == all[(base + i * 31) % nodes];
        }
        System.out.println("RESULT check=stores-during-marking verified=" + ok
                + " stores=" + stores + " checksum=" + Long.toHexString(sum));
    }
}
