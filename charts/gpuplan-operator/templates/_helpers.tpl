{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "gpuplan-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name, with the chart name appended unless the
release name already contains it.
*/}}
{{- define "gpuplan-operator.fullname" -}}
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

{{- define "gpuplan-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object gets. */}}
{{- define "gpuplan-operator.labels" -}}
helm.sh/chart: {{ include "gpuplan-operator.chart" . }}
{{ include "gpuplan-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuplan
{{- end }}

{{/* Labels that select the operator's pods (immutable once installed: keep them stable). */}}
{{- define "gpuplan-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuplan-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuplan-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuplan-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpuplan-operator.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* "true" when the replicas run with kopf peering (more than one, or forced). */}}
{{- define "gpuplan-operator.peering" -}}
{{- if or (gt (int .Values.replicaCount) 1) .Values.peering.enabled }}true{{ end }}
{{- end }}

{{- define "gpuplan-operator.peeringName" -}}
{{- default (include "gpuplan-operator.fullname" .) .Values.peering.name }}
{{- end }}

{{/*
The watched namespaces, validated: exact names only (RBAC Roles cannot follow a glob).
*/}}
{{- define "gpuplan-operator.watchNamespaces" -}}
{{- range .Values.watchNamespaces }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) }}
{{- fail (printf "watchNamespaces: %q is not a namespace name (globs are not supported by the chart's RBAC)" .) }}
{{- end }}
{{- end }}
{{- join "," (uniq .Values.watchNamespaces) }}
{{- end }}

{{/* The operator's command-line arguments. */}}
{{- define "gpuplan-operator.args" -}}
{{- $ns := include "gpuplan-operator.watchNamespaces" . }}
- --liveness
- {{ printf "http://0.0.0.0:%d%s" (int .Values.health.port) .Values.health.path | quote }}
{{- if $ns }}
{{- range splitList "," $ns }}
- --namespace
- {{ . | quote }}
{{- end }}
{{- end }}
{{- if include "gpuplan-operator.peering" . }}
- --peering
- {{ include "gpuplan-operator.peeringName" . | quote }}
{{- end }}
{{- if eq .Values.logLevel "debug" }}
- --verbose
{{- else if ne .Values.logLevel "info" }}
{{- fail (printf "logLevel: %q is not one of info, debug" .Values.logLevel) }}
{{- end }}
{{- if eq .Values.logFormat "json" }}
- --log-format
- json
{{- else if ne .Values.logFormat "text" }}
{{- fail (printf "logFormat: %q is not one of text, json" .Values.logFormat) }}
{{- end }}
{{- range $key, $flag := dict "planSeconds" "--plan-seconds" "debounce" "--debounce" "maxDelay" "--max-delay" "settle" "--settle" "resync" "--resync" "readyPoll" "--ready-poll" "gangTimeout" "--gang-timeout" "orphanGrace" "--orphan-grace" "priorityClassValueBase" "--priority-base" }}
{{- $value := index $.Values.planning $key }}
{{- if not (kindIs "invalid" $value) }}
{{- if ne (toString $value) "" }}
- {{ $flag }}
{{- /* YAML numbers reach templates as float64; print whole ones in full, not as 5e+08 */}}
{{- if and (kindIs "float64" $value) (eq $value (float64 (int64 $value))) }}
- {{ int64 $value | toString | quote }}
{{- else }}
- {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.view.enabled }}
{{- if not .Values.metrics.enabled }}
{{- fail "view.enabled needs metrics.enabled (the view is served on the metrics port)" }}
{{- end }}
- --view
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
