{{/* Names and labels shared by the chart's templates. */}}
{{- define "klique.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "klique.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "klique.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "klique.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "klique.secretName" -}}
{{- .Values.existingSecret | default (include "klique.fullname" .) -}}
{{- end -}}

{{/* The control plane's environment: the ConfigMap and the Secret. */}}
{{- define "klique.envFrom" -}}
- configMapRef:
    name: {{ include "klique.fullname" . }}
- secretRef:
    name: {{ include "klique.secretName" . }}
{{- end -}}

{{/* Pod-level settings every control-plane pod shares. */}}
{{- define "klique.podSpec" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Writable folders for a read-only root filesystem: /tmp, and beat's schedule. */}}
{{- define "klique.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: state
  mountPath: /var/lib/klique
{{- end -}}

{{- define "klique.volumes" -}}
- name: tmp
  emptyDir: {}
- name: state
  emptyDir: {}
{{- end -}}

{{/* Rolls the pods when the configuration changes. */}}
{{- define "klique.configChecksum" -}}
checksum/config: {{ include (print $.Template.BasePath "/config.yaml") . | sha256sum }}
{{- end -}}
