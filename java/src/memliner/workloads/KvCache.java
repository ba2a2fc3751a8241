package memliner.workloads;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Key-value cache workload (QuickCached-like): a bounded LRU map of byte[] values under
 * Zipfian gets and puts. Every value carries its key and version and a body derived from both;
 * each get checks it, so a corrupted page is caught at once. The checksum depends only on the
 * parameters.
 *
 * Prints one line: RESULT workload=kv keys=K ops=N checksum=HEX verified=true elapsed_ms=T
 */
public final class KvCache {
    static byte[] value(long key, int version, int size) {
        byte[] v = new byte[size];
        long x = Graph.mix(key * 31 + version);
        for (int i = 0; i < size; i++) {
            if ((i & 7) == 0) x = Graph.mix(x + i);
            v[i] = (byte) (x >>> ((i & 7) * 8));
        }
        // Header: key and version, so a value landing under another key is caught too.
        for (int i = 0; i < 8; i++) v[i] = (byte) (key >>> (i * 8));
        v[8] = (byte) version; v[9] = (byte) (version >>> 8);
        return v;
    }

    static boolean ok(long key, byte[] v) {
        int version = (v[8] & 0xff) | (v[9] & 0xff) << 8;
        byte[] want = value(key, version, v.length);
        return java.util.Arrays.equals(v, want);
    }

    /** Zipf(s) sampler over [0, n) by inverse CDF on a precomputed table. */
    static final class Zipf {
        final double[] cdf;
        Zipf(int n, double s) {
            cdf = new double[n];
            double sum = 0;
            for (int i = 0; i < n; i++) { sum += 1.0 / Math.pow(i + 1, s); cdf[i] = sum; }
            for (int i = 0; i < n; i++) cdf[i] /= sum;
        }
        int next(SplittableRandom r) {
            int i = java.util.Arrays.binarySearch(cdf, r.nextDouble());
            return i >= 0 ? i : Math.min(cdf.length - 1, -i - 1);
        }
    }

    public static void main(String[] argv) {
        Args a = new Args(argv, "keys", "ops", "capacity", "size", "puts", "zipf", "seed");
        int keys = (int) a.get("keys", 200_000);
        long ops = a.get("ops", 600_000);
        int capacity = (int) a.get("capacity", 100_000);
        int size = (int) a.get("size", 256);
        double putRatio = a.getDouble("puts", 0.1);
        double s = a.getDouble("zipf", 0.99);
        long seed = a.get("seed", 7);
        long t0 = System.nanoTime();
        SplittableRandom r = new SplittableRandom(seed);
        Zipf zipf = new Zipf(keys, s);
        // Keys are scattered so that hot keys do not sit next to each other in the heap.
        Map<Long, byte[]> cache = new LinkedHashMap<>(capacity * 2, 0.75f, true) {
            @Override protected boolean removeEldestEntry(Map.Entry<Long, byte[]> e) {
                return size() > capacity;
            }
        };
        int[] versions = new int[keys];
        long sum = 0, hits = 0;
        for (long op = 0; op < ops; op++) {
            int k = zipf.next(r);
            long key = Graph.mix(k) & Long.MAX_VALUE;
            if (r.nextDouble() < putRatio) {
                versions[k] = (versions[k] + 1) & 0xffff;
                cache.put(key, value(key, versions[k], size));
            } else {
                byte[] v = cache.get(key);
                if (v == null) {
                    v = value(key, versions[k], size); // miss: "load from the database"
                    cache.put(key, v);
                } else {
                    hits++;
                    if (!ok(key, v)) System.exit(Args.fail("kv", "value of key " + k + " is corrupt"));
                }
                sum = Graph.mix(sum ^ v[10] ^ ((long) v[size - 1] << 8)) + k;
            }
        }
        for (Map.Entry<Long, byte[]> e : cache.entrySet()) {
            if (!ok(e.getKey(), e.getValue())) System.exit(Args.fail("kv", "a cached value is corrupt"));
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("RESULT workload=kv keys=" + keys + " ops=" + ops + " hits=" + hits
            + " checksum=" + Long.toHexString(sum) + " verified=true elapsed_ms=" + ms);
    }
}
