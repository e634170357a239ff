{{/*
Expand the name of the chart.
*/}}
{{- define "tts-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "tts-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "tts-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "tts-gateway.labels" -}}
helm.sh/chart: {{ include "tts-gateway.chart" . }}
{{ include "tts-gateway.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "tts-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tts-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the helm test pod: not the selector labels, so the Service, PDB and NetworkPolicy never select it.
*/}}
{{- define "tts-gateway.testLabels" -}}
helm.sh/chart: {{ include "tts-gateway.chart" . }}
app.kubernetes.io/name: {{ printf "%s-test" (include "tts-gateway.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "tts-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tts-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "tts-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Name of the Secret holding secret.yaml: the user's existingSecret, else the chart's own.
*/}}
{{- define "tts-gateway.secretName" -}}
{{- default (include "tts-gateway.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{/*
Whether the chart renders its own Secret ("true" or empty).
*/}}
{{- define "tts-gateway.createSecret" -}}
{{- if not .Values.auth.existingSecret }}true{{- end }}
{{- end }}

{{/*
Name of the PersistentVolumeClaim mounted at /models.
*/}}
{{- define "tts-gateway.claimName" -}}
{{- default (printf "%s-models" (include "tts-gateway.fullname" .)) .Values.weights.persistentVolumeClaim.existingClaim }}
{{- end }}

{{/*
Where the Redis password comes from: a dict with "name" and "key", or empty when there is none.
*/}}
{{- define "tts-gateway.redisPasswordRef" -}}
{{- if .Values.redis.existingSecret }}
{{- dict "name" .Values.redis.existingSecret "key" .Values.redis.existingSecretPasswordKey | toJson }}
{{- else if .Values.redis.password }}
{{- if .Values.auth.existingSecret }}
{{- fail "redis.password is rendered into the chart's Secret, which auth.existingSecret turns off: use redis.existingSecret" }}
{{- end }}
{{- dict "name" (include "tts-gateway.fullname" .) "key" "redis-password" | toJson }}
{{- end }}
{{- end }}

{{/*
The gateway's redis_url, with $(REDIS_PASSWORD) expanded by the kubelet from the env var of that name.
*/}}
{{- define "tts-gateway.redisURL" -}}
{{- $userinfo := "" }}
{{- if include "tts-gateway.redisPasswordRef" . }}
{{- $userinfo = printf "%s:$(REDIS_PASSWORD)@" .Values.redis.username }}
{{- else if .Values.redis.username }}
{{- $userinfo = printf "%s@" .Values.redis.username }}
{{- end }}
{{- printf "%s://%s%s:%d/%d" (ternary "rediss" "redis" .Values.redis.tls) $userinfo .Values.redis.host (int .Values.redis.port) (int .Values.redis.db) }}
{{- end }}

{{/*
The gateway configuration (config.yaml): .Values.config with the weights location, and device cuda with
gpu.enabled, added under the options of every engine of kind chattts (options set in values win).
*/}}
{{- define "tts-gateway.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $weights := .Values.weights }}
{{- $derived := dict }}
{{- if eq $weights.source "dir" }}
{{- if not $weights.persistentVolumeClaim.enabled }}
{{- fail "weights.source dir reads the weights from a volume: set weights.persistentVolumeClaim.enabled (and existingClaim)" }}
{{- end }}
{{- if not (hasPrefix "/models/" $weights.path) }}
{{- fail "weights.path must lie under /models/, where the weights volume is mounted" }}
{{- end }}
{{- $_ := set $derived "source" "dir" }}
{{- $_ := set $derived "path" $weights.path }}
{{- else }}
{{- $_ := set $derived "source" "hub" }}
{{- $_ := set $derived "cache_dir" "/models/hub-cache" }}
{{- $_ := set $derived "download" $weights.download }}
{{- end }}
{{- if .Values.gpu.enabled }}
{{- $_ := set $derived "device" "cuda" }}
{{- end }}
{{- range $name, $engine := ($config.engines | default dict) }}
{{- if and $engine (eq (toString $engine.kind) "chattts") }}
{{- $_ := set $engine "options" (mergeOverwrite (deepCopy $derived) ($engine.options | default dict)) }}
{{- end }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
The admin token: the value, else the one in the release's existing Secret (kept across upgrades), else a random one
generated once per render (memoized so the Secret and its checksum agree).
*/}}
{{- define "tts-gateway.adminToken" -}}
{{- if .Values.auth.adminToken }}
{{- .Values.auth.adminToken }}
{{- else }}
{{- $memo := .Values.auth }}
{{- if not (index $memo "_generatedAdminToken") }}
{{- $token := "" }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "tts-gateway.fullname" .) }}
{{- if and $existing $existing.data (index $existing.data "secret.yaml") }}
{{- $previous := index $existing.data "secret.yaml" | b64dec | fromYaml }}
{{- $token = dig "auth" "admin_token" "" $previous }}
{{- end }}
{{- $_ := set $memo "_generatedAdminToken" ($token | default (randAlphaNum 40)) }}
{{- end }}
{{- index $memo "_generatedAdminToken" }}
{{- end }}
{{- end }}

{{/*
The chart Secret's secret.yaml: the credentials part of the gateway configuration.
*/}}
{{- define "tts-gateway.secretConfig" -}}
{{- $auth := dict "admin_token" (include "tts-gateway.adminToken" .) }}
{{- with .Values.auth.tenants }}
{{- $_ := set $auth "tenants" . }}
{{- end }}
{{- with .Values.auth.jwt }}
{{- $_ := set $auth "jwt" . }}
{{- end }}
{{- toYaml (dict "auth" $auth) }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the preStop sleep, then the streams' grace (config.server.shutdown_grace_s), then time
for the engine workers to stop.
*/}}
{{- define "tts-gateway.terminationGracePeriodSeconds" -}}
{{- $grace := dig "server" "shutdown_grace_s" 30 .Values.config }}
{{- add (int .Values.preStopSleepSeconds) (int $grace) (int .Values.terminationGraceExtraSeconds) }}
{{- end }}
