#!/usr/bin/env bash
# Build the RocketMQ 5 Java client driver (tests/rocketmq5/java) once per pom + source hash into
# ~/.cache/raftmq/rmq5-java-driver and print its classpath (tests/support/maven_classpath.sh).
#   build.sh            build if missing, print the classpath
#   build.sh --path     print the classpath if built, else exit 1
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../support/maven_classpath.sh" "$here" "${RAFTMQ_RMQ5_JAVA_CACHE:-$HOME/.cache/raftmq/rmq5-java-driver}" \
  "rmq5 java driver" "$@"
