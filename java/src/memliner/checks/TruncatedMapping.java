package memliner.checks;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.List;

/**
 * A SIGBUS that is not the pager's must still reach the JVM: reading a mapped file past its
 * truncated end raises SIGBUS, which HotSpot turns into an InternalError. The heap around it is
 * paged (the pager's own SIGBUS faults), and its bytes are checked before and after.
 *
 * Prints {@code RESULT check=truncated-mapping outcome=internal-error heap=ok checksum=...}.
 */
public final class TruncatedMapping {
    public static void main(String[] args) throws Exception {
        List<long[]> heap = new ArrayList<>();
        for (int i = 0; i < 2048; i++) {
            long[] a = new long[1024];
            for (int j = 0; j < a.length; j++) {
                a[j] = (long) i * 1_000_003L + j;
            }
            heap.add(a);
        }
        long before = checksum(heap);

        File f = File.createTempFile("memliner-truncated", ".bin");
        f.deleteOnExit();
        String outcome;
        try (RandomAccessFile raf = new RandomAccessFile(f, "rw")) {
            raf.setLength(2 * 4096);
            MappedByteBuffer m = raf.getChannel().map(FileChannel.MapMode.READ_ONLY, 0, 2 * 4096);
            raf.setLength(0);
            try {
                outcome = "read-" + m.get(4096);
            } catch (InternalError e) {
                outcome = "internal-error";
            }
        }
        long after = checksum(heap);
        System.out.println("RESULT check=truncated-mapping outcome=" + outcome
                + " heap=" + (before == after ? "ok" : "changed")
                + " checksum=" + Long.toHexString(after));
    }

    private static long checksum(List<long[]> heap) {
        long h = 17;
        for (long[] a : heap) {
            for (long v : a) {
                h = h * 31 + v;
            }
        }
        return h;
    }
}
