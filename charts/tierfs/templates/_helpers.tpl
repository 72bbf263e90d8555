{{/*
_helpers.tpl: names, labels, images and the checks every template shares.
The driver name is tierfs-csi's own (CSI_DRIVER_NAME in csi/plugin.h), not
a value: the binary answers GetPluginInfo with it whatever the chart says.
*/}}

{{- define "tierfs.driverName" -}}
csi.tierfs.dev
{{- end -}}

{{- define "tierfs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tierfs.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* selector labels of one component: include with (list $ "controller") */}}
{{- define "tierfs.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "tierfs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* a sidecar's image: include with (list $ "provisioner") */}}
{{- define "tierfs.sidecarImage" -}}
{{- $s := index (index . 0).Values.sidecars (index . 1) -}}
{{- printf "%s:%s" (required (printf "sidecars.%s.repository is required" (index . 1)) $s.repository) (required (printf "sidecars.%s.tag is required" (index . 1)) $s.tag) -}}
{{- end -}}

{{/*
a StorageClass value as the string tierfs-csi reads. Helm reads every
number in values as a float64, which toString prints as 1e+07; whole
numbers print as integers here.
*/}}
{{- define "tierfs.str" -}}
{{- if kindIs "float64" . -}}
{{- if eq (float64 (int64 .)) . -}}{{- printf "%d" (int64 .) -}}{{- else -}}{{- toString . -}}{{- end -}}
{{- else if kindIs "invalid" . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{- define "tierfs.secretName" -}}
{{- required "credentials.secretName is required" .Values.credentials.secretName -}}
{{- end -}}

{{/* the unix socket every container of a pod shares, and its directory */}}
{{- define "tierfs.socketDir" -}}/csi{{- end -}}
{{- define "tierfs.socketPath" -}}/csi/csi.sock{{- end -}}

{{/* where kubelet finds the node plugin's socket, on the host */}}
{{- define "tierfs.nodePluginDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.node.kubeletDir) (include "tierfs.driverName" .) -}}
{{- end -}}

{{/* leader-election flags of a controller sidecar */}}
{{- define "tierfs.leaderElectionArgs" -}}
{{- $le := .Values.controller.leaderElection -}}
{{- if $le.enabled -}}
- --leader-election
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-lease-duration={{ $le.leaseDuration }}
- --leader-election-renew-deadline={{ $le.renewDeadline }}
- --leader-election-retry-period={{ $le.retryPeriod }}
{{- end -}}
{{- end -}}

{{/* the CA bundle: env and mount, when s3.caBundle.configMap is set */}}
{{- define "tierfs.caEnv" -}}
{{- if .Values.s3.caBundle.configMap -}}
- name: AWS_CA_BUNDLE
  value: /etc/tierfs/ca/{{ .Values.s3.caBundle.key }}
{{- end -}}
{{- end -}}
{{- define "tierfs.caMount" -}}
{{- if .Values.s3.caBundle.configMap -}}
- name: ca-bundle
  mountPath: /etc/tierfs/ca
  readOnly: true
{{- end -}}
{{- end -}}
{{- define "tierfs.caVolume" -}}
{{- if .Values.s3.caBundle.configMap -}}
- name: ca-bundle
  configMap:
    name: {{ .Values.s3.caBundle.configMap }}
    items:
      - key: {{ .Values.s3.caBundle.key }}
        path: {{ .Values.s3.caBundle.key }}
{{- end -}}
{{- end -}}

{{/*
Values tierfs-csi would refuse at provisioning time are refused at install
time instead, with the same words (csi/controller.c value_problem()).
*/}}
{{- define "tierfs.validate" -}}
{{- if ne .Values.node.launcher "process" -}}
{{- fail (printf "node.launcher %q: tierfs-csi 0.1.0 only starts mount daemons as processes in its own container (\"process\"); host systemd units are not implemented in tierfs-csi yet" .Values.node.launcher) -}}
{{- end -}}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) -}}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled: the sidecars of two replicas would act on the same objects" -}}
{{- end -}}
{{- if not (hasPrefix "/" .Values.node.kubeletDir) -}}
{{- fail (printf "node.kubeletDir %q: must be an absolute path" .Values.node.kubeletDir) -}}
{{- end -}}
{{- if not (hasPrefix "/" .Values.node.cacheRoot) -}}
{{- fail (printf "node.cacheRoot %q: must be an absolute path (tierfs-csi --cache-root)" .Values.node.cacheRoot) -}}
{{- end -}}
{{- if and .Values.s3.endpoint (not (regexMatch "^https?://[^ \t]+$" .Values.s3.endpoint)) -}}
{{- fail (printf "s3.endpoint %q: expected an http:// or https:// URL" .Values.s3.endpoint) -}}
{{- end -}}
{{- if and .Values.credentials.create (not .Values.credentials.accessKeyID) -}}
{{- fail "credentials.create is true: credentials.accessKeyID is required" -}}
{{- end -}}
{{- if and .Values.credentials.create (not .Values.credentials.secretAccessKey) -}}
{{- fail "credentials.create is true: credentials.secretAccessKey is required" -}}
{{- end -}}
{{- $names := dict -}}
{{- range .Values.storageClasses -}}
{{- $n := required "storageClasses[].name is required" .name -}}
{{- if hasKey $names $n -}}
{{- fail (printf "storageClasses: %q is listed twice" $n) -}}
{{- end -}}
{{- $_ := set $names $n true -}}
{{- if not (has (default "s3" .durability) (list "s3" "local")) -}}
{{- fail (printf "storageClasses %s: durability %q: expected s3 or local" $n .durability) -}}
{{- end -}}
{{- if not (has (default "delete" .onDelete) (list "delete" "retain")) -}}
{{- fail (printf "storageClasses %s: onDelete %q: expected delete or retain" $n .onDelete) -}}
{{- end -}}
{{- if not (has (default "Delete" .reclaimPolicy) (list "Delete" "Retain")) -}}
{{- fail (printf "storageClasses %s: reclaimPolicy %q: expected Delete or Retain" $n .reclaimPolicy) -}}
{{- end -}}
{{- if not (has (default "Immediate" .volumeBindingMode) (list "Immediate" "WaitForFirstConsumer")) -}}
{{- fail (printf "storageClasses %s: volumeBindingMode %q: expected Immediate or WaitForFirstConsumer" $n .volumeBindingMode) -}}
{{- end -}}
{{- $sc := . -}}
{{- range $k := list "uid" "gid" -}}
{{- $v := include "tierfs.str" (index $sc $k) -}}
{{- if and $v (not (regexMatch "^[0-9]{1,10}$" $v)) -}}
{{- fail (printf "storageClasses %s: %s %q: expected a decimal id" $n $k $v) -}}
{{- end -}}
{{- end -}}
{{- if kindIs "float64" .mode -}}
{{- fail (printf "storageClasses %s: mode must be a quoted string such as \"0770\" (YAML reads an unquoted 0770 as the number 504)" $n) -}}
{{- end -}}
{{- $mode := include "tierfs.str" .mode -}}
{{- if and $mode (not (regexMatch "^0?[0-7]{1,4}$" $mode)) -}}
{{- fail (printf "storageClasses %s: mode %q: expected an octal mode such as 0770" $n $mode) -}}
{{- end -}}
{{- $cs := include "tierfs.str" .cacheSize -}}
{{- if and $cs (not (regexMatch "^[0-9]*[1-9][0-9]*([KMGTkmgt](i|iB|B)?)?$" $cs)) -}}
{{- fail (printf "storageClasses %s: cacheSize %q: expected a size such as 20Gi" $n $cs) -}}
{{- end -}}
{{- end -}}
{{- end -}}
