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

{{/* Security contexts: Pod Security "restricted". With openshift.enabled the UID, GID and fsGroup are left
     to the namespace's SCC (restricted-v2 assigns them from the namespace's range and refuses fixed ones). */}}
{{- define "medhelm.podSecurityContext" -}}
runAsNonRoot: true
{{- if not .Values.openshift.enabled }}
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "medhelm.containerSecurityContext" -}}
runAsNonRoot: true
{{- if not .Values.openshift.enabled }}
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
{{- end }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Sizes: "<n>Mi" or "<n>Gi" (the schema allows nothing else) as a number of MiB. */}}
{{- define "medhelm.mib" -}}
{{- if hasSuffix "Gi" . -}}
{{- mul (int (trimSuffix "Gi" .)) 1024 -}}
{{- else -}}
{{- int (trimSuffix "Mi" .) -}}
{{- end -}}
{{- end -}}

{{/* An ephemeral-storage limit that holds the pod's disk-backed scratch volumes plus logs and the writable
     layer: the kubelet evicts a pod whose emptyDirs and containers together exceed its limits.
     Argument: a list of sizes ("20Gi", "512Mi"). */}}
{{- define "medhelm.ephemeralLimit" -}}
{{- $total := 512 -}}
{{- range . -}}
{{- $total = add $total (include "medhelm.mib" . | int) -}}
{{- end -}}
{{- printf "%dMi" (int $total) -}}
{{- end -}}

{{/* Pod-level settings a site adapts (runtimeClassName, priorityClassName, nodeSelector, tolerations,
     affinity, topology spread). Argument: the settings dict, and an optional extra required pod-affinity
     term (co-location with the pods sharing a ReadWriteOnce volume). */}}
{{- define "medhelm.podPlacement" -}}
{{- $s := .settings -}}
{{- with $s.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with $s.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $s.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $s.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $affinity := deepCopy (default (dict) $s.affinity) -}}
{{- if .colocate -}}
{{- $podAffinity := default (dict) $affinity.podAffinity -}}
{{- $required := default (list) $podAffinity.requiredDuringSchedulingIgnoredDuringExecution -}}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append $required .colocate) -}}
{{- $_ := set $affinity "podAffinity" $podAffinity -}}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $s.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pods that mount the home and audit volumes carry this label; while either volume is ReadWriteOnce they
     must share a node (a second node cannot attach it: Multi-Attach error). */}}
{{- define "medhelm.homeUserLabel" -}}
medhelm.local/home-volume: {{ include "medhelm.homeClaim" . | trunc 63 | trimSuffix "-" | quote }}
{{- end -}}

{{- define "medhelm.homeIsRWO" -}}
{{- if or (has "ReadWriteOnce" .Values.persistence.home.accessModes) (has "ReadWriteOnce" .Values.persistence.audit.accessModes) -}}
true
{{- end -}}
{{- end -}}

{{/* The required pod-affinity term that keeps every pod mounting the home on one node (RWO), or nothing. */}}
{{- define "medhelm.homeColocation" -}}
{{- if include "medhelm.homeIsRWO" . -}}
{{- $labels := dict "medhelm.local/home-volume" (include "medhelm.homeClaim" . | trunc 63 | trimSuffix "-") "app.kubernetes.io/instance" .Release.Name -}}
{{- toJson (dict "labelSelector" (dict "matchLabels" $labels) "topologyKey" "kubernetes.io/hostname") -}}
{{- end -}}
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

{{/* DNS-1035 label for a model's StatefulSet and its headless Service: <fullname>-vllm-<model>. At most 52
     characters: the StatefulSet controller appends "-<ordinal>" to pod names and a revision hash to a label. */}}
{{- define "medhelm.serverName" -}}
{{- $model := .name | lower | replace "." "-" | replace "_" "-" -}}
{{- printf "%s-vllm-%s" (include "medhelm.fullname" .root) $model | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The Service name (all ready replicas), for people and NOTES. */}}
{{- define "medhelm.serverURL" -}}
{{- printf "http://%s.%s.svc.%s:%d/v1" (include "medhelm.serverName" .) .root.Release.Namespace .root.Values.clusterDomain (int .root.Values.vllm.port) -}}
{{- end -}}

{{/* One URL per replica (the StatefulSet's stable pod names under its headless Service), so the runner
     balances across replicas itself and records which replica answered. Argument: dict name, replicas, root. */}}
{{- define "medhelm.replicaURLs" -}}
{{- $server := include "medhelm.serverName" . -}}
{{- $urls := list -}}
{{- range $i := until (int .replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc.%s:%d/v1" $server $i $server $.root.Release.Namespace $.root.Values.clusterDomain (int $.root.Values.vllm.port)) -}}
{{- end -}}
{{- toJson $urls -}}
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

{{- /* A model's or judge's GPUs per replica, as JSON: its gpu map over the defaults (one nvidia.com/gpu). */ -}}
{{- define "medhelm.gpu" -}}
{{- mergeOverwrite (dict "count" 1 "resource" "nvidia.com/gpu") (default (dict) .gpu) | toJson -}}
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
{{- range $arg := .Values.vllm.extraArgs -}}
{{- if include "medhelm.accessLogFlag" $arg -}}
{{- fail (printf "vllm.extraArgs %q turns uvicorn's access log back on (a line per request with the client address and path), which the chart turns off on every server with --disable-uvicorn-access-log: remove it" $arg) -}}
{{- end -}}
{{- with include "medhelm.parallelFlag" $arg -}}
{{- fail (printf "vllm.extraArgs %q sets the %s of every model, which the chart passes itself and checks each model's gpu.count against: remove it and set %s on the models and judges" $arg . .) -}}
{{- end -}}
{{- if include "medhelm.servedNameFlag" $arg -}}
{{- fail (printf "vllm.extraArgs %q sets the name every server serves its model under, which the chart passes itself (each model's servedModel, default its name) and writes into appliance.yaml as the name the runner asks for and checks replies against: remove it and set servedModel on the models and judges" $arg) -}}
{{- end -}}
{{- end -}}
{{- $servers := list -}}
{{- range (concat .Values.models .Values.judges) -}}
{{- $server := include "medhelm.serverName" (dict "name" .name "root" $) -}}
{{- if has $server $servers -}}
{{- fail (printf "model %q maps to the same Deployment/Service name %q as another model; shorten or rename it" .name $server) -}}
{{- end -}}
{{- $servers = append $servers $server -}}
{{- end -}}
{{- if and .Values.runner.model (not (has .Values.runner.model $names)) -}}
{{- fail (printf "runner.model %q is not one of the configured models %v" .Values.runner.model $names) -}}
{{- end -}}
{{- if and .Values.runner.model (not .Values.runner.benchmarks) (not .Values.runner.command) -}}
{{- fail "runner.model is set but runner.benchmarks is empty: name the benchmarks to evaluate (or give runner.command)" -}}
{{- end -}}
{{- range (concat .Values.models .Values.judges) -}}
{{- if eq (int (ternary .replicas 1 (hasKey . "replicas"))) 0 -}}
{{- if eq .name $.Values.runner.model -}}
{{- fail (printf "runner.model %q has replicas: 0: nothing would answer its requests" .name) -}}
{{- end -}}
{{- end -}}
{{- /* The parallel sizes come from the values alone: one in extraArgs comes after the chart's and wins in vLLM,
     unseen by the GPU check below. */ -}}
{{- $model := .name -}}
{{- range $arg := (default (list) .extraArgs) -}}
{{- if include "medhelm.accessLogFlag" $arg -}}
{{- fail (printf "model %q: extraArgs %q turns uvicorn's access log back on (a line per request with the client address and path), which the chart turns off on every server with --disable-uvicorn-access-log: remove it" $model $arg) -}}
{{- end -}}
{{- with include "medhelm.parallelFlag" $arg -}}
{{- fail (printf "model %q: extraArgs %q sets the %s vLLM runs with, which the chart passes itself and checks gpu.count against: remove it and set %s on the model" $model $arg . .) -}}
{{- end -}}
{{- if include "medhelm.servedNameFlag" $arg -}}
{{- fail (printf "model %q: extraArgs %q sets the name vLLM serves the model under, which the chart passes itself (servedModel, default the model's name) and writes into appliance.yaml as the name the runner asks for and checks replies against (vLLM keeps the last one given, so every request would get 404 or name another model): remove it and set servedModel" $model $arg) -}}
{{- end -}}
{{- end -}}
{{- /* vLLM runs one worker per GPU: tensorParallelSize x pipelineParallelSize x dataParallelSize of them per replica.
     Fewer GPUs than workers never starts; more are held by the pod and never used. */ -}}
{{- $gpu := include "medhelm.gpu" . | fromJson -}}
{{- $gpus := int $gpu.count -}}
{{- $tp := int (default 1 .tensorParallelSize) -}}
{{- $pp := int (default 1 .pipelineParallelSize) -}}
{{- $dp := int (default 1 .dataParallelSize) -}}
{{- $workers := mul $tp $pp $dp -}}
{{- $sizes := printf "tensorParallelSize %d x pipelineParallelSize %d x dataParallelSize %d" $tp $pp $dp -}}
{{- if gt $workers $gpus -}}
{{- fail (printf "model %q: %s needs %d GPUs per replica, but gpu.count is %d: vLLM would fail at start (one worker per GPU); set gpu.count: %d, or parallel sizes whose product is %d" .name $sizes $workers $gpus $workers $gpus) -}}
{{- else if lt $workers $gpus -}}
{{- fail (printf "model %q: gpu.count is %d, but %s uses %d GPUs per replica: the pod would hold %d GPUs vLLM never uses; set gpu.count: %d, or parallel sizes whose product is %d (tensorParallelSize and pipelineParallelSize split the model over GPUs, dataParallelSize serves copies of it)" .name $gpus $sizes $workers (sub $gpus $workers) $workers $gpus) -}}
{{- end -}}
{{- /* The GPU limit is gpu.count's: one written under resources would be replaced without a word. */ -}}
{{- $resource := $gpu.resource -}}
{{- $limit := dig "resources" "limits" $resource (dig "resources" "limits" $resource nil $.Values.vllm) . -}}
{{- if and (not (kindIs "invalid" $limit)) (ne (int $limit) $gpus) -}}
{{- fail (printf "model %q: resources.limits.%s is %v (its own, or vllm.resources') but gpu.count is %d; the pod gets gpu.count GPUs: set gpu.count, not the limit" .name $resource $limit $gpus) -}}
{{- end -}}
{{- end -}}
{{- /* One pinned audit key: the pods read only one of these, so a second one given would be ignored unseen. */ -}}
{{- $pins := list -}}
{{- range $field := list "fingerprint" "existingConfigMap" "existingSecret" -}}
{{- if get $.Values.auditKey $field -}}
{{- $pins = append $pins (printf "auditKey.%s" $field) -}}
{{- end -}}
{{- end -}}
{{- if gt (len $pins) 1 -}}
{{- fail (printf "%s are all set, but the pods read the audit key's fingerprint from one place: set only one of auditKey.fingerprint, auditKey.existingConfigMap or auditKey.existingSecret" (join " and " $pins)) -}}
{{- end -}}
{{- /* A public key file pinned through runner.extraEnv anchors the audit trail only where the appliance cannot
     write it: a read-only mount, never the home, audit, keys or scratch volumes. */ -}}
{{- range (default (list) .Values.runner.extraEnv) -}}
{{- if eq .name "MEDHELM_AUDIT_PUBKEY_FILE" -}}
{{- $path := default "" .value -}}
{{- $writable := `^/(var/lib/medhelm|var/lib/medhelm-audit|var/lib/medhelm-incoming|run/medhelm|tmp)(/|$)` -}}
{{- if or (not (hasPrefix "/" $path)) (contains "/.." $path) (regexMatch $writable $path) -}}
{{- fail "runner.extraEnv MEDHELM_AUDIT_PUBKEY_FILE must be a literal absolute path (value, no \"..\") on a read-only mount (runner.extraVolumes, e.g. a ConfigMap): not on the home, audit, keys, incoming or /tmp volumes, which the appliance writes, so a key there anchors nothing" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.console.ingress.enabled (not .Values.console.enabled) -}}
{{- fail "console.ingress.enabled is true but console.enabled is false: the chart renders no console and so no Ingress for it; set console.enabled: true (and its OIDC settings), or console.ingress.enabled: false" -}}
{{- end -}}
{{- if and .Values.runner.command .Values.runner.extraArgs -}}
{{- fail "runner.extraArgs is added to the run command the chart builds; with runner.command it would be ignored: put those arguments in runner.command" -}}
{{- end -}}
{{- if and (eq .Values.keys.mode "existingSecret") (not .Values.keys.existingSecret) -}}
{{- fail "keys.mode=existingSecret needs keys.existingSecret" -}}
{{- end -}}
{{- if and (eq .Values.keys.mode "secret") (or (not .Values.keys.signingKey) (not .Values.keys.signingPublicKey) (not .Values.keys.storeDataKey)) -}}
{{- fail "keys.mode=secret needs keys.signingKey, keys.signingPublicKey and keys.storeDataKey" -}}
{{- end -}}
{{- /* Key values another mode would ignore: the pods would run on keys the site never made (mode home: `init`
     generates them on the home volume), not on the Secret or values it gave. */ -}}
{{- if and .Values.keys.existingSecret (ne .Values.keys.mode "existingSecret") -}}
{{- fail (printf "keys.existingSecret %q is set but keys.mode is %q, which does not read it (mode home: `medhelm-local init` would generate new keys on the home volume): set keys.mode: existingSecret" .Values.keys.existingSecret .Values.keys.mode) -}}
{{- end -}}
{{- if and (ne .Values.keys.mode "secret") (or .Values.keys.signingKey .Values.keys.signingPublicKey .Values.keys.storeDataKey) -}}
{{- fail (printf "keys.signingKey, keys.signingPublicKey and keys.storeDataKey are read only in keys.mode: secret, not %q: remove them from the values (Helm keeps every value, private keys included, in its release history; deploy/RUNBOOK.md, Key rotation)" .Values.keys.mode) -}}
{{- end -}}
{{- /* vllmApiKey.value beside existingSecret is never used (the pods read the Secret), yet Helm keeps it in every
     release-history Secret: a key the site believes it moved out of the values. */ -}}
{{- if and .Values.vllmApiKey.existingSecret .Values.vllmApiKey.value -}}
{{- fail (printf "vllmApiKey.value is set but vllmApiKey.existingSecret %q is what the pods read: remove vllmApiKey.value from the values (Helm keeps every value in its release history)" .Values.vllmApiKey.existingSecret) -}}
{{- end -}}
{{- if and (gt (int .Values.runner.shards) 1) (gt (int .Values.runner.parallelism) 1) -}}
{{- range $volume := list "home" "audit" -}}
{{- $modes := (get $.Values.persistence $volume).accessModes -}}
{{- if not (has "ReadWriteMany" $modes) -}}
{{- fail (printf "runner.shards > 1 with runner.parallelism > 1 needs persistence.%s.accessModes [ReadWriteMany]: every shard mounts the %s volume and shards run on different nodes (a ReadWriteOnce volume attaches to one node: Multi-Attach error). With an existingClaim, set accessModes to the claim's own modes" $volume $volume) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Every URL appliance.yaml gets must be on its allowlist: the appliance refuses any other before connecting, so
     a run (and its wait-for-models) would fail on every request. A clusterDomain other than cluster.local is how
     the chart's own servers fall off the default allowlist. */ -}}
{{- range (concat .Values.models .Values.judges) -}}
{{- $replicas := int (ternary .replicas 1 (hasKey . "replicas")) -}}
{{- if gt $replicas 0 -}}
{{- $url := index (include "medhelm.replicaURLs" (dict "name" .name "replicas" 1 "root" $) | fromJsonArray) 0 -}}
{{- if not (include "medhelm.urlAllowed" (dict "url" $url "allowlist" $.Values.appliance.allowlist)) -}}
{{- fail (printf "model %q: its servers' URLs (%s) are not on appliance.allowlist, so the appliance would refuse every request to them before connecting; add an entry such as \"http://*.svc.%s\" (clusterDomain is %q)" .name $url $.Values.clusterDomain $.Values.clusterDomain) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.appliance.extraModels -}}
{{- $model := .name -}}
{{- range $url := .base_urls -}}
{{- if not (include "medhelm.urlAllowed" (dict "url" $url "allowlist" $.Values.appliance.allowlist)) -}}
{{- fail (printf "appliance.extraModels %q: base URL %s is not on appliance.allowlist, so the appliance would refuse every request to it before connecting; add its scheme://host[:port] to appliance.allowlist (and a networkPolicy.extraRunnerEgress rule)" $model $url) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The parts of an http(s) URL the allowlist compares, as the appliance reads them (medhelm_local/inference/egress.py):
     {scheme, host (lower case, without IPv6 brackets), port ("" when absent)}. A host pattern keeps its `*`. */}}
{{- define "medhelm.urlParts" -}}
{{- $pattern := `^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^@/?#]*@)?(\[[^\]]*\]|[^:/?#]*)(?::([0-9]*))?(?:[/?#].*)?$` -}}
{{- if regexMatch $pattern . -}}
{{- $host := regexReplaceAll $pattern . "${2}" | lower | trimPrefix "[" | trimSuffix "]" -}}
{{- toJson (dict "scheme" (regexReplaceAll $pattern . "${1}" | lower) "host" $host "port" (regexReplaceAll $pattern . "${3}")) -}}
{{- else -}}
{{- toJson (dict "scheme" "" "host" "" "port" "") -}}
{{- end -}}
{{- end -}}

{{/* "true" when appliance.allowlist allows the URL, as the appliance decides it: same scheme, the entry's port if it
     names one, and the host matching the entry's shell pattern (`*`, `?`). An entry with a `[...]` class is taken
     to allow it: the chart cannot tell, and the appliance still decides at run time. Argument: dict url, allowlist. */}}
{{- define "medhelm.urlAllowed" -}}
{{- $url := include "medhelm.urlParts" .url | fromJson -}}
{{- $allowed := false -}}
{{- if and $url.host (has $url.scheme (list "http" "https")) -}}
{{- range $entry := .allowlist -}}
{{- $e := include "medhelm.urlParts" $entry | fromJson -}}
{{- if and (eq $e.scheme $url.scheme) (or (not $e.port) (eq (int $e.port) (int $url.port))) -}}
{{- if contains "[" $e.host -}}
{{- $allowed = true -}}
{{- else if regexMatch (printf "^%s$" (regexQuoteMeta $e.host | replace "\\*" ".*" | replace "\\?" ".")) $url.host -}}
{{- $allowed = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $allowed }}true{{ end -}}
{{- end -}}

{{/* The value (tensorParallelSize, pipelineParallelSize, dataParallelSize) whose vLLM flag an extra `vllm serve`
     argument sets, as vLLM's parser reads it: underscores as dashes, "=value" attached, an abbreviation (argparse
     takes --pipeline-par for --pipeline-parallel-size) and the short -tp/-pp/-dp, prefixes included; or nothing. */}}
{{- define "medhelm.parallelFlag" -}}
{{- $name := regexReplaceAll "=.*$" . "" | replace "_" "-" -}}
{{- $flags := dict "tensorParallelSize" (list "--tensor-parallel-size" "-tp") "pipelineParallelSize" (list "--pipeline-parallel-size" "-pp") "dataParallelSize" (list "--data-parallel-size" "-dp") -}}
{{- range $value, $spellings := $flags -}}
{{- $long := and (hasPrefix "--" $name) (gt (len $name) 2) (hasPrefix $name (index $spellings 0)) -}}
{{- $short := and (not (hasPrefix "--" $name)) (gt (len $name) 1) (hasPrefix $name (index $spellings 1)) -}}
{{- if or $long $short -}}{{- $value -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when an extra `vllm serve` argument is --no-disable-uvicorn-access-log (vLLM's boolean flags take a
     --no- form), as vLLM's parser reads it: underscores as dashes, "=value" attached, an abbreviation. */}}
{{- define "medhelm.accessLogFlag" -}}
{{- $name := regexReplaceAll "=.*$" . "" | replace "_" "-" -}}
{{- if and (hasPrefix "--no-disable-u" $name) (hasPrefix $name "--no-disable-uvicorn-access-log") -}}true{{- end -}}
{{- end -}}

{{/* "true" when an extra `vllm serve` argument is --served-model-name, as vLLM's parser reads it (underscores as
     dashes, "=value" attached, an abbreviation of at least --ser). The chart serves each model under one name,
     servedModel, and appliance.yaml asks for that name and expects it in the replies (vLLM names the model asked
     for): no reply_model is needed for the chart's servers, and this flag is the only way they could differ. */}}
{{- define "medhelm.servedNameFlag" -}}
{{- $name := regexReplaceAll "=.*$" . "" | replace "_" "-" -}}
{{- if and (hasPrefix "--" $name) (gt (len $name) 4) (hasPrefix $name "--served-model-name") -}}true{{- end -}}
{{- end -}}

{{/* Egress to every model server (NetworkPolicyEgressRule list items, or nothing): the release's own, on the vLLM
     port, and the site's (networkPolicy.extraRunnerEgress: the appliance.extraModels servers). The runner calls
     them and the console's IT page probes each one: both policies take this list, so neither reaches a server the
     other cannot. */}}
{{- define "medhelm.modelServerEgress" -}}
{{- if or .Values.models .Values.judges }}
- to:
    - podSelector:
        matchLabels:
          {{- include "medhelm.selectorLabels" . | nindent 10 }}
          app.kubernetes.io/component: model-server
  ports:
    - {protocol: TCP, port: {{ .Values.vllm.port }}}
{{- end }}
{{- with .Values.networkPolicy.extraRunnerEgress }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Does the appliance talk to any model over HTTP (so a run must wait for it)? */}}
{{- define "medhelm.hasServedModels" -}}
{{- if or .Values.models .Values.judges .Values.appliance.extraModels -}}true{{- end -}}
{{- end -}}

{{/* The runner's command: runner.command verbatim, or `run` built from runner.model / benchmarks. */}}
{{- define "medhelm.runnerCommand" -}}
{{- $cmd := list -}}
{{- if .Values.runner.command -}}
{{- $cmd = .Values.runner.command -}}
{{- else -}}
{{- $cmd = list "medhelm-local" "--actor" .Values.runner.actor "run" "--model" .Values.runner.model "--benchmarks" (join "," .Values.runner.benchmarks) -}}
{{- if not (kindIs "invalid" .Values.runner.maxInstances) -}}
{{- $cmd = concat $cmd (list "--max-instances" (printf "%d" (int .Values.runner.maxInstances))) -}}
{{- end -}}
{{- if gt (int .Values.runner.shards) 1 -}}
{{/* Every shard of one Job shares one run: the Job's own name (a retried pod resumes it). */}}
{{- $cmd = concat $cmd (list "--run-id" "$(MEDHELM_JOB_NAME)" "--shard" (printf "$(JOB_COMPLETION_INDEX)/%d" (int .Values.runner.shards))) -}}
{{- end -}}
{{- $cmd = concat $cmd (list "--json") .Values.runner.extraArgs -}}
{{- end -}}
{{- toJson $cmd -}}
{{- end -}}

{{/* Labels of the runner's and the toolbox's pods. Argument: dict root, component. */}}
{{- define "medhelm.homePodLabels" -}}
{{- with .root -}}
{{ include "medhelm.selectorLabels" . }}
app.kubernetes.io/component: {{ $.component }}
{{ include "medhelm.homeUserLabel" . }}
{{- with .Values.runner.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Runner pod spec, shared by the runner CronJob's Jobs and the toolbox. Argument: dict root, toolbox. ---- */}}
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
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" false "toolbox" false) | nindent 6 }}
  {{- if and (not $toolbox) .Values.runner.waitForModels.enabled (include "medhelm.hasServedModels" .) }}
  # Start the run only when every replica of every model and judge answers /health (vLLM loads large
  # weights for many minutes; an upgrade restarts the servers). Fails the pod after the timeout.
  - name: wait-for-models
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    command: ["medhelm-local", "models", "wait", "--timeout", {{ .Values.runner.waitForModels.timeoutSeconds | int | quote }}]
    env:
      {{- include "medhelm.runnerEnv" . | nindent 6 }}
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- toYaml .Values.initResources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" false "toolbox" false) | nindent 6 }}
  {{- end }}
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
      {{- if .Values.networkPolicy.enabled }}
      # Its NetworkPolicies reach DNS only: `run` and the other commands asking a model or judge server are refused
      # here (exit 2) instead of recording every request failed.
      - {name: MEDHELM_NO_MODEL_EGRESS, value: "1"}
      {{- end }}
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
      {{- $resources := deepCopy .Values.toolbox.resources -}}
      {{- $_ := set $resources "limits" (merge (dict "ephemeral-storage" (include "medhelm.ephemeralLimit" (list .Values.toolbox.tmpSize .Values.toolbox.incomingSize))) (omit (default (dict) $resources.limits) "ephemeral-storage")) }}
      {{- toYaml $resources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" true "toolbox" true) | nindent 6 }}
  {{- else }}
  - name: runner
    image: {{ include "medhelm.image" .Values.image.appliance }}
    imagePullPolicy: {{ .Values.image.appliance.pullPolicy }}
    {{- $cmd := include "medhelm.runnerCommand" . | fromJsonArray }}
    command: [{{ first $cmd | quote }}]
    args:
      {{- range (rest $cmd) }}
      - {{ . | quote }}
      {{- end }}
    env:
      {{- include "medhelm.runnerEnv" . | nindent 6 }}
      - name: MEDHELM_JOB_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.labels['batch.kubernetes.io/job-name']
      {{- if gt (int .Values.runner.shards) 1 }}
      - name: JOB_COMPLETION_INDEX
        valueFrom:
          fieldRef:
            fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
      {{- end }}
    securityContext:
      {{- include "medhelm.containerSecurityContext" . | nindent 6 }}
    resources:
      {{- $resources := deepCopy .Values.runner.resources -}}
      {{- $_ := set $resources "limits" (merge (dict "ephemeral-storage" (include "medhelm.ephemeralLimit" (list .Values.runner.tmpSize))) (omit (default (dict) $resources.limits) "ephemeral-storage")) }}
      {{- toYaml $resources | nindent 6 }}
    volumeMounts:
      {{- include "medhelm.runnerVolumeMounts" (dict "root" . "keysWritable" false "toolbox" false) | nindent 6 }}
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
  - name: export-policy
    configMap:
      name: {{ include "medhelm.exportPolicyConfigMap" . }}
      defaultMode: 0444
      items:
        - {key: {{ .Values.exportPolicy.key | quote }}, path: export-policy.yaml}
  - name: vllm-api-key
    secret:
      secretName: {{ include "medhelm.vllmApiKeySecret" . }}
      defaultMode: 0440
      items:
        - {key: {{ .Values.vllmApiKey.secretKey }}, path: api-key}
  - name: tmp
    emptyDir:
      sizeLimit: {{ ternary .Values.toolbox.tmpSize .Values.runner.tmpSize $toolbox }}
  {{- if $toolbox }}
  # Raw extracts staged for `datasets register`: never on the home volume (so never in its backups or
  # snapshots), gone when the pod goes; deploy/AIRGAP.md deletes each file once it is registered.
  - name: incoming
    emptyDir:
      sizeLimit: {{ .Values.toolbox.incomingSize }}
  {{- end }}
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
  {{- with include "medhelm.extraVolumes" . }}
  {{- . | nindent 2 }}
  {{- end }}
{{- $colocate := include "medhelm.homeColocation" . }}
{{- $term := dict }}
{{- if $colocate }}{{ $term = fromJson $colocate }}{{ end }}
{{- include "medhelm.podPlacement" (dict "settings" .Values.runner "colocate" $term) }}
{{- end -}}
{{- end -}}

{{- define "medhelm.exportPolicyConfigMap" -}}
{{- default (printf "%s-export-policy" (include "medhelm.fullname" .)) .Values.exportPolicy.existingConfigMap -}}
{{- end -}}

{{- define "medhelm.runnerEnv" -}}
- {name: MEDHELM_HOME, value: /var/lib/medhelm}
- {name: MEDHELM_CONFIG, value: /etc/medhelm/appliance.yaml}
{{- if ne .Values.keys.mode "home" }}
- {name: MEDHELM_KEYS_DIR, value: /run/medhelm/keys}
{{- end }}
# Writers wait this long for another process's lock on the store instead of failing at once.
- {name: MEDHELM_LOCK_TIMEOUT_S, value: {{ .Values.appliance.store.lockTimeoutS | int | quote }}}
# The export policy and the pinned audit key come from ConfigMaps/Secrets mounted read-only: the appliance
# (and anyone who can only run its CLI) cannot change them.
- {name: MEDHELM_EXPORT_POLICY, value: /etc/medhelm/policy/export-policy.yaml}
{{- with .Values.auditKey }}
{{- if .existingSecret }}
- name: MEDHELM_AUDIT_KEY_FINGERPRINT
  valueFrom:
    secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .key | quote }}}
{{- else if or .existingConfigMap .fingerprint }}
- name: MEDHELM_AUDIT_KEY_FINGERPRINT
  valueFrom:
    configMapKeyRef: {name: {{ default (printf "%s-audit-key" (include "medhelm.fullname" $)) .existingConfigMap | quote }}, key: {{ .key | quote }}}
{{- end }}
{{- end }}
# Hints to resume a run name a Job from this CronJob (deploy/RUNBOOK.md, Runs), not a command typed here.
- {name: MEDHELM_RUNNER_CRONJOB, value: {{ printf "%s-runner" (include "medhelm.fullname" .) | quote }}}
- {name: HOME, value: /var/lib/medhelm}
- {name: TMPDIR, value: /tmp}
- {name: VLLM_NO_USAGE_STATS, value: "1"}
- {name: DO_NOT_TRACK, value: "1"}
- {name: HF_HUB_OFFLINE, value: "1"}
- {name: TRANSFORMERS_OFFLINE, value: "1"}
- {name: HF_DATASETS_OFFLINE, value: "1"}
{{- with .Values.runner.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* runner.extraVolumes: the site's own volumes (a CA bundle, an extraModels key, an extract share), in every pod
     that runs the appliance (runner, toolbox, console): they share runner.extraEnv and appliance.yaml, which may
     name files on these volumes. */}}
{{- define "medhelm.extraVolumes" -}}
{{- with .Values.runner.extraVolumes -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* The appliance containers' mounts (runner, toolbox, console, and the runner's init containers), with
     runner.extraVolumeMounts. Argument: dict root, keysWritable, toolbox. */}}
{{- define "medhelm.runnerVolumeMounts" -}}
{{- $keysWritable := .keysWritable -}}
{{- $toolbox := .toolbox -}}
{{- with .root -}}
- {name: home, mountPath: /var/lib/medhelm}
- {name: audit, mountPath: /var/lib/medhelm-audit}
- {name: config, mountPath: /etc/medhelm/appliance.yaml, subPath: appliance.yaml, readOnly: true}
- {name: export-policy, mountPath: /etc/medhelm/policy, readOnly: true}
- {name: vllm-api-key, mountPath: /etc/medhelm/vllm, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if $toolbox }}
- {name: incoming, mountPath: /var/lib/medhelm-incoming}
{{- end }}
{{- if ne .Values.keys.mode "home" }}
- {name: keys, mountPath: /run/medhelm/keys, readOnly: {{ not $keysWritable }}}
{{- end }}
{{- with .Values.runner.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* checkov suppressions, each with its reason (tests/deploy checks that only these appear). Argument: dict
     root, oneShot (a `helm test` pod: no probes). */}}
{{- define "medhelm.checkovSkips" -}}
{{- $skips := list -}}
{{- if .oneShot -}}
{{- $skips = append $skips "CKV_K8S_8=a helm test pod runs one command and exits: a liveness probe has nothing to watch" -}}
{{- $skips = append $skips "CKV_K8S_9=a helm test pod serves nothing: readiness has no meaning for it" -}}
{{- end -}}
{{- if .root.Values.openshift.enabled -}}
{{- $skips = append $skips "CKV_K8S_40=OpenShift restricted-v2 assigns a UID from the namespace range (1000000000 and up) and refuses a fixed one" -}}
{{- end -}}
{{- range $i, $skip := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $skip | quote }}
{{- end }}
{{- end -}}
