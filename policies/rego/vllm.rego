# Rules for the vLLM model servers: no prompt logging, no telemetry, verified weights, probes sized for
# slow loads, shared memory in RAM. Query: data.medhelm.kubernetes.vllm.deny
package medhelm.kubernetes.vllm

import rego.v1

import data.medhelm.lib

required_env := {
	"VLLM_NO_USAGE_STATS": "1",
	"DO_NOT_TRACK": "1",
	"HF_HUB_OFFLINE": "1",
	"TRANSFORMERS_OFFLINE": "1",
}

# Flags that would write prompts or outputs to logs, put the API key in argv (visible in `ps` and events), or read
# any other flag from a file. They are read as vLLM's parser reads them: underscores as dashes, and an abbreviation
# (argparse takes --enable-log-req for --enable-log-requests), as medhelm_local.inference.vllm.forbidden_arg does.
forbidden_flags := {"--enable-log-requests", "--enable-log-outputs", "--api-key", "--config"}

vllm_containers contains [obj, spec, c] if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some c in object.get(spec, "containers", [])
	argv := array.concat(object.get(c, "command", []), object.get(c, "args", []))
	some i, word in argv
	endswith(word, "vllm")
	argv[i + 1] == "serve"
}

deny contains msg if {
	some [obj, _, c] in vllm_containers
	argv := array.concat(object.get(c, "command", []), object.get(c, "args", []))
	some word in argv
	flag := split(word, "=")[0]
	name := replace(flag, "_", "-")
	startswith(name, "--")
	count(name) > 2
	some forbidden in forbidden_flags
	startswith(forbidden, name)
	msg := sprintf("%s: container %s: flag %s is not allowed", [lib.id(obj), c.name, flag])
}

deny contains msg if {
	some [obj, _, c] in vllm_containers
	some name, value in required_env
	not env_value(c, name) == value
	msg := sprintf("%s: container %s: env %s must be %s", [lib.id(obj), c.name, name, value])
}

env_value(c, name) := e.value if {
	some e in object.get(c, "env", [])
	e.name == name
}

deny contains msg if {
	some [obj, _, c] in vllm_containers
	not api_key_from_secret(c)
	msg := sprintf("%s: container %s: VLLM_API_KEY must come from a Secret", [lib.id(obj), c.name])
}

api_key_from_secret(c) if {
	some e in object.get(c, "env", [])
	e.name == "VLLM_API_KEY"
	e.valueFrom.secretKeyRef.name
}

deny contains msg if {
	some [obj, _, c] in vllm_containers
	some probe in ["startupProbe", "readinessProbe", "livenessProbe"]
	not object.get(c, [probe, "httpGet", "path"], "") == "/health"
	msg := sprintf("%s: container %s: %s must be an HTTP GET on /health", [lib.id(obj), c.name, probe])
}

# Slow model loads: the startup probe must allow at least 10 minutes.
deny contains msg if {
	some [obj, _, c] in vllm_containers
	p := c.startupProbe
	object.get(p, "periodSeconds", 10) * object.get(p, "failureThreshold", 3) < 600
	msg := sprintf("%s: container %s: startupProbe allows less than 600 s for the model to load", [lib.id(obj), c.name])
}

deny contains msg if {
	some [obj, spec, c] in vllm_containers
	not verifies_weights(spec)
	msg := sprintf("%s: no verify-weights init container checks the weights against a sha256 manifest", [lib.id(obj)])
}

verifies_weights(spec) if {
	some ic in object.get(spec, "initContainers", [])
	ic.name == "verify-weights"
	some e in ic.env
	e.name == "WEIGHTS_MANIFEST"
}

deny contains msg if {
	some [obj, spec, c] in vllm_containers
	not shm_in_memory(spec, c)
	msg := sprintf("%s: container %s: /dev/shm must be an emptyDir with medium Memory", [lib.id(obj), c.name])
}

shm_in_memory(spec, c) if {
	some m in c.volumeMounts
	m.mountPath == "/dev/shm"
	some v in spec.volumes
	v.name == m.name
	v.emptyDir.medium == "Memory"
}

deny contains msg if {
	some [obj, spec, c] in vllm_containers
	some v in spec.volumes
	v.persistentVolumeClaim
	not v.persistentVolumeClaim.readOnly == true
	msg := sprintf("%s: volume %s: model weights must be mounted read-only", [lib.id(obj), v.name])
}
