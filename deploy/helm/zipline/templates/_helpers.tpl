{{/* Name of the chart, overridable. */}}
{{- define "zipline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix for every object: the release name, with the chart name unless it already contains it. */}}
{{- define "zipline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "zipline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "zipline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: zipline
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "node"). */}}
{{- define "zipline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "zipline.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "zipline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "zipline.sidecarImage" -}}
{{- printf "%s/%s:%s" .root.Values.sidecars.registry .img.name .img.tag -}}
{{- end -}}

{{/* The etcd endpoint list the daemons get (comma-separated URLs). */}}
{{- define "zipline.etcdEndpoints" -}}
{{- if eq .Values.etcd.mode "external" -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- $fn := include "zipline.fullname" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.bundled.replicas) -}}
{{- $eps = append $eps (printf "http://%s-etcd-%d.%s-etcd-peer.%s.svc:%d" $fn $i $fn $.Release.Namespace (int $.Values.etcd.bundled.clientPort)) -}}
{{- end -}}
{{- join "," $eps -}}
{{- end -}}
{{- end -}}

{{/* Whether the daemons talk to etcd over TLS with a client certificate. */}}
{{- define "zipline.etcdTLS" -}}
{{- if and (eq .Values.etcd.mode "external") .Values.etcd.external.tls.enabled -}}true{{- end -}}
{{- end -}}

{{- define "zipline.etcdAuth" -}}
{{- if and (eq .Values.etcd.mode "external") .Values.etcd.external.auth.enabled -}}true{{- end -}}
{{- end -}}

{{/* etcd flags shared by every daemon (args list items). */}}
{{- define "zipline.etcdArgs" -}}
- --etcd=$(ZIPLINE_ETCD)
- --etcd-prefix={{ .Values.etcd.prefix }}
{{- if include "zipline.etcdTLS" . }}
- --etcd-cacert=/etc/zipline/etcd-tls/{{ .Values.etcd.external.tls.caKey }}
- --etcd-cert=/etc/zipline/etcd-tls/{{ .Values.etcd.external.tls.certKey }}
- --etcd-key=/etc/zipline/etcd-tls/{{ .Values.etcd.external.tls.keyKey }}
{{- end }}
{{- if include "zipline.etcdAuth" . }}
- --etcd-user={{ .Values.etcd.external.auth.username }}
- --etcd-password-file=/etc/zipline/etcd-auth/{{ .Values.etcd.external.auth.passwordSecretKey }}
{{- end }}
{{- end -}}

{{- define "zipline.etcdEnv" -}}
- name: ZIPLINE_ETCD
  value: {{ include "zipline.etcdEndpoints" . | quote }}
{{- end -}}

{{- define "zipline.etcdVolumeMounts" -}}
{{- if include "zipline.etcdTLS" . }}
- name: etcd-tls
  mountPath: /etc/zipline/etcd-tls
  readOnly: true
{{- end }}
{{- if include "zipline.etcdAuth" . }}
- name: etcd-auth
  mountPath: /etc/zipline/etcd-auth
  readOnly: true
{{- end }}
{{- end -}}

{{- define "zipline.etcdVolumes" -}}
{{- if include "zipline.etcdTLS" . }}
- name: etcd-tls
  secret:
    secretName: {{ required "etcd.external.tls.secretName is required when etcd.external.tls.enabled" .Values.etcd.external.tls.secretName }}
    defaultMode: 0440
{{- end }}
{{- if include "zipline.etcdAuth" . }}
- name: etcd-auth
  secret:
    secretName: {{ required "etcd.external.auth.passwordSecretName is required when etcd.external.auth.enabled" .Values.etcd.external.auth.passwordSecretName }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Transport for a component: its own setting, else the global one. */}}
{{- define "zipline.transport" -}}
{{- default .root.Values.transport .own -}}
{{- end -}}

{{/* securityContext of a container that needs no privilege. */}}
{{- define "zipline.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
