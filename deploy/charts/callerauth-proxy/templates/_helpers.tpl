{{- define "proxy.name" -}}
{{- .Values.nameOverride | default (printf "%s-callerauth-proxy" .Release.Name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "proxy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "proxy.labels" -}}
app.kubernetes.io/name: callerauth-proxy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: callerauth
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "proxy.selector" -}}
app.kubernetes.io/name: callerauth-proxy
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Render-time validation: what the proxy would refuse at start-up. */}}
{{- define "proxy.validate" -}}
{{- $v := .Values -}}
{{- if not $v.upstream -}}
{{- fail "callerauth-proxy: upstream is required: http://HOST:PORT, https://HOST:PORT or unix:///PATH" -}}
{{- end -}}
{{- if not $v.caller.audience -}}
{{- fail "callerauth-proxy: caller.audience is required: a token minted for another service must not be accepted" -}}
{{- end -}}
{{- if and $v.deployment.enabled (not $v.tls.secretName) -}}
{{- fail "callerauth-proxy: tls.secretName is required: callers send bearer tokens, which never travel over plaintext TCP" -}}
{{- end -}}
{{- if not (has $v.caller.mode (list "enforce" "audit")) -}}
{{- fail (printf "callerauth-proxy: caller.mode %q: want enforce or audit" $v.caller.mode) -}}
{{- end -}}
{{- if not (has $v.authorization.mode (list "allow" "rbac")) -}}
{{- fail (printf "callerauth-proxy: authorization.mode %q: want allow or rbac" $v.authorization.mode) -}}
{{- end -}}
{{- if and (eq $v.authorization.mode "allow") (not (or $v.allow.serviceAccounts $v.allow.groups $v.allow.users)) -}}
{{- fail "callerauth-proxy: name the callers let through (allow.serviceAccounts, allow.groups, allow.users) or ask Kubernetes RBAC (authorization.mode: rbac)" -}}
{{- end -}}
{{- if and (eq $v.authorization.mode "allow") $v.authorization.configFile -}}
{{- fail "callerauth-proxy: authorization.configFile belongs to authorization.mode rbac" -}}
{{- end -}}
{{- if and $v.ignorePaths $v.allowPaths -}}
{{- fail "callerauth-proxy: ignorePaths and allowPaths: give one" -}}
{{- end -}}
{{- with $v.decisionLog -}}
{{- if .enabled -}}
{{- if not $v.deployment.enabled -}}
{{- fail "callerauth-proxy: decisionLog is rendered for the standalone proxy (deployment.enabled); as a sidecar give the --decision-log flags yourself (docs/decision-log.md)" -}}
{{- end -}}
{{- if and (not .searchSecret.name) (gt (int $v.deployment.replicas) 1) -}}
{{- fail "callerauth-proxy: decisionLog.searchSecret.name is required with more than one replica: the Secret holding the postgres:// URL of the search index the replicas share" -}}
{{- end -}}
{{- if not .keySecret.name -}}
{{- fail "callerauth-proxy: decisionLog.keySecret.name is required: the Secret holding the checkpoint key (callerauth decisions checkpoint-key)" -}}
{{- end -}}
{{- if and .reader (hasPrefix "system:serviceaccount:" .reader) (not (regexMatch "^system:serviceaccount:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?:[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$" .reader)) -}}
{{- fail (printf "callerauth-proxy: decisionLog.reader %q: want system:serviceaccount:<namespace>:<name>, lowercase, no white space" .reader) -}}
{{- end -}}
{{- if or (eq (int .port) (int $v.port)) (eq (int .port) (int $v.metrics.port)) -}}
{{- fail (printf "callerauth-proxy: decisionLog.port %d is the proxy's or the metrics' port" (int .port)) -}}
{{- end -}}
{{- else if or .reader .searchSecret.name .keySecret.name .witnesses.configMap -}}
{{- fail "callerauth-proxy: decisionLog's settings are given but decisionLog.enabled is false" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The proxy's arguments, the same standalone and as a sidecar. */}}
{{- define "proxy.args" -}}
- --listen=:{{ .Values.port }}
- --tls-cert-file=/etc/callerauth-proxy/tls/tls.crt
- --tls-key-file=/etc/callerauth-proxy/tls/tls.key
- --metrics-listen=:{{ .Values.metrics.port }}
- --upstream={{ .Values.upstream }}
{{- if .Values.upstreamCA.configMap }}
- --upstream-ca-file=/etc/callerauth-proxy/upstream-ca/ca.crt
{{- end }}
{{- if .Values.upstreamHTTP2 }}
- --upstream-http2
{{- end }}
- --caller-audience={{ .Values.caller.audience }}
- --caller-auth-mode={{ .Values.caller.mode }}
- --caller-cache-ttl={{ .Values.caller.cacheTTL }}
{{- if .Values.caller.watchBoundObjects }}
- --caller-watch-bound-objects
{{- end }}
{{- range .Values.allow.serviceAccounts }}
- --allow-service-account={{ . }}
{{- end }}
{{- range .Values.allow.groups }}
- --allow-group={{ . }}
{{- end }}
{{- range .Values.allow.users }}
- --allow-user={{ . }}
{{- end }}
- --authorization={{ .Values.authorization.mode }}
{{- if eq .Values.authorization.mode "rbac" }}
- --authorization-allow-ttl={{ .Values.authorization.allowTTL }}
- --authorization-deny-ttl={{ .Values.authorization.denyTTL }}
{{- if .Values.authorization.configFile }}
- --config-file=/etc/callerauth-proxy/config/config-file.yaml
{{- end }}
{{- end }}
{{- with .Values.ignorePaths }}
- --ignore-paths={{ join "," . }}
{{- end }}
{{- with .Values.allowPaths }}
- --allow-paths={{ join "," . }}
{{- end }}
{{- with .Values.decisionLog }}{{ if .enabled }}
- --decision-log=/var/lib/callerauth-proxy/decisions
- --decision-log-replica=$(POD_NAME)
{{- if .searchSecret.name }}
- --decision-log-search-url-file=/etc/callerauth-proxy/decision-log-search/{{ .searchSecret.key }}
{{- end }}
- --decision-log-key-file=/etc/callerauth-proxy/decision-log-key/{{ .keySecret.key }}
{{- if .witnesses.configMap }}
- --decision-log-witnesses=/etc/callerauth-proxy/decision-log-witnesses/{{ .witnesses.key }}
{{- end }}
- --decision-log-mode={{ .mode }}
- --decision-log-max-age={{ .maxAge }}
- --decision-log-max-entries={{ int64 .maxEntries }}
- --decision-log-caller-max-entries={{ int64 .callerMaxEntries }}
{{- if .reader }}
- --decision-log-listen=:{{ .port }}
- --caller-binding=callerauth/decision-log={{ .reader }}
{{- end }}
{{- end }}{{ end }}
{{- with .Values.tracing }}{{ if .otlpEndpoint }}
- --otlp-endpoint={{ .otlpEndpoint }}
- --otlp-protocol={{ .protocol }}
{{- if .caConfigMap.name }}
- --otlp-ca-file=/etc/callerauth-proxy/otlp-ca/{{ .caConfigMap.key }}
{{- end }}
- --trace-sample-ratio={{ .sampleRatio }}
{{- end }}{{ end }}
- --log-level={{ .Values.logLevel }}
{{- end -}}
