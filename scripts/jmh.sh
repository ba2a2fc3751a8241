#!/usr/bin/env bash
# The JMH suite in java/jmh, built with javac against Debian's libjmh-java jars, run with
# or without the memliner agent.
#
#   scripts/jmh.sh [--local 25%] [--policy memliner|baseline] [JMH options...]
#
# With --local, a memliner server is started on loopback for the run and the agent goes to
# the benchmark JVMs through -jvmArgsAppend. libjmh-java is only in Debian unstable: its
# packages are fetched with `apt-get download` through a private sources list into
# target/jmh (no change to the system's apt configuration), then unpacked there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work="$root/target/jmh"
local_pct="" policy=memliner
while [ $# -gt 0 ]; do
    case "$1" in
    --local) local_pct=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    *) break ;;
    esac
done

fetch() {
    local apt="$work/apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$work/debs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian unstable main" \
        >"$apt/sources.list"
    local o=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1
        -o APT::Sandbox::User=root)
    apt-get "${o[@]}" update -qq
    (cd "$work/debs" && apt-get "${o[@]}" download -qq libjmh-java libjoptsimple-java libcommons-math3-java)
    for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/root"; done
}

jars() {
    local j="$work/root/usr/share/java"
    echo "$j/jmh-core.jar:$j/jmh-generator-annprocess.jar:$j/joptsimple.jar:$j/commons-math3.jar"
}

[ -f "$work/root/usr/share/java/jmh-core.jar" ] || fetch
cp=$(jars)
classes="$work/classes"
src=$(find "$root/java/jmh/src" -name '*.java')
if [ ! -f "$classes/META-INF/BenchmarkList" ] || [ -n "$(find $src -newer "$classes/META-INF/BenchmarkList")" ]; then
    rm -rf "$classes" && mkdir -p "$classes"
    javac -cp "$cp" -processorpath "$cp" -d "$classes" $src 2>&1 | grep -v "^Note:" || true
    [ -f "$classes/META-INF/BenchmarkList" ] || { echo "the JMH annotation processor made no BenchmarkList" >&2; exit 1; }
fi

# The live set is sized for this heap; the command line's -jvmArgsAppend replaces the
# annotation's, so the heap is given here in both modes.
heap="-Xms96m -Xmx96m"
extra=(-jvmArgsAppend "$heap")
if [ -n "$local_pct" ]; then
    agent="$root/target/release/libmemliner_agent.so"
    memliner="$root/target/release/memliner"
    [ -f "$agent" ] && [ -x "$memliner" ] || { echo "build first: cargo build --release" >&2; exit 2; }
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$memliner" server --listen "127.0.0.1:$port" --capacity 4g &
    server=$!
    trap 'kill $server 2>/dev/null' EXIT
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    extra=(-jvmArgsAppend "$heap -agentpath:$agent=server=127.0.0.1:$port,local=$local_pct,policy=$policy,stats=$work/stats.json")
fi
java -cp "$classes:$cp" org.openjdk.jmh.Main "${extra[@]}" "$@"
