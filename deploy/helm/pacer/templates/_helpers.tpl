{{/*
pacer.image: the container image, repository[:tag].
*/}}
{{- define "pacer.image" -}}
{{- if .Values.image.tag -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- else -}}
{{ .Values.image.repository }}
{{- end -}}
{{- end -}}

{{/*
pacer.channels: the names of the enabled channels, sorted, as a JSON list;
a channel Pacer does not have is refused.
*/}}
{{- define "pacer.channels" -}}
{{- $known := list "apns" "fcm" "sendgrid" "whatsapp" -}}
{{- $out := list -}}
{{- range $name, $ch := .Values.channels -}}
{{- if not (has $name $known) -}}
{{- fail (printf "channels.%s: Pacer has no channel %q (it has %s)" $name $name (join ", " $known)) -}}
{{- end -}}
{{- if $ch.enabled -}}
{{- $out = append $out $name -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
pacer.keda: the KEDA settings of channel .name (.Values.keda, overridden by
the channel's own keda map), checked against the channel's partitions, as
JSON. Called with (dict "root" $ "name" $name).
*/}}
{{- define "pacer.keda" -}}
{{- $ch := index .root.Values.channels .name -}}
{{- $k := merge (dict) (deepCopy ($ch.keda | default dict)) (deepCopy .root.Values.keda) -}}
{{- $max := int $k.maxReplicaCount -}}
{{- $min := int $k.minReplicaCount -}}
{{- $parts := int $ch.partitions -}}
{{- if gt $max $parts -}}
{{- fail (printf "channels.%s: keda.maxReplicaCount %d is above the topic's %d partitions (channels.%s.partitions): the replicas past them would get no partition and idle" .name $max $parts .name) -}}
{{- end -}}
{{- if or (lt $min 0) (lt $max 1) (gt $min $max) -}}
{{- fail (printf "channels.%s: keda.minReplicaCount %d and maxReplicaCount %d: want 0 <= min <= max and max >= 1" .name $min $max) -}}
{{- end -}}
{{- toJson $k -}}
{{- end -}}

{{/*
pacer.expectedReplicas: PACER_EXPECTED_REPLICAS of a Deployment: its
replicas, or with KEDA its maxReplicaCount (the local failure mode's share
of a rate is then never above the rate). Called with (dict "root" $
"replicas" N "keda" K-or-nil).
*/}}
{{- define "pacer.expectedReplicas" -}}
{{- if .keda -}}
{{ int .keda.maxReplicaCount }}
{{- else -}}
{{ int .replicas }}
{{- end -}}
{{- end -}}

{{/*
pacer.sharedEnv: the environment every pacer container gets after its
ConfigMap: the drain, the replicas, the Redis URL. Called with (dict "root"
$ "expected" N).
*/}}
{{- define "pacer.sharedEnv" -}}
- name: PACER_DRAIN
  value: {{ .root.Values.drain | quote }}
- name: PACER_EXPECTED_REPLICAS
  value: {{ .expected | quote }}
{{- with .root.Values.redis.urlSecret }}
{{- if .name }}
- name: PACER_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}
{{- end }}
{{- end -}}

{{/*
pacer.env: a map of settings as env entries, in the order of their names:
a string is a value, a map a valueFrom.
*/}}
{{- define "pacer.env" -}}
{{- range $name, $v := . }}
- name: {{ $name }}
{{- if kindIs "map" $v }}
  valueFrom:
    {{- toYaml $v | nindent 4 }}
{{- else }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
pacer.connMounts / pacer.connVolumes: the Kafka and Redis TLS and SASL
Secrets every pacer container mounts, when set.
*/}}
{{- define "pacer.connMounts" -}}
{{- if .Values.kafka.tls.secret }}
- {name: kafka-tls, mountPath: /etc/pacer/kafka-tls, readOnly: true}
{{- end }}
{{- if .Values.kafka.sasl.passwordSecret.name }}
- {name: kafka-sasl, mountPath: /etc/pacer/kafka-sasl, readOnly: true}
{{- end }}
{{- if .Values.redis.tls.secret }}
- {name: redis-tls, mountPath: /etc/pacer/redis-tls, readOnly: true}
{{- end }}
{{- if .Values.redis.passwordSecret.name }}
- {name: redis-auth, mountPath: /etc/pacer/redis-auth, readOnly: true}
{{- end }}
{{- end -}}

{{- define "pacer.connVolumes" -}}
{{- if .Values.kafka.tls.secret }}
- name: kafka-tls
  secret: {secretName: {{ .Values.kafka.tls.secret }}, defaultMode: 0440}
{{- end }}
{{- with .Values.kafka.sasl.passwordSecret }}
{{- if .name }}
- name: kafka-sasl
  secret:
    secretName: {{ .name }}
    defaultMode: 0440
    items: [{key: {{ .key }}, path: password}]
{{- end }}
{{- end }}
{{- if .Values.redis.tls.secret }}
- name: redis-tls
  secret: {secretName: {{ .Values.redis.tls.secret }}, defaultMode: 0440}
{{- end }}
{{- with .Values.redis.passwordSecret }}
{{- if .name }}
- name: redis-auth
  secret:
    secretName: {{ .name }}
    defaultMode: 0440
    items: [{key: {{ .key }}, path: password}]
{{- end }}
{{- end }}
{{- end -}}

{{/*
pacer.podSecurity / pacer.containerSecurity: non-root, read-only root
filesystem, no capabilities.
*/}}
{{- define "pacer.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "pacer.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}
