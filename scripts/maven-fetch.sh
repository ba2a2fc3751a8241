#!/usr/bin/env bash
# Fetches a Maven Central artifact and its runtime dependencies into DIR/lib, once (DIR/lib/.complete
# marks a finished fetch; mvn's output goes to DIR/mvn.log). For scripts/cassandra.sh and
# scripts/lucene.sh, which keep what they fetch in caches outside the checkout.
#
#   scripts/maven-fetch.sh GROUP:ARTIFACT:VERSION DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 GROUP:ARTIFACT:VERSION DIR" >&2; exit 2; }
IFS=: read -r group artifact version <<<"$1"
[ -n "$group" ] && [ -n "$artifact" ] && [ -n "$version" ] || { echo "maven-fetch.sh: '$1' is not GROUP:ARTIFACT:VERSION" >&2; exit 2; }
dir=$2
lib=$dir/lib
[ -f "$lib/.complete" ] && exit 0
command -v mvn >/dev/null || { echo "maven-fetch.sh: mvn is needed once to fetch $1 from Maven Central (apt-get install maven)" >&2; exit 2; }
mkdir -p "$dir"
cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memliner</groupId><artifactId>fetch</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>$group</groupId><artifactId>$artifact</artifactId><version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
echo "maven-fetch.sh: fetching $1 and its dependencies from Maven Central into $lib" >&2
rm -rf "$lib"
mvn -B -f "$dir/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$lib" >"$dir/mvn.log" 2>&1 \
  || { echo "maven-fetch.sh: mvn could not fetch $1 with its dependencies (log: $dir/mvn.log)" >&2; exit 2; }
[ -f "$lib/$artifact-$version.jar" ] || { echo "maven-fetch.sh: mvn finished but $lib holds no $artifact-$version.jar" >&2; exit 2; }
touch "$lib/.complete"
