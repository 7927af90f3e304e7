{{- define "pdp.name" -}}
{{- .Values.nameOverride | default (printf "%s-pdp" .Release.Name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pdp.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "pdp.labels" -}}
app.kubernetes.io/name: pdp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: callerauth
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "pdp.selector" -}}
app.kubernetes.io/name: pdp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The name consumers are given: the Service's trailing-dot FQDN. */}}
{{- define "pdp.fqdn" -}}
{{ include "pdp.name" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}.
{{- end -}}

{{- define "pdp.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default (printf "%s-policy" (include "pdp.name" .)) -}}
{{- end -}}

{{- define "pdp.registryConfigMap" -}}
{{- .Values.registry.existingConfigMap | default (printf "%s-registry" (include "pdp.name" .)) -}}
{{- end -}}

{{/* Render-time validation: what the pdp would refuse at start-up, and what would make the release unusable. */}}
{{- define "pdp.validate" -}}
{{- $v := .Values -}}
{{- if not $v.tls.secretName -}}
{{- fail "pdp: tls.secretName is required: callers send bearer tokens, which never travel over plaintext TCP" -}}
{{- end -}}
{{- if not $v.signingKey.secretName -}}
{{- fail "pdp: signingKey.secretName is required: every record is signed (callerauth decision keygen --out signing.pem)" -}}
{{- end -}}
{{- if and $v.policy.files $v.policy.existingConfigMap -}}
{{- fail "pdp: policy.files and policy.existingConfigMap: give one" -}}
{{- end -}}
{{- if not (or $v.policy.files $v.policy.existingConfigMap) -}}
{{- fail "pdp: the policy package is required: policy.files (manifest.json, *.cedar, one *.cedarschema) or policy.existingConfigMap" -}}
{{- end -}}
{{- if $v.policy.files -}}
{{- if not (hasKey $v.policy.files "manifest.json") -}}
{{- fail "pdp: policy.files has no manifest.json" -}}
{{- end -}}
{{- end -}}
{{- if and $v.registry.json $v.registry.existingConfigMap -}}
{{- fail "pdp: registry.json and registry.existingConfigMap: give one" -}}
{{- end -}}
{{- if not (or $v.registry.json $v.registry.existingConfigMap) -}}
{{- fail "pdp: the registry is required: registry.json or registry.existingConfigMap (with the key registry.json)" -}}
{{- end -}}
{{- if not (has $v.caller.mode (list "enforce" "warn")) -}}
{{- fail (printf "pdp: caller.mode %q: want enforce or warn (the chart never deploys a pdp that authenticates nobody)" $v.caller.mode) -}}
{{- end -}}
{{- if not $v.caller.audience -}}
{{- fail "pdp: caller.audience may not be empty" -}}
{{- end -}}
{{- if not $v.caller.bindings -}}
{{- fail "pdp: caller.bindings: at least one SYSTEM: PRINCIPAL is required, or no caller may represent any system" -}}
{{- end -}}
{{- range $system, $principal := $v.caller.bindings -}}
{{- if not (kindIs "string" $principal) -}}
{{- fail (printf "pdp: caller.bindings.%s: want a principal string, got %s" $system (kindOf $principal)) -}}
{{- end -}}
{{- if and (hasPrefix "system:serviceaccount:" $principal) (not (regexMatch "^system:serviceaccount:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?:[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$" $principal)) -}}
{{- fail (printf "pdp: caller.bindings.%s %q: want system:serviceaccount:<namespace>:<name>, lowercase, no white space" $system $principal) -}}
{{- end -}}
{{- end -}}
{{- with $v.decisionLog -}}
{{- if .enabled -}}
{{- if and (not .searchSecret.name) (or (gt (int $v.replicas) 1) $v.autoscaling.enabled) -}}
{{- fail "pdp: decisionLog.searchSecret.name is required with more than one replica: the Secret holding the postgres:// URL of the search index the replicas share" -}}
{{- end -}}
{{- if not .keySecret.name -}}
{{- fail "pdp: decisionLog.keySecret.name is required: the Secret holding the checkpoint key (callerauth decisions checkpoint-key)" -}}
{{- end -}}
{{- if hasKey $v.caller.bindings "callerauth/decision-log" -}}
{{- fail "pdp: name the decision log's reader in decisionLog.reader, not in caller.bindings" -}}
{{- end -}}
{{- if and .reader (hasPrefix "system:serviceaccount:" .reader) (not (regexMatch "^system:serviceaccount:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?:[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$" .reader)) -}}
{{- fail (printf "pdp: decisionLog.reader %q: want system:serviceaccount:<namespace>:<name>, lowercase, no white space" .reader) -}}
{{- end -}}
{{- if and .sink (not (hasPrefix "https://" .sink)) -}}
{{- fail (printf "pdp: decisionLog.sink %q: want an https:// URL" .sink) -}}
{{- end -}}
{{- else if or .reader .sink .searchSecret.name .keySecret.name -}}
{{- fail "pdp: decisionLog's settings are given but decisionLog.enabled is false" -}}
{{- end -}}
{{- end -}}
{{- if and $v.authzenBaseURL (not (hasPrefix "https://" $v.authzenBaseURL)) -}}
{{- fail (printf "pdp: authzenBaseURL %q: want an https:// URL" $v.authzenBaseURL) -}}
{{- end -}}
{{- if lt (int $v.replicas) 1 -}}
{{- fail "pdp: replicas: at least 1" -}}
{{- end -}}
{{- if $v.autoscaling.enabled -}}
{{- if lt (int $v.autoscaling.minReplicas) 1 -}}
{{- fail "pdp: autoscaling.minReplicas: at least 1" -}}
{{- end -}}
{{- if lt (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas) -}}
{{- fail (printf "pdp: autoscaling.maxReplicas %d is below minReplicas %d" (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas)) -}}
{{- end -}}
{{- end -}}
{{- if $v.podDisruptionBudget.enabled -}}
{{- $least := ternary (int $v.autoscaling.minReplicas) (int $v.replicas) $v.autoscaling.enabled -}}
{{- if ge (int $v.podDisruptionBudget.minAvailable) $least -}}
{{- fail (printf "pdp: podDisruptionBudget.minAvailable %d with %d replicas: no pod could ever be evicted, and a node drain would hang" (int $v.podDisruptionBudget.minAvailable) $least) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The workload: a StatefulSet with the decision log on (a log and a
volume a replica), else a Deployment. */}}
{{- define "pdp.workload" -}}
{{- if .Values.decisionLog.enabled }}StatefulSet{{ else }}Deployment{{ end -}}
{{- end -}}
