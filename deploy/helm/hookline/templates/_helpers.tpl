{{/* Names and labels. */}}
{{- define "hookline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hookline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The three components: values key -> resource/binary suffix. */}}
{{- define "hookline.components" -}}
fanout: fanout
dispatcher: dispatcher
dlqSink: dlq-sink
{{- end -}}

{{- define "hookline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "hookline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hookline
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* (dict "root" $ "component" "dlq-sink") */}}
{{- define "hookline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookline.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hookline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hookline.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hookline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Topic names, unprefixed, in the order of hookline_envelope::Topics::all()
     (crates/envelope/src/topics.rs is the source of truth). */}}
{{- define "hookline.topicNames" -}}
- events
- subscriptions
- deliveries
- deliveries.strict
{{- range .Values.topics.retryTiers }}
- deliveries.{{ .name }}
{{- end }}
- deliveries.dlq
- events.quarantine
- deliveries.attempts
- subscriptions.health
{{- range until 8 }}
- deliveries.lane-{{ . }}
{{- end }}
{{- end -}}

{{/* Partitions of one topic, by unprefixed name (the topics.perTopic key):
     its perTopic partitions, else topics.partitions (for an overflow lane,
     deliveries' partitions). (dict "root" $ "topic" "events") */}}
{{- define "hookline.partitions" -}}
{{- $t := .root.Values.topics -}}
{{- $s := get $t.perTopic .topic | default dict -}}
{{- $default := $t.partitions -}}
{{- if hasPrefix "deliveries.lane-" .topic -}}
{{- /* An overflow lane mirrors deliveries partition for partition. */ -}}
{{- $d := get $t.perTopic "deliveries" | default dict -}}
{{- $default = default $t.partitions $d.partitions -}}
{{- end -}}
{{- int (default $default $s.partitions) -}}
{{- end -}}

{{/* Replicas a component's consumers can keep busy, checked against
     replicaCount, or autoscaling.maxReplicas when autoscaling is on (hpa or
     keda). A replica beyond them gets no partition: it sits idle, fails
     /readyz after kafka.consumerStallTimeout, and an unready pod holds the
     PodDisruptionBudget and blocks node drains. fanout runs one consumer on
     events; the dispatcher one consumer per topic (deliveries, deliveries.strict
     and each retry tier), so the topic with the fewest partitions bounds it; the
     dlq-sink one consumer on deliveries.dlq, events.quarantine and
     deliveries.attempts together (it archives the attempt log too), so their sum
     does. (dict "root" $ "key" "dispatcher") */}}
{{- define "hookline.replicaGuard" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .key -}}
{{- $field := printf "%s.replicaCount" .key -}}
{{- $replicas := int $c.replicaCount -}}
{{- if $c.autoscaling.enabled -}}
{{- $field = printf "%s.autoscaling.maxReplicas" .key -}}
{{- $replicas = int $c.autoscaling.maxReplicas -}}
{{- end -}}
{{- $limit := 0 -}}
{{- $source := "" -}}
{{- $why := "" -}}
{{- $raise := "" -}}
{{- if eq .key "dlqSink" -}}
{{- $topics := list "deliveries.dlq" "events.quarantine" "deliveries.attempts" -}}
{{- range $topics -}}
{{- $limit = add $limit (include "hookline.partitions" (dict "root" $root "topic" .) | int) -}}
{{- end -}}
{{- $source = join " + " $topics -}}
{{- $why = ", which its one consumer shares" -}}
{{- $raise = "topics.perTopic.deliveries.dlq.partitions, topics.perTopic.events.quarantine.partitions or topics.perTopic.deliveries.attempts.partitions" -}}
{{- else -}}
{{- $topics := list "events" -}}
{{- if eq .key "dispatcher" -}}
{{- $topics = list "deliveries" "deliveries.strict" -}}
{{- range $root.Values.topics.retryTiers }}{{ $topics = append $topics (printf "deliveries.%s" .name) }}{{ end -}}
{{- end -}}
{{- range $topics -}}
{{- $p := include "hookline.partitions" (dict "root" $root "topic" .) | int -}}
{{- if or (not $source) (lt $p $limit) -}}
{{- $limit = $p -}}
{{- $source = . -}}
{{- end -}}
{{- end -}}
{{- if gt (len $topics) 1 -}}
{{- $why = ", the fewest of deliveries, deliveries.strict and its retry tiers (one consumer each)" -}}
{{- end -}}
{{- $raise = printf "topics.perTopic.%s.partitions" $source -}}
{{- end -}}
{{- if gt $replicas (int $limit) -}}
{{- fail (printf "%s (%d) exceeds the partitions of %s (%d)%s: extra consumers would sit idle, fail /readyz and block node drains under the PodDisruptionBudget; lower %s or raise %s" $field $replicas $source (int $limit) $why $field $raise) -}}
{{- end -}}
{{- end -}}

{{/* The retry ladder as `name=delay,...` from topics.retryTiers: the one list
     both the dispatcher and the topic hook are given (the same variable,
     HOOKLINE_RETRY_TIERS, for both), so the tiers it consumes are the
     tiers that exist. Fails on a ladder the dispatcher would refuse at start. */}}
{{- define "hookline.retryTiers" -}}
{{- $tiers := list -}}
{{- $seen := dict -}}
{{- $previous := int64 0 -}}
{{- $previousDelay := "" -}}
{{- range .Values.topics.retryTiers -}}
{{- $ms := include "hookline.durationMs" .delay | int64 -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "topics.retryTiers: tier name %s appears twice" .name) -}}
{{- end -}}
{{- if eq $ms (int64 0) -}}
{{- fail (printf "topics.retryTiers: tier %s has a zero delay" .name) -}}
{{- end -}}
{{- if le $ms $previous -}}
{{- fail (printf "topics.retryTiers: tier %s delay %s must be greater than the previous tier's %s" .name .delay $previousDelay) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- $previous = $ms -}}
{{- $previousDelay = .delay -}}
{{- $tiers = append $tiers (printf "%s=%s" .name .delay) -}}
{{- end -}}
{{- join "," $tiers -}}
{{- end -}}

{{/* A duration like 10s, 15m, 7d, 1h30m, 250ms in milliseconds; fails otherwise. */}}
{{- define "hookline.durationMs" -}}
{{- $s := toString . | trim -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h|d|w))+$" $s) -}}
{{- fail (printf "`%s` is not a duration like 10s, 15m, 7d or 1h30m" $s) -}}
{{- end -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w)" $s -1 -}}
{{- $n := regexFind "^[0-9]+" . | int64 -}}
{{- $u := trimPrefix (regexFind "^[0-9]+" .) . -}}
{{- $total = add $total (mul $n (get $units $u)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* The Kafka values of one component: (dict "root" $ "key" "dispatcher"), as
     YAML: the component's own `kafka` (its principal's Secrets) merged over
     the global `kafka`. Without a key, the global values. */}}
{{- define "hookline.kafkaValues" -}}
{{- $k := deepCopy .root.Values.kafka -}}
{{- with .key -}}
{{- with (index $.root.Values .).kafka -}}
{{- $k = mergeOverwrite $k (deepCopy .) -}}
{{- end -}}
{{- end -}}
{{- toYaml $k -}}
{{- end -}}

{{/* The librdkafka passthrough as `key=value;...` for HOOKLINE_KAFKA_CONFIG,
     from Kafka values (`hookline.kafkaValues`). Credentials are `@/path`
     references to mounted Secret files, never values. */}}
{{- define "hookline.kafkaConfig" -}}
{{- $k := . -}}
{{- $entries := list -}}
{{- $managed := list -}}
{{- $proto := $k.securityProtocol -}}
{{- if $proto -}}
{{- $entries = append $entries (printf "security.protocol=%s" $proto) -}}
{{- $managed = append $managed "security.protocol" -}}
{{- end -}}
{{- if hasPrefix "SASL_" $proto -}}
{{- if not $k.sasl.existingSecret -}}
{{- fail "kafka.securityProtocol is SASL_*: set kafka.sasl.existingSecret to a Secret holding the username and password" -}}
{{- end -}}
{{- $entries = append $entries (printf "sasl.mechanism=%s" $k.sasl.mechanism) -}}
{{- $entries = append $entries (printf "sasl.username=@/etc/hookline/kafka/sasl/%s" $k.sasl.usernameKey) -}}
{{- $entries = append $entries (printf "sasl.password=@/etc/hookline/kafka/sasl/%s" $k.sasl.passwordKey) -}}
{{- $managed = concat $managed (list "sasl.mechanism" "sasl.username" "sasl.password") -}}
{{- end -}}
{{- if $k.tls.existingSecret -}}
{{- if not (has $proto (list "SSL" "SASL_SSL")) -}}
{{- fail "kafka.tls.existingSecret is set but kafka.securityProtocol is not SSL or SASL_SSL" -}}
{{- end -}}
{{- $entries = append $entries (printf "ssl.ca.location=/etc/hookline/kafka/tls/%s" $k.tls.caKey) -}}
{{- $managed = append $managed "ssl.ca.location" -}}
{{- if $k.tls.certKey -}}
{{- $entries = append $entries (printf "ssl.certificate.location=/etc/hookline/kafka/tls/%s" $k.tls.certKey) -}}
{{- $entries = append $entries (printf "ssl.key.location=/etc/hookline/kafka/tls/%s" $k.tls.keyKey) -}}
{{- $managed = concat $managed (list "ssl.certificate.location" "ssl.key.location") -}}
{{- end -}}
{{- end -}}
{{- $group := dict "group.id" "use <component>.groupId" "group.instance.id" "use kafka.staticMembership" "session.timeout.ms" "use kafka.groupSessionTimeout" "heartbeat.interval.ms" "derived from kafka.groupSessionTimeout" "partition.assignment.strategy" "always cooperative-sticky" "group.protocol" "the classic protocol with cooperative-sticky" -}}
{{- range $key, $value := $k.config -}}
{{- $v := include "hookline.str" $value -}}
{{- if has $key $managed -}}
{{- fail (printf "kafka.config.%s is set by the chart from kafka.securityProtocol/sasl/tls; remove it from kafka.config" $key) -}}
{{- end -}}
{{- if hasKey $group $key -}}
{{- fail (printf "kafka.config.%s is a consumer-group setting the services own and refuse as -X (%s); remove it from kafka.config" $key (get $group $key)) -}}
{{- end -}}
{{- if or (contains ";" $key) (contains ";" $v) -}}
{{- fail (printf "kafka.config.%s: `;` separates passthrough entries and cannot appear in a key or value" $key) -}}
{{- end -}}
{{- if and (regexMatch "(password|secret|jaas)" $key) (not (hasPrefix "@" $v)) -}}
{{- fail (printf "kafka.config.%s looks like a credential: mount it from a Secret and reference the file as @/path, never put it in values" $key) -}}
{{- end -}}
{{- $entries = append $entries (printf "%s=%s" $key $v) -}}
{{- end -}}
{{- join ";" $entries -}}
{{- end -}}

{{/* Environment shared by every component and the topics Job (which leaves
     out the service-only HOOKLINE_HTTP_ADDR and HOOKLINE_LOG). */}}
{{- define "hookline.commonEnv" -}}
HOOKLINE_BROKERS: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
HOOKLINE_TOPIC_PREFIX: {{ .Values.topics.prefix | quote }}
{{- with include "hookline.kafkaConfig" .Values.kafka }}
HOOKLINE_KAFKA_CONFIG: {{ . | quote }}
{{- end }}
HOOKLINE_HTTP_ADDR: {{ printf "0.0.0.0:%d" (int .Values.metrics.port) | quote }}
HOOKLINE_LOG_FORMAT: {{ .Values.log.format | quote }}
HOOKLINE_LOG: {{ .Values.log.level | quote }}
{{- end -}}

{{/* Consumer-group settings of every component (not the topics Job, which
     joins no group), checked against the range the services accept.
     HOOKLINE_GROUP_INSTANCE_ID is not here: it comes from the pod name
     (hookline.staticMembershipEnv), which a ConfigMap cannot hold. */}}
{{- define "hookline.groupEnv" -}}
{{- $k := .Values.kafka -}}
{{- $session := include "hookline.durationMs" $k.groupSessionTimeout | int64 -}}
{{- if or (lt $session (int64 1000)) (gt $session (int64 1800000)) -}}
{{- fail (printf "kafka.groupSessionTimeout %s is outside 1s..30m, which the services refuse (brokers accept 6s..30m by default)" $k.groupSessionTimeout) -}}
{{- end -}}
{{- if lt (include "hookline.durationMs" $k.consumerStallTimeout | int64) (int64 1000) -}}
{{- fail (printf "kafka.consumerStallTimeout %s must be at least 1s" $k.consumerStallTimeout) -}}
{{- end -}}
HOOKLINE_GROUP_SESSION_TIMEOUT: {{ $k.groupSessionTimeout | quote }}
HOOKLINE_CONSUMER_STALL_TIMEOUT: {{ $k.consumerStallTimeout | quote }}
{{- end -}}

{{/* The container env entry of static membership, when kafka.staticMembership:
     the pod name, unique per replica and stable across container restarts in
     the pod (the dispatcher suffixes it per consumer). */}}
{{- define "hookline.staticMembershipEnv" -}}
{{- if .Values.kafka.staticMembership -}}
- name: HOOKLINE_GROUP_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}
{{- end -}}

{{/* Environment of one component: (dict "root" $ "key" "dispatcher"). The
     chart's typed values first; the component's `env` map may add any other
     HOOKLINE_* flag but not override one the chart sets. */}}
{{- define "hookline.componentEnv" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .key -}}
{{- $env := include "hookline.commonEnv" $root | fromYaml -}}
{{- $kafka := include "hookline.kafkaValues" . | fromYaml -}}
{{- $_ := unset $env "HOOKLINE_KAFKA_CONFIG" -}}
{{- with include "hookline.kafkaConfig" $kafka -}}
{{- $_ := set $env "HOOKLINE_KAFKA_CONFIG" . -}}
{{- end -}}
{{- $_ := set $env "HOOKLINE_SHUTDOWN_GRACE" (printf "%ds" (int $c.shutdownGraceSeconds)) -}}
{{- range $k, $v := include "hookline.groupEnv" $root | fromYaml -}}
{{- $_ := set $env $k $v -}}
{{- end -}}
{{- if or (eq .key "fanout") (eq .key "dispatcher") -}}
{{- $_ := set $env "HOOKLINE_OVERFLOW_LANES" (include "hookline.str" $root.Values.overflow.lanes) -}}
{{- end -}}
{{- if eq .key "fanout" -}}
{{- $_ := set $env "HOOKLINE_FANOUT_GROUP" $c.groupId -}}
{{- $_ := set $env "HOOKLINE_DEDUP_WINDOW" (include "hookline.str" $c.dedupWindow) -}}
{{- $_ := set $env "HOOKLINE_DEDUP_MAX_KEYS" (include "hookline.str" $c.dedupMaxKeys) -}}
{{- else if eq .key "dispatcher" -}}
{{- $_ := set $env "HOOKLINE_DISPATCHER_GROUP" $c.groupId -}}
{{- $_ := set $env "HOOKLINE_REQUEST_TIMEOUT" (printf "%ds" (int $c.requestTimeoutSeconds)) -}}
{{- $_ := set $env "HOOKLINE_SECRETS_DIR" $root.Values.signing.mountPath -}}
{{- $_ := set $env "HOOKLINE_SECRETS_POLL_INTERVAL" $root.Values.signing.pollInterval -}}
{{- $_ := set $env "HOOKLINE_RETRY_TIERS" (include "hookline.retryTiers" $root) -}}
{{- $policy := $c.retryPolicy -}}
{{- if eq (include "hookline.durationMs" $policy.maxAge) "0" -}}
{{- fail "dispatcher.retryPolicy.maxAge must be greater than zero" -}}
{{- end -}}
{{- $_ := set $env "HOOKLINE_MAX_ATTEMPTS" (include "hookline.str" $policy.maxAttempts) -}}
{{- $_ := set $env "HOOKLINE_MAX_AGE" $policy.maxAge -}}
{{- $_ := set $env "HOOKLINE_RETRY_JITTER" $policy.jitter -}}
{{- else if eq .key "dlqSink" -}}
{{- $_ := set $env "HOOKLINE_DLQ_SINK_GROUP" $c.groupId -}}
{{- $_ := set $env "HOOKLINE_ARCHIVE_URL" (default $c.archive.mountPath $c.archive.url) -}}
{{- with $c.archive.s3Endpoint }}{{ $_ := set $env "HOOKLINE_S3_ENDPOINT" . }}{{ end -}}
{{- with $c.archive.s3Region }}{{ $_ := set $env "HOOKLINE_S3_REGION" . }}{{ end -}}
{{- end -}}
{{- range $name, $value := $c.env -}}
{{- if eq $name "HOOKLINE_GROUP_INSTANCE_ID" -}}
{{- fail (printf "%s.env.HOOKLINE_GROUP_INSTANCE_ID would give every replica the same instance id: set kafka.staticMembership, which takes it from the pod name" $.key) -}}
{{- end -}}
{{- if hasKey $env $name -}}
{{- fail (printf "%s.env.%s is set by the chart from typed values; change those instead" $.key $name) -}}
{{- end -}}
{{- $_ := set $env $name (include "hookline.str" $value) -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* terminationGracePeriodSeconds of a component, computed or checked. */}}
{{- define "hookline.terminationGrace" -}}
{{- $c := index .root.Values .key -}}
{{- $shutdown := int $c.shutdownGraceSeconds -}}
{{- $min := add $shutdown 15 -}}
{{- $why := printf "%s.shutdownGraceSeconds (%d) + 15s to commit and flush" .key $shutdown -}}
{{- if eq .key "dispatcher" -}}
{{- $timeout := int $c.requestTimeoutSeconds -}}
{{- $slack := int $c.drainSlackSeconds -}}
{{- if lt $shutdown $timeout -}}
{{- fail (printf "dispatcher.shutdownGraceSeconds (%d) is below dispatcher.requestTimeoutSeconds (%d): requests in flight at shutdown could not finish; raise it" $shutdown $timeout) -}}
{{- end -}}
{{- $min = add $shutdown $slack -}}
{{- $why = printf "dispatcher.shutdownGraceSeconds (%d, >= requestTimeoutSeconds %d) + drainSlackSeconds (%d)" $shutdown $timeout $slack -}}
{{- end -}}
{{- if kindIs "invalid" $c.terminationGracePeriodSeconds -}}
{{- $min -}}
{{- else if lt (int $c.terminationGracePeriodSeconds) (int $min) -}}
{{- fail (printf "%s.terminationGracePeriodSeconds (%d) is too low: it must be at least %d = %s, or Kubernetes kills the pod mid-drain" .key (int $c.terminationGracePeriodSeconds) (int $min) $why) -}}
{{- else -}}
{{- int $c.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* Volumes every pod gets: /tmp and the Kafka credential Secrets of its
     Kafka values (`hookline.kafkaValues`). */}}
{{- define "hookline.kafkaVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if and (hasPrefix "SASL_" .securityProtocol) .sasl.existingSecret }}
- name: kafka-sasl
  secret:
    secretName: {{ .sasl.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "hookline.kafkaVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and (hasPrefix "SASL_" .securityProtocol) .sasl.existingSecret }}
- name: kafka-sasl
  mountPath: /etc/hookline/kafka/sasl
  readOnly: true
{{- end }}
{{- if .tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/hookline/kafka/tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* A value as a string, whole numbers without float formatting (2097152, not 2.097152e+06). */}}
{{- define "hookline.str" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- if eq (float64 .) (float64 (int64 .)) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* Where the dlq-sink's archive lives: `s3` (or another URL: no volume),
     `existing-claim`, `emptyDir` (archive.ephemeral, explicitly) or
     `chart-claim` (the default: a PersistentVolumeClaim the chart creates). */}}
{{- define "hookline.archiveVolume" -}}
{{- $a := .Values.dlqSink.archive -}}
{{- if $a.url -}}
url
{{- else if $a.existingClaim -}}
{{- if $a.ephemeral -}}
{{- fail "dlqSink.archive.existingClaim and dlqSink.archive.ephemeral exclude each other: drop one" -}}
{{- end -}}
existing-claim
{{- else if $a.ephemeral -}}
emptyDir
{{- else -}}
chart-claim
{{- end -}}
{{- end -}}

{{- define "hookline.archiveClaimName" -}}
{{- printf "%s-dlq-sink-archive" (include "hookline.fullname" .) -}}
{{- end -}}
