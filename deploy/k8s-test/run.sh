#!/usr/bin/env bash
# `make k8s-test`: the Helm chart on a real single-node Kubernetes
# (deploy/dev/k8s.sh) with the image `make image` builds and the broker of
# deploy/dev/kafka.sh. Checks, in order:
#   1. `helm install` completes: the topics hook Job ran to completion (helm
#      waits for it and fails otherwise; its Completed event is checked) and
#      the three Deployments are Ready through their real probes, no restarts;
#   2. a subscription put and an event published reach a receiver on the host
#      (deploy/dev/receiver.py), which verifies the Standard Webhooks signature
#      with the `standardwebhooks` package;
#   3. `helm upgrade` with a changed dispatcher value rolls the dispatcher (and
#      only it) while events are published throughout, and every one of them
#      is delivered and verified;
#   4. `helm uninstall` leaves nothing of the release but the archive's claim,
#      which the chart keeps on purpose (then deleted here).
# Every pod's logs, the cluster's parts' logs and the objects are copied to
# $TARGET_DIR/k8s-test/logs-<time> on failure (and with HOOKLINE_K8S_TEST_LOGS=1).
# HOOKLINE_K8S_KEEP=1 leaves the cluster up afterwards (`deploy/dev/k8s.sh down`).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
start=$SECONDS
K8S=deploy/dev/k8s.sh
KAFKA=deploy/dev/kafka.sh
NS=hookline-k8s-test
RELEASE=hookline
target=${CARGO_TARGET_DIR:-$repo/target}
out=$target/k8s-test
run_id=$(date -u +%Y%m%dT%H%M%S)
prefix="k8s$run_id."
GATEWAY=${HOOKLINE_K8S_GATEWAY:-10.88.0.1}
PYTHON=.venv/bin/python
log() { printf 'k8s-test: [%4ds] %s\n' "$((SECONDS - start))" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root (kubelet and containerd need it)"
[ -x "$PYTHON" ] || fail "run 'make venv' first (standardwebhooks for the receiver)"
helm=$(bash deploy/helm/helm.sh)
mkdir -p "$out"
rm -f "$out"/receiver.log "$out"/published

receiver_pid=
publisher_pid=
linker_pid=
started_kafka=
finish() {
  local rc=$?
  set +e
  [ -n "$publisher_pid" ] && kill "$publisher_pid" 2> /dev/null
  [ -n "$linker_pid" ] && kill "$linker_pid" 2> /dev/null
  local d=$out/logs-$run_id
  if [ "$rc" != 0 ] || [ -n "${HOOKLINE_K8S_TEST_LOGS:-}" ]; then
    log "keeping every log in $d"
    bash $K8S logs "$d" > /dev/null 2>&1
    cp "$out"/receiver.log "$out"/published "$out"/*.out "$d/" 2> /dev/null
  fi
  [ -n "$receiver_pid" ] && kill "$receiver_pid" 2> /dev/null
  [ "$rc" = 0 ] && [ -z "${HOOKLINE_K8S_TEST_LOGS:-}" ] && rm -rf "$d"
  if [ -z "${HOOKLINE_K8S_KEEP:-}" ]; then
    bash $K8S down
    [ -n "$started_kafka" ] && bash $KAFKA down
  else
    log "HOOKLINE_K8S_KEEP: the cluster stays up (deploy/dev/k8s.sh down stops it)"
  fi
  if [ "$rc" = 0 ]; then log "PASS in $((SECONDS - start))s"; else log "FAILED after $((SECONDS - start))s"; fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 143' TERM INT

log "building the image (make image)"
bash deploy/dev/k8s-image.sh
fanout_cli=$target/release/hookline-fanout

bash $KAFKA status > /dev/null 2>&1 || started_kafka=1
bootstrap=$(bash $KAFKA up)
log "Kafka at $bootstrap"
export HOOKLINE_BROKERS=$bootstrap HOOKLINE_TOPIC_PREFIX=$prefix

bash $K8S forward "${bootstrap##*:}"
bash $K8S up > /dev/null
bash $K8S import "$target/image/hookline.tar"
k() { bash $K8S kubectl "$@"; }
# Every container's log, kept from the moment it appears (see k8s.sh link-logs).
(while sleep 1; do bash $K8S link-logs "$out/logs-$run_id/pods"; done) > /dev/null 2>&1 &
linker_pid=$!
k create namespace "$NS" > /dev/null

# ------------------------------------------------------------- dry runs ----
# Every values file of the offline chart tests, rendered and applied with
# --dry-run=server: the API server's own validation and admission of each
# object (the operators' kinds, whose CRDs are not installed, left out).
log "server-side dry run of every deploy/helm/tests/values rendering"
mkdir -p "$out/dry-run"
for f in deploy/helm/tests/values/*.yaml; do
  name=$(basename "$f" .yaml)
  "$helm" template "$RELEASE" deploy/helm/hookline -n "$NS" -f "$f" --kube-version "${K8S_VERSION:-v1.34.4}" |
    "$PYTHON" -c '
import sys, yaml
crds = {"PodMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication", "KafkaTopic"}
docs = [d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] not in crds]
yaml.safe_dump_all(docs, sys.stdout)' > "$out/dry-run/$name.yaml"
  k -n "$NS" apply --dry-run=server -f "$out/dry-run/$name.yaml" > "$out/dry-run/$name.out" 2>&1 ||
    { cat "$out/dry-run/$name.out" >&2; fail "the API server refuses the rendering of $f"; }
done
log "$(ls "$out"/dry-run/*.out | wc -l) renderings accepted by the API server"

# The archive's volume: a hostPath PersistentVolume of the claim's class, owned
# by the pods' uid (there is no provisioner on this cluster).
pv_dir=$repo/.cache/k8s-run/pv-archive
mkdir -p "$pv_dir"
chown 65532:65532 "$pv_dir"
k apply -f - > /dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: hookline-k8s-test-archive}
spec:
  storageClassName: hookline-k8s-test
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $pv_dir, type: Directory}
EOF

secret="whsec_$(head -c 32 /dev/urandom | base64 -w0)"
printf '%s\n' "$secret" > "$out/secrets"
k -n "$NS" create secret generic hookline-k8s-test-signing --from-literal=k8s-test="$secret" > /dev/null

# The receiver on the node's bridge address, which pods reach.
rport=$("$PYTHON" -c "import socket; s=socket.socket(); s.bind(('$GATEWAY', 0)); print(s.getsockname()[1])")
"$PYTHON" deploy/dev/receiver.py --listen "$GATEWAY:$rport" --secrets "$out/secrets" > "$out/receiver.log" 2>&1 &
receiver_pid=$!

# ---------------------------------------------------------------- install --
log "helm install (the topics hook first, then the Deployments Ready)"
"$helm" install "$RELEASE" deploy/helm/hookline -n "$NS" --kubeconfig "$repo/.cache/k8s-run/pki/admin.kubeconfig" \
  -f deploy/k8s-test/values.yaml --set kafka.bootstrapServers="$bootstrap" --set topics.prefix="$prefix" \
  --wait --timeout 6m > "$out/install.out" || { cat "$out/install.out" >&2; fail "helm install"; }
grep -q "PersistentVolumeClaim $RELEASE-dlq-sink-archive" "$out/install.out" || fail "NOTES do not name the archive's claim"
# The hook Job is deleted once it succeeded (hook-delete-policy); its events stay.
k -n "$NS" get events --field-selector "involvedObject.kind=Job,involvedObject.name=$RELEASE-topics,reason=Completed" -o name |
  grep -q . || fail "no Completed event of the topics hook Job"
deployments=("$RELEASE-fanout" "$RELEASE-dispatcher" "$RELEASE-dlq-sink")
for d in "${deployments[@]}"; do
  k -n "$NS" rollout status "deploy/$d" --timeout 120s > /dev/null || fail "$d not rolled out"
  ready=$(k -n "$NS" get deploy "$d" -o jsonpath='{.status.readyReplicas}/{.spec.replicas}')
  [ "${ready%/*}" = "${ready#*/}" ] || fail "$d: $ready ready"
  log "$d ready $ready"
done
restarts=$(k -n "$NS" get pods -o jsonpath='{range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount}{"\n"}{end}' | grep -v '=0$' || true)
[ -z "$restarts" ] || fail "containers restarted: $restarts"
k -n "$NS" get pvc "$RELEASE-dlq-sink-archive" -o jsonpath='{.status.phase}' | grep -qx Bound || fail "the archive's claim is not Bound"

# --------------------------------------------------------------- delivery --
# received_all FILE: every body in FILE (one per line) has a verified webhook.
received_all() {
  "$PYTHON" - "$1" "$out/receiver.log" <<'PY'
import sys
want = {l.strip() for l in open(sys.argv[1]) if l.strip()}
got = {}
for line in open(sys.argv[2]):
    if line.startswith("verified "):
        body = line.split(" ", 2)[2].strip()
        got[body] = got.get(body, 0) + 1
missing = want - set(got)
print(f"{len(want) - len(missing)}/{len(want)} received, {sum(got[b] - 1 for b in want if b in got)} duplicates, missing {sorted(missing)[:5]}")
sys.exit(1 if missing else 0)
PY
}
wait_received() {
  local file=$1 secs=$2 end=$((SECONDS + $2))
  until received_all "$file" > "$out/received.txt"; do
    [ $SECONDS -lt $end ] || { cat "$out/received.txt" >&2; fail "not every webhook arrived within ${secs}s"; }
    sleep 1
  done
  log "$(cat "$out/received.txt")"
}
publish() {
  "$fanout_cli" events publish --tenant k8s --event-type order.created --id "$1" --data "$2" > /dev/null
  echo "$2" >> "$out/published"
}
grep -q REJECTED "$out/receiver.log" && fail "the receiver rejected a signature"

log "subscription put and one event published"
"$fanout_cli" subscriptions put --id k8s-test --tenant k8s --url "http://$GATEWAY:$rport/hook" \
  --event-type 'order.*' --secret-ref k8s-test --allow-http > /dev/null
publish evt_first '{"k8s_test":"first"}'
wait_received "$out/published" 90
# The attempt log reaches the archive on the claim (files sealed after 5s here).
end=$((SECONDS + 90))
until [ -n "$(find "$pv_dir" -type f -size +0 | head -n 1)" ]; do
  [ $SECONDS -lt $end ] || fail "nothing archived on the claim's volume $pv_dir"
  sleep 2
done
log "the dlq-sink archived to the claim: $(find "$pv_dir" -type f | head -n 1 | sed "s#^$pv_dir/##")"

# ---------------------------------------------------------------- upgrade --
log "helm upgrade (dispatcher.requestTimeoutSeconds 15 -> 10) while publishing"
template_hashes() {
  for d in "${deployments[@]}"; do
    printf '%s=%s\n' "$d" "$(k -n "$NS" get rs -l "app.kubernetes.io/instance=$RELEASE" \
      -o jsonpath="{range .items[?(@.metadata.ownerReferences[0].name==\"$d\")]}{.metadata.name}{\" \"}{end}")"
  done
}
before=$(template_hashes)
rm -f "$out/stop"
(
  i=0
  while [ ! -e "$out/stop" ]; do
    i=$((i + 1))
    publish "evt_roll_$i" "{\"roll\":$i}" || exit 1
    sleep 0.3
  done
) &
publisher_pid=$!
"$helm" upgrade "$RELEASE" deploy/helm/hookline -n "$NS" --kubeconfig "$repo/.cache/k8s-run/pki/admin.kubeconfig" \
  --reuse-values --set dispatcher.requestTimeoutSeconds=10 --wait --timeout 6m > "$out/upgrade.out" ||
  { cat "$out/upgrade.out" >&2; fail "helm upgrade"; }
k -n "$NS" rollout status "deploy/$RELEASE-dispatcher" --timeout 180s > /dev/null
sleep 5
touch "$out/stop"
wait "$publisher_pid" || fail "publishing during the upgrade failed"
publisher_pid=
after=$(template_hashes)
[ "$(k -n "$NS" get cm "$RELEASE-dispatcher" -o jsonpath='{.data.HOOKLINE_REQUEST_TIMEOUT}')" = 10s ] || fail "the dispatcher's config did not change"
for d in "${deployments[@]}"; do
  b=$(grep "^$d=" <<< "$before")
  a=$(grep "^$d=" <<< "$after")
  if [ "$d" = "$RELEASE-dispatcher" ]; then
    [ "$a" != "$b" ] || fail "the dispatcher did not roll"
  else
    [ "$a" = "$b" ] || fail "$d rolled though its values did not change"
  fi
done
log "dispatcher rolled; $(grep -c roll "$out/published") events published during the upgrade"
wait_received "$out/published" 120
grep -q REJECTED "$out/receiver.log" && fail "the receiver rejected a signature"

# -------------------------------------------------------------- uninstall --
log "helm uninstall"
"$helm" uninstall "$RELEASE" -n "$NS" --kubeconfig "$repo/.cache/k8s-run/pki/admin.kubeconfig" --wait --timeout 3m > "$out/uninstall.out"
grep -q "$RELEASE-dlq-sink-archive" "$out/uninstall.out" || fail "helm uninstall does not say it kept the archive's claim"
leftovers() {
  local kinds
  kinds=$(k api-resources --verbs=list --namespaced -o name | grep -vx 'events\|events.events.k8s.io' | paste -sd, -)
  # Everything labelled as the release's, and any pod at all (the pods carry the label too).
  k -n "$NS" get "$kinds" -l "app.kubernetes.io/instance=$RELEASE" -o name 2> /dev/null
}
end=$((SECONDS + 60))
until [ "$(leftovers)" = "persistentvolumeclaim/$RELEASE-dlq-sink-archive" ]; do
  [ $SECONDS -lt $end ] || fail "left after helm uninstall: $(leftovers | paste -sd' ' -)"
  sleep 2
done
[ -z "$(k -n "$NS" get pods -o name)" ] || fail "pods left: $(k -n "$NS" get pods -o name)"
log "only the kept claim is left; deleting it"
k -n "$NS" delete pvc "$RELEASE-dlq-sink-archive" --wait=true > /dev/null
[ -z "$(leftovers)" ] || fail "left: $(leftovers)"
k delete pv hookline-k8s-test-archive > /dev/null
k delete namespace "$NS" --wait=true --timeout 120s > /dev/null
