package memliner.workloads;

import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;

/**
 * Ordered record index workload: a sorted map of records (a red-black tree of scattered nodes,
 * as an in-memory table or a secondary index is) under a skewed mix of point reads,
 * read-modify-writes and short range scans. A few keys are hot (Zipfian ranks spread over the
 * key space by a permutation, so hot records sit all over the heap); the tree's upper levels
 * are hot for every operation; most records are touched now and then. Writes replace a
 * record's payload, so the old one is garbage and the young generation fills steadily.
 *
 * Every record carries its key and version in a payload derived from both; reads and scans
 * check it, so a corrupted page is caught at once. The checksum depends only on the
 * parameters.
 *
 * Prints one line: RESULT workload=index records=N ops=M checksum=HEX verified=true elapsed_ms=T
 */
public final class Index {
    static final class Record {
        final long key;
        int version;
        long[] payload;
        Record(long key) { this.key = key; }
    }

    static long[] payloadFor(long key, int version, int words) {
        long[] p = new long[words];
        long x = Graph.mix(key ^ ((long) version << 48));
        for (int i = 0; i < words; i++) { x = Graph.mix(x + i); p[i] = x; }
        p[0] = key;
        p[1] = version;
        return p;
    }

    static boolean ok(Record r) {
        long[] p = r.payload;
        if (p[0] != r.key || p[1] != r.version) return false;
        long x = Graph.mix(r.key ^ ((long) r.version << 48));
        for (int i = 0; i < p.length; i++) {
            x = Graph.mix(x + i);
            if (i >= 2 && p[i] != x) return false;
        }
        return true;
    }

    /** The key of the record of rank `i` (hotness order): spread over the key space. */
    static long keyOf(long i, long n) {
        // An odd multiplier modulo a power of two above n, folded back into [0, n): a
        // permutation of the ranks, so neighbouring ranks are far apart in key order.
        long m = Long.highestOneBit(Math.max(1, n - 1)) << 1;
        long k = i;
        do { k = (k * 0x9E3779B97F4A7C15L + 0x632BE59BD9B4E019L) & (m - 1); } while (k >= n);
        return k * 8 + 1;
    }

    public static void main(String[] argv) {
        Args a = new Args(argv, "records", "ops", "payload", "writes", "scans", "scan", "zipf", "seed");
        int n = (int) a.get("records", 400_000);
        long ops = a.get("ops", 2_000_000);
        int words = (int) a.get("payload", 16);
        double writes = a.getDouble("writes", 0.5);
        double scans = a.getDouble("scans", 0.05);
        int scanLen = (int) a.get("scan", 32);
        double s = a.getDouble("zipf", 0.99);
        long seed = a.get("seed", 11);
        long t0 = System.nanoTime();
        SplittableRandom r = new SplittableRandom(seed);
        KvCache.Zipf zipf = new KvCache.Zipf(n, s);

        // Records inserted in random order: tree nodes and records scattered over the heap.
        TreeMap<Long, Record> index = new TreeMap<>();
        int[] order = new int[n];
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = r.nextInt(i + 1);
            int t = order[i]; order[i] = order[j]; order[j] = t;
        }
        for (int i = 0; i < n; i++) {
            long key = keyOf(order[i], n);
            Record rec = new Record(key);
            rec.payload = payloadFor(key, 0, words);
            index.put(key, rec);
        }

        long sum = 0;
        for (long op = 0; op < ops; op++) {
            long key = keyOf(zipf.next(r), n);
            double u = r.nextDouble();
            if (u < scans) {
                // A range scan from a hot key: neighbours in key order, far apart in the heap.
                int k = 0;
                for (Map.Entry<Long, Record> e : index.tailMap(key, true).entrySet()) {
                    Record rec = e.getValue();
                    if (!ok(rec)) System.exit(Args.fail("index", "record " + rec.key + " is corrupt"));
                    sum = Graph.mix(sum ^ rec.payload[2 + (k % (words - 2))]) + rec.version;
                    if (++k >= scanLen) break;
                }
            } else {
                Record rec = index.get(key);
                if (rec == null || !ok(rec)) {
                    System.exit(Args.fail("index", "record " + key + " is missing or corrupt"));
                }
                if (u < scans + writes) {
                    // Read-modify-write: a new payload, the old one becomes garbage.
                    rec.version = (rec.version + 1) & 0xffff;
                    rec.payload = payloadFor(key, rec.version, words);
                }
                sum = Graph.mix(sum ^ rec.payload[2]) + rec.version;
            }
        }
        for (Record rec : index.values()) {
            if (!ok(rec)) System.exit(Args.fail("index", "record " + rec.key + " is corrupt"));
            sum = Graph.mix(sum ^ rec.version) + rec.key;
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("RESULT workload=index records=" + n + " ops=" + ops
            + " checksum=" + Long.toHexString(sum) + " verified=true elapsed_ms=" + ms);
    }
}
