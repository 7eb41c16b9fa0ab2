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

{{/* TLS of the TCP data path (tls.enabled, docs/SECURITY.md): the Secret
     tls.secretName (tls.crt, tls.key, ca.crt) mounted at /etc/zipline/tls. */}}
{{- define "zipline.tlsVolumeMounts" -}}
{{- if .Values.tls.enabled }}
- name: data-tls
  mountPath: /etc/zipline/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "zipline.tlsVolumes" -}}
{{- if .Values.tls.enabled }}
- name: data-tls
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled (a Secret with tls.crt, tls.key and ca.crt)" .Values.tls.secretName }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* zipline-storage: serve TLS only, verify TLS peers by the cluster-wide name. */}}
{{- define "zipline.tlsStorageArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-cert=/etc/zipline/tls/tls.crt
- --tls-key=/etc/zipline/tls/tls.key
- --tls-ca=/etc/zipline/tls/ca.crt
- --tls-server-name={{ required "tls.serverName is required when tls.enabled" .Values.tls.serverName }}
{{- end }}
{{- end -}}

{{/* Clients of the storage daemons (node plugin, controller): the CA and the
     name, as flags where the daemon has them, else in the environment
     lib/client reads. */}}
{{- define "zipline.tlsClientArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-ca=/etc/zipline/tls/ca.crt
- --tls-server-name={{ required "tls.serverName is required when tls.enabled" .Values.tls.serverName }}
{{- end }}
{{- end -}}

{{- define "zipline.tlsClientEnv" -}}
{{- if .Values.tls.enabled }}
- name: ZIPLINE_TLS_CA
  value: /etc/zipline/tls/ca.crt
- name: ZIPLINE_TLS_SERVER_NAME
  value: {{ .Values.tls.serverName | quote }}
{{- end }}
{{- end -}}

{{/* The cluster key Secret (docs/SECURITY.md): the operator's
     auth.clusterKey.existingSecret, else <fullname>-cluster-key, which the
     chart creates once (templates/cluster-key.yaml). Mounted into the pods
     that speak to the storage daemons with the cluster token: the storage
     daemons (peers) and the controller (the manager, DeleteVolume). Never
     into the node plugin: a node gets attach tokens, one per volume
     attached to it, so a compromised node reaches those volumes only. */}}
{{- define "zipline.clusterKeySecret" -}}
{{- default (printf "%s-cluster-key" (include "zipline.fullname" .)) .Values.auth.clusterKey.existingSecret -}}
{{- end -}}

{{- define "zipline.clusterKeyArgs" -}}
- --cluster-key-file=/etc/zipline/cluster-key/{{ .Values.auth.clusterKey.secretKey }}
{{- end -}}

{{/* So that `kubectl exec ... zl` in these pods uses the same key. */}}
{{- define "zipline.clusterKeyEnv" -}}
- name: ZIPLINE_CLUSTER_KEY_FILE
  value: /etc/zipline/cluster-key/{{ .Values.auth.clusterKey.secretKey }}
{{- end -}}

{{- define "zipline.clusterKeyVolumeMounts" -}}
- name: cluster-key
  mountPath: /etc/zipline/cluster-key
  readOnly: true
{{- end -}}

{{- define "zipline.clusterKeyVolumes" -}}
- name: cluster-key
  secret:
    secretName: {{ include "zipline.clusterKeySecret" . }}
    defaultMode: 256 # 0400: decimal, so that YAML 1.1 and 1.2 readers agree
    items:
      - key: {{ .Values.auth.clusterKey.secretKey }}
        path: {{ .Values.auth.clusterKey.secretKey }}
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

{{/* How many storage nodes the operator says there are: storage.replicas
     for the StatefulSet, else storage.nodes (the nodes carrying the
     storage.nodeSelector label). A class cannot place more replicas. */}}
{{- define "zipline.storageNodes" -}}
{{- if eq .Values.storage.kind "StatefulSet" -}}
{{- int .Values.storage.replicas -}}
{{- else -}}
{{- int .Values.storage.nodes -}}
{{- end -}}
{{- end -}}

{{- define "zipline.storageNodesKey" -}}
{{- ternary "storage.replicas" "storage.nodes" (eq .Values.storage.kind "StatefulSet") -}}
{{- end -}}

{{/* Name of the StorageClass `helm test` provisions from: tests.storageClassName,
     else the first class whose replicas fit on the storage nodes. Fails the
     install when no class of the chart can provision. */}}
{{- define "zipline.testClass" -}}
{{- $nodes := include "zipline.storageNodes" . | int -}}
{{- $key := include "zipline.storageNodesKey" . -}}
{{- $pick := "" -}}
{{- range .Values.storageClasses -}}
{{- if and (not $pick) (le (int .replicas) $nodes) -}}
{{- $pick = .name -}}
{{- end -}}
{{- if and $.Values.tests.storageClassName (eq .name $.Values.tests.storageClassName) (gt (int .replicas) $nodes) -}}
{{- fail (printf "tests.storageClassName %q has replicas=%d but %s=%d: helm test could not provision; name a class with replicas <= %d" .name (int .replicas) $key $nodes $nodes) -}}
{{- end -}}
{{- end -}}
{{- if .Values.tests.storageClassName -}}
{{- .Values.tests.storageClassName -}}
{{- else if $pick -}}
{{- $pick -}}
{{- else -}}
{{- fail (printf "no StorageClass in storageClasses has replicas <= %s=%d, so no volume could be provisioned: add a class with replicas: %d (see examples/single-node.yaml) or label more storage nodes and raise %s" $key $nodes $nodes $key) -}}
{{- end -}}
{{- end -}}

{{/* Refuses values that install a cluster which cannot work; included by
     storageclass.yaml. */}}
{{- define "zipline.checkValues" -}}
{{- $nodes := include "zipline.storageNodes" . | int -}}
{{- $key := include "zipline.storageNodesKey" . -}}
{{- $etcd := .Values.etcd -}}
{{- $etcdPVC := and (eq $etcd.mode "bundled") $etcd.bundled.persistence.enabled -}}
{{- range .Values.storageClasses -}}
{{- if and .default (gt (int .replicas) $nodes) -}}
{{- fail (printf "StorageClass %q is the default class with replicas=%d, but %s=%d storage nodes: its volumes could not be provisioned. Set its replicas to %d or less, or label more storage nodes and raise %s" .name (int .replicas) $key $nodes $nodes $key) -}}
{{- end -}}
{{- if and $etcdPVC .default (not $etcd.bundled.persistence.storageClassName) -}}
{{- fail (printf "StorageClass %q would be the cluster's default class while the bundled etcd's PVCs use the default class: etcd would wait for Zipline, which waits for etcd. Set etcd.bundled.persistence.storageClassName to a class not served by Zipline (e.g. local-path, standard), or default: false" .name) -}}
{{- end -}}
{{- if and $etcdPVC (eq .name $etcd.bundled.persistence.storageClassName) -}}
{{- fail (printf "etcd.bundled.persistence.storageClassName %q is a Zipline class: etcd would wait for Zipline, which waits for etcd. Name a class not served by Zipline" .name) -}}
{{- end -}}
{{- if and (eq $.Values.storage.kind "StatefulSet") (eq .name $.Values.storage.dataDir.storageClassName) -}}
{{- fail (printf "storage.dataDir.storageClassName %q is a Zipline class: the storage daemons cannot keep their data on Zipline. Name a local-PV class" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The mounts of the node plugin's containers (zipline-node and the
attacher, whose attach processes need the same view: state dir, devices,
modules, etcd and storage TLS files). */}}
{{- define "zipline.nodeMounts" -}}
{{- $kubelet := trimSuffix "/" .Values.kubeletDir -}}
# Staging and publish paths live under the kubelet dir; mounts
# made here must reach the host and the pods: Bidirectional.
- name: kubelet-dir
  mountPath: {{ $kubelet }}
  mountPropagation: Bidirectional
- name: state-dir
  mountPath: {{ .Values.node.stateDir }}
  mountPropagation: Bidirectional
- name: dev
  mountPath: /dev
- name: sys
  mountPath: /sys
- name: run-udev
  mountPath: /run/udev
  readOnly: true
- name: lib-modules
  mountPath: /lib/modules
  readOnly: true
{{- with (include "zipline.etcdVolumeMounts" . | trim) }}{{ . | nindent 0 }}{{- end }}
{{- with (include "zipline.tlsVolumeMounts" . | trim) }}{{ . | nindent 0 }}{{- end }}
{{- if .Values.node.attacher.enabled }}
- name: attacher-dir
  mountPath: /run/zipline-attacher
{{- end }}
{{- end }}
