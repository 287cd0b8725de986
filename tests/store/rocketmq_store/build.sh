#!/usr/bin/env bash
# Build the RocketMQ 4.9.8 store reader (tests/store/rocketmq_store) once per pom + source hash into
# ~/.cache/raftmq/rocketmq-store-reader and print its classpath (tests/support/maven_classpath.sh).
#   build.sh            build if missing, print the classpath
#   build.sh --path     print the classpath if built, else exit 1
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../support/maven_classpath.sh" "$here" \
  "${RAFTMQ_ROCKETMQ_STORE_CACHE:-$HOME/.cache/raftmq/rocketmq-store-reader}" "rocketmq store reader" "$@"
