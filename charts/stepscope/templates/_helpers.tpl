{{/* Names and labels shared by every template. */}}

{{- define "stepscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-stepscope", or the release name alone when it already says stepscope. */}}
{{- define "stepscope.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "stepscope.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "stepscope.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "stepscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "stepscope.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "stepscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "stepscope.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stepscope.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository@digest when a digest is given, else repository:tag (tag defaults to appVersion). */}}
{{- define "stepscope.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (default .appVersion .tag) -}}
{{- end -}}
{{- end -}}

{{- define "stepscope.operatorImage" -}}
{{- include "stepscope.image" (merge (dict "appVersion" .Chart.AppVersion) .Values.operator.image) -}}
{{- end -}}

{{- define "stepscope.agentImage" -}}
{{- include "stepscope.image" (merge (dict "appVersion" .Chart.AppVersion) .Values.agent.image) -}}
{{- end -}}

{{- define "stepscope.agentSigningKeysSecretName" -}}
{{- default (printf "%s-agent-signing-keys" (include "stepscope.fullname" .)) .Values.agent.signingKeys.existingSecret -}}
{{- end -}}

{{- define "stepscope.webhookTLSSecretName" -}}
{{- printf "%s-webhook-tls" (include "stepscope.fullname" .) -}}
{{- end -}}

{{- define "stepscope.webhookServiceName" -}}
{{- printf "%s-webhook" (include "stepscope.fullname" .) -}}
{{- end -}}

{{/* Cluster-scoped names carry the namespace so two releases never collide. */}}
{{- define "stepscope.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "stepscope.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
