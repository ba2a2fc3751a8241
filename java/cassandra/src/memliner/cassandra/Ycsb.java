package memliner.cassandra;

import com.datastax.driver.core.BoundStatement;
import com.datastax.driver.core.Cluster;
import com.datastax.driver.core.ConsistencyLevel;
import com.datastax.driver.core.PreparedStatement;
import com.datastax.driver.core.QueryOptions;
import com.datastax.driver.core.ResultSet;
import com.datastax.driver.core.Row;
import com.datastax.driver.core.Session;
import com.datastax.driver.core.SocketOptions;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import org.HdrHistogram.Histogram;

/**
 * A YCSB-style load on one Cassandra node that checks every value it reads.
 *
 * <p>YCSB's core workloads A (50% reads, 50% updates), B (95/5), C (reads only) and E (95% short
 * range scans, 5% inserts), its table ({@code usertable}: a key and ten 100-character fields) and
 * its scrambled Zipfian request distribution (constant 0.99 over 10^10 items, hashed onto the
 * records). What YCSB does not do, this does: every record's fields are a function of its key
 * number and a version, every write carries {@code USING TIMESTAMP version + 1} (so that the last
 * write wins in version order, whatever the order the node applied concurrent ones), and every
 * row read back is regenerated and compared byte for byte, its version between the highest one
 * acknowledged before the read and the highest one issued after it. A wrong byte, a missing row or
 * a version from the past is reported with the key and ends the run with status 1. Updates write
 * all fields (YCSB's {@code writeallfields=true}): a row then holds one version.
 *
 * <p>Per phase it prints one line, {@code ycsb-result {...}}: operations, seconds, throughput,
 * rows verified, errors, and per operation type the count and the p50, p99, p99.9 and largest
 * latency in microseconds (HdrHistogram, three significant digits).
 */
public final class Ycsb {
  private static final String USAGE =
      "usage: Ycsb [--host H] [--port N] [--workloads a,b,c,e] [--records N] [--ops N]"
          + " [--threads N] [--fields N] [--field-length N] [--max-scan N] [--seed N]"
          + " [--wait SECONDS] [--no-load]";

  // YCSB's scrambled Zipfian: a Zipfian over this many items (its zeta precomputed), hashed.
  private static final long ZIPF_ITEMS = 10_000_000_000L;
  private static final double ZIPF_THETA = 0.99;
  private static final double ZIPF_ZETAN = 26.46902820178302;

  private static final class Opts {
    String host = "127.0.0.1";
    int port = 9042;
    List<String> workloads = List.of("a");
    int records = 100_000;
    int ops = 100_000;
    int threads = 8;
    int fields = 10;
    int fieldLength = 100;
    int maxScan = 100;
    long seed = 1;
    int waitSeconds = 120;
    boolean load = true;
  }

  private enum Op {
    READ,
    UPDATE,
    SCAN,
    INSERT
  }

  private final Opts o;
  private final Session session;
  private final PreparedStatement insert;
  private final PreparedStatement update;
  private final PreparedStatement read;
  private final PreparedStatement scan;
  // Per key number: the highest version issued (a write was sent) and acknowledged; -1 before
  // the key's insert.
  private final AtomicIntegerArray issued;
  private final AtomicIntegerArray acked;
  private final AtomicLong nextInsert;
  private final int capacity;

  private Ycsb(Opts o, Session session, int capacity) {
    this.o = o;
    this.session = session;
    this.capacity = capacity;
    this.issued = new AtomicIntegerArray(capacity);
    this.acked = new AtomicIntegerArray(capacity);
    for (int k = 0; k < capacity; k++) {
      issued.set(k, -1);
      acked.set(k, -1);
    }
    this.nextInsert = new AtomicLong(o.records);
    StringBuilder cols = new StringBuilder();
    StringBuilder marks = new StringBuilder();
    StringBuilder sets = new StringBuilder();
    for (int f = 0; f < o.fields; f++) {
      cols.append(", field").append(f);
      marks.append(", ?");
      sets.append(f == 0 ? "" : ", ").append("field").append(f).append(" = ?");
    }
    insert =
        session.prepare(
            "INSERT INTO ycsb.usertable (y_id" + cols + ") VALUES (?" + marks + ") USING TIMESTAMP ?");
    update = session.prepare("UPDATE ycsb.usertable USING TIMESTAMP ? SET " + sets + " WHERE y_id = ?");
    read = session.prepare("SELECT * FROM ycsb.usertable WHERE y_id = ?");
    scan = session.prepare("SELECT * FROM ycsb.usertable WHERE token(y_id) >= token(?) LIMIT ?");
  }

  public static void main(String[] args) throws Exception {
    Opts o = parse(args);
    Cluster cluster = connect(o);
    int failures;
    try {
      Session session = cluster.connect();
      session.execute(
          "CREATE KEYSPACE IF NOT EXISTS ycsb WITH replication ="
              + " {'class': 'SimpleStrategy', 'replication_factor': 1}");
      StringBuilder cols = new StringBuilder();
      for (int f = 0; f < o.fields; f++) cols.append(", field").append(f).append(" text");
      session.execute(
          "CREATE TABLE IF NOT EXISTS ycsb.usertable (y_id text PRIMARY KEY" + cols + ")");
      long inserts = 0;
      for (String w : o.workloads) if (w.equals("e")) inserts += o.ops;
      long cap = o.records + inserts;
      if (cap > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("too many records");
      Ycsb y = new Ycsb(o, session, (int) cap);
      failures = y.phases();
    } finally {
      cluster.close();
    }
    System.exit(failures == 0 ? 0 : 1);
  }

  /** A cluster whose first connection succeeded; a failed one cannot be reused. */
  private static Cluster connect(Opts o) throws InterruptedException {
    long deadline = System.nanoTime() + o.waitSeconds * 1_000_000_000L;
    while (true) {
      Cluster cluster =
          Cluster.builder()
              .addContactPoint(o.host)
              .withPort(o.port)
              .withoutMetrics()
              .withoutJMXReporting()
              // A paged node answers slowly at first: wait for it rather than report timeouts.
              .withSocketOptions(new SocketOptions().setReadTimeoutMillis(120_000))
              .withQueryOptions(new QueryOptions().setConsistencyLevel(ConsistencyLevel.ONE))
              .build();
      try {
        cluster.init();
        return cluster;
      } catch (RuntimeException e) {
        cluster.close();
        if (System.nanoTime() > deadline) {
          System.err.printf(
              "ycsb: no CQL answer from %s:%d within %d s: %s%n",
              o.host, o.port, o.waitSeconds, e.getMessage());
          System.exit(2);
        }
        // Retrying a connection, not synchronising with the node: it says it is ready only by
        // answering.
        Thread.sleep(250);
      }
    }
  }

  private int phases() throws InterruptedException {
    int failures = 0;
    if (o.load) {
      failures += phase("load");
    } else {
      // The records are there from an earlier run of the same seed and sizes.
      for (int k = 0; k < o.records; k++) {
        issued.set(k, 0);
        acked.set(k, 0);
      }
    }
    for (String w : o.workloads) {
      if (failures > 0) break;
      failures += phase(w);
    }
    return failures;
  }

  /** Runs one phase on o.threads threads; prints its line; returns its failures. */
  private int phase(String name) throws InterruptedException {
    int n = name.equals("load") ? o.records : o.ops;
    AtomicLong next = new AtomicLong();
    Worker[] workers = new Worker[o.threads];
    Thread[] threads = new Thread[o.threads];
    long started = System.nanoTime();
    for (int t = 0; t < o.threads; t++) {
      workers[t] = new Worker(name, n, next, new SplittableRandom(o.seed * 1_000_003L + t));
      threads[t] = new Thread(workers[t], "ycsb-" + name + "-" + t);
      threads[t].start();
    }
    for (Thread t : threads) t.join();
    double seconds = (System.nanoTime() - started) / 1e9;
    Histogram[] merged = new Histogram[Op.values().length];
    long verified = 0;
    int failures = 0;
    long errors = 0;
    String firstError = null;
    for (Worker w : workers) {
      for (Op op : Op.values()) {
        if (w.latency[op.ordinal()].getTotalCount() == 0) continue;
        if (merged[op.ordinal()] == null) merged[op.ordinal()] = new Histogram(3);
        merged[op.ordinal()].add(w.latency[op.ordinal()]);
      }
      verified += w.verified;
      failures += w.failures;
      errors += w.errors;
      if (firstError == null) firstError = w.firstError;
    }
    StringBuilder json = new StringBuilder();
    json.append(
        String.format(
            Locale.ROOT,
            "{\"phase\":\"%s\",\"ops\":%d,\"seconds\":%.3f,\"throughput\":%.1f,"
                + "\"verified\":%d,\"wrong\":%d,\"errors\":%d,\"by_op\":{",
            name,
            n,
            seconds,
            n / seconds,
            verified,
            failures,
            errors));
    boolean first = true;
    for (Op op : Op.values()) {
      Histogram h = merged[op.ordinal()];
      if (h == null) continue;
      json.append(first ? "" : ",");
      first = false;
      json.append(
          String.format(
              Locale.ROOT,
              "\"%s\":{\"count\":%d,\"p50_us\":%d,\"p99_us\":%d,\"p999_us\":%d,\"max_us\":%d}",
              op.name().toLowerCase(Locale.ROOT),
              h.getTotalCount(),
              h.getValueAtPercentile(50),
              h.getValueAtPercentile(99),
              h.getValueAtPercentile(99.9),
              h.getMaxValue()));
    }
    json.append("}}");
    System.out.println("ycsb-result " + json);
    if (firstError != null) System.err.println("ycsb: " + firstError);
    return failures + (int) Math.min(errors, 1_000_000);
  }

  private final class Worker implements Runnable {
    final String phase;
    final int n;
    final AtomicLong next;
    final SplittableRandom rnd;
    final Histogram[] latency = new Histogram[Op.values().length];
    long verified;
    int failures;
    long errors;
    String firstError;

    Worker(String phase, int n, AtomicLong next, SplittableRandom rnd) {
      this.phase = phase;
      this.n = n;
      this.next = next;
      this.rnd = rnd;
      for (Op op : Op.values()) latency[op.ordinal()] = new Histogram(3);
    }

    @Override
    public void run() {
      for (long i = next.getAndIncrement(); i < n; i = next.getAndIncrement()) {
        if (failures > 0) return; // one wrong value ends the phase: it is reported
        Op op = choose();
        long t0 = System.nanoTime();
        try {
          switch (op) {
            case INSERT -> doInsert(phase.equals("load") ? (int) i : newKey());
            case UPDATE -> doUpdate(key());
            case READ -> doRead(key());
            case SCAN -> doScan(key(), 1 + rnd.nextInt(o.maxScan));
          }
        } catch (RuntimeException e) {
          errors++;
          note(op + ": " + e);
        }
        latency[op.ordinal()].recordValue(Math.max(1, (System.nanoTime() - t0) / 1000));
      }
    }

    private Op choose() {
      double r = rnd.nextDouble();
      return switch (phase) {
        case "load" -> Op.INSERT;
        case "a" -> r < 0.5 ? Op.READ : Op.UPDATE;
        case "b" -> r < 0.95 ? Op.READ : Op.UPDATE;
        case "c" -> Op.READ;
        case "e" -> r < 0.95 ? Op.SCAN : Op.INSERT;
        default -> throw new IllegalStateException(phase);
      };
    }

    /** A key number, scrambled-Zipfian over the records inserted and acknowledged. */
    private int key() {
      while (true) {
        long z = zipfian(rnd.nextDouble());
        int k = (int) Long.remainderUnsigned(fnv64(z), capacity);
        if (acked.get(k) >= 0) return k;
      }
    }

    private int newKey() {
      long k = nextInsert.getAndIncrement();
      if (k >= capacity) throw new IllegalStateException("insert beyond " + capacity + " keys");
      return (int) k;
    }

    private void doInsert(int k) {
      issued.set(k, 0);
      BoundStatement b = insert.bind();
      b.setString(0, keyName(k));
      for (int f = 0; f < o.fields; f++) b.setString(1 + f, field(k, 0, f));
      b.setLong(1 + o.fields, 1L);
      session.execute(b);
      ack(k, 0);
    }

    private void doUpdate(int k) {
      int v = issued.incrementAndGet(k);
      BoundStatement b = update.bind();
      b.setLong(0, v + 1L);
      for (int f = 0; f < o.fields; f++) b.setString(1 + f, field(k, v, f));
      b.setString(1 + o.fields, keyName(k));
      session.execute(b);
      ack(k, v);
    }

    private void ack(int k, int v) {
      int a = acked.get(k);
      while (a < v && !acked.compareAndSet(k, a, v)) a = acked.get(k);
    }

    private void doRead(int k) {
      int lo = acked.get(k);
      Row row = session.execute(read.bind(keyName(k))).one();
      int hi = issued.get(k);
      if (row == null) {
        wrong("key " + keyName(k) + " (record " + k + ", version >= " + lo + ") is missing");
        return;
      }
      check(row, k, lo, hi);
    }

    private void doScan(int k, int length) {
      ResultSet rs = session.execute(scan.bind(keyName(k), length));
      // Read after the answer (LIMIT <= max-scan rows come in its first page): a row inserted
      // while the scan ran is then below it.
      int hi = nextInsert.intValue();
      for (Row row : rs) {
        String f0 = row.getString("field0");
        int kk = f0 == null ? -1 : parseKey(f0);
        if (kk < 0 || kk >= Math.min(hi, capacity)) {
          wrong("scan returned key " + row.getString("y_id") + " whose field0 names no record");
          return;
        }
        if (!check(row, kk, 0, issued.get(kk))) return;
      }
    }

    /** Compares a row with what version v of record k holds, lo <= v <= hi. */
    private boolean check(Row row, int k, int lo, int hi) {
      String id = row.getString("y_id");
      String f0 = row.getString("field0");
      int v = f0 == null ? -1 : parseVersion(f0);
      if (!keyName(k).equals(id) || parseKey(f0) != k) {
        return wrong("key " + id + " holds record " + (f0 == null ? "none" : f0.substring(0, 20)));
      }
      if (v < lo || v > hi) {
        return wrong(
            "key " + id + " read version " + v + ", expected " + lo + ".." + hi + " (stale or lost)");
      }
      for (int f = 0; f < o.fields; f++) {
        String got = row.getString("field" + f);
        if (!field(k, v, f).equals(got)) {
          return wrong("key " + id + " version " + v + ": field" + f + " has wrong bytes");
        }
      }
      verified++;
      return true;
    }

    private boolean wrong(String what) {
      failures++;
      note("WRONG: " + what);
      return false;
    }

    private void note(String what) {
      if (firstError == null) firstError = what;
    }
  }

  /** Record k's field f at version v: "k<k>v<v>:" then characters from a seeded generator. */
  String field(int k, int v, int f) {
    StringBuilder s = new StringBuilder(o.fieldLength);
    if (f == 0) s.append('k').append(k).append('v').append(v).append(':');
    SplittableRandom r = new SplittableRandom(mix(o.seed, k, v, f));
    while (s.length() < o.fieldLength) s.append((char) ('a' + r.nextInt(26)));
    s.setLength(o.fieldLength);
    return s.toString();
  }

  private static int parseKey(String f0) {
    int v = f0.indexOf('v');
    try {
      return f0.charAt(0) == 'k' && v > 1 ? Integer.parseInt(f0, 1, v, 10) : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static int parseVersion(String f0) {
    int v = f0.indexOf('v');
    int c = f0.indexOf(':');
    try {
      return v > 0 && c > v ? Integer.parseInt(f0, v + 1, c, 10) : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  static String keyName(int k) {
    return "user" + Long.toUnsignedString(fnv64(k));
  }

  private static long mix(long seed, int k, int v, int f) {
    long h = seed * 0x9E3779B97F4A7C15L;
    h ^= (((long) k) << 32) ^ (v & 0xffffffffL);
    h = (h ^ (h >>> 31)) * 0xBF58476D1CE4E5B9L;
    return h ^ (f * 0x94D049BB133111EBL);
  }

  /** FNV-1a over the eight bytes of x, as YCSB hashes its key numbers. */
  static long fnv64(long x) {
    long h = 0xCBF29CE484222325L;
    for (int i = 0; i < 8; i++) {
      h ^= x & 0xff;
      h *= 1099511628211L;
      x >>>= 8;
    }
    return h;
  }

  /** Gray et al.'s Zipfian generator over ZIPF_ITEMS items, as YCSB's scrambled Zipfian. */
  private static long zipfian(double u) {
    double zeta2 = 1 + Math.pow(0.5, ZIPF_THETA);
    double alpha = 1 / (1 - ZIPF_THETA);
    double eta = (1 - Math.pow(2.0 / ZIPF_ITEMS, 1 - ZIPF_THETA)) / (1 - zeta2 / ZIPF_ZETAN);
    double uz = u * ZIPF_ZETAN;
    if (uz < 1) return 0;
    if (uz < zeta2) return 1;
    return (long) (ZIPF_ITEMS * Math.pow(eta * u - eta + 1, alpha));
  }

  private static Opts parse(String[] args) {
    Opts o = new Opts();
    try {
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        if (a.equals("--no-load")) {
          o.load = false;
          continue;
        }
        if (i + 1 >= args.length) throw new IllegalArgumentException(a + " needs a value");
        String v = args[++i];
        switch (a) {
          case "--host" -> o.host = v;
          case "--port" -> o.port = Integer.parseInt(v);
          case "--workloads" -> {
            List<String> ws = new ArrayList<>();
            for (String w : v.split(",")) {
              if (!List.of("a", "b", "c", "e").contains(w)) {
                throw new IllegalArgumentException("workload " + w + " is not one of a, b, c, e");
              }
              ws.add(w);
            }
            o.workloads = ws;
          }
          case "--records" -> o.records = positive(a, v);
          case "--ops" -> o.ops = positive(a, v);
          case "--threads" -> o.threads = positive(a, v);
          case "--fields" -> o.fields = positive(a, v);
          case "--field-length" -> o.fieldLength = Math.max(24, positive(a, v));
          case "--max-scan" -> o.maxScan = positive(a, v);
          case "--seed" -> o.seed = Long.parseLong(v);
          case "--wait" -> o.waitSeconds = positive(a, v);
          default -> throw new IllegalArgumentException("unknown option " + a);
        }
      }
    } catch (IllegalArgumentException e) {
      System.err.println("ycsb: " + e.getMessage() + "\n" + USAGE);
      System.exit(2);
    }
    return o;
  }

  private static int positive(String name, String v) {
    int n = Integer.parseInt(v);
    if (n <= 0) throw new IllegalArgumentException(name + " must be positive, not " + v);
    return n;
  }
}
