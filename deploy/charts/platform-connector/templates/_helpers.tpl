{{/* The validated auth settings; fails the render on anything the connector would refuse. */}}
{{- define "platform-connector.auth" -}}
{{- $auth := .Values.global.platformConnectorAuth | default dict -}}
{{- if not (hasKey $auth "enabled") -}}
{{- fail "global.platformConnectorAuth.enabled must be set explicitly to true or false: there is no default" -}}
{{- end -}}
{{- if not (kindIs "bool" $auth.enabled) -}}
{{- fail (printf "global.platformConnectorAuth.enabled must be a real boolean, got %s %v (a quoted \"false\", null or 0 is refused)" (kindOf $auth.enabled) $auth.enabled) -}}
{{- end -}}
{{- $mode := $auth.mode | default "enforce" -}}
{{- if not (has $mode (list "enforce" "audit")) -}}
{{- fail (printf "global.platformConnectorAuth.mode must be enforce or audit, got %v" $mode) -}}
{{- end -}}
{{- $failOpen := false -}}
{{- if hasKey $auth "failOpenOnUnavailable" -}}
{{- if not (kindIs "bool" $auth.failOpenOnUnavailable) -}}
{{- fail (printf "global.platformConnectorAuth.failOpenOnUnavailable must be a real boolean, got %s %v" (kindOf $auth.failOpenOnUnavailable) $auth.failOpenOnUnavailable) -}}
{{- end -}}
{{- $failOpen = $auth.failOpenOnUnavailable -}}
{{- end -}}
{{- if or (not (kindIs "string" $auth.audience)) (eq (toString $auth.audience) "") -}}
{{- fail "global.platformConnectorAuth.audience must be a non-empty string" -}}
{{- end -}}
{{- $t := $auth.tokenExpirationSeconds -}}
{{- if not (or (kindIs "float64" $t) (kindIs "int64" $t) (kindIs "int" $t)) -}}
{{- fail (printf "global.platformConnectorAuth.tokenExpirationSeconds must be a whole number of seconds, got %s %v" (kindOf $t) $t) -}}
{{- end -}}
{{- $tf := float64 $t -}}
{{- if ne $tf (floor $tf) -}}
{{- fail (printf "global.platformConnectorAuth.tokenExpirationSeconds must be a whole number of seconds, got %v (Kubernetes rejects fractional values)" $t) -}}
{{- end -}}
{{- if or (lt $tf 600.0) (gt $tf 4294967296.0) -}}
{{- fail (printf "global.platformConnectorAuth.tokenExpirationSeconds must be 600 <= x <= 4294967296, got %v" (int64 $tf)) -}}
{{- end -}}
{{- if or (not (kindIs "string" $auth.tokenMountPath)) (not (hasPrefix "/" (toString $auth.tokenMountPath))) -}}
{{- fail "global.platformConnectorAuth.tokenMountPath must be an absolute path; the token file is <tokenMountPath>/token" -}}
{{- end -}}
{{- $cross := list -}}
{{- if hasKey $auth "crossNodeServiceAccounts" -}}
{{- if kindIs "invalid" $auth.crossNodeServiceAccounts -}}
{{- fail "global.platformConnectorAuth.crossNodeServiceAccounts is null: null and \"none\" are not the same statement; omit the key or write [] for none" -}}
{{- end -}}
{{- if not (kindIs "slice" $auth.crossNodeServiceAccounts) -}}
{{- fail (printf "global.platformConnectorAuth.crossNodeServiceAccounts must be a list, got %s" (kindOf $auth.crossNodeServiceAccounts)) -}}
{{- end -}}
{{- range $i, $e := $auth.crossNodeServiceAccounts -}}
{{- include "platform-connector.checkServiceAccount" (dict "entry" $e "index" $i) -}}
{{- $cross = append $cross $e -}}
{{- end -}}
{{- end -}}
{{- range $name := keys .Values.monitors | sortAlpha -}}
{{- if (index $.Values.monitors $name).enabled -}}
{{- $cross = append $cross (printf "system:serviceaccount:%s:%s" $.Release.Namespace $name) -}}
{{- end -}}
{{- end -}}
{{- dict "enableNodeBindingAuth" $auth.enabled "AuthAudience" $auth.audience "AuthCrossNodeServiceAccounts" (uniq $cross) "AuthMode" $mode "AuthFailOpenOnUnavailable" $failOpen | toJson -}}
{{- end -}}

{{/* One cross-node entry: system:serviceaccount:<ns>:<name>, matched verbatim, never trimmed. */}}
{{- define "platform-connector.checkServiceAccount" -}}
{{- $e := .entry -}}
{{- $where := printf "global.platformConnectorAuth.crossNodeServiceAccounts[%d]" .index -}}
{{- if not (kindIs "string" $e) -}}
{{- fail (printf "%s must be a string, got %s" $where (kindOf $e)) -}}
{{- end -}}
{{- if regexMatch "\\s" $e -}}
{{- fail (printf "%s %q contains whitespace; entries are matched verbatim and never trimmed" $where $e) -}}
{{- end -}}
{{- if ne $e (lower $e) -}}
{{- fail (printf "%s %q contains uppercase; a service-account username never does" $where $e) -}}
{{- end -}}
{{- $parts := splitList ":" $e -}}
{{- if or (ne (len $parts) 4) (ne (index $parts 0) "system") (ne (index $parts 1) "serviceaccount") -}}
{{- fail (printf "%s %q: want system:serviceaccount:<namespace>:<name>" $where $e) -}}
{{- end -}}
{{- $ns := index $parts 2 -}}
{{- $name := index $parts 3 -}}
{{- if or (gt (len $ns) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) -}}
{{- fail (printf "%s %q: namespace %q must be a DNS-1123 label of at most 63 characters" $where $e $ns) -}}
{{- end -}}
{{- if or (gt (len $name) 253) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $name)) -}}
{{- fail (printf "%s %q: name %q must be a DNS-1123 subdomain of at most 253 characters" $where $e $name) -}}
{{- end -}}
{{- end -}}

{{- define "platform-connector.labels" -}}
app.kubernetes.io/name: platform-connector
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: callerauth
{{- end -}}

{{/* The projected service-account token a publisher mounts. */}}
{{- define "platform-connector.tokenVolume" -}}
- name: platform-connector-token
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ .Values.global.platformConnectorAuth.audience | quote }}
          expirationSeconds: {{ int64 .Values.global.platformConnectorAuth.tokenExpirationSeconds }}
          path: token
{{- end -}}

{{- define "platform-connector.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The pod securityContext every workload of the chart runs with. */}}
{{- define "platform-connector.podSecurityContext" -}}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A container's securityContext, resources, and GOMEMLIMIT from its memory limit; $res is its resources. */}}
{{- define "platform-connector.container" -}}
{{- with .root.Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .res }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The --otlp-* flags of .Values.tracing (docs/monitoring.md "Traces"),
the CA bundle's mount and its volume: empty when traces are off. */}}
{{- define "connector.tracingArgs" -}}
{{- with .Values.tracing }}{{ if .otlpEndpoint -}}
- --otlp-endpoint={{ .otlpEndpoint }}
- --otlp-protocol={{ .protocol }}
{{- if .caConfigMap.name }}
- --otlp-ca-file=/etc/otlp-ca/{{ .caConfigMap.key }}
{{- end }}
- --trace-sample-ratio={{ .sampleRatio }}
{{- end }}{{ end }}
{{- end -}}

{{- define "connector.tracingMount" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.caConfigMap.name -}}
- {name: otlp-ca, mountPath: /etc/otlp-ca, readOnly: true}
{{- end -}}
{{- end -}}

{{- define "connector.tracingVolume" -}}
{{- if and .Values.tracing.otlpEndpoint .Values.tracing.caConfigMap.name -}}
- name: otlp-ca
  configMap: {name: {{ .Values.tracing.caConfigMap.name }}}
{{- end -}}
{{- end -}}
