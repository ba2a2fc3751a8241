package memliner.workloads;

import java.util.HashMap;
import java.util.Map;

/** Minimal `--key value` parsing shared by the workloads. */
final class Args {
    private final Map<String, String> values = new HashMap<>();

    Args(String[] argv, String... known) {
        for (int i = 0; i < argv.length; i++) {
            String k = argv[i];
            if (!k.startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --key value pairs, got '" + k + "'");
            }
            String key = k.substring(2);
            if (!java.util.Arrays.asList(known).contains(key)) {
                throw new IllegalArgumentException("unknown option --" + key + " (known: " + String.join(", ", known) + ")");
            }
            values.put(key, argv[++i]);
        }
    }

    long get(String key, long dflt) {
        String v = values.get(key);
        return v == null ? dflt : Long.parseLong(v);
    }

    double getDouble(String key, double dflt) {
        String v = values.get(key);
        return v == null ? dflt : Double.parseDouble(v);
    }

    static int fail(String workload, String why) {
        System.out.println("RESULT workload=" + workload + " verified=false error=" + why.replace(' ', '_'));
        return 1;
    }
}
