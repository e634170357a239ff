{{/*
Expand the name of the chart.
*/}}
{{- define "chattts-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "chattts-gateway.fullname" -}}
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
{{- define "chattts-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "chattts-gateway.labels" -}}
helm.sh/chart: {{ include "chattts-gateway.chart" . }}
{{ include "chattts-gateway.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "chattts-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chattts-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the helm test pod: not the selector labels, so the Service, PDB and NetworkPolicy never select it.
*/}}
{{- define "chattts-gateway.testLabels" -}}
helm.sh/chart: {{ include "chattts-gateway.chart" . }}
app.kubernetes.io/name: {{ printf "%s-test" (include "chattts-gateway.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "chattts-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "chattts-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "chattts-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Name of the Secret holding secret.yaml: the user's existingSecret, else the chart's own.
*/}}
{{- define "chattts-gateway.secretName" -}}
{{- default (include "chattts-gateway.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{/*
Whether the chart renders its own Secret ("true" or empty).
*/}}
{{- define "chattts-gateway.createSecret" -}}
{{- if not .Values.auth.existingSecret }}true{{- end }}
{{- end }}

{{/*
Name of the PersistentVolumeClaim mounted at /models.
*/}}
{{- define "chattts-gateway.claimName" -}}
{{- default (printf "%s-models" (include "chattts-gateway.fullname" .)) .Values.weights.persistentVolumeClaim.existingClaim }}
{{- end }}

{{/*
Whether the gateway has a Redis ("true" or empty): redis.host for mode standalone, redis.sentinel.hosts for sentinel,
redis.cluster.nodes for cluster.
*/}}
{{- define "chattts-gateway.redisEnabled" -}}
{{- $redis := .Values.redis }}
{{- if eq $redis.mode "sentinel" }}
{{- if not $redis.sentinel.hosts }}
{{- fail "redis.mode sentinel needs redis.sentinel.hosts" }}
{{- end }}true
{{- else if eq $redis.mode "cluster" }}
{{- if not $redis.cluster.nodes }}
{{- fail "redis.mode cluster needs redis.cluster.nodes" }}
{{- end }}true
{{- else if $redis.host }}true
{{- end }}
{{- end }}

{{/*
Where the Redis password comes from: a dict with "name" and "key", or empty when there is none.
*/}}
{{- define "chattts-gateway.redisPasswordRef" -}}
{{- if .Values.redis.existingSecret }}
{{- dict "name" .Values.redis.existingSecret "key" .Values.redis.existingSecretPasswordKey | toJson }}
{{- else if .Values.redis.password }}
{{- if .Values.auth.existingSecret }}
{{- fail "redis.password is rendered into the chart's Secret, which auth.existingSecret turns off: use redis.existingSecret" }}
{{- end }}
{{- dict "name" (include "chattts-gateway.fullname" .) "key" "redis-password" | toJson }}
{{- end }}
{{- end }}

{{/*
Where the sentinels' own password comes from (redis.sentinel.auth own): a dict with "name" and "key", or empty.
*/}}
{{- define "chattts-gateway.redisSentinelPasswordRef" -}}
{{- $sentinel := .Values.redis.sentinel }}
{{- if and (eq .Values.redis.mode "sentinel") (eq $sentinel.auth "own") }}
{{- if $sentinel.existingSecret }}
{{- dict "name" $sentinel.existingSecret "key" $sentinel.existingSecretPasswordKey | toJson }}
{{- else if $sentinel.password }}
{{- if .Values.auth.existingSecret }}
{{- fail "redis.sentinel.password is rendered into the chart's Secret, which auth.existingSecret turns off: use redis.sentinel.existingSecret" }}
{{- end }}
{{- dict "name" (include "chattts-gateway.fullname" .) "key" "redis-sentinel-password" | toJson }}
{{- else }}
{{- fail "redis.sentinel.auth own needs redis.sentinel.password or redis.sentinel.existingSecret" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Where redis.tlsCASecret is mounted.
*/}}
{{- define "chattts-gateway.redisCADir" -}}
/etc/chattts-gateway/redis-ca
{{- end }}

{{/*
The gateway's redis_url (its schemes: docs/configuration.md), with $(REDIS_PASSWORD) and $(REDIS_SENTINEL_PASSWORD)
expanded by the kubelet from the env vars of those names.
*/}}
{{- define "chattts-gateway.redisURL" -}}
{{- $redis := .Values.redis }}
{{- $userinfo := "" }}
{{- if include "chattts-gateway.redisPasswordRef" . }}
{{- $userinfo = printf "%s:$(REDIS_PASSWORD)@" $redis.username }}
{{- else if $redis.username }}
{{- $userinfo = printf "%s@" $redis.username }}
{{- end }}
{{- $scheme := ternary "rediss" "redis" $redis.tls }}
{{- $options := list }}
{{- if $redis.tlsCASecret }}
{{- if not $redis.tls }}
{{- fail "redis.tlsCASecret needs redis.tls" }}
{{- end }}
{{- $options = append $options (printf "ssl_ca_certs=%s/%s" (include "chattts-gateway.redisCADir" .) $redis.tlsCASecretKey) }}
{{- end }}
{{- $url := "" }}
{{- if eq $redis.mode "sentinel" }}
{{- if eq $redis.sentinel.auth "none" }}
{{- $options = append $options "sentinel_password=" }}
{{- else if include "chattts-gateway.redisSentinelPasswordRef" . }}
{{- $options = append $options "sentinel_password=$(REDIS_SENTINEL_PASSWORD)" }}
{{- end }}
{{- $url = printf "%s+sentinel://%s%s/%s/%d" $scheme $userinfo (join "," $redis.sentinel.hosts) $redis.sentinel.masterSet (int $redis.db) }}
{{- else if eq $redis.mode "cluster" }}
{{- if ne (int $redis.db) 0 }}
{{- fail "a Redis Cluster has only database 0: leave redis.db at 0 with redis.mode cluster" }}
{{- end }}
{{- $url = printf "%s+cluster://%s%s" $scheme $userinfo (join "," $redis.cluster.nodes) }}
{{- else }}
{{- $url = printf "%s://%s%s:%d/%d" $scheme $userinfo $redis.host (int $redis.port) (int $redis.db) }}
{{- end }}
{{- $url }}{{ with $options }}?{{ join "&" . }}{{ end }}
{{- end }}

{{/*
The TCP ports the gateway reaches Redis on, as a JSON list: redis.port, and the sentinels' or the startup nodes' ports
(26379 or 6379 where an entry names none).
*/}}
{{- define "chattts-gateway.redisPorts" -}}
{{- $redis := .Values.redis }}
{{- $ports := list (int $redis.port) }}
{{- if ne $redis.mode "standalone" }}
{{- $sentinel := eq $redis.mode "sentinel" }}
{{- $default := ternary 26379 6379 $sentinel }}
{{- range (ternary $redis.sentinel.hosts $redis.cluster.nodes $sentinel) }}
{{- $parts := regexFind ":[0-9]+$" . }}
{{- $ports = append $ports (ternary (int (trimPrefix ":" $parts)) $default (ne $parts "")) }}
{{- end }}
{{- end }}
{{- uniq $ports | toJson }}
{{- end }}

{{/*
The options the chart adds to every engine of kind chattts (as JSON): the weights location, and device cuda with
gpu.enabled. Options set in values win over these.
*/}}
{{- define "chattts-gateway.weightsOptions" -}}
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
{{- toJson $derived }}
{{- end }}

{{/*
The gateway's built-in engines (gateway/settings.py BUILT_IN_ENGINES; tests/helm checks the two agree). A rendered
config must name each one it does not run as null: the gateway merges its config into the built-ins, and Helm drops
keys set to null in values, so a `config.engines.chattts=null` never reaches the rendered file by itself.
*/}}
{{- define "chattts-gateway.builtInEngines" -}}
{{- list "chattts" "espeak" | toJson }}
{{- end }}

{{/*
The gateway's built-in aliases, OpenAI's model names and ElevenLabs' (gateway/settings.py BUILT_IN_MODEL_NAMES;
tests/helm checks the two agree). As for engines, a rendered config names each one it does not serve as null.
*/}}
{{- define "chattts-gateway.builtInAliases" -}}
{{- list "tts-1" "tts-1-hd" "tts-1-1106" "tts-1-hd-1106" "gpt-4o-mini-tts" "gpt-4o-mini-tts-2025-03-20" "gpt-4o-mini-tts-2025-12-15" "gpt-realtime" "gpt-realtime-2025-08-28" "gpt-realtime-1.5" "gpt-realtime-2" "gpt-realtime-2.1" "gpt-realtime-2.1-mini" "gpt-realtime-mini" "gpt-realtime-mini-2025-10-06" "gpt-realtime-mini-2025-12-15" "eleven_multilingual_v2" "eleven_flash_v2_5" "eleven_turbo_v2_5" "eleven_v3" "eleven_v3_conversational" "eleven_v4" "eleven_v4_turbo" "eleven_monolingual_v1" "eleven_multilingual_v1" "eleven_flash_v2" "eleven_turbo_v2" | toJson }}
{{- end }}

{{/*
The gateway's aliases (as JSON): each of config.aliases in the mapping form, with `fallback` set to aliasFallback
where it sets none itself (the gateway's own default is true, which the chart must not inherit unseen), and every
built-in alias missing from config.aliases set to null.
*/}}
{{- define "chattts-gateway.aliases" -}}
{{- $aliases := dict }}
{{- range $name, $alias := (.Values.config.aliases | default dict) }}
{{- if $alias }}
{{- $mapping := dict }}
{{- if kindIs "slice" $alias }}
{{- $mapping = dict "engines" $alias }}
{{- else }}
{{- $mapping = deepCopy $alias }}
{{- end }}
{{- if not (hasKey $mapping "fallback") }}
{{- $_ := set $mapping "fallback" $.Values.aliasFallback }}
{{- end }}
{{- $_ := set $aliases $name $mapping }}
{{- end }}
{{- end }}
{{- range (include "chattts-gateway.builtInAliases" . | fromJsonArray) }}
{{- if not (hasKey $aliases .) }}
{{- $_ := set $aliases . nil }}
{{- end }}
{{- end }}
{{- toJson $aliases }}
{{- end }}

{{/*
Names of the engines that run on the engine tier (as JSON): every engine of kind chattts in config.engines, the
ones that need weights and a GPU. Empty when engineTier is off.
*/}}
{{- define "chattts-gateway.engineTier.engineNames" -}}
{{- $names := list }}
{{- if .Values.engineTier.enabled }}
{{- range $name, $engine := (.Values.config.engines | default dict) }}
{{- if and $engine (eq (toString $engine.kind) "chattts") }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- if not $names }}
{{- fail "engineTier.enabled moves the engines of kind chattts to the engine tier, but config.engines has none" }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/*
The gateway configuration (config.yaml): .Values.config with the weights options added to every engine of kind
chattts. With engineTier on, each of those engines is replaced by a remote engine (kind openai) of the same name that
calls it on the engine tier, so aliases and model names stay as they are.
*/}}
{{- define "chattts-gateway.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $engines := $config.engines | default dict }}
{{- $_ := set $config "engines" $engines }}
{{- $derived := include "chattts-gateway.weightsOptions" . | fromJson }}
{{- $remote := include "chattts-gateway.engineTier.engineNames" . | fromJsonArray }}
{{- range $name, $engine := $engines }}
{{- if has $name $remote }}
{{- $_ := set $engines $name (include "chattts-gateway.engineTier.remoteEngine" (list $ $name) | fromJson) }}
{{- else if and $engine (eq (toString $engine.kind) "chattts") }}
{{- $_ := set $engine "options" (mergeOverwrite (deepCopy $derived) ($engine.options | default dict)) }}
{{- end }}
{{- end }}
{{- include "chattts-gateway.nullMissingBuiltIns" $engines }}
{{- $_ := set $config "aliases" (include "chattts-gateway.aliases" . | fromJson) }}
{{- $uploads := $config.uploads | default dict }}
{{- if not (hasKey $uploads "max_spooled_mb") }}
{{- /* Upload bodies over 1 MiB are spooled to /tmp while they wait: half of it for them, the rest for the rest. */}}
{{- $_ := set $uploads "max_spooled_mb" (max 16 (div (include "chattts-gateway.mebibytes" .Values.tmpSizeLimit | int) 2)) }}
{{- end }}
{{- $_ := set $config "uploads" $uploads }}
{{- /* Speech jobs (docs/jobs.md) from the jobs values; config.jobs wins where it sets the same field. */}}
{{- $jobs := dict "concurrency" (int .Values.jobs.concurrency) "ttl_s" (int .Values.jobs.ttlSeconds) "max_input_chars" (int .Values.jobs.maxInputChars) "storage_quota_bytes" (int64 .Values.jobs.storageQuotaBytes) }}
{{- if .Values.jobs.volume.existingClaim }}
{{- $_ := set $jobs "directory" .Values.jobs.volume.mountPath }}
{{- end }}
{{- $_ := set $config "jobs" (mergeOverwrite $jobs ($config.jobs | default dict)) }}
{{- toYaml $config }}
{{- end }}

{{/*
A Kubernetes quantity (values.schema.json's pattern: 512Mi, 1Gi, 2G, 1048576) in whole mebibytes.
*/}}
{{- define "chattts-gateway.mebibytes" -}}
{{- $quantity := toString . }}
{{- $digits := regexFind "^[0-9]+(\\.[0-9]+)?" $quantity }}
{{- $perUnit := dict "" 1.0 "m" 0.001 "k" 1e3 "Ki" 1024.0 "M" 1e6 "Mi" 1048576.0 "G" 1e9 "Gi" 1073741824.0 "T" 1e12 "Ti" 1099511627776.0 "P" 1e15 "Pi" 1125899906842624.0 "E" 1e18 "Ei" 1152921504606846976.0 }}
{{- divf (mulf (float64 $digits) (get $perUnit (trimPrefix $digits $quantity))) 1048576 | floor | int }}
{{- end }}

{{/*
Sets every built-in engine missing from the given engines mapping to null (see chattts-gateway.builtInEngines).
*/}}
{{- define "chattts-gateway.nullMissingBuiltIns" -}}
{{- $engines := . }}
{{- range (include "chattts-gateway.builtInEngines" . | fromJsonArray) }}
{{- if not (hasKey $engines .) }}
{{- $_ := set $engines . nil }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The admin token: the value, else the one in the release's existing Secret (kept across upgrades), else a random one
generated once per render (memoized so the Secret and its checksum agree).
*/}}
{{- define "chattts-gateway.adminToken" -}}
{{- if .Values.auth.adminToken }}
{{- .Values.auth.adminToken }}
{{- else }}
{{- $memo := .Values.auth }}
{{- if not (index $memo "_generatedAdminToken") }}
{{- $token := "" }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "chattts-gateway.fullname" .) }}
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
{{- define "chattts-gateway.secretConfig" -}}
{{- $auth := dict "admin_token" (include "chattts-gateway.adminToken" .) }}
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
{{- define "chattts-gateway.terminationGracePeriodSeconds" -}}
{{- $grace := dig "server" "shutdown_grace_s" 30 .Values.config }}
{{- add (int .Values.preStopSleepSeconds) (int $grace) (int .Values.terminationGraceExtraSeconds) }}
{{- end }}

{{/*
--- The engine tier (engineTier.enabled): engine nodes (`server.profile: engine`) behind a headless Service. ---
*/}}

{{/*
Full name of the engine tier's resources.
*/}}
{{- define "chattts-gateway.engineTier.fullname" -}}
{{- printf "%s-engine" (include "chattts-gateway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of the jobs' own pods (jobs.runner dedicated); a name of their own, as the engine pods have.
*/}}
{{- define "chattts-gateway.jobs.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-jobs" (include "chattts-gateway.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the jobs' own pods (jobs.runner dedicated): not the gateway's selector labels, so the Service, PDB and HPA
never select them.
*/}}
{{- define "chattts-gateway.jobs.labels" -}}
helm.sh/chart: {{ include "chattts-gateway.chart" . }}
{{ include "chattts-gateway.jobs.selectorLabels" . }}
app.kubernetes.io/component: jobs
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels of the engine pods. The name differs from the gateway's, so the gateway's Service, PDB,
NetworkPolicy and ServiceMonitor (which select name + instance) never select an engine pod.
*/}}
{{- define "chattts-gateway.engineTier.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-engine" (include "chattts-gateway.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the engine tier's resources.
*/}}
{{- define "chattts-gateway.engineTier.labels" -}}
helm.sh/chart: {{ include "chattts-gateway.chart" . }}
{{ include "chattts-gateway.engineTier.selectorLabels" . }}
app.kubernetes.io/component: engine
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Base URL of the engine tier for the gateway's remote engines: the headless Service's name, which resolves to the
address of every ready engine pod (the remote engine counts each address as one endpoint and re-resolves it). A
fully qualified name, so resolution needs no trip through the search list.
*/}}
{{- define "chattts-gateway.engineTier.baseURL" -}}
{{- printf "http://%s.%s.svc.%s:%d/v1" (include "chattts-gateway.engineTier.fullname" .) .Release.Namespace .Values.engineTier.clusterDomain (int .Values.containerPort) }}
{{- end }}

{{/*
The gateway's remote engine (as JSON) standing in for engine $name of the engine tier; called with (list $ $name).
It asks the engine nodes for the engine by its own name and authenticates with the service token from the
environment variable TTS_ENGINE_SERVICE_TOKEN (set from the Secret, never written into the ConfigMap).
*/}}
{{- define "chattts-gateway.engineTier.remoteEngine" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $options := deepCopy ($root.Values.engineTier.remoteOptions | default dict) }}
{{- $_ := set $options "endpoints" (list (include "chattts-gateway.engineTier.baseURL" $root)) }}
{{- $_ := set $options "model" $name }}
{{- $_ := set $options "api_key_env" "TTS_ENGINE_SERVICE_TOKEN" }}
{{- dict "kind" "openai" "options" $options | toJson }}
{{- end }}

{{/*
The engine nodes' configuration (their config.yaml): the gateway's server settings with `profile: engine`, and the
engines that moved off the gateway (with their weights options); every other engine, built-ins included, is null.
An engine pod is ready when every moved engine is (readiness.engines): the front gateways call each by its name.
No tenants, limits, cache or Redis: the front gateways do those. The service token comes from the environment.
*/}}
{{- define "chattts-gateway.engineTier.config" -}}
{{- $server := deepCopy (.Values.config.server | default dict) }}
{{- $_ := set $server "profile" "engine" }}
{{- $_ := set $server "playground" false }}
{{- $derived := include "chattts-gateway.weightsOptions" . | fromJson }}
{{- $moved := include "chattts-gateway.engineTier.engineNames" . | fromJsonArray }}
{{- $engines := dict }}
{{- range $name, $engine := (.Values.config.engines | default dict) }}
{{- if has $name $moved }}
{{- $copy := deepCopy $engine }}
{{- $_ := set $copy "options" (mergeOverwrite (deepCopy $derived) ($copy.options | default dict)) }}
{{- $_ := set $engines $name $copy }}
{{- else }}
{{- $_ := set $engines $name nil }}
{{- end }}
{{- end }}
{{- include "chattts-gateway.nullMissingBuiltIns" $engines }}
{{- toYaml (dict "server" $server "engines" $engines "readiness" (dict "engines" $moved)) }}
{{- end }}

{{/*
Name of the Secret holding the service token: engineTier.existingSecret, else the chart's own.
*/}}
{{- define "chattts-gateway.engineTier.secretName" -}}
{{- default (include "chattts-gateway.engineTier.fullname" .) .Values.engineTier.existingSecret }}
{{- end }}

{{/*
Key of the service token in that Secret.
*/}}
{{- define "chattts-gateway.engineTier.secretKey" -}}
{{- ternary .Values.engineTier.existingSecretKey "service-token" (ne .Values.engineTier.existingSecret "") }}
{{- end }}

{{/*
The service token the chart renders into its Secret: engineTier.serviceToken, else the one in the release's existing
Secret (kept across upgrades), else a random 48-character one generated once per render (memoized so the Secret and
the pods' checksum agree).
*/}}
{{- define "chattts-gateway.engineTier.serviceToken" -}}
{{- $tier := .Values.engineTier }}
{{- if $tier.serviceToken }}
{{- if lt (len $tier.serviceToken) 32 }}
{{- fail "engineTier.serviceToken must be at least 32 characters long" }}
{{- end }}
{{- $tier.serviceToken }}
{{- else }}
{{- if not (index $tier "_generatedServiceToken") }}
{{- $token := "" }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "chattts-gateway.engineTier.fullname" .) }}
{{- if and $existing $existing.data (index $existing.data "service-token") }}
{{- $token = index $existing.data "service-token" | b64dec }}
{{- end }}
{{- $_ := set $tier "_generatedServiceToken" ($token | default (randAlphaNum 48)) }}
{{- end }}
{{- index $tier "_generatedServiceToken" }}
{{- end }}
{{- end }}

{{/*
Pod annotation that rolls the pods of both tiers when the service token the chart renders changes (the token reaches
them as an environment variable, read once at start). Nothing with an existing Secret: roll them yourself.
*/}}
{{- define "chattts-gateway.engineTier.tokenChecksum" -}}
{{- if not .Values.engineTier.existingSecret -}}
checksum/service-token: {{ include "chattts-gateway.engineTier.serviceToken" . | sha256sum }}
{{- end }}
{{- end }}

{{/*
The env entry of container $name (TTS_ENGINE_SERVICE_TOKEN in the gateway, the engine nodes' auth.service_token
override there) reading the service token from the Secret; called with (list $ $name).
*/}}
{{- define "chattts-gateway.engineTier.tokenEnv" -}}
{{- $root := index . 0 -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ include "chattts-gateway.engineTier.secretName" $root }}
      key: {{ include "chattts-gateway.engineTier.secretKey" $root }}
{{- end }}

{{/*
The /models volume (the weights): the claim when weights.persistentVolumeClaim.enabled, else a size-limited emptyDir.
*/}}
{{- define "chattts-gateway.modelsVolume" -}}
- name: models
  {{- if .Values.weights.persistentVolumeClaim.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "chattts-gateway.claimName" . }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ .Values.weights.emptyDirSizeLimit }}
  {{- end }}
{{- end }}

{{/*
An autoscaling/v2 HorizontalPodAutoscaler spec scaling Deployment "target" by the "autoscaling" values; called with
(dict "target" NAME "autoscaling" VALUES).
*/}}
{{- define "chattts-gateway.hpaSpec" -}}
scaleTargetRef:
  apiVersion: apps/v1
  kind: Deployment
  name: {{ .target }}
minReplicas: {{ .autoscaling.minReplicas }}
maxReplicas: {{ .autoscaling.maxReplicas }}
metrics:
  {{- with .autoscaling.targetCPUUtilizationPercentage }}
  - type: Resource
    resource:
      name: cpu
      target:
        type: Utilization
        averageUtilization: {{ . }}
  {{- end }}
  {{- with .autoscaling.targetMemoryUtilizationPercentage }}
  - type: Resource
    resource:
      name: memory
      target:
        type: Utilization
        averageUtilization: {{ . }}
  {{- end }}
  {{- with .autoscaling.customMetrics }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .autoscaling.behavior }}
behavior:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A PodDisruptionBudget spec from the "budget" values (minAvailable, or maxUnavailable when set) selecting "selector"
(YAML labels); called with (dict "budget" VALUES "selector" LABELS).
*/}}
{{- define "chattts-gateway.pdbSpec" -}}
{{- if not (kindIs "invalid" .budget.maxUnavailable) -}}
maxUnavailable: {{ .budget.maxUnavailable }}
{{- else -}}
minAvailable: {{ .budget.minAvailable }}
{{- end }}
selector:
  matchLabels:
    {{- .selector | nindent 4 }}
{{- end }}
