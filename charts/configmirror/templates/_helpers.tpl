{{/* The chart's name: app.kubernetes.io/name, as in deploy/. */}}
{{- define "configmirror.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Every object's name: the release name when it contains the chart's name, so release
"configmirror" names its objects as deploy/ does; else <release>-configmirror. At most 55
characters, so "<fullname>-metrics" is still a valid Service name.
*/}}
{{- define "configmirror.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := include "configmirror.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels on every object: deploy/'s (name, part-of) plus Helm's own. */}}
{{- define "configmirror.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "configmirror.selectorLabels" . }}
app.kubernetes.io/part-of: configmirror
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What selects the pods: deploy/'s name, plus the release, so two releases never share pods. */}}
{{- define "configmirror.selectorLabels" -}}
app.kubernetes.io/name: {{ include "configmirror.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "configmirror.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
