#!/usr/bin/env bash
# The Lucene search workload (java/lucene/src/memliner/lucene/Search.java): fetches lucene-core
# from Maven Central into a cache outside the checkout ($MEMLINER_LUCENE_CACHE, default
# ~/.cache/memliner/lucene; mvn, once), compiles the workload into target/lucene-classes, and
# prints the classpath to run it with:
#
#   memliner run --local 25% -- java -XX:+UseG1GC -Xms1g -Xmx1g -cp "$(scripts/lucene.sh)" \
#       memliner.lucene.Search --docs 600000 --queries 20000
set -euo pipefail
cd "$(dirname "$0")/.."
version=9.12.3
cache=${MEMLINER_LUCENE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memliner/lucene}
lib=$cache/$version/lib
die() { echo "lucene.sh: $*" >&2; exit 2; }
scripts/maven-fetch.sh "org.apache.lucene:lucene-core:$version" "$cache/$version" \
  || die "lucene-core $version is not available from Maven Central here"
out=target/lucene-classes
src=java/lucene/src/memliner/lucene/Search.java
if [ ! -f "$out/memliner/lucene/Search.class" ] || [ "$src" -nt "$out/memliner/lucene/Search.class" ]; then
  mkdir -p "$out"
  ${JAVA_HOME:+$JAVA_HOME/bin/}javac -nowarn -d "$out" -cp "$lib/*" "$src"
fi
echo "$PWD/$out:$lib/*"
