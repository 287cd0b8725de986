#!/usr/bin/env bash
# Build RocketMQ 4.9.7 (broker, name server, tools, client) and the bench driver once per pom + source hash into
# ~/.cache/raftmq-bench/rocketmq-dledger and print its classpath (tests/support/maven_classpath.sh).
#   build.sh            build if missing, print the classpath
#   build.sh --path     print the classpath if built, else exit 1
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../tests/support/maven_classpath.sh" "$here" \
  "${RAFTMQ_BENCH_DLEDGER_CACHE:-$HOME/.cache/raftmq-bench/rocketmq-dledger}" "rocketmq dledger bench" "$@"
