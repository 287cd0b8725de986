#!/usr/bin/env bash
# Build the RocketMQ 5 Java client driver (tests/rocketmq5/java) once per pom + source hash into a cache outside
# the work tree; print its classpath (driver classes + the client's jars, ':'-separated). The first build fetches
# the client from Maven Central into ~/.m2; later builds of a changed driver run offline.
#   build.sh            build if missing, print the classpath
#   build.sh --path     print the classpath if built, else exit 1
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
hash="$(cd "$here" && cat pom.xml $(find src -type f | sort) | sha256sum | cut -c1-12)"
cache="${RAFTMQ_RMQ5_JAVA_CACHE:-$HOME/.cache/raftmq/rmq5-java-driver}/$hash"
classpath() { echo "$cache/classes:$cache/lib/*"; }
if [[ -f "$cache/.complete" ]]; then classpath; exit 0; fi
[[ "${1:-}" == "--path" ]] && exit 1
command -v mvn >/dev/null || { echo "rmq5 java driver: needs Maven (mvn) and a JDK 17" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/pom.xml" "$here/src" "$work/"
echo "rmq5 java driver: building $hash (first time: fetches rocketmq-client-java from Maven Central)" >&2
if ! (cd "$work" && mvn -q -B -o package -DskipTests >"$work/build.log" 2>&1); then
  (cd "$work" && mvn -q -B package -DskipTests >"$work/build.log" 2>&1) || {
    echo "rmq5 java driver: maven build failed:" >&2; tail -30 "$work/build.log" >&2; exit 1; }
fi
rm -rf "$cache.building" && mkdir -p "$cache.building"
cp -r "$work/target/classes" "$work/target/lib" "$cache.building/"
rm -rf "$cache" && mv "$cache.building" "$cache" && touch "$cache/.complete"
classpath
