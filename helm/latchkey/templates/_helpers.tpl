{{/*
Expand the name of the chart.
*/}}
{{- define "latchkey.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "latchkey.fullname" -}}
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
{{- define "latchkey.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "latchkey.labels" -}}
helm.sh/chart: {{ include "latchkey.chart" . }}
{{ include "latchkey.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "latchkey.selectorLabels" -}}
app.kubernetes.io/name: {{ include "latchkey.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "latchkey.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "latchkey.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}


{{/*
A list setting (a comma-separated string or a YAML list) as a JSON array of
its trimmed, non-empty items; callers read it with fromJsonArray.
*/}}
{{- define "latchkey.list" -}}
{{- $raw := . | default "" }}
{{- if kindIs "slice" $raw }}
{{- $raw = join "," $raw }}
{{- end }}
{{- $items := list }}
{{- range splitList "," (toString $raw) }}
{{- if trim . }}
{{- $items = append $items (trim .) }}
{{- end }}
{{- end }}
{{- toJson $items }}
{{- end }}

{{/*
The Redis URL(s) of redis.url, comma-separated. `required` fails the install
when there is none and no existing Secret is given (without a URL the binary
would start its own redis-server processes, which the image does not
contain); helm lint only warns about it.
*/}}
{{- define "latchkey.redisUrl" -}}
{{- $urls := include "latchkey.list" .Values.redis.url | fromJsonArray }}
{{- $joined := join "," $urls }}
{{- required "redis.url is required (e.g. --set redis.url=redis://my-redis:6379), or set redis.existingSecret to a Secret holding LATCHKEY_REDIS_URL" $joined }}
{{- end }}

{{/*
redis.url with the password of redis.auth.existingSecret put into every URL
as `user:$(REDIS_PASSWORD)@`; the kubelet substitutes the variable, which
the Deployment defines before LATCHKEY_REDIS_URL.
*/}}
{{- define "latchkey.redisUrlWithAuth" -}}
{{- $user := .Values.redis.auth.username | default "" }}
{{- $out := list }}
{{- range include "latchkey.list" .Values.redis.url | fromJsonArray }}
{{- $parts := splitn "://" 2 . }}
{{- $out = append $out (printf "%s://%s:$(REDIS_PASSWORD)@%s" $parts._0 $user $parts._1) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/*
The RedLock node list as one comma-separated string.
*/}}
{{- define "latchkey.redlockNodes" -}}
{{- include "latchkey.list" .Values.redis.redlockNodes | fromJsonArray | join "," }}
{{- end }}

{{/*
Name of the Secret this chart creates for LATCHKEY_REDIS_URL and
LATCHKEY_REDLOCK_NODES.
*/}}
{{- define "latchkey.redisSecretName" -}}
{{- include "latchkey.fullname" . }}
{{- end }}

{{/*
Whether the chart's Redis Secret has anything to hold: the URL (unless it
comes from redis.existingSecret or carries redis.auth's password reference)
or the RedLock nodes. Empty when it has nothing.
*/}}
{{- define "latchkey.redisSecretNeeded" -}}
{{- if not .Values.redis.existingSecret }}
{{- if or (not .Values.redis.auth.existingSecret) (include "latchkey.redlockNodes" .) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
API keys: the Secret holding the entries (the user's or the chart's), its
key, and whether any is configured.
*/}}
{{- define "latchkey.apiKeysEnabled" -}}
{{- if or .Values.apiKeys.existingSecret .Values.apiKeys.entries }}true{{ end }}
{{- end }}

{{- define "latchkey.apiKeysSecretName" -}}
{{- .Values.apiKeys.existingSecret | default (printf "%s-api-keys" (include "latchkey.fullname" .)) }}
{{- end }}

{{- define "latchkey.apiKeysSecretKey" -}}
{{- if .Values.apiKeys.existingSecret }}
{{- .Values.apiKeys.existingSecretKey | default "api-keys" }}
{{- else }}
{{- "api-keys" }}
{{- end }}
{{- end }}

{{/*
The path LATCHKEY_API_KEYS_FILE names: the Secret's key mounted as a file.
*/}}
{{- define "latchkey.apiKeysFile" -}}
{{- printf "%s/api-keys" (trimSuffix "/" .Values.apiKeys.mountPath) }}
{{- end }}

{{/*
The Redis TLS files: a JSON list of {env, key, file} for each key of
redis.tls that is set (the Secret's key, mounted as `file` under
redis.tls.mountPath).
*/}}
{{- define "latchkey.redisTlsFiles" -}}
{{- $tls := .Values.redis.tls }}
{{- $files := list }}
{{- if $tls.existingSecret }}
{{- if $tls.caKey }}
{{- $files = append $files (dict "env" "LATCHKEY_REDIS_TLS_CA_FILE" "key" $tls.caKey "file" "ca.crt") }}
{{- end }}
{{- if $tls.certKey }}
{{- $files = append $files (dict "env" "LATCHKEY_REDIS_TLS_CERT_FILE" "key" $tls.certKey "file" "client.crt") }}
{{- end }}
{{- if $tls.keyKey }}
{{- $files = append $files (dict "env" "LATCHKEY_REDIS_TLS_KEY_FILE" "key" $tls.keyKey "file" "client.key") }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/*
The seconds a pod may need from the start of its termination until the
process has exited: the preStop pause, then config.shutdownGraceMs (rounded
up to whole seconds) for the drain, then 2 s for what follows the drain
(the runtime's last second, process exit).
*/}}
{{- define "latchkey.drainSeconds" -}}
{{- $preStop := 0 }}
{{- if .Values.preStop.enabled }}
{{- $preStop = int64 .Values.preStop.seconds }}
{{- end }}
{{- $graceSeconds := div (add (int64 .Values.config.shutdownGraceMs) 999) 1000 }}
{{- add $preStop $graceSeconds 2 }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the value given, which may not be below
latchkey.drainSeconds (the render fails), or latchkey.drainSeconds itself.
*/}}
{{- define "latchkey.terminationGracePeriodSeconds" -}}
{{- $needed := include "latchkey.drainSeconds" . | int64 }}
{{- $given := .Values.terminationGracePeriodSeconds }}
{{- if or (kindIs "invalid" $given) (eq (toString $given) "") }}
{{- $needed }}
{{- else if lt (int64 $given) $needed }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least %d: preStop.seconds + config.shutdownGraceMs (rounded up to seconds) + 2 s; leave it empty to use that" (int64 $given) $needed) }}
{{- else }}
{{- int64 $given }}
{{- end }}
{{- end }}

{{/*
Render a whole number as a plain decimal string. Helm reads numbers from
values files as float64, and `quote` alone would render 86400000 as
"8.64e+07".
*/}}
{{- define "latchkey.int" -}}
{{- int64 . | toString }}
{{- end }}

{{/*
Checks on values that would otherwise only fail in the pod (or never):
rendered (as nothing) by the Deployment.
*/}}
{{- define "latchkey.validate" -}}
{{- $redis := .Values.redis }}
{{- $modes := list "standalone" "sentinel" "cluster" }}
{{- if not (has $redis.mode $modes) }}
{{- fail (printf "redis.mode must be one of standalone, sentinel, cluster (got %q)" (toString $redis.mode)) }}
{{- end }}
{{- $urls := include "latchkey.list" $redis.url | fromJsonArray }}
{{- $nodes := include "latchkey.list" $redis.redlockNodes | fromJsonArray }}
{{- if $redis.existingSecret }}
{{- if $redis.auth.existingSecret }}
{{- fail "redis.auth.existingSecret works with redis.url; with redis.existingSecret, put the credentials into the URLs in that Secret" }}
{{- end }}
{{- else }}
{{- $_ := include "latchkey.redisUrl" . }}
{{- if and (eq $redis.mode "standalone") (gt (len $urls) 1) }}
{{- fail (printf "redis.url has %d URLs, but redis.mode is standalone (one URL); set redis.mode to sentinel or cluster for several" (len $urls)) }}
{{- end }}
{{- range concat $urls $nodes }}
{{- if not (or (hasPrefix "redis://" .) (hasPrefix "rediss://" .)) }}
{{- fail "every URL in redis.url and redis.redlockNodes must start with redis:// or rediss://" }}
{{- end }}
{{- end }}
{{- if has (len $nodes) (list 1 2) }}
{{- fail (printf "redis.redlockNodes lists %d node(s); RedLock needs at least 3 independent nodes, or none" (len $nodes)) }}
{{- end }}
{{- if $redis.auth.existingSecret }}
{{- range $urls }}
{{- if contains "@" . }}
{{- fail "redis.url must not carry credentials when redis.auth.existingSecret is set (the chart adds them)" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $tls := $redis.tls }}
{{- if $tls.existingSecret }}
{{- if not (or $tls.caKey $tls.certKey $tls.keyKey) }}
{{- fail "redis.tls.existingSecret is set, but none of redis.tls.caKey, certKey, keyKey" }}
{{- end }}
{{- if ne (empty $tls.certKey) (empty $tls.keyKey) }}
{{- fail "redis.tls.certKey and redis.tls.keyKey go together: a client certificate needs its key" }}
{{- end }}
{{- if not $redis.existingSecret }}
{{- $tlsUrl := false }}
{{- range concat $urls $nodes }}
{{- if hasPrefix "rediss://" . }}
{{- $tlsUrl = true }}
{{- end }}
{{- end }}
{{- if not $tlsUrl }}
{{- fail "redis.tls.existingSecret is set, but no URL in redis.url or redis.redlockNodes uses TLS (rediss://)" }}
{{- end }}
{{- end }}
{{- end }}
{{- if not .Values.apiKeys.existingSecret }}
{{- range $i, $entry := .Values.apiKeys.entries }}
{{- if not (regexMatch "^[A-Za-z0-9._~-]{1,64}:(client|admin):[0-9A-Fa-f]{64}$" (toString $entry)) }}
{{- fail (printf "apiKeys.entries[%d] must be NAMESPACE:ROLE:SHA256 (namespace of 1-64 characters of A-Z a-z 0-9 . _ ~ -, role client or admin, the key's SHA-256 in hex)" $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (has (toString .Values.preStop.action) (list "exec" "sleep")) }}
{{- fail (printf "preStop.action must be exec or sleep (got %q)" (toString .Values.preStop.action)) }}
{{- end }}
{{- if and .Values.preStop.enabled (lt (int64 .Values.preStop.seconds) 1) }}
{{- fail "preStop.seconds must be at least 1 (or set preStop.enabled to false)" }}
{{- end }}
{{- $_ := include "latchkey.terminationGracePeriodSeconds" . }}
{{- $port := int64 .Values.service.containerPort }}
{{- if or (lt $port 1024) (gt $port 65535) }}
{{- fail (printf "service.containerPort must be between 1024 and 65535 (got %d): the container runs as non-root without capabilities" $port) }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int64 .Values.autoscaling.minReplicas) (int64 .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
