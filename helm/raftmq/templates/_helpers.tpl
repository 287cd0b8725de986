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

{{/* issue 38, groups: a template rendered for group k gets the root context plus .Group (dict "index" k), built
by "raftmq.groupContext". Group 0 keeps the names of a one-group release, so a release upgrades from groups: 1
without its pods, PVCs or Services changing; group k > 0 adds -g<k> (raftmq-g1, raftmq-g1-headless, ...). */}}
{{- define "raftmq.groupIndex" -}}
{{- with .Group }}{{ int .index }}{{ else }}0{{ end -}}
{{- end -}}

{{- define "raftmq.groupSuffix" -}}
{{- $k := include "raftmq.groupIndex" . | int -}}
{{- if gt $k 0 }}{{ printf "-g%d" $k }}{{ end -}}
{{- end -}}

{{/* The StatefulSet (and ConfigMap, PDB) of a group; its pods are <this>-<ordinal>. */}}
{{- define "raftmq.groupFullname" -}}
{{- printf "%s%s" (include "raftmq.fullname" .) (include "raftmq.groupSuffix" .) -}}
{{- end -}}

{{/* The group's name (its RocketMQ broker name): cluster.name for group 0, as a one-group cluster's; <cluster.name>-g<k>. */}}
{{- define "raftmq.groupName" -}}
{{- printf "%s%s" .Values.cluster.name (include "raftmq.groupSuffix" .) -}}
{{- end -}}

{{/* The group's STOREHOST: cluster.storeHost for group 0; the same address with the port + k for group k
(unique per group: a msgId is STOREHOST + offset). */}}
{{- define "raftmq.groupStoreHost" -}}
{{- $k := include "raftmq.groupIndex" . | int -}}
{{- $host := regexReplaceAll ":[0-9]+$" .Values.cluster.storeHost "" -}}
{{- $port := regexFind "[0-9]+$" .Values.cluster.storeHost | int -}}
{{- if gt (add $port $k) 65535 -}}
{{- fail (printf "cluster.storeHost %s: group %d's store host would be port %d, beyond 65535; lower the port" .Values.cluster.storeHost $k (add $port $k)) -}}
{{- end -}}
{{- printf "%s:%d" $host (add $port $k) -}}
{{- end -}}

{{/* The DNS name of group k's discovery Service: <fullname>-g<k>-headless (cluster.group_discovery's pattern). */}}
{{- define "raftmq.groupDiscoveryPattern" -}}
{{- printf "%s-g{index}-headless.%s.svc.%s:%d" (include "raftmq.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.ports.grpc) -}}
{{- end -}}

{{- define "raftmq.headlessName" -}}
{{- printf "%s-headless" (include "raftmq.groupFullname" .) -}}
{{- end -}}

{{- define "raftmq.leaderName" -}}
{{- printf "%s-leader" (include "raftmq.groupFullname" .) -}}
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

{{/* The broker pods of one group: its StatefulSet selector, headless and leader Services, PDB. Group 0's pods
are component "broker" as before groups; group k's "broker-g<k>", so no selector of one group matches another's. */}}
{{- define "raftmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "raftmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker{{ include "raftmq.groupSuffix" . }}
{{- end -}}

{{/* Every pod of the release, brokers of every group (the client Service, the spread over nodes). */}}
{{- define "raftmq.releaseLabels" -}}
app.kubernetes.io/name: {{ include "raftmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The broker pods of every group, as a label selector's matchExpressions (NetworkPolicy, role label policy). */}}
{{- define "raftmq.brokerExpressions" -}}
- key: app.kubernetes.io/component
  operator: In
  values:
    {{- range $k := until (int .Values.groups) }}
    - broker{{ if gt $k 0 }}-g{{ $k }}{{ end }}
    {{- end }}
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
{{- $fullname := include "raftmq.groupFullname" . -}}
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

{{/*
issue 38: `groups` going down deletes the StatefulSets of the groups above it, and with them the only copy of
whatever their queues still hold. Refused, naming the groups, unless the operator drained them and lists their
indexes in `groupsDrained` (docs/operations/kubernetes.md#removing-a-group). The live release is read with
`lookup`, so `helm template` (no cluster) renders without the check. Also: every group's StatefulSet name plus
a pod's controller-revision-hash suffix must fit in 63 characters.
*/}}
{{- define "raftmq.validateGroups" -}}
{{- $groups := int .Values.groups -}}
{{- $fullname := include "raftmq.fullname" . -}}
{{- if and (gt $groups 1) (gt (len (printf "%s-g%d" $fullname (sub $groups 1))) 52) -}}
{{- fail (printf "groups: %d: the StatefulSet %s-g%d is longer than 52 characters (its pods' controller-revision-hash label must fit in 63); shorten the release name or set fullnameOverride" $groups $fullname (sub $groups 1)) -}}
{{- end -}}
{{- if and (gt $groups 1) (not (regexMatch "^[A-Za-z0-9][A-Za-z0-9_-]{0,57}$" .Values.cluster.name)) -}}
{{- fail (printf "groups: %d: cluster.name %q names the groups (%s-g1, ...), so it must be 1-58 letters, digits, '_', '-' (a RocketMQ broker name)" $groups .Values.cluster.name .Values.cluster.name) -}}
{{- end -}}
{{- $drained := list -}}
{{- range .Values.groupsDrained -}}
{{- if lt (int .) $groups -}}
{{- fail (printf "groupsDrained lists group %d, but groups: %d keeps it (groups 0..%d); list only the groups being removed" (int .) $groups (sub $groups 1)) -}}
{{- end -}}
{{- $drained = append $drained (int .) -}}
{{- end -}}
{{- $live := lookup "apps/v1" "StatefulSet" .Release.Namespace "" -}}
{{- $removed := list -}}
{{- range (get $live "items" | default list) -}}
{{- $labels := .metadata.labels | default dict -}}
{{- if eq (get $labels "app.kubernetes.io/instance" | default "") $.Release.Name -}}
{{- $m := regexFind "-g[0-9]+$" .metadata.name -}}
{{- if and $m (eq .metadata.name (printf "%s%s" $fullname $m)) -}}
{{- $k := trimPrefix "-g" $m | int -}}
{{- if and (ge $k $groups) (not (has $k $drained)) -}}
{{- $removed = append $removed $k -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $removed -}}
{{- $names := list -}}
{{- range (sortAlpha (toStrings $removed)) -}}
{{- $names = append $names (printf "%s-g%s" $.Values.cluster.name .) -}}
{{- end -}}
{{- fail (printf "groups: %d removes group(s) %s (StatefulSet %s-g<index>) and everything their queues still hold. Drain them first (stop writes to them, let consumers catch up: docs/operations/kubernetes.md#removing-a-group), then confirm with --set 'groupsDrained={%s}'" $groups (join ", " $names) $fullname (join "," (sortAlpha (toStrings $removed)))) -}}
{{- end -}}
{{- end -}}
