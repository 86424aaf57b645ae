{{/* The provider, checked: one of the four. */}}
{{- define "polyccm.provider" -}}
{{- $providers := list "aws" "gce" "digitalocean" "packet" -}}
{{- if not (has .Values.provider $providers) -}}
{{- fail (printf "provider must be one of aws, gce, digitalocean, packet (got %q)" .Values.provider) -}}
{{- end -}}
{{- .Values.provider -}}
{{- end -}}

{{- define "polyccm.labels" -}}
app.kubernetes.io/name: polyccm
app.kubernetes.io/component: cloud-controller-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "polyccm.selectorLabels" -}}
app.kubernetes.io/name: polyccm
app.kubernetes.io/component: cloud-controller-manager
{{- end -}}

{{- define "polyccm.image" -}}
{{- $repository := .Values.image.repository | default (printf "ghcr.io/polyccm/polyccm-%s" (include "polyccm.provider" .)) -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret with the cloud credentials: the existing one, or the chart's. */}}
{{- define "polyccm.credentialsSecret" -}}
{{- if .Values.credentials.existingSecret -}}
{{- .Values.credentials.existingSecret -}}
{{- else if .Values.credentials.values -}}
polyccm-cloud-credentials
{{- end -}}
{{- end -}}

{{/*
The ClusterRole's rules: the core's, then the provider's own controllers'. The same rules as
`polyccm rbac --provider NAME` prints (tests/test_helm_chart.py keeps them equal).
*/}}
{{- define "polyccm.rules" -}}
# Node informer (list, watch); cloud-node sets providerID, labels and removes the
# uninitialized taint (patch), re-reading the node when that write conflicts (get);
# cloud-node-lifecycle sets or clears the shutdown taint (patch) and deletes nodes whose
# instance is gone (delete).
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch, patch, delete]
# cloud-node refreshes node addresses; route sets the NetworkUnavailable condition.
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
# Service informer (list, watch); service adds and removes its finalizer (patch), and
# re-reads the service when that write conflicts with another change (get).
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, patch]
# service writes status.loadBalancer.
- apiGroups: [""]
  resources: [services/status]
  verbs: [patch]
# The event recorder creates events, and patches the count of repeated ones.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if eq (include "polyccm.provider" .) "packet" }}
# packet-bgp: the kube-system namespace's UID is the cluster id of the Elastic IPs.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
# packet-metallb: MetalLB's configuration and the BGP password's Secret.
- apiGroups: [metallb.io]
  resources: [ipaddresspools, bgppeers, bgpadvertisements]
  verbs: [get, list, create, update, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update]
# packet-control-plane: the control plane's Elastic IP Service and its EndpointSlice.
- apiGroups: [""]
  resources: [services]
  verbs: [create, patch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, patch]
{{- end }}
{{- end -}}
