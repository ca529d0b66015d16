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

{{/* What the ConfigMap holds (and the migrate hook's copy). */}}
{{- define "klique.configData" -}}
DJANGO_SETTINGS_MODULE: klique.settings.production
ALLOWED_HOSTS: {{ .Values.host | quote }}
CSRF_TRUSTED_ORIGINS: {{ printf "https://%s" .Values.host | quote }}
KLIQUE_PUBLIC_URL: {{ printf "https://%s" .Values.host | quote }}
{{- if .Values.gateway.enabled }}
KLIQUE_SESSION_GATEWAY_URL: {{ printf "https://%s" .Values.host | quote }}
{{- end }}
WEB_WORKERS: {{ .Values.web.workers | quote }}
WEB_THREADS: {{ .Values.web.threads | quote }}
WEB_TIMEOUT: {{ .Values.web.timeout | quote }}
CELERY_CONCURRENCY: {{ .Values.celery.concurrency | quote }}
CELERY_QUEUES: {{ .Values.celery.queues | quote }}
CELERY_BEAT_SCHEDULE_FILE: /var/lib/klique/celerybeat-schedule
KLIQUE_ALIVE_FILE: /tmp/klique-alive
{{- range $name, $value := .Values.config }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* What the Secret holds (and the migrate hook's copy), unless existingSecret names one. */}}
{{- define "klique.secretData" -}}
SECRET_KEY: {{ required "secretKey (or existingSecret) is required" .Values.secretKey | quote }}
DATABASE_URL: {{ required "databaseUrl (or existingSecret) is required" .Values.databaseUrl | quote }}
REDIS_URL: {{ required "redisUrl (or existingSecret) is required" .Values.redisUrl | quote }}
{{- range $name, $value := .Values.secretEnv }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* A liveness probe on the alive file a process touches while its loop turns (klique/liveness.py,
the worker daemon's --alive-file): stale for two minutes, the container is restarted. */}}
{{- define "klique.aliveProbe" -}}
livenessProbe:
  exec:
    command: ["/bin/sh", "-c", "test -n \"$(find /tmp/klique-alive -mmin -2 2>/dev/null)\""]
  initialDelaySeconds: 60
  periodSeconds: 30
  timeoutSeconds: 10
  failureThreshold: 3
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
