#!/usr/bin/env bash
# One Apache Cassandra node in the foreground on loopback, its data in the Java heap (memtables
# as heap buffers), for memliner to page:
#
#   memliner run --local 25% --agent-env MEMLINER_AGENT_OPTS -- scripts/cassandra.sh --heap 2g
#
# Options: --heap SIZE (-Xms = -Xmx; default 2g), --port N (CQL; default 9042), --storage-port N
# (the node's own; default CQL port + 1), --data DIR (default $TMPDIR/memliner-cassandra-PORT,
# emptied first unless --keep), --gc G1|Shenandoah (default G1), --no-mlock (Cassandra locks its
# memory at start, mlockall, against swap: this lets that fail, as for a user who runs it beside
# kernel swap; the bench runs every cell so), --fetch (only fetch, print the classpath directory). The JVM options Cassandra's launcher would add come from
# $MEMLINER_AGENT_OPTS (what `memliner run --agent-env` sets) and $JVM_EXTRA_OPTS (what
# Cassandra's own bin/cassandra reads too). The node is ready when CQL answers on the port
# (scripts/ycsb.sh waits for it); SIGTERM stops it cleanly (Cassandra drains on its shutdown
# hook). Java: $JAVA_HOME/bin/java, else java on the PATH (17; Cassandra 5.0 runs on 11 and 17).
#
# Cassandra's server jar and its dependencies come from Maven Central (mvn) into a cache outside
# the checkout: $MEMLINER_CASSANDRA_CACHE, default ~/.cache/memliner/cassandra. Nothing of it is
# committed. The configuration is written next to the data; it is Cassandra's defaults but for
# loopback, the ports, memtable_allocation_type: heap_buffers with half the heap for memtables (so
# that the heap, not files, holds what the load wrote), request timeouts of 20 s (a paged node
# is slower to answer the first reads) and no JMX port.
set -euo pipefail

version=5.0.8
cache=${MEMLINER_CASSANDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memliner/cassandra}
lib=$cache/$version/lib

die() { echo "cassandra.sh: $*" >&2; exit 2; }

heap=2g port=9042 storage_port= data= gc=G1 fetch_only=0 keep=0 mlock=1
while [ $# -gt 0 ]; do
  case $1 in
    --heap) heap=${2:?--heap needs a size}; shift 2 ;;
    --port) port=${2:?--port needs a number}; shift 2 ;;
    --storage-port) storage_port=${2:?--storage-port needs a number}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --gc) gc=${2:?--gc needs G1 or Shenandoah}; shift 2 ;;
    --keep) keep=1; shift ;;
    --no-mlock) mlock=0; shift ;;
    --fetch) fetch_only=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $heap =~ ^[0-9]+[kKmMgG]$ ]] || die "--heap takes a size such as 2g or 1536m, not '$heap'"
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -gt 0 ] && [ "$port" -lt 65535 ] || die "bad --port '$port'"
storage_port=${storage_port:-$((port + 1))}
[[ $storage_port =~ ^[0-9]+$ ]] && [ "$storage_port" -lt 65536 ] || die "bad --storage-port '$storage_port'"
case $gc in
  G1|g1) gc_opts=(-XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1 -XX:G1RSetUpdatingPauseTimePercent=5 -XX:MaxGCPauseMillis=300 -XX:InitiatingHeapOccupancyPercent=70) ;;
  Shenandoah|shenandoah) gc_opts=(-XX:+UseShenandoahGC) ;;
  *) die "--gc takes G1 or Shenandoah, not '$gc'" ;;
esac

# --- the jars, once ---------------------------------------------------------------------------
"$(dirname "$0")/maven-fetch.sh" "org.apache.cassandra:cassandra-all:$version" "$cache/$version" \
  || die "Cassandra $version is not available from Maven Central here"
if [ "$fetch_only" = 1 ]; then
  echo "$lib"
  exit 0
fi

# --- configuration and data -------------------------------------------------------------------
data=${data:-${TMPDIR:-/tmp}/memliner-cassandra-$port}
[ "$keep" = 1 ] || rm -rf "$data"
mkdir -p "$data/conf" "$data/triggers"
data=$(cd "$data" && pwd)
heap_mb=$(( $(numfmt --from=iec "${heap^^}") / 1048576 ))
cat >"$data/conf/cassandra.yaml" <<EOF
cluster_name: memliner
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$storage_port"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $storage_port
native_transport_port: $port
start_native_transport: true
endpoint_snitch: SimpleSnitch
data_file_directories: [$data/data]
commitlog_directory: $data/commitlog
saved_caches_directory: $data/saved_caches
hints_directory: $data/hints
cdc_raw_directory: $data/cdc_raw
memtable_allocation_type: heap_buffers
memtable_heap_space: $((heap_mb / 2))MiB
read_request_timeout: 20000ms
range_request_timeout: 20000ms
write_request_timeout: 20000ms
request_timeout: 20000ms
EOF
cat >"$data/conf/logback.xml" <<'EOF'
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter"><level>WARN</level></filter>
    <encoder><pattern>cassandra: %-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
EOF

# What Cassandra's conf/jvm17-server.options opens to itself on Java 17.
opens=()
for p in java.base/jdk.internal.misc java.base/jdk.internal.ref java.base/sun.nio.ch \
         java.management.rmi/com.sun.jmx.remote.internal.rmi java.rmi/sun.rmi.registry \
         java.rmi/sun.rmi.server java.sql/java.sql java.base/java.lang.ref jdk.unsupported/sun.misc; do
  opens+=(--add-exports "$p=ALL-UNNAMED")
done
for p in java.base/java.lang.module java.base/jdk.internal.loader java.base/jdk.internal.ref \
         java.base/jdk.internal.reflect java.base/jdk.internal.math java.base/jdk.internal.module \
         java.base/jdk.internal.util.jar jdk.management/com.sun.management.internal \
         java.base/sun.nio.ch java.base/java.io java.base/java.nio java.base/java.util.concurrent \
         java.base/java.util java.base/java.util.concurrent.atomic java.base/java.lang \
         java.base/java.math java.base/java.lang.reflect java.base/java.net; do
  opens+=(--add-opens "$p=ALL-UNNAMED")
done

java=${JAVA_HOME:+$JAVA_HOME/bin/}java
# shellcheck disable=SC2206 # the option strings are word lists, as Cassandra's launcher reads them
extra=(${MEMLINER_AGENT_OPTS:-} ${JVM_EXTRA_OPTS:-})
# With --no-mlock: no memory lock allowed (root locks past any limit unless it drops
# CAP_IPC_LOCK, here from the bounding set the JVM's capabilities come from).
lock=()
if [ "$mlock" = 0 ]; then
  ulimit -l 0
  if [ "$(id -u)" = 0 ]; then
    command -v setpriv >/dev/null || die "--no-mlock as root needs setpriv (util-linux)"
    lock=(setpriv --bounding-set=-ipc_lock --)
  fi
fi
# exec: SIGTERM reaches the JVM itself, whose shutdown hook drains the node.
exec "${lock[@]}" "$java" -Xms"$heap" -Xmx"$heap" "${gc_opts[@]}" -Xss256k -XX:+CrashOnOutOfMemoryError \
  "${opens[@]}" -Djdk.attach.allowAttachSelf=true -javaagent:"$lib/jamm-0.4.0.jar" \
  -Dcassandra.config="file://$data/conf/cassandra.yaml" \
  -Dlogback.configurationFile="$data/conf/logback.xml" \
  -Dcassandra-foreground=yes -Dcassandra.storagedir="$data" -Dcassandra.triggers_dir="$data/triggers" \
  "${extra[@]}" -cp "$lib/*" org.apache.cassandra.service.CassandraDaemon
