#!/usr/bin/env bash
# Runs a command with HOOKLINE_TEST_BROKERS pointing at a real Kafka broker.
# Uses the one given in HOOKLINE_TEST_BROKERS, else a broker this project's
# kafka.sh already runs, else starts one and stops it again when the command
# ends (whatever its result), so `make test` leaves nothing running.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

if [ -n "${HOOKLINE_TEST_BROKERS:-}" ]; then
  echo "with-kafka: using HOOKLINE_TEST_BROKERS=$HOOKLINE_TEST_BROKERS" >&2
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
"$@"
