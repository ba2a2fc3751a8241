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
if [ ! -f "$lib/.complete" ]; then
  command -v mvn >/dev/null || die "mvn is needed once to fetch lucene-core $version from Maven Central (apt-get install maven)"
  mkdir -p "$cache/$version"
  cat >"$cache/$version/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memliner</groupId><artifactId>lucene-fetch</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.lucene</groupId><artifactId>lucene-core</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
  rm -rf "$lib"
  log=$cache/$version/mvn.log
  mvn -B -f "$cache/$version/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$lib" >"$log" 2>&1 \
    || die "mvn could not fetch org.apache.lucene:lucene-core:$version (log: $log)"
  touch "$lib/.complete"
fi
out=target/lucene-classes
src=java/lucene/src/memliner/lucene/Search.java
if [ ! -f "$out/memliner/lucene/Search.class" ] || [ "$src" -nt "$out/memliner/lucene/Search.class" ]; then
  mkdir -p "$out"
  ${JAVA_HOME:+$JAVA_HOME/bin/}javac -nowarn -d "$out" -cp "$lib/*" "$src"
fi
echo "$PWD/$out:$lib/*"
