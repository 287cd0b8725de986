#!/usr/bin/env bash
# Build RocketMQ 4.9.7 (broker, name server, tools, client) and the bench driver once per pom + source hash into a
# cache outside the work tree; print its classpath (driver classes + RocketMQ jars, colon-separated). The first
# build fetches RocketMQ from Maven Central into ~/.m2; later builds of a changed driver run offline.
#   build.sh            build if missing, print the classpath
#   build.sh --path     print the classpath if built, else exit 1
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
hash="$(cd "$here" && cat pom.xml $(find src -type f | sort) | sha256sum | cut -c1-12)"
cache="${RAFTMQ_BENCH_DLEDGER_CACHE:-$HOME/.cache/raftmq-bench/rocketmq-dledger}/$hash"
classpath() { echo "$cache/classes:$cache/lib/*"; }
if [[ -f "$cache/.complete" ]]; then classpath; exit 0; fi
[[ "${1:-}" == "--path" ]] && exit 1
command -v mvn >/dev/null || { echo "rocketmq dledger bench: needs Maven (mvn) and a JDK 17" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/pom.xml" "$here/src" "$work/"
echo "rocketmq dledger bench: building $hash (first time: fetches RocketMQ 4.9.7 from Maven Central)" >&2
if ! (cd "$work" && mvn -q -B -o package -DskipTests >"$work/build.log" 2>&1); then
  (cd "$work" && mvn -q -B package -DskipTests >"$work/build.log" 2>&1) || {
    echo "rocketmq dledger bench: maven build failed:" >&2; tail -30 "$work/build.log" >&2; exit 1; }
fi
rm -rf "$cache.building" && mkdir -p "$cache.building"
cp -r "$work/target/classes" "$work/target/lib" "$cache.building/"
rm -rf "$cache" && mv "$cache.building" "$cache" && touch "$cache/.complete"
classpath
