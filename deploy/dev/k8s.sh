#!/usr/bin/env bash
# A single-node Kubernetes cluster from parts, for `make k8s-test`: etcd and
# containerd from Debian packages, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl built from the k8s.io/kubernetes Go
# module by deploy/dev/k8s-build.sh (cached in ~/.cache/hookline/k8s-<version>).
# Runs as root (kubelet and containerd need it). See deploy/dev/README.md.
#
#   k8s.sh up          build what is missing, start every part, wait for the
#                      node to be Ready; prints the kubeconfig path on stdout
#   k8s.sh down        stop every part, remove pods, mounts, the bridge and the
#                      state dir (idempotent)
#   k8s.sh status      exits 0 if the API answers and the node is Ready
#   k8s.sh kubectl ARGS  kubectl with the cluster's kubeconfig
#   k8s.sh import TAR  import an image archive (docker-archive) into containerd
#   k8s.sh forward PORT...  make host 127.0.0.1:PORT reachable as
#                      127.0.0.1:PORT from pods started afterwards (Kafka)
#   k8s.sh logs DIR    copy every part's log and every pod's logs to DIR
#   k8s.sh link-logs DIR  hard-link the container logs the kubelet holds now
#                      into DIR, to keep them past their pod's deletion
#
# Progress goes to stderr.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
K8S_VERSION=${K8S_VERSION:-v1.34.4}
export K8S_VERSION
K8S_CACHE=${K8S_CACHE:-$HOME/.cache/hookline/k8s-$K8S_VERSION}
export K8S_CACHE
BIN=$K8S_CACHE/bin
STATE=${HOOKLINE_K8S_STATE:-$REPO/.cache/k8s-run}
NODE=${HOOKLINE_K8S_NODE:-hookline-dev}
ETCD_PORT=${HOOKLINE_K8S_ETCD_PORT:-23790}
API_PORT=${HOOKLINE_K8S_API_PORT:-16443}
KUBELET_PORT=${HOOKLINE_K8S_KUBELET_PORT:-10250}
POD_CIDR=${HOOKLINE_K8S_POD_CIDR:-10.88.0.0/16}
GATEWAY=${HOOKLINE_K8S_GATEWAY:-10.88.0.1}
SERVICE_CIDR=${HOOKLINE_K8S_SERVICE_CIDR:-10.96.0.0/16}
BRIDGE=${HOOKLINE_K8S_BRIDGE:-hlk8s0}
# overlayfs, or native where overlay mounts are refused.
SNAPSHOTTER=${HOOKLINE_K8S_SNAPSHOTTER:-overlayfs}
START_TIMEOUT=${HOOKLINE_K8S_START_TIMEOUT:-180}
PAUSE_IMAGE=hookline.local/pause:$K8S_VERSION
SOCK=$STATE/containerd/containerd.sock
KUBECONFIG_ADMIN=$STATE/pki/admin.kubeconfig

log() { printf 'k8s.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: kubelet and containerd need it"

kctl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

node_ip() { ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

# ------------------------------------------------------------------ pki ----

# cert NAME CN ORG [SANS]: a key and a certificate signed by the cluster CA.
cert() {
  local name=$1 cn=$2 org=$3 sans=${4:-}
  local d=$STATE/pki
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$name.key" -subj "/O=$org/CN=$cn" \
    -out "$d/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$d/$name.ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 30 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
}

kubeconfig() {
  local name=$1 d=$STATE/pki
  cat > "$d/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hookline-dev
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $d/ca.crt
users:
- name: $name
  user:
    client-certificate: $d/$name.crt
    client-key: $d/$name.key
contexts:
- name: hookline-dev
  context: {cluster: hookline-dev, user: $name, namespace: default}
current-context: hookline-dev
EOF
}

make_pki() {
  local d=$STATE/pki
  [ -s "$d/admin.kubeconfig" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=hookline-dev-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  local ip
  ip=$(node_ip)
  # 10.96.0.1: the first address of SERVICE_CIDR, the `kubernetes` Service.
  cert apiserver kube-apiserver hookline-dev \
    "IP:127.0.0.1,IP:$ip,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler system:kube-scheduler
  cert kubelet "system:node:$NODE" system:nodes "IP:127.0.0.1,IP:$ip,DNS:$NODE"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  for n in controller-manager scheduler kubelet admin; do kubeconfig "$n"; done
}

# ------------------------------------------------------------ processes ----

# start NAME CMD...: a part in its own session, logging to $STATE/logs/NAME.log.
start() {
  local name=$1
  shift
  local pidf=$STATE/run/$name.pid
  if [ -s "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    return 0
  fi
  log "starting $name"
  setsid nohup "$@" > "$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$pidf"
}

stop() {
  local name=$1 pidf=$STATE/run/$1.pid pid
  [ -s "$pidf" ] || return 0
  pid=$(cat "$pidf")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name ($pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidf"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds, else the part's log tail.
wait_for() {
  local what=$1 secs=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" > /dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then
      log "$what did not come up in ${secs}s; log tail:"
      tail -n 40 "$STATE/logs/$what.log" >&2 2>/dev/null || true
      die "$what did not come up"
    fi
    sleep 1
  done
}

# ----------------------------------------------------------- containerd ----

write_containerd_config() {
  local d=$STATE/containerd
  mkdir -p "$d" "$STATE/cni/bin" "$STATE/cni/net.d"
  # Debian's plugins, and the port forward of k8s-cni-localfwd.
  local plugin
  for plugin in /usr/lib/cni/*; do ln -sf "$plugin" "$STATE/cni/bin/"; done
  ln -sf "$SCRIPT_DIR/k8s-cni-localfwd" "$STATE/cni/bin/k8s-cni-localfwd"
  cat > "$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  # The pods' network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$SNAPSHOTTER"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$STATE/cni/bin"
    conf_dir = "$STATE/cni/net.d"
EOF
  write_cni_config
}

write_cni_config() {
  local ports
  ports=""
  [ -s "$STATE/forward-ports" ] && ports=$(paste -sd, "$STATE/forward-ports")
  cat > "$STATE/cni/net.d/10-hookline.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "hookline-dev",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "k8s-cni-localfwd", "gateway": "$GATEWAY", "ports": [${ports}]}
  ]
}
EOF
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# The pod sandbox image: pause.c of the k8s.io/kubernetes module, static.
pause_image() {
  ctr_ images ls -q | grep -qx "$PAUSE_IMAGE" && return 0
  local d=$K8S_CACHE/pause src
  mkdir -p "$d/ctx"
  if [ ! -s "$d/pause.tar" ]; then
    src=$(cd "$K8S_CACHE/module" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
    gcc -Os -static -DVERSION="$K8S_VERSION" -o "$d/ctx/pause" "$src"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$d/Containerfile"
    buildah --storage-driver vfs build -q -f "$d/Containerfile" -t "$PAUSE_IMAGE" "$d/ctx" >&2
    rm -f "$d/pause.tar"
    buildah --storage-driver vfs push -q "$PAUSE_IMAGE" "docker-archive:$d/pause.tar:$PAUSE_IMAGE" >&2
  fi
  ctr_ images import "$d/pause.tar" >&2
}

# ------------------------------------------------------------------ up -----

cmd_up() {
  # Debian's packages, installed like chart-test.sh installs promtool.
  local missing=()
  command -v etcd > /dev/null || missing+=(etcd-server)
  command -v containerd > /dev/null || missing+=(containerd)
  command -v runc > /dev/null || missing+=(runc)
  command -v buildah > /dev/null || missing+=(buildah)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v socat > /dev/null || missing+=(socat)
  command -v iptables > /dev/null || missing+=(iptables)
  command -v gcc > /dev/null || missing+=(gcc libc6-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get > /dev/null || die "install ${missing[*]} (Debian package names)"
    log "installing ${missing[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
  fi
  bash "$SCRIPT_DIR/k8s-build.sh" >&2
  mkdir -p "$STATE/logs" "$STATE/run" "$STATE/kubelet"
  make_pki
  local ip
  ip=$(node_ip)

  start etcd etcd --name hookline-dev --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
    --initial-cluster "hookline-dev=http://127.0.0.1:$((ETCD_PORT + 10))"
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  local p=$STATE/pki
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address "$ip" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=false
  wait_for kube-apiserver "$START_TIMEOUT" kctl get --raw /readyz

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$p/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$p/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --use-service-account-credentials=true
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$p/scheduler.kubeconfig" \
    --authentication-kubeconfig "$p/scheduler.kubeconfig" \
    --authorization-kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false

  # The bridge exists before the first pod, so the forwarder can bind its address.
  if ! ip link show "$BRIDGE" > /dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
  for port in $(cat "$STATE/forward-ports" 2>/dev/null); do start_forward "$port"; done

  write_containerd_config
  start containerd containerd --config "$STATE/containerd/config.toml"
  wait_for containerd 30 ctr --address "$SOCK" version
  pause_image

  cat > "$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: 0
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $p/kubelet.crt
tlsPrivateKeyFile: $p/kubelet.key
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
resolvConf: /etc/resolv.conf
# Container logs in the state dir rather than /var/log/pods.
podLogsDir: $STATE/pod-logs
serializeImagePulls: false
# The sandbox shares its disk with other work: no image garbage collection
# or disk-pressure evictions of the test's pods.
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi"}
EOF
  start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$p/kubelet.kubeconfig" --hostname-override "$NODE" --node-ip "$ip" \
    --root-dir "$STATE/kubelet/root" --cert-dir "$STATE/kubelet/pki"
  local end=$((SECONDS + START_TIMEOUT))
  until kctl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; do
    if [ $SECONDS -ge $end ] || ! kill -0 "$(cat "$STATE/run/kubelet.pid")" 2>/dev/null; then
      log "node $NODE not Ready in ${START_TIMEOUT}s; kubelet log tail:"
      tail -n 60 "$STATE/logs/kubelet.log" >&2
      die "kubelet did not make the node Ready"
    fi
    sleep 2
  done
  # No cluster DNS and no kube-proxy here; the default ServiceAccount must exist
  # before pods without one (the topics hook Job) are admitted.
  wait_for kube-controller-manager 60 kctl -n default get serviceaccount default
  log "node $NODE Ready (Kubernetes $K8S_VERSION); KUBECONFIG=$KUBECONFIG_ADMIN"
  echo "$KUBECONFIG_ADMIN"
}

start_forward() {
  local port=$1
  start "forward-$port" socat "TCP-LISTEN:$port,bind=$GATEWAY,fork,reuseaddr" "TCP:127.0.0.1:$port"
}

cmd_forward() {
  mkdir -p "$STATE/run" "$STATE/logs"
  for port in "$@"; do
    [[ $port =~ ^[0-9]+$ ]] || die "forward: not a port: $port"
    grep -qx "$port" "$STATE/forward-ports" 2>/dev/null || echo "$port" >> "$STATE/forward-ports"
    if ip link show "$BRIDGE" > /dev/null 2>&1; then start_forward "$port"; fi
  done
  [ -d "$STATE/cni/net.d" ] && write_cni_config
  return 0
}

# ---------------------------------------------------------------- down -----

cmd_down() {
  [ -d "$STATE" ] || return 0
  # The kubelet first, so it restarts nothing.
  stop kubelet
  if [ -S "$SOCK" ]; then
    # Every container's task first, so no shim outlives containerd.
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$t" > /dev/null 2>&1 || true; done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" > /dev/null 2>&1 || true; done
  fi
  for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$name"; done
  for f in "$STATE"/run/forward-*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done
  stop containerd
  # Shims started with this containerd's socket, by their own command line.
  for d in /proc/[0-9]*; do
    if { tr '\0' ' ' < "$d/cmdline"; } 2>/dev/null | grep -qF -- "-address $SOCK"; then
      kill -9 "${d#/proc/}" 2>/dev/null || true
    fi
  done
  # Mounts under the state dir (container rootfs, kubelet volumes, shm,
  # network namespaces), deepest first.
  awk -v s="$STATE" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done || true
  # The bridge (the pods' network namespaces were mounts under the state dir).
  ip link delete "$BRIDGE" 2>/dev/null || true
  # The bridge plugin's masquerade rules and chains of pods not torn down
  # through CNI (their comment names this network).
  local chains
  chains=$(iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"hookline-dev\"' | grep -o 'CNI-[0-9a-f]*' | sort -u || true)
  iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"hookline-dev\"' | sed 's/^-A/-D/' |
    while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null || true; done || true
  for chain in $chains; do
    iptables -t nat -F "$chain" 2>/dev/null || true
    iptables -t nat -X "$chain" 2>/dev/null || true
  done
  # The kubelet's symlinks to container logs in the state dir.
  find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
  rm -rf "$STATE"
  log "down"
}

# -------------------------------------------------------------- others -----

cmd_status() {
  kctl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

cmd_import() {
  [ -s "${1:-}" ] || die "import: no such archive: ${1:-}"
  ctr_ images import "$1" >&2
}

# link_pod_logs DIR: hard links to every container log file the kubelet
# holds, so DIR keeps them, whole, after the kubelet deletes a pod's files
# (a link shares the file, so lines written later are in it too). Called
# every second by the test, it catches pods that come and go (the hook Job's,
# replaced replicas').
link_pod_logs() {
  local out=$1 f rel
  [ -d "$STATE/pod-logs" ] || return 0
  find "$STATE/pod-logs" -name '*.log*' -type f | while read -r f; do
    rel=${f#"$STATE"/pod-logs/}
    [ -e "$out/$rel" ] && continue
    mkdir -p "$out/$(dirname "$rel")"
    ln "$f" "$out/$rel" 2>/dev/null || cp "$f" "$out/$rel" 2>/dev/null || true
  done
}

cmd_logs() {
  local out=$1
  mkdir -p "$out/parts" "$out/pods"
  cp "$STATE"/logs/*.log "$out/parts/" 2>/dev/null || true
  # Every container log the kubelet still holds; add earlier links (see
  # link_pod_logs) with `link-logs` while pods run.
  link_pod_logs "$out/pods"
  kctl get all,events,pvc,pv -A -o wide > "$out/objects.txt" 2>&1 || true
  kctl describe pods -A > "$out/pods-describe.txt" 2>&1 || true
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubectl) kctl "$@" ;;
  import) cmd_import "$@" ;;
  forward) cmd_forward "$@" ;;
  logs) cmd_logs "$@" ;;
  link-logs) mkdir -p "$1" && link_pod_logs "$1" ;;
  *) die "usage: k8s.sh up|down|status|kubectl ARGS|import TAR|forward PORT...|logs DIR|link-logs DIR" ;;
esac
