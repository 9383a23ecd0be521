{{/* The one pod template of every component: (dict "root" $ "key" "dispatcher" "name" "dispatcher"). */}}
{{- define "hookline.podTemplate" -}}
{{- $root := .root -}}
{{- $c := index $root.Values .key -}}
{{- $port := int $root.Values.metrics.port -}}
{{- $kafka := include "hookline.kafkaValues" (dict "root" $root "key" .key) | fromYaml -}}
metadata:
  labels:
    {{- include "hookline.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "hookline.componentEnv" (dict "root" $root "key" .key) | sha256sum }}
    {{- with (merge (dict) $c.podAnnotations $root.Values.podAnnotations) }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "hookline.serviceAccountName" $root }}
  automountServiceAccountToken: false
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ include "hookline.terminationGrace" (dict "root" $root "key" .key) }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  containers:
    - name: {{ .name }}
      image: {{ include "hookline.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command: ["/usr/local/bin/hookline-{{ .name }}"]
      envFrom:
        - configMapRef:
            name: {{ include "hookline.fullname" $root }}-{{ .name }}
      {{- $static := include "hookline.staticMembershipEnv" $root }}
      {{- range $c.extraEnv }}
      {{- if and $static (eq .name "HOOKLINE_GROUP_INSTANCE_ID") }}
      {{- fail "extraEnv sets HOOKLINE_GROUP_INSTANCE_ID, which kafka.staticMembership already takes from the pod name; drop one" }}
      {{- end }}
      {{- end }}
      {{- if or $static $c.extraEnv }}
      env:
        {{- with $static }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with $c.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      ports:
        - name: metrics
          containerPort: {{ $port }}
          protocol: TCP
      startupProbe:
        httpGet:
          path: /healthz
          port: metrics
        {{- toYaml $c.startupProbe | nindent 8 }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        {{- toYaml $c.livenessProbe | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        {{- toYaml $c.readinessProbe | nindent 8 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "hookline.kafkaVolumeMounts" $kafka | nindent 8 }}
        {{- if eq .key "dispatcher" }}
        # A directory mount without subPath: the kubelet swaps the Secret's
        # files atomically, so rotated signing secrets reach running pods.
        - name: signing-secrets
          mountPath: {{ $root.Values.signing.mountPath }}
          readOnly: true
        {{- end }}
        {{- if and (eq .key "dlqSink") (not $c.archive.url) }}
        - name: archive
          mountPath: {{ $c.archive.mountPath }}
        {{- end }}
        {{- with $c.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- include "hookline.kafkaVolumes" $kafka | nindent 4 }}
    {{- if eq .key "dispatcher" }}
    - name: signing-secrets
      secret:
        secretName: {{ default (printf "%s-signing" (include "hookline.fullname" $root)) $root.Values.signing.existingSecret }}
        defaultMode: 0440
    {{- end }}
    {{- if and (eq .key "dlqSink") (not $c.archive.url) }}
    {{- $volume := include "hookline.archiveVolume" $root }}
    - name: archive
      {{- if eq $volume "existing-claim" }}
      persistentVolumeClaim:
        claimName: {{ $c.archive.existingClaim }}
      {{- else if eq $volume "emptyDir" }}
      # dlqSink.archive.ephemeral: lost with the pod (NOTES.txt warns).
      emptyDir: {}
      {{- else }}
      persistentVolumeClaim:
        claimName: {{ include "hookline.archiveClaimName" $root }}
      {{- end }}
    {{- end }}
    {{- with $c.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $c.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
