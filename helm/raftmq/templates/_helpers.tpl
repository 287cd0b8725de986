{{/* Names. fullname is capped at 50 characters: pods get a controller-revision-hash label of
<statefulset>-<10 chars>, which must fit in 63, and "-headless" must still fit a Service name. */}}
{{- define "raftmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "raftmq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "raftmq.headlessName" -}}
{{- printf "%s-headless" (include "raftmq.fullname" .) -}}
{{- end -}}

{{- define "raftmq.leaderName" -}}
{{- printf "%s-leader" (include "raftmq.fullname" .) -}}
{{- end -}}

{{- define "raftmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "raftmq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "raftmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "raftmq.labels" -}}
helm.sh/chart: {{ include "raftmq.chart" . }}
{{ include "raftmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: raftmq
{{- end -}}

{{/* The broker pods of this release: StatefulSet selector, Services, PDB, NetworkPolicy all use exactly this. */}}
{{- define "raftmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "raftmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker
{{- end -}}

{{/* The label a client pod needs when networkPolicy.clients restricts the gRPC port. */}}
{{- define "raftmq.clientLabel" -}}
{{ include "raftmq.fullname" . }}-client
{{- end -}}

{{- define "raftmq.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Stable DNS domain of the members: <pod>.<headless>.<namespace>.svc.<clusterDomain>. */}}
{{- define "raftmq.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "raftmq.headlessName" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The client Service's in-cluster address (host:port). */}}
{{- define "raftmq.clientAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "raftmq.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.ports.grpc) -}}
{{- end -}}

{{/* The Raft members: one per ordinal 0..replicas-1, addressed by stable DNS names, never pod IPs. */}}
{{- define "raftmq.members" -}}
{{- $fullname := include "raftmq.fullname" . -}}
{{- $domain := include "raftmq.peerDomain" . -}}
{{- range $i := until (int .Values.replicas) }}
- id: {{ printf "%s-%d" $fullname $i }}
  raft: {{ printf "%s-%d.%s:%d" $fullname $i $domain (int $.Values.ports.raft) }}
  grpc: {{ printf "%s-%d.%s:%d" $fullname $i $domain (int $.Values.ports.grpc) }}
{{- end }}
{{- end -}}

{{/* issue 14: the Secret holding tls.crt, tls.key and ca.crt. */}}
{{- define "raftmq.tlsSecretName" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "raftmq.fullname" .) -}}
{{- else -}}
{{- .Values.tls.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* issue 14: client-side TLS and credentials for the `raftmq` CLI run inside the chart's pods (preStop hook,
     helm test): the CLI reads RAFTMQ_TLS_* and RAFTMQ_ACCESS_KEY / RAFTMQ_SECRET_KEY. */}}
{{- define "raftmq.cliSecurityEnv" -}}
{{- if .Values.tls.enabled }}
- name: RAFTMQ_TLS
  value: "1"
- name: RAFTMQ_TLS_CA
  value: /etc/raftmq/tls/ca.crt
{{- if .Values.tls.mutual }}
- name: RAFTMQ_TLS_CERT
  value: /etc/raftmq/tls/tls.crt
- name: RAFTMQ_TLS_KEY
  value: /etc/raftmq/tls/tls.key
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
- name: RAFTMQ_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: {{ .Values.auth.accessKeyKey }}
- name: RAFTMQ_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: {{ .Values.auth.secretKeyKey }}
{{- end }}
{{- end -}}

{{/* issue 14: HTTPS probes when the HTTP port speaks TLS. */}}
{{- define "raftmq.httpScheme" -}}
{{- if and .Values.tls.enabled .Values.tls.http -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/*
A Kubernetes quantity ("20Gi", "1.5G", "500Mi") in bytes, as an int64.
*/}}
{{- define "raftmq.quantityBytes" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $num $q -}}
{{- $mult := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if not (hasKey $mult $unit) -}}
{{- fail (printf "persistence.size: %q is not a quantity this chart understands (use Ki, Mi, Gi, Ti, k, M, G or T)" $q) -}}
{{- end -}}
{{- mulf (float64 $num) (get $mult $unit) | int64 -}}
{{- end -}}

{{/*
The node's own rule (store.config.store_footprint / volume_problem, which `raftmq config validate` and a starting
node apply): to keep taking writes across a segment roll a member needs two commit-log segments
(store.mapped_file_size_commit_log, 1 GiB by default) and two index files (40 + 4 x max_hash_slot_num + 20 x
max_index_num bytes, ~400 MB by default), each allocated whole, four consume-queue files and disk_min_free_bytes,
all below disk_space_warning_level_ratio of the volume. A smaller volume fills at the first roll, so the chart
refuses it. tests/helm/test_volume_and_test_pod.py checks this against store_footprint.
*/}}
{{- define "raftmq.validateVolumeSize" -}}
{{- $store := .Values.store | default dict -}}
{{- $segment := int64 (get $store "mapped_file_size_commit_log" | default 1073741824) -}}
{{- $slots := int64 (get $store "max_hash_slot_num" | default 5000000) -}}
{{- $entries := int64 (get $store "max_index_num" | default 20000000) -}}
{{- $index := 0 -}}
{{- if (hasKey $store "message_index_enable" | ternary (get $store "message_index_enable") true) -}}
{{- $index = add 40 (mul 4 $slots) (mul 20 $entries) -}}
{{- end -}}
{{- $cqBytes := int64 (get $store "mapped_file_size_consume_queue" | default 6000000) -}}
{{- $cqFile := mul (div (add $cqBytes 19) 20) 20 -}}
{{- $minFree := int64 (get $store "disk_min_free_bytes" | default 67108864) -}}
{{- $ratio := float64 (get $store "disk_space_warning_level_ratio" | default 0.9) -}}
{{- $footprint := add (mul 2 $segment) (mul 2 $index) (mul 4 $cqFile) $minFree -}}
{{- $need := ceil (divf $footprint $ratio) | int64 -}}
{{- $have := include "raftmq.quantityBytes" .Values.persistence.size | int64 -}}
{{- if lt $have $need -}}
{{- fail (printf "persistence.size %s (%d bytes) is too small: a member needs two %d-byte commit-log segments (store.mapped_file_size_commit_log) and two %d-byte index files, allocated whole, four consume-queue files and disk_min_free_bytes, below disk_space_warning_level_ratio %.2f of the volume; give at least %d bytes (%.1fGi), or shrink those store settings" (toString .Values.persistence.size) $have $segment $index $ratio $need (divf $need 1073741824)) -}}
{{- end -}}
{{- end -}}
