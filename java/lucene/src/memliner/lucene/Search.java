package memliner.lucene;

import java.util.SplittableRandom;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.SerialMergeScheduler;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.store.ByteBuffersDirectory;

/**
 * Lucene indexing and search with the index in the Java heap ({@code ByteBuffersDirectory}):
 * what a search service holds in memory, paged by memliner.
 *
 * <p>Indexes {@code --docs} synthetic documents (each a list of words drawn from a Zipfian
 * vocabulary, a function of the seed and the document's number), then runs {@code --queries}
 * searches: a single word (Zipfian) or two words that must both occur. Every answer is checked:
 * a single word's hit count against the document frequency counted while generating, and each
 * of the top ten hits, regenerated from its stored number, must contain the query's words. One
 * merge thread and one indexing thread keep the segments, and so the hits, deterministic.
 *
 * <p>Prints one line: RESULT workload=lucene docs=N queries=Q checksum=HEX verified=true
 * elapsed_ms=T (the checksum is over every query's hit count and top hits).
 */
public final class Search {
  private static final int VOCABULARY = 50_000;

  public static void main(String[] args) throws Exception {
    int docs = 1_000_000;
    int queries = 20_000;
    long seed = 42;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--docs" -> docs = Integer.parseInt(args[i + 1]);
        case "--queries" -> queries = Integer.parseInt(args[i + 1]);
        case "--seed" -> seed = Long.parseLong(args[i + 1]);
        default -> {
          System.err.println("usage: Search [--docs N] [--queries N] [--seed N]");
          System.exit(2);
        }
      }
    }
    if (args.length % 2 != 0 || docs <= 0 || queries <= 0) {
      System.err.println("usage: Search [--docs N] [--queries N] [--seed N]");
      System.exit(2);
    }
    long t0 = System.nanoTime();
    double[] cdf = zipfCdf(VOCABULARY, 1.0);
    int[] df = new int[VOCABULARY];
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    IndexWriterConfig cfg = new IndexWriterConfig(new StandardAnalyzer());
    cfg.setMergeScheduler(new SerialMergeScheduler());
    cfg.setRAMBufferSizeMB(64);
    boolean[] seen = new boolean[VOCABULARY];
    try (IndexWriter w = new IndexWriter(dir, cfg)) {
      for (int d = 0; d < docs; d++) {
        int[] words = words(seed, d, cdf);
        StringBuilder body = new StringBuilder(words.length * 7);
        for (int x : words) {
          body.append('w').append(x).append(' ');
          if (!seen[x]) {
            seen[x] = true;
            df[x]++;
          }
        }
        for (int x : words) seen[x] = false;
        Document doc = new Document();
        doc.add(new StoredField("n", d));
        doc.add(new TextField("body", body.toString(), Field.Store.NO));
        w.addDocument(doc);
      }
      w.commit();
    }
    long indexed = System.nanoTime();

    long sum = 0x9E3779B97F4A7C15L;
    int wrong = 0;
    String firstWrong = null;
    SplittableRandom rnd = new SplittableRandom(seed ^ 0x5DEECE66DL);
    try (DirectoryReader reader = DirectoryReader.open(dir)) {
      IndexSearcher searcher = new IndexSearcher(reader);
      for (int q = 0; q < queries; q++) {
        int a = sample(cdf, rnd.nextDouble());
        boolean pair = rnd.nextInt(4) == 0;
        int b = sample(cdf, rnd.nextDouble());
        BooleanQuery.Builder bq = new BooleanQuery.Builder();
        bq.add(new TermQuery(new Term("body", "w" + a)), BooleanClause.Occur.MUST);
        if (pair) bq.add(new TermQuery(new Term("body", "w" + b)), BooleanClause.Occur.MUST);
        BooleanQuery query = bq.build();
        TopDocs top = searcher.search(query, 10);
        long hits = searcher.count(query);
        if (!pair && hits != df[a]) {
          wrong++;
          if (firstWrong == null) {
            firstWrong = "w" + a + ": " + hits + " hits, " + df[a] + " documents hold it";
          }
        }
        sum = mix(sum ^ (a * 31L + (pair ? b : -1)));
        sum = mix(sum ^ hits);
        for (ScoreDoc sd : top.scoreDocs) {
          int n = searcher.storedFields().document(sd.doc).getField("n").numericValue().intValue();
          if (!contains(words(seed, n, cdf), a) || (pair && !contains(words(seed, n, cdf), b))) {
            wrong++;
            if (firstWrong == null) {
              firstWrong = "document " + n + " answered w" + a + (pair ? " w" + b : "")
                  + " without holding it";
            }
          }
          sum = mix(sum ^ n);
        }
      }
    }
    long done = System.nanoTime();
    if (wrong > 0) {
      System.err.println("lucene: " + wrong + " wrong answers; first: " + firstWrong);
    }
    System.out.printf(
        "RESULT workload=lucene docs=%d queries=%d index_ms=%d search_ms=%d checksum=%x verified=%b elapsed_ms=%d%n",
        docs, queries, (indexed - t0) / 1_000_000, (done - indexed) / 1_000_000, sum, wrong == 0,
        (done - t0) / 1_000_000);
    System.exit(wrong == 0 ? 0 : 1);
  }

  /** Document d's words: 20 to 60 of them, Zipfian over the vocabulary. */
  static int[] words(long seed, int d, double[] cdf) {
    SplittableRandom r = new SplittableRandom(mix(seed * 0x100000001B3L + d));
    int[] out = new int[20 + r.nextInt(41)];
    for (int i = 0; i < out.length; i++) out[i] = sample(cdf, r.nextDouble());
    return out;
  }

  static boolean contains(int[] words, int x) {
    for (int w : words) if (w == x) return true;
    return false;
  }

  static double[] zipfCdf(int n, double s) {
    double[] cdf = new double[n];
    double total = 0;
    for (int i = 0; i < n; i++) {
      total += 1.0 / Math.pow(i + 1, s);
      cdf[i] = total;
    }
    for (int i = 0; i < n; i++) cdf[i] /= total;
    return cdf;
  }

  static int sample(double[] cdf, double u) {
    int lo = 0, hi = cdf.length - 1;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  static long mix(long z) {
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }
}
