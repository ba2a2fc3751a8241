#!/usr/bin/env bash
# A YCSB-style load that verifies every read (java/cassandra/src/memliner/cassandra/Ycsb.java)
# against a Cassandra node (scripts/cassandra.sh): loads --records, then runs --ops of each of
# --workloads (a, b, c, e; Zipfian), and prints one `ycsb-result {json}` line per phase with
# throughput and p50/p99/p99.9 latency per operation type. Exit status: 0; 1 when a read came
# back wrong (the key and versions are printed) or a request failed; 2 on bad options or when no
# node answered within --wait seconds.
#
#   scripts/ycsb.sh --port 9042 --workloads a,b --records 200000 --ops 200000 --threads 8
#
# It builds against the jars scripts/cassandra.sh fetched (the driver and HdrHistogram come with
# Cassandra) into target/cassandra-classes, and runs outside any memliner agent.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(scripts/cassandra.sh --fetch)
out=target/cassandra-classes
src=java/cassandra/src/memliner/cassandra/Ycsb.java
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
javac=${JAVA_HOME:+$JAVA_HOME/bin/}javac
if [ ! -f "$out/memliner/cassandra/Ycsb.class" ] || [ "$src" -nt "$out/memliner/cassandra/Ycsb.class" ]; then
  mkdir -p "$out"
  "$javac" -nowarn -d "$out" -cp "$lib/*" "$src"
fi
# The driver logs through logback (on Cassandra's classpath): warnings only, to stderr.
[ -f "$out/logback.xml" ] || cat >"$out/logback.xml" <<'EOF'
<configuration>
  <appender name="ERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>ycsb: %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="ERR"/></root>
</configuration>
EOF
# A small heap of its own: the client is not what is measured.
exec "$java" -Xmx512m -XX:+UseParallelGC -cp "$out:$lib/*" memliner.cassandra.Ycsb "$@"
