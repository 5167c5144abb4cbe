{{/* The chart name, or nameOverride. */}}
{{- define "etcd-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: fullnameOverride, else the release name when it already contains
the chart name (release `etcd-operator` gives `etcd-operator`), else `<release>-<chart name>`.
*/}}
{{- define "etcd-operator.fullname" -}}
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

{{- define "etcd-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "etcd-operator.labels" -}}
helm.sh/chart: {{ include "etcd-operator.chart" . }}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "etcd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etcd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The controller Pods (the reference chart's name-agnostic handle). */}}
{{- define "etcd-operator.controllerSelectorLabels" -}}
{{ include "etcd-operator.selectorLabels" . }}
control-plane: controller-manager
{{- end }}

{{- define "etcd-operator.webhookSelectorLabels" -}}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
The one image reference: the manager and webhook containers, --operator-image and OPERATOR_IMAGE
all render it, so they cannot drift apart.
*/}}
{{- define "etcd-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "etcd-operator.serviceAccountName" -}}
{{- default (include "etcd-operator.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "etcd-operator.webhookServiceAccountName" -}}
{{- default (printf "%s-webhook" (include "etcd-operator.fullname" .)) .Values.webhook.serviceAccount.name }}
{{- end }}

{{- define "etcd-operator.webhookServiceName" -}}
{{- printf "%s-webhook" (include "etcd-operator.fullname" .) }}
{{- end }}

{{/* The DNS names the apiserver may use for the webhook Service. */}}
{{- define "etcd-operator.webhookDNSNames" -}}
{{- $svc := include "etcd-operator.webhookServiceName" . -}}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/*
The Secret holding the webhook's serving certificate (tls.crt, tls.key). One name per mode:
cert-manager does not delete the Secret of a deleted Certificate, so after a switch away from
certManager mode (or an uninstall) its Secret stays, and the chart's own must not collide with it.
*/}}
{{- define "etcd-operator.webhookSecretName" -}}
{{- if eq .Values.webhook.certificate.mode "secret" }}
{{- required "webhook.certificate.secret.name is required with webhook.certificate.mode=secret: the name of a kubernetes.io/tls Secret (tls.crt, tls.key) in the release namespace" .Values.webhook.certificate.secret.name }}
{{- else if eq .Values.webhook.certificate.mode "certManager" }}
{{- printf "%s-webhook-cert-manager-tls" (include "etcd-operator.fullname" .) }}
{{- else }}
{{- printf "%s-webhook-tls" (include "etcd-operator.fullname" .) }}
{{- end }}
{{- end }}

{{/* The cert-manager Certificate of the serving certificate (certManager mode). */}}
{{- define "etcd-operator.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "etcd-operator.fullname" .) }}
{{- end }}

{{/* A duration value `<n>s|m|h|d` (the schema checks the form) in seconds. */}}
{{- define "etcd-operator.durationSeconds" -}}
{{- $unit := regexFind "[smhd]$" . }}
{{- mul (trimSuffix $unit . | atoi) (get (dict "s" 1 "m" 60 "h" 3600 "d" 86400) $unit) }}
{{- end }}

{{/*
The NetworkPolicy egress rule to the Kubernetes API. The apiserver has no Pod label to select,
and the policy sees its traffic after the `kubernetes` Service's ClusterIP (443) is translated to
an apiserver address (often port 6443): both ports, to networkPolicy.apiServer.cidrs or anywhere.
*/}}
{{- define "etcd-operator.apiServerEgress" -}}
- ports:
    {{- range .Values.networkPolicy.apiServer.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  {{- with .Values.networkPolicy.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- end }}

{{/* Values the chart cannot honour fail the render with the reason and the way out. */}}
{{- define "etcd-operator.validate" -}}
{{- if .Values.kubeRbacProxy.enabled }}
{{- fail "kubeRbacProxy.enabled=true is not supported: this chart ships no kube-rbac-proxy sidecar; metrics are served directly on the admin port 8081 (Service <fullname>-metrics, port `metrics`). Set kubeRbacProxy.enabled=false and protect the port with a NetworkPolicy that admits only your Prometheus." }}
{{- end }}
{{- end }}

{{/* Fields both webhook registrations share; takes (dict "root" $ "path" … "caBundle" …). */}}
{{- define "etcd-operator.webhookCommon" -}}
admissionReviewVersions: ["v1"]
matchPolicy: Equivalent
sideEffects: None
timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}
{{- with .root.Values.webhook.namespaceSelector }}
namespaceSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
clientConfig:
  service:
    name: {{ include "etcd-operator.webhookServiceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}
