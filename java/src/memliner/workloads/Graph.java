package memliner.workloads;

import java.util.SplittableRandom;

/**
 * Object-graph workload: a graph of nodes with skewed out-edges, per-node payload arrays and
 * linked chains, mutated with a skew (hot nodes change more) while a PageRank-style traversal
 * runs over it. Every payload encodes its node id and version, so a corrupted page is caught;
 * the final checksum depends only on the parameters, so runs with and without the agent must
 * print the same one.
 *
 * Prints one line: RESULT workload=graph nodes=N rounds=R checksum=HEX verified=true elapsed_ms=T
 */
public final class Graph {
    static final class Node {
        final int id;
        int version;
        Node[] out;      // the object graph the collector traces
        int[] outIds;    // the same edges as ids: what the PageRank pass reads
        long[] payload;
        Node next; // chain link
        Node(int id) { this.id = id; }
    }

    static long mix(long z) {
        z = (z ^ (z >>> 33)) * 0xff51afd7ed558ccdL;
        z = (z ^ (z >>> 33)) * 0xc4ceb9fe1a85ec53L;
        return z ^ (z >>> 33);
    }

    static long[] payloadFor(int id, int version, int words) {
        long[] p = new long[words];
        for (int i = 0; i < words; i++) p[i] = mix(((long) id << 32) ^ ((long) version << 16) ^ i);
        return p;
    }

    static boolean payloadOk(Node n) {
        long[] p = n.payload;
        for (int i = 0; i < p.length; i++) {
            if (p[i] != mix(((long) n.id << 32) ^ ((long) n.version << 16) ^ i)) return false;
        }
        return true;
    }

    /** Skewed pick: small ids are hot (roughly power-law). */
    static int skewed(SplittableRandom r, int n) {
        double u = r.nextDouble();
        return (int) Math.min(n - 1, (long) (n * u * u * u));
    }

    public static void main(String[] argv) {
        Args a = new Args(argv, "nodes", "degree", "payload", "rounds", "mutations", "seed");
        int n = (int) a.get("nodes", 60_000);
        int degree = (int) a.get("degree", 8);
        int words = (int) a.get("payload", 24);
        int rounds = (int) a.get("rounds", 6);
        int mutations = (int) a.get("mutations", n / 2);
        long seed = a.get("seed", 42);
        long t0 = System.nanoTime();
        SplittableRandom r = new SplittableRandom(seed);

        Node[] nodes = new Node[n];
        for (int i = 0; i < n; i++) {
            nodes[i] = new Node(i);
            nodes[i].payload = payloadFor(i, 0, words);
        }
        for (int i = 0; i < n; i++) {
            Node[] out = new Node[degree];
            int[] ids = new int[degree];
            for (int k = 0; k < degree; k++) {
                ids[k] = skewed(r, n);
                out[k] = nodes[ids[k]];
            }
            nodes[i].out = out;
            nodes[i].outIds = ids;
            // Chains link nodes in a scattered order, so walking one jumps around the heap.
            nodes[i].next = nodes[(int) ((i * 7919L + 13) % n)];
        }

        double[] rank = new double[n];
        double[] next = new double[n];
        java.util.Arrays.fill(rank, 1.0 / n);
        for (int round = 0; round < rounds; round++) {
            java.util.Arrays.fill(next, 0.15 / n);
            for (int i = 0; i < n; i++) {
                Node v = nodes[i];
                double share = 0.85 * rank[i] / v.outIds.length;
                for (int w : v.outIds) next[w] += share;
            }
            double[] t = rank; rank = next; next = t;

            // Skewed mutation: hot nodes get new payloads (garbage for the GC) and new edges.
            for (int m = 0; m < mutations; m++) {
                Node v = nodes[skewed(r, n)];
                v.version++;
                v.payload = payloadFor(v.id, v.version, words);
                int k = r.nextInt(degree), target = r.nextInt(n);
                v.out[k] = nodes[target];
                v.outIds[k] = target;
            }
            // Walk a chain: pointer chasing across the graph.
            Node c = nodes[r.nextInt(n)];
            for (int s = 0; s < n / 16; s++) c = c.next;
            if (c == null) return;
        }

        long sum = 0;
        for (int i = 0; i < n; i++) {
            Node v = nodes[i];
            if (!payloadOk(v)) {
                System.exit(Args.fail("graph", "payload of node " + i + " is corrupt"));
            }
            sum = mix(sum ^ Math.round(rank[i] * 1e12) ^ ((long) v.version << 40));
            for (int k = 0; k < v.out.length; k++) {
                if (v.out[k].id != v.outIds[k]) {
                    System.exit(Args.fail("graph", "edge " + k + " of node " + i + " is corrupt"));
                }
                sum += v.outIds[k];
            }
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("RESULT workload=graph nodes=" + n + " rounds=" + rounds
            + " checksum=" + Long.toHexString(sum) + " verified=true elapsed_ms=" + ms);
    }
}
