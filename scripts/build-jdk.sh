#!/usr/bin/env bash
# Builds the GC-hook patched JDK 17 into target/jdk-memliner/.
#
# The source is Debian's openjdk-17 package, fetched through a private apt configuration (the
# system's sources are not changed); gc-hooks/hotspot/jdk17/series is applied to it; only
# HotSpot is built. The JDK around it is Debian's binary package of the same version, with the
# patched lib/server/libjvm.so and regenerated CDS archives. Debian drops old versions from its
# archive: the newest version whose source and binaries both download is built.
#
# Cache (outside the repository): $MEMLINER_JDK_CACHE, default ~/.cache/memliner/jdk. It keeps
# the source and build trees per version (warm rebuilds take a few minutes with ccache) and the
# built libjvm.so keyed by version and patch hash (a hit assembles the JDK in seconds).
#
# Usage: scripts/build-jdk.sh [--check] [--jobs N]
#   --check   apply the series to a fresh copy of the source and stop (no build)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
patches=$repo/gc-hooks/hotspot/jdk17
out=$repo/target/jdk-memliner
cache=${MEMLINER_JDK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memliner/jdk}
jobs=$(nproc)
check_only=false
while [ $# -gt 0 ]; do
  case $1 in
    --check) check_only=true ;;
    --jobs) jobs=$2; shift ;;
    *) echo "build-jdk.sh: unknown argument '$1' (usage: build-jdk.sh [--check] [--jobs N])" >&2; exit 2 ;;
  esac
  shift
done
say() { printf '[build-jdk %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# --- a private apt configuration (lists and downloads under the cache) -----------------------
apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/sources.list" <<'EOF'
deb-src http://deb.debian.org/debian-security bookworm-security main
deb-src http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian-security bookworm-security main
deb http://deb.debian.org/debian bookworm main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root -q)
if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*Sources*' -mmin -720 2>/dev/null | head -1)" ]; then
  say "updating the private package lists"
  apt-get "${apt_opts[@]}" update >/dev/null || die "apt-get update failed (is deb.debian.org reachable?)"
fi

# --- the newest version with both source and binaries downloadable --------------------------
abi_header=$repo/gc-hooks/include/memliner.h
abi_dest=src/hotspot/share/gc/shared/memliner.h  # where the patches include it from
patch_hash=$(cd "$patches" && cat series $(grep -v '^#' series) "$abi_header" | sha256sum | cut -c1-16)
version=""
for v in $(apt-cache "${apt_opts[@]}" madison openjdk-17 | awk -F'|' '$3 ~ /Sources/ { gsub(/ /, "", $2); print $2 }' | sort -urV); do
  src=$cache/src/$v
  if [ -f "$src/.complete" ]; then version=$v; break; fi
  mkdir -p "$src" && cd "$src"
  say "fetching openjdk-17 $v (source and binary packages)"
  if apt-get "${apt_opts[@]}" source --download-only "openjdk-17=$v" >/dev/null 2>&1 &&
     apt-get "${apt_opts[@]}" download "openjdk-17-jre-headless=$v" "openjdk-17-jdk-headless=$v" >/dev/null 2>&1; then
    touch .complete; version=$v; cd "$repo"; break
  fi
  say "openjdk-17 $v is listed but does not download; trying an older one"
  cd "$repo"; rm -rf "$src"
done
[ -n "$version" ] || die "no openjdk-17 version downloads from the archive"
src=$cache/src/$version
say "openjdk-17 $version, patch series $patch_hash"

# --- apply the series to a fresh copy (the --check mode, and the first step of a build) ------
apply_series() { # $1 = tree
  local n=0
  while read -r p; do
    case $p in ''|'#'*) continue ;; esac
    patch -d "$1" -p1 --forward --batch --no-backup-if-mismatch -s -F 0 <"$patches/$p" >"$cache/patch.log" 2>&1 ||
      { cat "$cache/patch.log" >&2; die "$p does not apply cleanly to openjdk-17 $version"; }
    n=$((n + 1))
  done <"$patches/series"
  cp "$abi_header" "$1/$abi_dest"
  say "$n patches applied cleanly"
}
patched_files() {
  { grep -h '^+++ ' $(sed -e '/^#/d' -e '/^$/d' -e "s|^|$patches/|" "$patches/series") | awk '{ sub(/^[^\/]*\//, "", $2); print $2 }'
    echo "$abi_dest"; } | sort -u
}

pristine=$cache/pristine/$version
if [ ! -f "$pristine/.complete" ]; then
  say "unpacking the source"
  rm -rf "$pristine"; mkdir -p "$(dirname "$pristine")"
  dpkg-source --no-check -x "$src"/openjdk-17_*.dsc "$pristine" >/dev/null
  touch "$pristine/.complete"
fi
# The series applied to pristine copies of the files it touches, in a scratch tree.
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
patched_files | while read -r f; do
  if [ -e "$pristine/$f" ]; then mkdir -p "$scratch/$(dirname "$f")"; cp -p "$pristine/$f" "$scratch/$f"; fi
done
apply_series "$scratch"
if $check_only; then
  exit 0
fi

# --- build (or take the cached libjvm.so) -----------------------------------------------------
built=$cache/libjvm/$version-$patch_hash/libjvm.so
if [ ! -f "$built" ]; then
  need=()
  for pkg in autoconf zip unzip file ccache libcups2-dev libasound2-dev libxtst-dev libxt-dev \
             libxrender-dev libxrandr-dev libxi-dev libfontconfig-dev libfreetype-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    say "installing build dependencies: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; } ||
      die "cannot install the build dependencies (${need[*]}): run as root with Debian's archive reachable"
  fi
  work=$cache/work/$version
  if [ ! -d "$work" ]; then
    say "copying the source tree"
    mkdir -p "$(dirname "$work")"; cp -a "$pristine" "$work"
  fi
  # Bring the work tree to pristine + this series, writing only the files that differ (the
  # others keep their times, so make recompiles only what changed).
  { [ -f "$work/.memliner-files" ] && cat "$work/.memliner-files"; patched_files; } | sort -u | while read -r f; do
    if [ -e "$scratch/$f" ]; then
      cmp -s "$scratch/$f" "$work/$f" || { mkdir -p "$work/$(dirname "$f")"; cp "$scratch/$f" "$work/$f"; }
    elif [ -e "$pristine/$f" ]; then
      cmp -s "$pristine/$f" "$work/$f" || cp -p "$pristine/$f" "$work/$f"
    else
      rm -f "$work/$f"
    fi
  done
  patched_files >"$work/.memliner-files"
  boot=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
  export CCACHE_DIR=$cache/ccache CCACHE_SLOPPINESS=time_macros,include_file_mtime,include_file_ctime CCACHE_MAXSIZE=4G
  if [ ! -f "$work/build/memliner/spec.gmk" ]; then
    say "configuring (boot JDK $boot)"
    (cd "$work" && bash configure --with-conf-name=memliner --with-boot-jdk="$boot" \
      --with-debug-level=release --with-native-debug-symbols=none --with-jvm-variants=server \
      --disable-warnings-as-errors --disable-precompiled-headers --enable-ccache \
      --with-pcsclite=bundled --enable-headless-only \
      --with-version-string="$(echo "$version" | sed -E 's/^([0-9.]+)\+([0-9]+).*/\1+\2/')" \
      --with-version-opt=memliner --with-vendor-name=memliner \
      >"$cache/configure.log" 2>&1) || { tail -30 "$cache/configure.log" >&2; die "configure failed (log: $cache/configure.log)"; }
  fi
  say "building HotSpot with $jobs jobs (cold: 15-35 minutes; warm with ccache: a few)"
  start=$(date +%s)
  stamp=$cache/make.stamp; : >"$stamp"
  objs=$work/build/memliner/hotspot/variant-server/libjvm/objs
  (cd "$work" && make CONF=memliner JOBS="$jobs" hotspot >"$cache/make.log" 2>&1) &
  make_pid=$!
  # Progress once a minute: objects compiled since the start, of the objects a whole build has
  # (make does not say how many of them a change makes it rebuild).
  # (On a cold build the folder does not exist yet: find fails, and under pipefail so would the
  # assignment, ending the script while make goes on alone.)
  whole=$(find "$objs" -name '*.o' 2>/dev/null | wc -l || true)
  while kill -0 "$make_pid" 2>/dev/null; do
    sleep 5
    if [ $(( ($(date +%s) - start) % 60 )) -lt 5 ]; then
      done_n=$(find "$objs" -name '*.o' -newer "$stamp" 2>/dev/null | wc -l || true)
      if [ "$whole" -gt 0 ]; then of="of the $whole a whole build compiles"; else of="(a first build)"; fi
      say "  compiled $done_n objects $of ($(( ($(date +%s) - start) / 60 )) min)"
    fi
  done
  wait "$make_pid" ||
    { grep -E "error|Error" "$cache/make.log" | head -30 >&2; die "make hotspot failed (log: $cache/make.log)"; }
  say "HotSpot built in $(( $(date +%s) - start )) s"
  lib=$(find "$work/build/memliner" -path '*/hotspot/variant-server/libjvm/objs/libjvm.so' -o -path '*/support/modules_libs/java.base/server/libjvm.so' | head -1)
  [ -n "$lib" ] || die "the build produced no libjvm.so"
  mkdir -p "$(dirname "$built")"; cp "$lib" "$built.tmp"; mv "$built.tmp" "$built"
fi

# --- assemble the JDK -------------------------------------------------------------------------
say "assembling $out"
t=$(mktemp -d); trap 'rm -rf "$t" "$scratch"' EXIT
for deb in "$src"/openjdk-17-jre-headless_*.deb "$src"/openjdk-17-jdk-headless_*.deb; do
  dpkg-deb -x "$deb" "$t"
done
home=$t/usr/lib/jvm/java-17-openjdk-amd64
[ -d "$home" ] || home=$(find "$t/usr/lib/jvm" -maxdepth 1 -mindepth 1 -type d | head -1)
# Debian links configuration into /etc/java-17-openjdk: take the package's own copies, so the
# JDK does not depend on whatever version the system has installed.
find "$home" -type l -lname '/etc/java-17-openjdk/*' | while read -r l; do
  target=$t$(readlink "$l"); rm "$l"; [ -e "$target" ] && cp -pL "$target" "$l"
done
cp "$built" "$home/lib/server/libjvm.so"
rm -f "$home/lib/server/classes.jsa" "$home/lib/server/classes_nocoops.jsa"
"$home/bin/java" -Xshare:dump -Xlog:cds=off >/dev/null 2>&1 || die "CDS dump failed"
"$home/bin/java" -XX:-UseCompressedOops -Xshare:dump -Xlog:cds=off >/dev/null 2>&1 || die "CDS dump (no compressed oops) failed"
# HotSpot's WhiteBox API, whose Java side ships only in the source's test library: the tests use
# it to run a full GC while concurrent marking runs (-Xbootclasspath/a:lib/memliner-whitebox.jar
# -XX:+UnlockDiagnosticVMOptions -XX:+WhiteBoxAPI).
mkdir -p "$t/whitebox"
"$home/bin/javac" -nowarn -d "$t/whitebox" $(find "$pristine/test/lib/jdk/test/whitebox" -name '*.java') >"$t/javac.log" 2>&1 ||
  { cat "$t/javac.log" >&2; die "cannot compile the WhiteBox API from $pristine/test/lib"; }
"$home/bin/jar" cf "$home/lib/memliner-whitebox.jar" -C "$t/whitebox" .
echo "$version+$patch_hash" >"$home/memliner-jdk"
rm -rf "$out.new"; mkdir -p "$(dirname "$out")"; mv "$home" "$out.new"
rm -rf "$out"; mv "$out.new" "$out"
"$out/bin/java" -XX:+UnlockDiagnosticVMOptions -XX:+PrintFlagsFinal -version 2>/dev/null | grep -q MemLinerLineUp ||
  die "the assembled JVM has no MemLinerLineUp flag"
say "done: $out ($("$out/bin/java" -version 2>&1 | tail -1))"
