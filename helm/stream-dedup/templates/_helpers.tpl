{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "stream-dedup.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name.  Kept to 52 characters: the StatefulSet controller appends
"-<ordinal>" and a hash to pod names and PVC names are "<claim>-<statefulset>-<ordinal>".
*/}}
{{- define "stream-dedup.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stream-dedup.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stream-dedup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stream-dedup.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stream-dedup.labels" -}}
helm.sh/chart: {{ include "stream-dedup.chart" . }}
{{ include "stream-dedup.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stream-dedup
{{- end }}

{{- define "stream-dedup.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stream-dedup.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stream-dedup.headlessServiceName" -}}
{{- printf "%s-headless" (include "stream-dedup.fullname" .) }}
{{- end }}

{{- define "stream-dedup.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the CA bundle from kafka.ssl.caSecret is mounted. */}}
{{- define "stream-dedup.caDir" -}}
/etc/stream-dedup/kafka-ca
{{- end }}

{{/* values.engine key -> environment variable of the setting (see stream_dedup/config.py). */}}
{{- define "stream-dedup.engineEnv" -}}
numPerm: STREAM_DEDUP_NUM_PERM
shingleSize: STREAM_DEDUP_SHINGLE_SIZE
lshThreshold: STREAM_DEDUP_LSH_THRESHOLD
jaccardThreshold: STREAM_DEDUP_JACCARD_THRESHOLD
containmentThreshold: STREAM_DEDUP_CONTAINMENT_THRESHOLD
simhashK: STREAM_DEDUP_SIMHASH_K
simhashBlocks: STREAM_DEDUP_SIMHASH_BLOCKS
maxTextBytes: STREAM_DEDUP_MAX_TEXT_BYTES
seed: STREAM_DEDUP_SEED
memory: STREAM_DEDUP_MEMORY
retention: STREAM_DEDUP_RETENTION
{{- end }}

{{/* A value as text; whole numbers without exponent (YAML numbers arrive as float64: 2e+06). */}}
{{- define "stream-dedup.number" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* Fail early on combinations the schema cannot express. */}}
{{- define "stream-dedup.validate" -}}
{{- $proto := .Values.kafka.securityProtocol }}
{{- if hasPrefix "SASL_" $proto }}
{{- if not .Values.kafka.sasl.mechanism }}
{{- fail (printf "kafka.securityProtocol=%s needs kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)" $proto) }}
{{- end }}
{{- if not .Values.kafka.sasl.existingSecret }}
{{- fail (printf "kafka.securityProtocol=%s needs kafka.sasl.existingSecret: the name of an existing Secret holding the password under kafka.sasl.passwordKey" $proto) }}
{{- end }}
{{- if and (not .Values.kafka.sasl.username) (not .Values.kafka.sasl.usernameKey) }}
{{- fail "SASL needs kafka.sasl.username or kafka.sasl.usernameKey" }}
{{- end }}
{{- end }}
{{- if and .Values.kafka.ssl.caSecret (not (hasSuffix "SSL" $proto)) }}
{{- fail (printf "kafka.ssl.caSecret is set but kafka.securityProtocol=%s does not use TLS (use SSL or SASL_SSL)" $proto) }}
{{- end }}
{{- $k := .Values.engine.simhashK }}
{{- $blocks := .Values.engine.simhashBlocks }}
{{- if and (not (kindIs "invalid" $k)) (not (kindIs "invalid" $blocks)) }}
{{- if ge (int $k) (int $blocks) }}
{{- fail "engine.simhashK must be smaller than engine.simhashBlocks" }}
{{- end }}
{{- end }}
{{- end }}
