#!/usr/bin/env bash
# Runs a command with HOOKLINE_TEST_BROKERS pointing at a real Kafka broker.
# Uses the one given in HOOKLINE_TEST_BROKERS, else a broker this project's
# kafka.sh already runs, else starts one and stops it again when the command
# ends (whatever its result), so `make test` leaves nothing running.
#
# It also exports the broker's secured listeners (`kafka.sh secure-env`:
# HOOKLINE_TEST_SASL_BROKERS, HOOKLINE_TEST_MTLS_BROKERS, users, password
# files, CA and client certificate) and HOOKLINE_TEST_SECURE_REQUIRED=1, so the
# secured tests fail rather than skip when that environment is missing. A
# broker given in HOOKLINE_TEST_BROKERS must come with its HOOKLINE_TEST_SASL_*
# and HOOKLINE_TEST_MTLS_* variables, unless it is the one kafka.sh runs.
# For the broker kafka.sh runs it exports HOOKLINE_KAFKA_GC_LOG (`kafka.sh
# gc-log`), which hookline-bench reads.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export HOOKLINE_TEST_SECURE_REQUIRED=1

# The broker's GC log, for hookline-bench (HOOKLINE_KAFKA_GC_LOG).
gc_log() {
  local path
  if [ -z "${HOOKLINE_KAFKA_GC_LOG:-}" ] && path="$(bash "$here/kafka.sh" gc-log 2>/dev/null)"; then
    export HOOKLINE_KAFKA_GC_LOG="$path"
  fi
}

secure_env() {
  local env
  if [ -n "${HOOKLINE_TEST_SASL_BROKERS:-}" ]; then
    return 0
  fi
  if env="$(bash "$here/kafka.sh" secure-env)"; then
    eval "$env"
  else
    echo "with-kafka: no secured listeners known for $HOOKLINE_TEST_BROKERS; the secured tests will fail" >&2
  fi
}

if [ -n "${HOOKLINE_TEST_BROKERS:-}" ]; then
  echo "with-kafka: using HOOKLINE_TEST_BROKERS=$HOOKLINE_TEST_BROKERS" >&2
  if [ -z "${HOOKLINE_TEST_SASL_BROKERS:-}" ] && \
     [ "$(bash "$here/kafka.sh" bootstrap 2>/dev/null || true)" = "$HOOKLINE_TEST_BROKERS" ]; then
    secure_env
    gc_log
  fi
  exec "$@"
fi

started=0
if ! bootstrap="$(bash "$here/kafka.sh" status 2>/dev/null)"; then
  started=1
  bootstrap="$(bash "$here/kafka.sh" up)"
fi
cleanup() {
  if [ "$started" = 1 ] && [ -z "${HOOKLINE_KEEP_KAFKA:-}" ]; then
    bash "$here/kafka.sh" down >&2 || true
  fi
}
trap cleanup EXIT
echo "with-kafka: real Kafka broker at $bootstrap" >&2
export HOOKLINE_TEST_BROKERS="$bootstrap"
secure_env
gc_log
"$@"
