{{/* Names ------------------------------------------------------------------------------------ */}}
{{- define "medhelm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "medhelm.fullname" -}}
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

{{- define "medhelm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "medhelm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels ----------------------------------------------------------------------------------- */}}
{{- define "medhelm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "medhelm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "medhelm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "medhelm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: medhelm-local
{{- end -}}

{{/* Images: repository:tag, or repository@digest when a digest is given. ---------------------- */}}
{{- define "medhelm.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* Security contexts: Pod Security "restricted". -------------------------------------------- */}}
{{- define "medhelm.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "medhelm.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Model servers ---------------------------------------------------------------------------- */}}
{{/* Every served model with its role: a list of dicts {role, spec}. */}}
{{- define "medhelm.servers" -}}
{{- $out := list -}}
{{- range .Values.models -}}
{{- $out = append $out (dict "role" "model" "spec" .) -}}
{{- end -}}
{{- range .Values.judges -}}
{{- $out = append $out (dict "role" "judge" "spec" .) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* DNS-1035 label for a model's Deployment and Service: <fullname>-vllm-<model>. */}}
{{- define "medhelm.serverName" -}}
{{- $model := .name | lower | replace "." "-" | replace "_" "-" -}}
{{- printf "%s-vllm-%s" (include "medhelm.fullname" .root) $model | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "medhelm.serverURL" -}}
{{- printf "http://%s.%s.svc.%s:%d/v1" (include "medhelm.serverName" .) .root.Release.Namespace .root.Values.clusterDomain (int .root.Values.vllm.port) -}}
{{- end -}}

{{- define "medhelm.vllmApiKeySecret" -}}
{{- if .Values.vllmApiKey.existingSecret -}}
{{- .Values.vllmApiKey.existingSecret -}}
{{- else -}}
{{- printf "%s-vllm-api-key" (include "medhelm.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "medhelm.keysSecret" -}}
{{- if eq .Values.keys.mode "existingSecret" -}}
{{- .Values.keys.existingSecret -}}
{{- else -}}
{{- printf "%s-keys" (include "medhelm.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "medhelm.homeClaim" -}}
{{- default (printf "%s-home" (include "medhelm.fullname" .)) .Values.persistence.home.existingClaim -}}
{{- end -}}

{{- define "medhelm.auditClaim" -}}
{{- default (printf "%s-audit" (include "medhelm.fullname" .)) .Values.persistence.audit.existingClaim -}}
{{- end -}}

{{/* Checks that cannot be expressed in values.schema.json. */}}
{{- define "medhelm.validate" -}}
{{- $names := list -}}
{{- if .Values.appliance.embeddedModel.enabled -}}
{{- $names = append $names .Values.appliance.embeddedModel.name -}}
{{- end -}}
{{- range (concat .Values.models .Values.judges .Values.appliance.extraModels) -}}
{{- if has .name $names -}}
{{- fail (printf "model name %q is used twice (models, judges, extraModels and the embedded model share one namespace)" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $servers := list -}}
{{- range (concat .Values.models .Values.judges) -}}
{{- $server := include "medhelm.serverName" (dict "name" .name "root" $) -}}
{{- if has $server $servers -}}
{{- fail (printf "model %q maps to the same Deployment/Service name %q as another model; shorten or rename it" .name $server) -}}
{{- end -}}
{{- $servers = append $servers $server -}}
{{- end -}}
{{- if not (has .Values.runner.model $names) -}}
{{- fail (printf "runner.model %q is not one of the configured models %v" .Values.runner.model $names) -}}
{{- end -}}
{{- if and (eq .Values.keys.mode "existingSecret") (not .Values.keys.existingSecret) -}}
{{- fail "keys.mode=existingSecret needs keys.existingSecret" -}}
{{- end -}}
{{- if and (eq .Values.keys.mode "secret") (or (not .Values.keys.signingKey) (not .Values.keys.signingPublicKey) (not .Values.keys.storeDataKey)) -}}
{{- fail "keys.mode=secret needs keys.signingKey, keys.signingPublicKey and keys.storeDataKey" -}}
{{- end -}}
{{- if and (gt (int .Values.runner.shards) 1) (has "ReadWriteOnce" .Values.persistence.home.accessModes) (gt (int .Values.runner.parallelism) 1) -}}
{{- fail "runner.shards > 1 with runner.parallelism > 1 needs persistence.home.accessModes [ReadWriteMany] (shards may run on different nodes)" -}}
{{- end -}}
{{- end -}}

{{/* Runner pod spec, shared by the Job, the CronJob and the toolbox. Argument: dict root, toolbox. ---- */}}
{{- define "medhelm.runnerPodSpec" -}}
{{- $toolbox := .toolbox -}}
{{- with .root -}}
{{- $secretKeys := ne .Values.keys.mode "home" -}}
serviceAccountName: {{ include "medhelm.serviceAccountName" . }}
automountServiceAccountToken: false
restartPolicy: {{ ternary "Always" "Never" $toolbox }}
enableServiceLinks: false
securityContext:
  {{- include "medhelm.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
initContainers:
  {{- if $secretKeys }}
  # Copy the keys from the Secret (0440 group fsGroup after the kubelet applies fsGroup) to an in-memory
  # emptyDir with mode 0400, owned by this UID: the appliance refuses group- or world-readable keys.
  - name: copy-keys
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    command: ["/bin/sh", "-c"]
    args:
      - |
        set -eu
        umask 077
        for f in signing-ed25519.pem signing-ed25519.pub.pem store-data.key; do
          if [ ! -s "/etc/medhelm/keys-secret/$f" ]; then echo "key file $f missing from the Secret" >&2; exit 1; fi
          cat "/etc/medhelm/keys-secret/$f" > "/run/medhelm/keys/$f"
          chmod 0400 "/run/medhelm/keys/$f"
        done
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- toYaml .Values.initResources | nindent 6 }}
    volumeMounts:
      - {name: keys-secret, mountPath: /etc/medhelm/keys-secret, readOnly: true}
      - {name: keys, mountPath: /run/medhelm/keys}
  {{- end }}
  # Create the home layout on the PVC (idempotent: existing files are kept).
  - name: init-home
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    command: ["medhelm-local", "--actor", {{ .Values.runner.actor | quote }}, "init"]
    env:
      {{- include "medhelm.runnerEnv" . | nindent 6 }}
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- toYaml .Values.initResources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" false) | nindent 6 }}
containers:
  {{- if $toolbox }}
  # Operator shell for maintenance (audit verify, backups, key rotation): kubectl exec into it.
  - name: toolbox
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    command: ["sleep", "infinity"]
    env:
      {{- include "medhelm.runnerEnv" . | nindent 6 }}
      - {name: MEDHELM_ACTOR, value: {{ .Values.toolbox.actor | quote }}}
    readinessProbe:
      exec: {command: ["medhelm-local", "doctor", "--json"]}
      periodSeconds: 60
      timeoutSeconds: 30
    livenessProbe:
      exec: {command: ["medhelm-local", "--version"]}
      periodSeconds: 60
      timeoutSeconds: 30
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- toYaml .Values.toolbox.resources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" true) | nindent 6 }}
  {{- else }}
  - name: runner
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    command: ["medhelm-local"]
    args:
      - "--actor"
      - {{ .Values.runner.actor | quote }}
      - "run"
      - "--model"
      - {{ .Values.runner.model | quote }}
      - "--benchmarks"
      - {{ join "," .Values.runner.benchmarks | quote }}
      {{- if not (kindIs "invalid" .Values.runner.maxInstances) }}
      - "--max-instances"
      - {{ .Values.runner.maxInstances | int | quote }}
      {{- end }}
      {{- if gt (int .Values.runner.shards) 1 }}
      - "--shard"
      - {{ printf "$(JOB_COMPLETION_INDEX)/%d" (int .Values.runner.shards) | quote }}
      {{- end }}
      - "--json"
      {{- range .Values.runner.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      {{- include "medhelm.runnerEnv" . | nindent 6 }}
      {{- if gt (int .Values.runner.shards) 1 }}
      - name: JOB_COMPLETION_INDEX
        valueFrom:
          fieldRef:
            fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
      {{- end }}
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- toYaml .Values.runner.resources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" false) | nindent 6 }}
  {{- end }}
volumes:
  - name: home
    persistentVolumeClaim:
      claimName: {{ include "medhelm.homeClaim" . }}
  - name: audit
    persistentVolumeClaim:
      claimName: {{ include "medhelm.auditClaim" . }}
  - name: config
    configMap:
      name: {{ include "medhelm.fullname" . }}-appliance
      defaultMode: 0444
  - name: vllm-api-key
    secret:
      secretName: {{ include "medhelm.vllmApiKeySecret" . }}
      defaultMode: 0440
      items:
        - {key: {{ .Values.vllmApiKey.secretKey }}, path: api-key}
  - name: tmp
    emptyDir:
      sizeLimit: 2Gi
  {{- if $secretKeys }}
  - name: keys-secret
    secret:
      secretName: {{ include "medhelm.keysSecret" . }}
      defaultMode: 0400
  - name: keys
    emptyDir:
      medium: Memory
      sizeLimit: 1Mi
  {{- end }}
{{- with .Values.runner.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.runner.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.runner.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "medhelm.runnerEnv" -}}
- {name: MEDHELM_HOME, value: /var/lib/medhelm}
- {name: MEDHELM_CONFIG, value: /etc/medhelm/appliance.yaml}
{{- if ne .Values.keys.mode "home" }}
- {name: MEDHELM_KEYS_DIR, value: /run/medhelm/keys}
{{- end }}
- {name: HOME, value: /var/lib/medhelm}
- {name: TMPDIR, value: /tmp}
- {name: VLLM_NO_USAGE_STATS, value: "1"}
- {name: DO_NOT_TRACK, value: "1"}
- {name: HF_HUB_OFFLINE, value: "1"}
- {name: TRANSFORMERS_OFFLINE, value: "1"}
- {name: HF_DATASETS_OFFLINE, value: "1"}
{{- end -}}

{{- define "medhelm.runnerVolumeMounts" -}}
{{- $keysWritable := .keysWritable -}}
{{- with .root -}}
- {name: home, mountPath: /var/lib/medhelm}
- {name: audit, mountPath: /var/lib/medhelm-audit}
- {name: config, mountPath: /etc/medhelm/appliance.yaml, subPath: appliance.yaml, readOnly: true}
- {name: vllm-api-key, mountPath: /etc/medhelm/vllm, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if ne .Values.keys.mode "home" }}
- {name: keys, mountPath: /run/medhelm/keys, readOnly: {{ not $keysWritable }}}
{{- end }}
{{- end }}
{{- end -}}
