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
Name of the Secret holding LATCHKEY_REDIS_URL / LATCHKEY_REDLOCK_NODES:
the user's redis.existingSecret, or the one this chart creates.
*/}}
{{- define "latchkey.secretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else }}
{{- include "latchkey.fullname" . }}
{{- end }}
{{- end }}

{{/*
Key of the Redis URL inside that Secret.
*/}}
{{- define "latchkey.secretKeyUrl" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretKeys.url | default "LATCHKEY_REDIS_URL" }}
{{- else }}
{{- "LATCHKEY_REDIS_URL" }}
{{- end }}
{{- end }}

{{/*
Key of the RedLock node list inside that Secret.
*/}}
{{- define "latchkey.secretKeyRedlockNodes" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretKeys.redlockNodes | default "LATCHKEY_REDLOCK_NODES" }}
{{- else }}
{{- "LATCHKEY_REDLOCK_NODES" }}
{{- end }}
{{- end }}

{{/*
RedLock node list as one comma-separated string (accepts a string or a list).
*/}}
{{- define "latchkey.redlockNodes" -}}
{{- $nodes := .Values.redis.redlockNodes | default "" }}
{{- if kindIs "slice" $nodes }}
{{- join "," $nodes }}
{{- else }}
{{- $nodes }}
{{- end }}
{{- end }}

{{/*
The Redis URL; fails the install when it is missing and no existing Secret
is given (without it the binary would try to start its own redis-server,
which the image does not contain).
*/}}
{{- define "latchkey.redisUrl" -}}
{{- required "redis.url is required (e.g. --set redis.url=redis://my-redis:6379), or set redis.existingSecret to a Secret holding LATCHKEY_REDIS_URL" .Values.redis.url }}
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
Sanity checks on values; rendered (as nothing) by the Deployment.
*/}}
{{- define "latchkey.validate" -}}
{{- $modes := list "standalone" "sentinel" "cluster" }}
{{- if not (has .Values.redis.mode $modes) }}
{{- fail (printf "redis.mode must be one of standalone, sentinel, cluster (got %q)" (toString .Values.redis.mode)) }}
{{- end }}
{{- if not .Values.redis.existingSecret }}
{{- $_ := include "latchkey.redisUrl" . }}
{{- end }}
{{- $graceMs := mul (int64 .Values.terminationGracePeriodSeconds) 1000 }}
{{- if le (int64 $graceMs) (int64 .Values.config.shutdownGraceMs) }}
{{- fail (printf "terminationGracePeriodSeconds (%d s) must be larger than config.shutdownGraceMs (%d ms)" (int64 .Values.terminationGracePeriodSeconds) (int64 .Values.config.shutdownGraceMs)) }}
{{- end }}
{{- $port := int64 .Values.service.containerPort }}
{{- if or (lt $port 1024) (gt $port 65535) }}
{{- fail (printf "service.containerPort must be between 1024 and 65535 (got %d): the container runs as non-root without capabilities" $port) }}
{{- end }}
{{- end }}
