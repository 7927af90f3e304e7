{{/* The image of one binary: .root the chart, .bin the binary (make images names each image after its binary). */}}
{{- define "vmafx.image" -}}
{{ .root.Values.image.registry }}/{{ .bin }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* The release's prefix of every object's name: the release's name when it says vmafx (a release "vmafx" names its controller vmafx-controller), else <release>-vmafx. Two releases in one namespace never share a name. */}}
{{- define "vmafx.fullname" -}}
{{- if contains "vmafx" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-vmafx" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* An object's name: .root the chart, .c the component (controller, node, operator) or any suffix. */}}
{{- define "vmafx.name" -}}
{{ include "vmafx.fullname" .root }}-{{ .c }}
{{- end -}}

{{/* The pods of one component of this release: .root the chart, .name the component's app name (vmafx-controller, ...). */}}
{{- define "vmafx.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* The labels of every object: .root the chart, .name the component (vmafx-controller, vmafx-node, vmafx-operator). */}}
{{- define "vmafx.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: callerauth
helm.sh/chart: {{ .root.Chart.Name }}-{{ .root.Chart.Version }}
{{- end -}}

{{/* The pod securityContext of every workload. */}}
{{- define "vmafx.podSecurityContext" -}}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A container's securityContext and resources, and GOMEMLIMIT from its memory limit (last, so env may follow). */}}
{{- define "vmafx.container" -}}
{{- with .root.Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .res }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
env:
  {{- if (.res.limits | default dict).memory }}
  - name: GOMEMLIMIT
    valueFrom: {resourceFieldRef: {resource: limits.memory}}
  {{- end }}
{{- end -}}

{{/* A NetworkPolicy admitting the metrics scrapers to .port of the pods labelled .name, and .from to .extraPort. */}}
{{- define "vmafx.networkPolicy" -}}
{{- if .root.Values.networkPolicy.enabled }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "vmafx.name" (dict "root" .root "c" (trimPrefix "vmafx-" .name)) }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "vmafx.labels" (dict "root" .root "name" .name) | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "vmafx.selector" (dict "root" .root "name" .name) | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    {{- with .root.Values.networkPolicy.metricsScrapers }}
    - ports: [{port: metrics}]
      from:
        {{- toYaml . | nindent 8 }}
    {{- end }}
    {{- with .from }}
    - ports: [{port: {{ $.extraPort }}}]
      from:
        {{- toYaml . | nindent 8 }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* The controller the node and the operator call: controller.address, else this release's. */}}
{{- define "vmafx.controllerAddress" -}}
{{- if .Values.controller.address -}}
{{ .Values.controller.address }}
{{- else -}}
{{ include "vmafx.name" (dict "root" . "c" "controller") }}.{{ .Release.Namespace }}.svc.cluster.local.:{{ .Values.controller.port }}
{{- end -}}
{{- end -}}

{{/* The name the controller's certificate must carry: controller.serverName, else the address's host without the cluster domain. */}}
{{- define "vmafx.controllerServerName" -}}
{{- if .Values.controller.serverName -}}
{{ .Values.controller.serverName }}
{{- else -}}
{{- $host := regexReplaceAll ":[0-9]+$" (include "vmafx.controllerAddress" .) "" -}}
{{ regexReplaceAll "\\.cluster\\.local\\.?$" $host "" }}
{{- end -}}
{{- end -}}

{{/* The controller connection of the node and the operator (credentials.Load's keys). */}}
{{- define "vmafx.connection" -}}
controller:
  address: {{ include "vmafx.controllerAddress" . }}
  tls: {{ .Values.controller.tls.enabled }}
  ca_file: /etc/vmafx/controller-ca/ca.crt
  server_name: {{ include "vmafx.controllerServerName" . }}
  token_file: /var/run/vmafx/token/token
{{- end -}}

{{/* Render-time validation: what would otherwise fail at start-up. */}}
{{- define "vmafx.validate" -}}
{{- if not (or .Values.controller.enabled .Values.node.enabled .Values.operator.enabled) -}}
{{- fail "vmafx: controller, node and operator all disabled: the release would hold nothing" -}}
{{- end -}}
{{- if and (not .Values.controller.enabled) (not .Values.controller.address) -}}
{{- fail "vmafx: controller.enabled false: give controller.address, the controller of another release (its Service, HOST:PORT), for the node and the operator to call" -}}
{{- end -}}
{{- if .Values.controller.enabled -}}
{{- if and .Values.authenticationConfig .Values.tenants -}}
{{- fail "vmafx: authenticationConfig and tenants: give one (authenticationConfig is the whole file; tenants are written into one)" -}}
{{- end -}}
{{- if not (or .Values.tenants .Values.authenticationConfig) -}}
{{- fail "vmafx: tenants: at least one tenant is required (name, issuer, audiences), or authenticationConfig: nobody could call the controller" -}}
{{- end -}}
{{- range $i, $t := .Values.tenants -}}
{{- if $t.caConfigMap -}}{{- fail (printf "vmafx: tenants[%d] (%s): caConfigMap is gone: give the issuer's CA as PEM in certificateAuthority (the AuthenticationConfiguration carries it inline, as the API server's does)" $i $t.name) -}}{{- end -}}
{{- range $k := list "rolesClaim" "tenantClaim" -}}{{- with (index $t $k) -}}{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" .) -}}{{- fail (printf "vmafx: tenants[%d] (%s): %s %q: a plain claim name here; write other mappings in authenticationConfig" $i $t.name $k .) -}}{{- end -}}{{- end -}}{{- end -}}
{{- if not $t.name -}}{{- fail (printf "vmafx: tenants[%d]: name is required" $i) -}}{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $t.name) -}}{{- fail (printf "vmafx: tenants[%d].name %q: want a DNS label" $i $t.name) -}}{{- end -}}
{{- if not $t.issuer -}}{{- fail (printf "vmafx: tenants[%d] (%s): issuer is required: the issuer decides the tenant" $i $t.name) -}}{{- end -}}
{{- if not (hasPrefix "https://" $t.issuer) -}}{{- fail (printf "vmafx: tenants[%d] (%s): issuer %q must be https://" $i $t.name $t.issuer) -}}{{- end -}}
{{- if not $t.audiences -}}{{- fail (printf "vmafx: tenants[%d] (%s): audiences: at least one is required" $i $t.name) -}}{{- end -}}
{{- end -}}
{{- $pg := .Values.controller.postgres -}}
{{- if $pg.url -}}
{{- if not (or (hasPrefix "postgres://" $pg.url) (hasPrefix "postgresql://" $pg.url)) -}}
{{- fail (printf "vmafx: controller.postgres.url %q: want a postgres:// URL" $pg.url) -}}
{{- end -}}
{{- if regexMatch "^postgres(ql)?://[^/@]*:[^/@]*@" $pg.url -}}
{{- fail "vmafx: controller.postgres.url carries a password: it would show in the pod spec and the process's arguments; put it in a Secret (controller.postgres.passwordSecret)" -}}
{{- end -}}
{{- if not (regexMatch "[?&]sslmode=(require|verify-ca|verify-full)(&|$)" $pg.url) -}}
{{- fail "vmafx: controller.postgres.url: add sslmode=verify-full (with sslrootcert), verify-ca or require: the controller refuses plaintext to a remote PostgreSQL" -}}
{{- end -}}
{{- if $pg.urlSecret.name -}}
{{- fail "vmafx: controller.postgres.url and controller.postgres.urlSecret: give one" -}}
{{- end -}}
{{- else if and (gt (int .Values.controller.replicas) 1) (not $pg.urlSecret.name) -}}
{{- fail (printf "vmafx: controller.replicas %d needs controller.postgres.url or urlSecret: replicas on SQLite would each keep their own jobs" (int .Values.controller.replicas)) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.controller.tls.enabled -}}
{{- fail "vmafx: controller.tls.enabled is false but the node and the operator send a bearer token: a token never travels over plaintext TCP" -}}
{{- end -}}
{{- if not (has .Values.credentials.mode (list "secret" "refresher")) -}}
{{- fail (printf "vmafx: credentials.mode %q: want secret or refresher" .Values.credentials.mode) -}}
{{- end -}}
{{- if and (not .Values.credentials.tenant) (or .Values.node.enabled .Values.operator.enabled) -}}
{{- fail "vmafx: credentials.tenant is required: a token is one tenant's" -}}
{{- end -}}
{{- if eq .Values.credentials.mode "refresher" -}}
{{- if not (hasPrefix "https://" (.Values.credentials.refresher.tokenURL | default "")) -}}
{{- fail "vmafx: credentials.refresher.tokenURL must be the tenant IdP's https:// token endpoint" -}}
{{- end -}}
{{- $r := float64 .Values.credentials.refresher.renewAt -}}
{{- if or (le $r 0.0) (ge $r 1.0) -}}
{{- fail (printf "vmafx: credentials.refresher.renewAt %v: want a fraction of the token lifetime between 0 and 1" .Values.credentials.refresher.renewAt) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The token volume and, in refresher mode, the sidecar; $who is node or operator. */}}
{{- define "vmafx.tokenVolume" -}}
{{- $c := index .root.Values.credentials .who -}}
- name: token
{{- if eq .root.Values.credentials.mode "secret" }}
  secret:
    secretName: {{ $c.tokenSecret }}
{{- else }}
  emptyDir:
    medium: Memory
- name: client
  secret:
    secretName: {{ $c.clientSecret }}
{{- end }}
- name: controller-ca
  secret:
    secretName: {{ .root.Values.controller.tls.secretName }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end -}}

{{- define "vmafx.refresher" -}}
{{- $c := index .root.Values.credentials .who -}}
{{- if eq .root.Values.credentials.mode "refresher" }}
- name: token-refresher
  image: {{ include "vmafx.image" (dict "root" .root "bin" "callerauth-refresher") }}
  {{- include "vmafx.container" (dict "root" .root "res" .root.Values.credentials.refresher.resources) | nindent 2 }}
    - name: CLIENT_ID
      valueFrom: {secretKeyRef: {name: {{ $c.clientSecret }}, key: client-id}}
  args:
    - --token-url={{ .root.Values.credentials.refresher.tokenURL }}
    - --client-id=$(CLIENT_ID)
    - --client-secret-file=/etc/vmafx/client/client-secret
    - --audience={{ .root.Values.credentials.refresher.audience }}
    - --renew-at={{ .root.Values.credentials.refresher.renewAt }}
    - --out=/var/run/vmafx/token/token
    {{- range $c.scopes }}
    - --scope={{ . }}
    {{- end }}
  volumeMounts:
    - {name: token, mountPath: /var/run/vmafx/token}
    - {name: client, mountPath: /etc/vmafx/client, readOnly: true}
{{- end }}
{{- end -}}

{{/* The --otlp-* flags of .Values.tracing (docs/monitoring.md "Traces"),
the CA bundle's mount and its volume: empty when traces are off. */}}
{{- define "vmafx.tracingArgs" -}}
{{- with .Values.tracing }}{{ if .otlpEndpoint -}}
- --otlp-endpoint={{ .otlpEndpoint }}
- --otlp-protocol={{ .protocol }}
{{- if .caConfigMap.name }}
- --otlp-ca-file=/etc/otlp-ca/{{ .caConfigMap.key }}
{{- end }}
- --trace-sample-ratio={{ .sampleRatio }}
{{- end }}{{ end }}
{{- end -}}

{{- define "vmafx.tracingMount" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.caConfigMap.name -}}
- {name: otlp-ca, mountPath: /etc/otlp-ca, readOnly: true}
{{- end -}}
{{- end -}}

{{- define "vmafx.tracingVolume" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.caConfigMap.name -}}
- name: otlp-ca
  configMap: {name: {{ .Values.tracing.caConfigMap.name }}}
{{- end -}}
{{- end -}}
