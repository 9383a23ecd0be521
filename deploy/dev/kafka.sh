#!/usr/bin/env bash
# Single-node Apache Kafka 4.x (KRaft, combined broker+controller) on 127.0.0.1
# for hookline's integration and end-to-end tests. See deploy/dev/README.md.
#
#   kafka.sh fetch      jars into $HOOKLINE_KAFKA_HOME/lib (Maven; idempotent)
#   kafka.sh up         start (or reuse) the broker; prints ONLY 127.0.0.1:PORT
#   kafka.sh down       stop the broker and delete its state dir (idempotent)
#   kafka.sh status     prints the bootstrap and exits 0 if the broker answers, else 1
#   kafka.sh bootstrap  prints the bootstrap if the broker process is alive, else 1
#   kafka.sh gc-log     prints the path of the running broker's GC log, else 1
#   kafka.sh smoke      topic + transactional commit/abort round trip against it
#   kafka.sh halt [--kill]  stop the broker (SIGTERM, or SIGKILL) but keep its
#                       data and ports, for fault tests (make faults)
#   kafka.sh resume     start a halted broker again on the same ports and data
#   kafka.sh secure-env prints `export VAR=...` lines for the secured listeners
#                       (SASL_SSL with SCRAM-SHA-512, mTLS): bootstraps, users,
#                       password files, CA, client certificate and key
#   kafka.sh acls ARGS  kafka-acls (org.apache.kafka.tools.AclCommand) against
#                       the running broker as a super user: `acls --list`
#   kafka.sh cluster VERB  three brokers (1..3) and a dedicated KRaft controller,
#                       beside the single broker, with their own ports and state:
#                       up, down, status, brokers, smoke, kill|stop|cont|term|start|pid N,
#                       leader TOPIC PARTITION, coordinator group|transaction ID
#
# stdout carries only the bootstrap address (or the answer asked for); all
# progress goes to stderr.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"
LOG4J_CONF="$SCRIPT_DIR/kafka/log4j2.properties"

KHOME="${HOOKLINE_KAFKA_HOME:-$REPO/.cache/kafka}"
STATE="${HOOKLINE_KAFKA_STATE:-$REPO/.cache/kafka-run}"
START_TIMEOUT="${HOOKLINE_KAFKA_START_TIMEOUT:-90}"
HEAP_OPTS="${HOOKLINE_KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
# G1 as Kafka's own start script sets it. On this project's 2-core machines
# ZGC and Shenandoah gave the bench a longer tail, not a shorter one (their
# concurrent work competes with the stages for the CPU); docs/benchmarks.md#tried-and-rejected.
GC_OPTS="${HOOKLINE_KAFKA_GC_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20}"
LIB="$KHOME/lib"
STAMP="$LIB/.hookline-stamp"
# The lock lives next to (not inside) the state dir, because `down` deletes it.
LOCK="$STATE.lock"

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  JAVA="$JAVA_HOME/bin/java"
else
  JAVA="java"
fi
PYTHON="${PYTHON:-python3}"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- fetch ----

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

fetch_done() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_hash)" ]]; }

cmd_fetch() {
  fetch_done && return 0
  mkdir -p "$KHOME"
  local fd
  exec {fd}>"$KHOME/.fetch.lock"
  flock -w 900 "$fd" || die "timed out waiting for $KHOME/.fetch.lock"
  if ! fetch_done; then
    command -v mvn >/dev/null || die "mvn not found (needed once to fetch the Kafka jars)"
    local tmp="$KHOME/lib.tmp.$$"
    rm -rf "$tmp"
    log "fetching Kafka jars with Maven into $LIB ..."
    if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$KHOME/fetch.log" 2>&1; then
      sed 's/\x1b\[[0-9;]*m//g' "$KHOME/fetch.log" >&2
      rm -rf "$tmp"
      die "mvn dependency:copy-dependencies failed (see above)"
    fi
    ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "no kafka_2.13 jar after fetch"; }
    pom_hash >"$tmp/.hookline-stamp"
    rm -rf "$LIB"
    mv "$tmp" "$LIB"
    log "fetched $(find "$LIB" -name "*.jar" | wc -l) jars"
  fi
  exec {fd}>&-
}

# --------------------------------------------------------------- probing ----

# probe PORT [TIMEOUT_S [NODE [BROKERS]]]: exit 0 iff a broker on
# 127.0.0.1:PORT answers a Metadata request and lists itself (node NODE,
# default 1) as a live (unfenced) broker, among at least BROKERS (default 1).
probe() {
  kwire probe "$1" "${2:-2}" "${3:-1}" "${4:-1}"
}

# coordinator_of PORTS KIND ID: the node id of the broker coordinating the
# consumer group (KIND group) or transactional id (KIND transaction) ID, as a
# FindCoordinator request to any of the comma-separated 127.0.0.1 PORTS
# answers it (the request clients send; it also creates __consumer_offsets or
# __transaction_state when they do not exist yet). Retries for 30 s.
coordinator_of() {
  kwire coordinator "$1" "$2" "$3" 30
}

# kwire MODE ARGS: the two Kafka requests above, spoken over the wire.
kwire() {
  "$PYTHON" - "$@" <<'PY'
import socket, struct, sys, time

mode = sys.argv[1]

def call(sock, api_key, version, corr, body):
    client = b"hookline-probe"
    hdr = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    msg = hdr + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", read(4))
    data = read(size)
    (rcorr,) = struct.unpack(">i", data[:4])
    if rcorr != corr:
        raise ValueError("bad correlation id")
    return data[4:]

def api_versions(sock):
    # ApiVersions v0: error_code, [api_key, min, max]
    r = call(sock, 18, 0, 1, b"")
    err, n = struct.unpack(">hi", r[:6])
    if err != 0:
        raise ValueError("ApiVersions error %d" % err)
    versions = {}
    off = 6
    for _ in range(n):
        k, lo, hi = struct.unpack(">hhh", r[off:off + 6])
        off += 6
        versions[k] = (lo, hi)
    return versions

def probe(port, timeout, want_node, want_brokers):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    lo, hi = api_versions(s).get(3, (99, -1))
    v = max(lo, 4)
    if v > min(hi, 8):  # we only speak the non-flexible Metadata v4..v8
        return False
    body = struct.pack(">ib", 0, 0)  # topics: [] (none), allow_auto_topic_creation=false
    if v >= 8:
        body += struct.pack(">bb", 0, 0)  # include_{cluster,topic}_authorized_operations
    r = call(s, 3, v, 2, body)
    off = 4  # throttle_time_ms
    (n,) = struct.unpack(">i", r[off:off + 4]); off += 4
    itself = False
    for _ in range(n):
        node, hl = struct.unpack(">ih", r[off:off + 6]); off += 6
        off += hl
        (bport, rl) = struct.unpack(">ih", r[off:off + 6]); off += 6
        if rl > 0:
            off += rl
        if node == want_node and bport == port:
            itself = True
    return itself and n >= want_brokers

def coordinator(port, kind, key):
    # FindCoordinator v1..v2 (non-flexible): key, key_type; the answer's
    # error_code and node_id. Returns (node or None, why not).
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    lo, hi = api_versions(s).get(10, (99, -1))
    v = max(lo, 1)
    if v > min(hi, 2):
        return None, "no FindCoordinator v1..v2 on port %d" % port
    k = key.encode()
    body = struct.pack(">h", len(k)) + k + struct.pack(">b", {"group": 0, "transaction": 1}[kind])
    r = call(s, 10, v, 2, body)
    err, ml = struct.unpack(">hh", r[4:8])  # after throttle_time_ms
    off = 8 + max(ml, 0)
    (node,) = struct.unpack(">i", r[off:off + 4])
    if err != 0:
        return None, "FindCoordinator error code %d from port %d" % (err, port)
    return node, ""

if mode == "probe":
    try:
        ok = probe(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    except Exception:
        ok = False
    sys.exit(0 if ok else 1)

if mode == "coordinator":
    ports = [int(p) for p in sys.argv[2].split(",") if p]
    kind, key, deadline = sys.argv[3], sys.argv[4], time.time() + float(sys.argv[5])
    why = "no port to ask"
    while True:
        for port in ports:
            try:
                node, why = coordinator(port, kind, key)
            except Exception as e:
                node, why = None, "port %d: %s" % (port, e)
            if node is not None:
                print(node)
                sys.exit(0)
        if time.time() > deadline:
            print("kafka.sh: error: no coordinator for %s %s: %s" % (kind, key, why), file=sys.stderr)
            sys.exit(1)
        time.sleep(0.5)

sys.exit(2)
PY
}

# Pid of the broker recorded in the state dir, if that process is alive and
# is really our kafka.Kafka (guards against pid reuse). Prints the pid.
live_pid() {
  local pid
  [[ -f "$STATE/kafka.pid" ]] || return 1
  pid="$(cat "$STATE/kafka.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/server.properties" || return 1
  echo "$pid"
}

bootstrap_port() {
  [[ -f "$STATE/port" ]] || return 1
  cat "$STATE/port"
}

healthy() {
  local port
  live_pid >/dev/null || return 1
  port="$(bootstrap_port)" || return 1
  probe "$port" "${1:-2}" || return 1
  [[ -f "$STATE/ready" ]] || touch "$STATE/ready"
}

# ------------------------------------------------------------------ stop ----

# stop_pids PID...: SIGTERM (and SIGCONT, for a stopped one) to each, then
# SIGKILL to any still alive after 30 s; returns when all are gone.
stop_pids() {
  local pid i alive
  for pid in "$@"; do
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 300; i++)); do
    alive=0
    for pid in "$@"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || return 0
    sleep 0.1
  done
  log "pid(s) $* did not stop within 30 s; SIGKILL"
  for pid in "$@"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 50; i++)); do
    alive=0
    for pid in "$@"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || return 0
    sleep 0.1
  done
}

stop_broker() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping broker pid $pid"
    stop_pids "$pid"
  fi
  rm -rf "$STATE"
}

take_lock() {
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -w 600 9 || die "timed out waiting for $LOCK"
}

# -------------------------------------------------------------------- up ----

free_ports() {
  # Four distinct free loopback ports (plain, controller, SASL_SSL, mTLS), held
  # open together so they differ.
  "$PYTHON" - <<'PY'
import socket
socks = []
for _ in range(4):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

cluster_id() {
  # Same format as org.apache.kafka.common.Uuid.randomUuid().toString().
  "$PYTHON" - <<'PY'
import base64, os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-") and s != "AAAAAAAAAAAAAAAAAAAAAA" and s != "AAAAAAAAAAAAAAAAAAAAAQ":
        print(s)
        break
PY
}

# The SCRAM-SHA-512 users of the SASL_SSL listener: "admin" is a super user
# (for kafka-acls); the others hold only the ACLs a test grants them.
SCRAM_USERS="admin fanout dispatcher dlq-sink ops"
# The principal of the mTLS client certificate (its CN).
MTLS_USER="hookline-mtls"

# make_tls DIR: a throwaway CA, a broker certificate for 127.0.0.1/localhost
# (key and chain in one PEM, the broker's keystore) and a client certificate
# for the MTLS listener. Valid 30 days; a fresh `up` makes new ones.
make_tls() {
  local dir="$1"
  command -v openssl >/dev/null || { log "openssl not found (needed for the dev broker's certificates)"; return 1; }
  mkdir -p "$dir"
  (
    set -e
    cd "$dir"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/O=hookline-dev/CN=hookline-dev-ca" \
      -keyout ca.key -out ca.pem 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >broker.ext
    openssl req -newkey rsa:2048 -nodes -subj "/O=hookline-dev/CN=127.0.0.1" \
      -keyout broker.key -out broker.csr 2>/dev/null
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
      -extfile broker.ext -out broker.crt 2>/dev/null
    cat broker.key broker.crt ca.pem >broker.pem
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -subj "/O=hookline-dev/CN=$MTLS_USER" \
      -keyout client.key -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
      -extfile client.ext -out client.crt 2>/dev/null
    rm -f ./*.csr ./*.ext ca.srl
  ) || { log "openssl failed to make the dev certificates in $dir"; return 1; }
}

# make_users DIR: one random password per SCRAM user, in DIR/USER.password.
make_users() {
  local dir="$1" user
  mkdir -p "$dir"
  chmod 700 "$dir"
  for user in $SCRAM_USERS; do
    (umask 077 && "$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(18))' >"$dir/$user.password")
  done
}

write_props() {
  local port="$1" cport="$2" sport="$3" mport="$4" tls="$STATE/tls"
  cat >"$STATE/server.properties" <<EOF
# Generated by deploy/dev/kafka.sh; do not edit (rewritten on every fresh start).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
# PLAINTEXT is the tests' default listener; SASL_SSL (SCRAM-SHA-512) and MTLS
# (TLS with a required client certificate) are the secured ones.
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SASL_SSL://127.0.0.1:$sport,MTLS://127.0.0.1:$mport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport,MTLS://127.0.0.1:$mport
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$STATE/data

# Authorization: nothing without an ACL, except for the super users. The plain
# and controller listeners authenticate nobody (principal ANONYMOUS), so
# ANONYMOUS is a super user: every plain-listener test and the broker's own
# controller traffic keep working. "admin" is the SCRAM super user.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:admin

# SASL_SSL: SCRAM-SHA-512 users are created by the storage format (--add-scram).
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$tls/broker.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$tls/ca.pem

# MTLS: the client certificate is required; its CN is the principal
# (CN=hookline-mtls,O=hookline-dev -> User:hookline-mtls).
listener.name.mtls.ssl.client.auth=required
listener.name.mtls.ssl.keystore.type=PEM
listener.name.mtls.ssl.keystore.location=$tls/broker.pem
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.location=$tls/ca.pem
listener.name.mtls.ssl.principal.mapping.rules=RULE:^CN=([^,]+),.*\$/\$1/,DEFAULT

# Topics: explicit creation only.
auto.create.topics.enable=false
num.partitions=3
default.replication.factor=1
min.insync.replicas=1

# Internal topics on a single node; few partitions so they are created fast.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
EOF
  quick_props >>"$STATE/server.properties"
}

# The settings of every dev node, the single broker's and the cluster's.
quick_props() {
  cat <<'EOF'

# Quick tests.
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.remove.expired.transaction.cleanup.interval.ms=60000
log.cleaner.backoff.ms=1000
log.cleaner.dedupe.buffer.size=16777216
log.retention.check.interval.ms=30000
log.segment.bytes=67108864

# Small machine.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
EOF
}

start_once() {
  local port cport sport mport cid user
  local -a scram=()
  rm -rf "$STATE"
  mkdir -p "$STATE"
  read -r port cport sport mport <<<"$(free_ports)"
  cid="$(cluster_id)"
  make_tls "$STATE/tls" || return 2
  make_users "$STATE/secrets"
  write_props "$port" "$cport" "$sport" "$mport"
  echo "$port" >"$STATE/port"
  echo "$sport" >"$STATE/sasl-port"
  echo "$mport" >"$STATE/mtls-port"
  for user in $SCRAM_USERS; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(cat "$STATE/secrets/$user.password")]")
  done

  log "formatting storage (cluster id $cid, SCRAM users: $SCRAM_USERS)"
  # The SCRAM passwords go to the format tool as arguments: a throwaway dev
  # broker's, readable only by this user while the tool runs for a second.
  if ! kafka_tool "$STATE/tools" kafka.tools.StorageTool format \
      -t "$cid" -c "$STATE/server.properties" "${scram[@]}" >"$STATE/format.log" 2>&1; then
    cat "$STATE/format.log" >&2
    return 2
  fi

  log "starting broker on 127.0.0.1:$port (controller 127.0.0.1:$cport)"
  launch
  wait_ready "$port"
}

# kafka_tool LOGDIR CLASS ARGS: one of Kafka's command-line tools (a main
# class of the fetched jars) in a small, quickly started JVM, its log4j log
# in LOGDIR.
kafka_tool() {
  local logs="$1"
  shift
  mkdir -p "$logs"
  "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LIB/*" \
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$logs" "$@"
}

# Starts the broker of $STATE/server.properties in the background.
launch() {
  rm -f "$STATE/kafka.pid" "$STATE/ready"
  # setsid + nohup: the broker outlives the caller (e.g. a test binary).
  # The wrapper closes every inherited fd above 2 before exec'ing java: the
  # flock fd (else the lock would be held for the broker's whole life) and
  # any pipe of the caller (else a harness waiting for EOF would hang).
  # shellcheck disable=SC2086,SC2016
  setsid nohup bash -c '
    for f in /proc/$$/fd/*; do
      n=${f##*/}
      if [[ $n =~ ^[0-9]+$ ]] && ((n > 2)); then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    echo $$ >"$0/kafka.pid"
    exec "$@"' "$STATE" \
    "$JAVA" $HEAP_OPTS $GC_OPTS -Xlog:gc:file="$STATE/gc.log":utctime:filecount=2,filesize=20m \
    -XX:+ExplicitGCInvokesConcurrent -XX:-OmitStackTraceInFastThrow \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$STATE" \
    -cp "$LIB/*" kafka.Kafka "$STATE/server.properties" \
    </dev/null >>"$STATE/console.log" 2>&1 9>&- &
  disown || true
}

# wait_ready PORT [NODE [BROKERS]]: until the launched broker answers (as
# `probe` means it); 0 ready, 3 port clash, 1 failed.
wait_ready() {
  local port="$1" node="${2:-1}" brokers="${3:-1}" pid deadline
  deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if [[ -f "$STATE/kafka.pid" ]]; then
      pid="$(cat "$STATE/kafka.pid")"
      if ! kill -0 "$pid" 2>/dev/null; then
        log "broker process $pid exited during startup"
        if grep -qE 'BindException|Address already in use' "$STATE"/console.log "$STATE"/server.log 2>/dev/null; then
          return 3 # port race: caller retries with fresh ports
        fi
        return 1
      fi
      if probe "$port" 2 "$node" "$brokers"; then
        touch "$STATE/ready"
        return 0
      fi
    fi
    sleep 0.25
  done
  log "broker did not answer within ${START_TIMEOUT} s"
  return 1
}

show_logs() {
  local f
  for f in console.log server.log; do
    if [[ -s "$STATE/$f" ]]; then
      if grep -qE '^\[[^]]*\] (ERROR|FATAL) ' "$STATE/$f"; then
        log "---- errors in $STATE/$f ----"
        grep -E -A3 '^\[[^]]*\] (ERROR|FATAL) ' "$STATE/$f" | tail -n 40 >&2
      fi
      log "---- tail of $STATE/$f ----"
      tail -n 40 "$STATE/$f" >&2
    fi
  done
}

cmd_up() {
  take_lock
  cmd_fetch
  if live_pid >/dev/null; then
    # Be patient before restarting a broker that other tests may be using:
    # on a loaded machine a probe can time out now and then.
    local deadline=$((SECONDS + START_TIMEOUT))
    while live_pid >/dev/null; do
      if healthy 5; then
        echo "127.0.0.1:$(bootstrap_port)"
        return 0
      fi
      ((SECONDS < deadline)) || break
      log "broker process is alive but does not answer yet; waiting"
      sleep 1
    done
    log "broker does not answer; restarting it"
    show_logs
  fi
  stop_broker
  local attempt rc start=$SECONDS
  for attempt in 1 2 3; do
    rc=0
    start_once || rc=$?
    if ((rc == 0)); then
      log "broker ready in $((SECONDS - start)) s"
      echo "127.0.0.1:$(bootstrap_port)"
      return 0
    fi
    if ((rc != 3)); then
      break
    fi
    log "port clash, retrying with new ports (attempt $attempt)"
  done
  show_logs
  local keep="$STATE.failed"
  rm -rf "$keep"
  stop_broker_keep "$keep"
  die "could not start Kafka (logs kept in $keep)"
}

# Stop whatever start_once left running and move the state dir aside for
# post-mortem instead of deleting it.
stop_broker_keep() {
  local keep="$1" pid
  if [[ -f "$STATE/kafka.pid" ]]; then
    pid="$(cat "$STATE/kafka.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  if [[ -d "$STATE" ]]; then
    rm -rf "$STATE/data"
    mv "$STATE" "$keep"
  fi
}

cmd_down() {
  take_lock
  stop_broker
  rm -rf "$STATE.failed"
}

cmd_halt() {
  local sig=TERM pid i
  [[ "${1:-}" == "--kill" ]] && sig=KILL
  take_lock
  pid="$(live_pid)" || die "no broker running in $STATE"
  log "halting broker pid $pid with SIG$sig (data and ports kept)"
  kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker did not stop within 60 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$STATE/ready"
}

cmd_resume() {
  local port rc=0 start=$SECONDS
  take_lock
  if live_pid >/dev/null; then
    echo "127.0.0.1:$(bootstrap_port)"
    return 0
  fi
  [[ -f "$STATE/server.properties" ]] || die "no halted broker in $STATE (run: $0 up)"
  port="$(bootstrap_port)" || die "no port recorded in $STATE"
  log "resuming broker on 127.0.0.1:$port"
  launch
  wait_ready "$port" || rc=$?
  if ((rc != 0)); then
    show_logs
    die "could not resume the broker (rc $rc)"
  fi
  log "broker resumed in $((SECONDS - start)) s"
  echo "127.0.0.1:$port"
}

cmd_status() {
  if healthy 3; then
    echo "127.0.0.1:$(bootstrap_port)"
    return 0
  fi
  log "not running"
  return 1
}

cmd_bootstrap() {
  if live_pid >/dev/null && [[ -f "$STATE/ready" ]]; then
    echo "127.0.0.1:$(bootstrap_port)"
    return 0
  fi
  log "not running"
  return 1
}

# The broker's GC log (its stop-the-world pauses, one line each), which
# hookline-bench reads to tell the broker's pauses from hookline's own waits.
cmd_gc_log() {
  if live_pid >/dev/null && [[ -f "$STATE/gc.log" ]]; then
    echo "$STATE/gc.log"
    return 0
  fi
  log "not running, or no GC log"
  return 1
}

cmd_smoke() {
  local bs
  bs="$(cmd_bootstrap)" || die "broker not running (run: $0 up)"
  mkdir -p "$STATE/tools"
  "$JAVA" -Xmx256m -cp "$LIB/*" -Dlog4j2.configurationFile="$LOG4J_CONF" \
    -Dkafka.logs.dir="$STATE/tools" "$SCRIPT_DIR/kafka/TxSmoke.java" "$bs"
}

# secure-env: `export` lines for tests and operators that use the secured
# listeners of the running broker (source them: eval "$(kafka.sh secure-env)").
cmd_secure_env() {
  cmd_bootstrap >/dev/null || die "broker not running (run: $0 up)"
  [[ -f "$STATE/sasl-port" && -f "$STATE/mtls-port" ]] \
    || die "the running broker has no secured listeners (started by an older kafka.sh: run $0 down, then up)"
  cat <<EOF
export HOOKLINE_TEST_SASL_BROKERS=127.0.0.1:$(cat "$STATE/sasl-port")
export HOOKLINE_TEST_MTLS_BROKERS=127.0.0.1:$(cat "$STATE/mtls-port")
export HOOKLINE_TEST_SASL_MECHANISM=SCRAM-SHA-512
export HOOKLINE_TEST_SASL_USERS='$SCRAM_USERS'
export HOOKLINE_TEST_SASL_ADMIN=admin
export HOOKLINE_TEST_SASL_PASSWORD_DIR=$STATE/secrets
export HOOKLINE_TEST_TLS_CA=$STATE/tls/ca.pem
export HOOKLINE_TEST_MTLS_USER=$MTLS_USER
export HOOKLINE_TEST_MTLS_CERT=$STATE/tls/client.crt
export HOOKLINE_TEST_MTLS_KEY=$STATE/tls/client.key
export HOOKLINE_TEST_KAFKA_SH=$SCRIPT_DIR/kafka.sh
EOF
}

# acls ARGS: AclCommand over the plain listener, whose ANONYMOUS principal is
# a super user; ARGS are kafka-acls.sh's (--add/--remove/--list ...).
# A --bootstrap-server / --command-config in ARGS replaces the default one.
cmd_acls() {
  local bs
  local -a target=()
  bs="$(cmd_bootstrap)" || die "broker not running (run: $0 up)"
  [[ " $* " == *" --bootstrap-server "* ]] || target=(--bootstrap-server "$bs")
  kafka_tool "$STATE/tools" org.apache.kafka.tools.AclCommand "${target[@]}" "$@"
}

# --------------------------------------------------------------- cluster ----
# `kafka.sh cluster ...`: three brokers and one dedicated KRaft controller on
# 127.0.0.1, beside the single broker (own ports, own state dir, own lock),
# for what one broker cannot show: replication factor 3 with
# min.insync.replicas 2, leader failover, coordinators that move. Brokers 1..3
# are nodes 1..3, so a leader or coordinator id is also the N of the fault
# verbs; the controller, the quorum of one, is node 100.

CSTATE="${HOOKLINE_KAFKA_CLUSTER_STATE:-$REPO/.cache/kafka-cluster-run}"
# The controller listens on the base port, broker N on base + N. Below the
# kernel's ephemeral range (32768-60999 on Linux), where the single broker's
# ports come from, so the two never collide.
CPORT_BASE="${HOOKLINE_KAFKA_CLUSTER_PORT:-29090}"
CHEAP_OPTS="${HOOKLINE_KAFKA_CLUSTER_HEAP_OPTS:--Xms128m -Xmx384m}"
CCTRL_HEAP_OPTS="${HOOKLINE_KAFKA_CLUSTER_CONTROLLER_HEAP_OPTS:--Xms64m -Xmx192m}"
CONTROLLER_ID=100
CBROKERS=(1 2 3)

cnode_dir() { if [[ "$1" == c ]]; then echo "$CSTATE/controller"; else echo "$CSTATE/broker-$1"; fi; }
cnode_port() { if [[ "$1" == c ]]; then echo "$CPORT_BASE"; else echo $((CPORT_BASE + $1)); fi; }

cluster_bootstrap() {
  local n out=()
  for n in "${CBROKERS[@]}"; do out+=("127.0.0.1:$(cnode_port "$n")"); done
  (IFS=,; echo "${out[*]}")
}

# cnode_pid N|c: the node's pid when it is alive (stopped counts as alive).
cnode_pid() {
  local STATE
  STATE="$(cnode_dir "$1")"
  live_pid
}

# cnode_state N: up (answers), stopped (SIGSTOP), unready (alive, does not
# answer) or down (no process).
cnode_state() {
  local pid
  pid="$(cnode_pid "$1")" || { echo down; return; }
  if [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == T ]]; then
    echo stopped
  elif [[ "$1" == c ]]; then
    if port_open "$(cnode_port c)"; then echo up; else echo unready; fi
  elif probe "$(cnode_port "$1")" 2 "$1"; then
    echo up
  else
    echo unready
  fi
}

# The brokers a tool may ask: alive and not stopped (a stopped one accepts
# connections and answers nothing).
cluster_tool_bootstrap() {
  local n pid out=()
  for n in "${CBROKERS[@]}"; do
    pid="$(cnode_pid "$n")" || continue
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == T ]] && continue
    out+=("127.0.0.1:$(cnode_port "$n")")
  done
  ((${#out[@]})) || { log "no broker of the cluster is running"; return 1; }
  (IFS=,; echo "${out[*]}")
}

port_open() {
  "$PYTHON" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$1" 2>/dev/null
}

# port_free PORT: whether Kafka could listen on it. With SO_REUSEADDR, as
# Kafka binds: a listener refuses it, the TIME_WAIT connections a `down` leaves
# for a minute do not.
port_free() {
  "$PYTHON" -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# Every node up, every broker seeing all three.
cluster_healthy() {
  local n
  cnode_pid c >/dev/null || return 1
  for n in "${CBROKERS[@]}"; do
    cnode_pid "$n" >/dev/null || return 1
    probe "$(cnode_port "$n")" "${1:-2}" "$n" "${#CBROKERS[@]}" || return 1
  done
}

# cluster_props N|c: the node's server.properties.
cluster_props() {
  local n="$1" dir port
  dir="$(cnode_dir "$n")"
  port="$(cnode_port "$n")"
  {
    echo "# Generated by deploy/dev/kafka.sh cluster; do not edit (rewritten on every fresh start)."
    if [[ "$n" == c ]]; then
      cat <<EOF
process.roles=controller
node.id=$CONTROLLER_ID
listeners=CONTROLLER://127.0.0.1:$port
listener.security.protocol.map=CONTROLLER:PLAINTEXT
EOF
    else
      cat <<EOF
process.roles=broker
node.id=$n
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
EOF
    fi
    cat <<EOF
# A static quorum of one voter: the controller.
controller.quorum.voters=$CONTROLLER_ID@127.0.0.1:$CPORT_BASE
controller.listener.names=CONTROLLER
log.dirs=$dir/data

# Topics: explicit creation only, replicated as in production. The controller
# holds them too: it fills in what a CreateTopics request leaves to defaults.
auto.create.topics.enable=false
num.partitions=3
default.replication.factor=3
min.insync.replicas=2

# Internal topics replicated likewise; three partitions each, so the
# coordinators of groups and transactional ids spread over the brokers.
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
share.coordinator.state.topic.num.partitions=1
EOF
    quick_props
  } >"$dir/server.properties"
  echo "$port" >"$dir/port"
}

# cluster_launch N|c: starts the node on its state dir (which must exist).
cluster_launch() {
  local STATE HEAP_OPTS="$CHEAP_OPTS"
  STATE="$(cnode_dir "$1")"
  [[ "$1" == c ]] && HEAP_OPTS="$CCTRL_HEAP_OPTS"
  launch
}

# cluster_wait N|c: until the node answers (a broker: lists itself, and all
# three with `all`); returns as wait_ready does.
cluster_wait() {
  local STATE deadline pid
  STATE="$(cnode_dir "$1")"
  if [[ "$1" != c ]]; then
    wait_ready "$(cnode_port "$1")" "$1" "$([[ "${2:-}" == all ]] && echo "${#CBROKERS[@]}" || echo 1)"
    return
  fi
  deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    pid="$(cat "$STATE/kafka.pid" 2>/dev/null)" || true
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      log "controller process $pid exited during startup"
      return 1
    fi
    if port_open "$CPORT_BASE"; then
      touch "$STATE/ready"
      return 0
    fi
    sleep 0.25
  done
  log "controller did not listen within ${START_TIMEOUT} s"
  return 1
}

cluster_show_logs() {
  local n STATE
  for n in c "${CBROKERS[@]}"; do
    STATE="$(cnode_dir "$n")"
    [[ -d "$STATE" ]] || continue
    log "==== $(basename "$STATE") ===="
    show_logs
  done
}

cluster_stop_all() {
  local n pid pids=()
  for n in "${CBROKERS[@]}"; do
    pid="$(cnode_pid "$n")" && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    log "stopping brokers (pids ${pids[*]})"
    stop_pids "${pids[@]}"
  fi
  if pid="$(cnode_pid c)"; then
    log "stopping controller (pid $pid)"
    stop_pids "$pid"
  fi
}

# Formats four fresh state dirs with one cluster id and starts the nodes;
# 0 when all three brokers see each other.
cluster_fresh() {
  local cid n port dir rc=0
  for n in c "${CBROKERS[@]}"; do
    port="$(cnode_port "$n")"
    port_free "$port" || { log "port $port is in use (choose another base with HOOKLINE_KAFKA_CLUSTER_PORT)"; return 1; }
  done
  rm -rf "$CSTATE"
  cid="$(cluster_id)"
  for n in c "${CBROKERS[@]}"; do
    mkdir -p "$(cnode_dir "$n")"
    cluster_props "$n"
  done
  echo "$cid" >"$CSTATE/cluster-id"
  log "formatting four nodes (cluster id $cid)"
  for n in c "${CBROKERS[@]}"; do
    dir="$(cnode_dir "$n")"
    kafka_tool "$dir/tools" kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" \
      >"$dir/format.log" 2>&1 &
  done
  for n in c "${CBROKERS[@]}"; do
    wait -n || rc=1
  done
  if ((rc)); then
    for n in c "${CBROKERS[@]}"; do cat "$(cnode_dir "$n")/format.log" >&2; done
    return 1
  fi
  cluster_start_nodes
}

# Starts every node that is not running, on its existing state (SIGCONT to a
# stopped one), and waits until all three brokers see each other.
cluster_start_nodes() {
  local n
  for n in c "${CBROKERS[@]}"; do
    kill -CONT "$(cnode_pid "$n")" 2>/dev/null || true
  done
  if ! cnode_pid c >/dev/null; then
    log "starting controller (node $CONTROLLER_ID) on 127.0.0.1:$CPORT_BASE"
    cluster_launch c
  fi
  cluster_wait c || return 1
  for n in "${CBROKERS[@]}"; do
    if ! cnode_pid "$n" >/dev/null; then
      log "starting broker $n on 127.0.0.1:$(cnode_port "$n")"
      cluster_launch "$n"
    fi
  done
  for n in "${CBROKERS[@]}"; do
    cluster_wait "$n" all || return 1
  done
}

cmd_cluster_up() {
  local start=$SECONDS keep="$CSTATE.failed"
  take_lock
  cmd_fetch
  if cluster_healthy 5; then
    cluster_bootstrap
    return 0
  fi
  if [[ -f "$CSTATE/cluster-id" ]]; then
    log "not every node of the cluster in $CSTATE answers; starting the missing ones"
    if cluster_start_nodes; then
      log "cluster ready in $((SECONDS - start)) s"
      cluster_bootstrap
      return 0
    fi
    cluster_show_logs
    log "could not bring the existing cluster back; starting a fresh one"
  fi
  cluster_stop_all
  if cluster_fresh; then
    log "cluster ready in $((SECONDS - start)) s"
    cluster_bootstrap
    return 0
  fi
  cluster_show_logs
  cluster_stop_all
  rm -rf "$keep"
  if [[ -d "$CSTATE" ]]; then
    rm -rf "$CSTATE"/*/data
    mv "$CSTATE" "$keep"
  fi
  die "could not start the cluster (logs kept in $keep)"
}

cmd_cluster_down() {
  take_lock
  cluster_stop_all
  rm -rf "$CSTATE" "$CSTATE.failed"
}

cmd_cluster_status() {
  local n
  if cluster_healthy 3; then
    cluster_bootstrap
    return 0
  fi
  for n in c "${CBROKERS[@]}"; do
    log "$([[ $n == c ]] && echo controller || echo "broker $n"): $(cnode_state "$n")"
  done
  return 1
}

# N id port pid state, one line per broker.
cmd_cluster_brokers() {
  local n pid
  for n in "${CBROKERS[@]}"; do
    pid="$(cnode_pid "$n")" || pid=-
    echo "$n $n $(cnode_port "$n") $pid $(cnode_state "$n")"
  done
}

broker_arg() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || die "a broker number (1..3) expected, got '${1:-}'"
}

cmd_cluster_signal() {
  local what="$1" n="${2:-}" pid i
  broker_arg "$n"
  take_lock
  pid="$(cnode_pid "$n")" || die "broker $n is not running"
  case "$what" in
    kill)
      log "SIGKILL to broker $n (pid $pid); its data and port are kept"
      kill -KILL "$pid"
      for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      rm -f "$(cnode_dir "$n")/ready"
      ;;
    stop)
      log "SIGSTOP to broker $n (pid $pid)"
      kill -STOP "$pid"
      ;;
    cont)
      log "SIGCONT to broker $n (pid $pid)"
      kill -CONT "$pid"
      ;;
  esac
}

# term N: a controlled shutdown, as a rolling upgrade stops a broker: SIGTERM,
# then waits until the process has exited (it first moves its leaderships to
# the other in-sync replicas); SIGKILL only if it is still alive after 60 s.
cmd_cluster_term() {
  local n="${1:-}" pid i start=$SECONDS
  broker_arg "$n"
  take_lock
  pid="$(cnode_pid "$n")" || die "broker $n is not running"
  log "SIGTERM to broker $n (pid $pid): controlled shutdown, its data and port are kept"
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid"
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker $n did not exit within 60 s of SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  else
    log "broker $n exited in $((SECONDS - start)) s"
  fi
  rm -f "$(cnode_dir "$n")/ready"
}

cmd_cluster_start() {
  local n="${1:-}" rc=0 start=$SECONDS
  broker_arg "$n"
  take_lock
  [[ -f "$(cnode_dir "$n")/server.properties" ]] || die "no cluster in $CSTATE (run: $0 cluster up)"
  if cnode_pid "$n" >/dev/null; then
    log "broker $n is already running"
  else
    log "starting broker $n on 127.0.0.1:$(cnode_port "$n") (its data kept)"
    cluster_launch "$n"
    cluster_wait "$n" || rc=$?
    if ((rc)); then
      (STATE="$(cnode_dir "$n")" && show_logs)
      die "could not start broker $n (rc $rc)"
    fi
    log "broker $n ready in $((SECONDS - start)) s"
  fi
  echo "127.0.0.1:$(cnode_port "$n")"
}

cmd_cluster_pid() {
  broker_arg "${1:-}"
  cnode_pid "$1" || { log "broker $1 is not running"; return 1; }
}

# leader TOPIC PARTITION: the node id (= N) of the partition's leader, from
# kafka-topics --describe.
cmd_cluster_leader() {
  local topic="${1:-}" part="${2:-}" bs out leader
  [[ -n "$topic" && "$part" =~ ^[0-9]+$ ]] || die "usage: $0 cluster leader TOPIC PARTITION"
  bs="$(cluster_tool_bootstrap)" || exit 1
  out="$(kafka_tool "$CSTATE/tools" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$bs" --describe --topic "$topic")" || die "kafka-topics --describe --topic $topic failed"
  leader="$(awk -v want="$part" '
    { p = ""; l = ""
      for (i = 1; i < NF; i++) { if ($i == "Partition:") p = $(i + 1); if ($i == "Leader:") l = $(i + 1) }
      if (p == want) { print l; exit } }' <<<"$out")"
  [[ -n "$leader" ]] || die "topic $topic has no partition $part"
  [[ "$leader" =~ ^[0-9]+$ ]] || die "partition $part of $topic has no leader ($leader)"
  echo "$leader"
}

# coordinator group|transaction ID: the node id (= N) of the broker that
# coordinates the consumer group or transactional id, by FindCoordinator
# (kafka-consumer-groups and kafka-transactions describe only ids that exist).
cmd_cluster_coordinator() {
  local kind="${1:-}" id="${2:-}" bs
  [[ "$kind" =~ ^(group|transaction)$ && -n "$id" ]] || die "usage: $0 cluster coordinator group|transaction ID"
  bs="$(cluster_tool_bootstrap)" || exit 1
  coordinator_of "${bs//127.0.0.1:/}" "$kind" "$id"
}

# smoke: kafka/ClusterSmoke.java (RF 3 topic, transactions, SIGKILL of a
# leader, acks=all write, read back, the broker restarted). Any broker it
# leaves down is started again.
cmd_cluster_smoke() {
  local bs n rc=0
  bs="$(cmd_cluster_status)" || die "cluster not running (run: $0 cluster up)"
  "$JAVA" -Xmx256m -cp "$LIB/*" -Dlog4j2.configurationFile="$LOG4J_CONF" \
    -Dkafka.logs.dir="$CSTATE/tools" "$SCRIPT_DIR/kafka/ClusterSmoke.java" "$bs" "$SCRIPT_DIR/kafka.sh" || rc=$?
  for n in "${CBROKERS[@]}"; do
    cnode_pid "$n" >/dev/null || cmd_cluster_start "$n" >/dev/null || rc=1
  done
  return "$rc"
}

cmd_cluster() {
  LOCK="$CSTATE.lock"
  local verb="${1:-}"
  shift || true
  case "$verb" in
    up) cmd_cluster_up ;;
    down) cmd_cluster_down ;;
    status) cmd_cluster_status ;;
    brokers) cmd_cluster_brokers ;;
    kill | stop | cont) cmd_cluster_signal "$verb" "$@" ;;
    term) cmd_cluster_term "$@" ;;
    start) cmd_cluster_start "$@" ;;
    pid) cmd_cluster_pid "$@" ;;
    leader) cmd_cluster_leader "$@" ;;
    coordinator) cmd_cluster_coordinator "$@" ;;
    smoke) cmd_cluster_smoke ;;
    *) usage; exit 2 ;;
  esac
}

usage() {
  sed -n '2,/^set /{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  bootstrap) cmd_bootstrap ;;
  gc-log) cmd_gc_log ;;
  smoke) cmd_smoke ;;
  halt) shift; cmd_halt "$@" ;;
  resume) cmd_resume ;;
  secure-env) cmd_secure_env ;;
  acls) shift; cmd_acls "$@" ;;
  cluster) shift; cmd_cluster "$@" ;;
  -h | --help | help) usage ;;
  *) usage; exit 2 ;;
esac
