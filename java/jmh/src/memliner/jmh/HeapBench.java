package memliner.jmh;

import java.util.HashMap;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;

/**
 * Heap-bound micro-benchmarks for paging policies: a sequential scan, random lookups and
 * allocation churn over a live set that fills most of a fixed heap. Run through
 * scripts/jmh.sh, which adds the memliner agent with -jvmArgsAppend. Every record carries
 * its own check value; the tear-down verifies all of them, so a wrong byte fails the run.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Fork(value = 1, jvmArgsAppend = {"-Xms96m", "-Xmx96m"})
@Warmup(iterations = 1, time = 2)
@Measurement(iterations = 3, time = 2)
public class HeapBench {
    static final class Rec {
        final int id;
        final long[] payload;
        Rec next;

        Rec(int id, int words) {
            this.id = id;
            this.payload = new long[words];
            for (int i = 0; i < words; i++) payload[i] = mix(id, i);
        }

        boolean ok() {
            for (int i = 0; i < payload.length; i++) if (payload[i] != mix(id, i)) return false;
            return true;
        }
    }

    static long mix(long a, long b) {
        long z = a * 0x9e3779b97f4a7c15L + b;
        z = (z ^ (z >>> 31)) * 0xbf58476d1ce4e5b9L;
        return z ^ (z >>> 29);
    }

    @Param({"120000"})
    int records;

    Rec[] array;
    Rec head;
    HashMap<Integer, Rec> index;
    SplittableRandom random;

    @Setup(Level.Trial)
    public void build() {
        array = new Rec[records];
        index = new HashMap<>(records * 2);
        for (int i = 0; i < records; i++) {
            array[i] = new Rec(i, 16);
            index.put(i, array[i]);
        }
        // The list visits records in a scattered order: pointer chasing across the heap.
        for (int i = 0; i < records; i++) {
            array[i].next = array[(int) ((i * 7919L + 1) % records)];
        }
        head = array[0];
        random = new SplittableRandom(11);
    }

    @Benchmark
    public long scanArray() {
        long s = 0;
        for (Rec r : array) s += r.payload[r.id & 15];
        return s;
    }

    @Benchmark
    public void randomLookups(Blackhole bh) {
        for (int i = 0; i < 2000; i++) {
            Rec r = index.get(random.nextInt(records));
            bh.consume(r.payload[0]);
        }
    }

    @Benchmark
    public long chaseList() {
        long s = 0;
        Rec r = head;
        for (int i = 0; i < 5000; i++) {
            s += r.id;
            r = r.next;
        }
        head = r;
        return s;
    }

    @Benchmark
    public void churn(Blackhole bh) {
        // Short-lived garbage next to the live set: the GC's work.
        for (int i = 0; i < 200; i++) bh.consume(new long[64]);
        int k = random.nextInt(records);
        Rec fresh = new Rec(k, 16);
        fresh.next = array[k].next;
        array[k] = fresh;
        index.put(k, fresh);
    }

    @TearDown(Level.Trial)
    public void verify() {
        for (int i = 0; i < records; i++) {
            Rec r = array[i];
            if (r.id != i || !r.ok() || index.get(i) != r) {
                throw new IllegalStateException("record " + i + " is corrupt");
            }
        }
    }
}
