#!/usr/bin/env bash
# Build a small Maven project once per pom + source hash into a cache outside the work tree and print its
# classpath (its classes + its runtime jars, colon-separated). The first build fetches the dependencies from
# Maven Central into ~/.m2; later builds of a changed project run offline.
#   maven_classpath.sh PROJECT_DIR CACHE_DIR LABEL           build if missing, print the classpath
#   maven_classpath.sh PROJECT_DIR CACHE_DIR LABEL --path    print the classpath if built, else exit 1
set -euo pipefail
here="$1" cache_root="$2" label="$3"
hash="$(cd "$here" && cat pom.xml $(find src -type f | sort) | sha256sum | cut -c1-12)"
cache="$cache_root/$hash"
classpath() { echo "$cache/classes:$cache/lib/*"; }
if [[ -f "$cache/.complete" ]]; then classpath; exit 0; fi
[[ "${4:-}" == "--path" ]] && exit 1
command -v mvn >/dev/null || { echo "$label: needs Maven (mvn) and a JDK 17" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/pom.xml" "$here/src" "$work/"
echo "$label: building $hash (first time: fetches its dependencies from Maven Central)" >&2
if ! (cd "$work" && mvn -q -B -o package -DskipTests >"$work/build.log" 2>&1); then
  (cd "$work" && mvn -q -B package -DskipTests >"$work/build.log" 2>&1) || {
    echo "$label: maven build failed:" >&2; tail -30 "$work/build.log" >&2; exit 1; }
fi
rm -rf "$cache.building" && mkdir -p "$cache.building"
cp -r "$work/target/classes" "$work/target/lib" "$cache.building/"
rm -rf "$cache" && mv "$cache.building" "$cache" && touch "$cache/.complete"
classpath
