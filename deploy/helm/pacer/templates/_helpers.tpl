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
{{- if not (kindIs "map" $ch) -}}
{{- fail (printf "channels.%s: got %s, want a map of the channel's values" $name (kindOf $ch)) -}}
{{- end -}}
{{- $fields := list "enabled" "replicas" "partitions" "credentialsSecrets" "credentialsDirSecrets" "env" "resources" "keda" -}}
{{- range $f, $_ := $ch -}}
{{- if not (has $f $fields) -}}
{{- fail (printf "channels.%s.%s: a channel has no value %q (it has %s)" $name $f $f (join ", " $fields)) -}}
{{- end -}}
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
{{- $k := deepCopy .root.Values.keda -}}
{{- /* Each value the channel sets wins, 0 and "" included (sprig's
merge would take them for unset and keep keda's). */ -}}
{{- range $key, $v := ($ch.keda | default dict) -}}
{{- $_ := set $k $key $v -}}
{{- end -}}
{{- range $key := list "minReplicaCount" "maxReplicaCount" "lagThreshold" "pollingInterval" "cooldownPeriod" -}}
{{- $where := ternary (printf "channels.%s.keda.%s" $.name $key) (printf "keda.%s" $key) (hasKey ($ch.keda | default dict) $key) -}}
{{- $_ := include "pacer.int" (dict "path" $where "v" (get $k $key)) -}}
{{- end -}}
{{- $max := int $k.maxReplicaCount -}}
{{- $min := int $k.minReplicaCount -}}
{{- $parts := include "pacer.int" (dict "path" (printf "channels.%s.partitions" .name) "v" $ch.partitions) | int -}}
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

{{/*
pacer.int: .v, a whole number, as text; anything else (a string, null, a
fraction, a misspelt value's absence) fails naming .path. The schema
refuses the same; this holds with --skip-schema-validation too. Numbers
from a values file are float64, from --set int64.
*/}}
{{- define "pacer.int" -}}
{{- $v := .v -}}
{{- if or (kindIs "int" $v) (kindIs "int64" $v) -}}
{{ $v }}
{{- else if and (kindIs "float64" $v) (eq (float64 (int64 $v)) $v) -}}
{{ int64 $v }}
{{- else -}}
{{- fail (printf "%s: got %s %v, want a whole number" .path (kindOf $v) $v) -}}
{{- end -}}
{{- end -}}

{{/*
pacer.checkDrain: drain is a Go duration (e.g. 30s), or fail.
*/}}
{{- define "pacer.checkDrain" -}}
{{- $d := .Values.drain -}}
{{- if not (and (kindIs "string" $d) (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$" $d)) -}}
{{- fail (printf "drain: got %s %v, want a duration such as 30s" (kindOf $d) $d) -}}
{{- end -}}
{{- end -}}

{{/*
pacer.checkSettings: refuses, in a map of settings (config, or a
component's env, named .where), every setting a value of the chart sets
(it would be written twice, or one would silently win) and every secret
of docs/configuration.md (a ConfigMap or a pod's spec is readable by
whoever can read the namespace). In an env, also the settings every
component must share. Called with (dict "where" "config" "settings" M).
*/}}
{{- define "pacer.checkSettings" -}}
{{- $owned := dict
  "PACER_KAFKA_BROKERS" "kafka.brokers"
  "PACER_KAFKA_TLS" "kafka.tls.enabled"
  "PACER_KAFKA_TLS_CA_FILE" "kafka.tls.secret and kafka.tls.caKey"
  "PACER_KAFKA_TLS_CERT_FILE" "kafka.tls.secret and kafka.tls.certKey"
  "PACER_KAFKA_TLS_KEY_FILE" "kafka.tls.secret and kafka.tls.keyKey"
  "PACER_KAFKA_TLS_SERVER_NAME" "kafka.tls.serverName"
  "PACER_KAFKA_SASL_MECHANISM" "kafka.sasl.mechanism"
  "PACER_KAFKA_SASL_USERNAME" "kafka.sasl.username"
  "PACER_KAFKA_SASL_PASSWORD_FILE" "kafka.sasl.passwordSecret"
  "PACER_METRICS_ADDR" "metricsPort"
  "PACER_REDIS_URL" "redis.urlSecret"
  "PACER_REDIS_USERNAME" "redis.username"
  "PACER_REDIS_PASSWORD_FILE" "redis.passwordSecret"
  "PACER_REDIS_TLS" "redis.tls.enabled"
  "PACER_REDIS_TLS_CA_FILE" "redis.tls.secret and redis.tls.caKey"
  "PACER_REDIS_TLS_CERT_FILE" "redis.tls.secret and redis.tls.certKey"
  "PACER_REDIS_TLS_KEY_FILE" "redis.tls.secret and redis.tls.keyKey"
  "PACER_REDIS_TLS_SERVER_NAME" "redis.tls.serverName"
  "PACER_DRAIN" "drain"
  "PACER_EXPECTED_REPLICAS" "the replicas values (each Deployment sets its own)"
  "PACER_CREDENTIALS_DIR" "channels.<name>.credentialsDirSecrets"
  "PACER_INGEST_ADDR" "ingest.port"
  "PACER_INGEST_TENANTS" "ingest.tenantsSecret"
  "PACER_INGEST_TOPIC_PREFIX" "topicPrefix (it names the topics of ingest, of each channel's pacer run and of KEDA alike)"
-}}
{{- $secrets := dict
  "PACER_KAFKA_SASL_PASSWORD" "kafka.sasl.passwordSecret"
  "PACER_REDIS_PASSWORD" "redis.passwordSecret"
  "PACER_WHATSAPP_TOKEN" "a Secret in channels.whatsapp.credentialsSecrets and channels.whatsapp.env.PACER_WHATSAPP_TOKEN_FILE naming its file"
  "PACER_SENDGRID_API_KEYS" "a Secret in channels.sendgrid.credentialsSecrets and channels.sendgrid.env.PACER_SENDGRID_API_KEYS_FILE naming its file"
  "PACER_WEBHOOK_WHATSAPP_APP_SECRET" "a mounted Secret and PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE naming its file"
  "PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN" "a mounted Secret and PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN_FILE naming its file"
  "PACER_WEBHOOK_GENERIC_SECRET" "a mounted Secret and PACER_WEBHOOK_GENERIC_SECRET_FILE naming its file"
-}}
{{- $shared := dict
  "PACER_CALLBACK_TOPIC" "config.PACER_CALLBACK_TOPIC (pacer run writes the outcomes topic and pacer ingest reads it: every component must have the same)"
-}}
{{- $where := .where -}}
{{- range $k, $_ := (.settings | default dict) -}}
{{- if hasKey $owned $k -}}
{{- fail (printf "%s.%s: set %s instead" $where $k (get $owned $k)) -}}
{{- end -}}
{{- if hasKey $secrets $k -}}
{{- fail (printf "%s.%s is a secret, which must not be in a ConfigMap or a pod's spec: use %s" $where $k (get $secrets $k)) -}}
{{- end -}}
{{- if and (ne $where "config") (hasKey $shared $k) -}}
{{- fail (printf "%s.%s: set %s instead" $where $k (get $shared $k)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
