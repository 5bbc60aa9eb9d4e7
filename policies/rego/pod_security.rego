# Pod Security "restricted" plus the appliance's own rules, on every pod spec of every workload.
# Query: data.medhelm.kubernetes.pod_security.deny (a set of messages; empty means compliant).
package medhelm.kubernetes.pod_security

import rego.v1

import data.medhelm.lib

allowed_volume_types := {
	"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
	"persistentVolumeClaim", "projected", "secret",
}

# Effective container setting: the container's own securityContext wins over the pod's.
effective(spec, c, key) := c.securityContext[key]

effective(spec, c, key) := spec.securityContext[key] if {
	not has_key(object.get(c, "securityContext", {}), key)
}

has_key(obj, key) if {
	_ = obj[key]
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not effective(spec, entry.c, "runAsNonRoot") == true
	msg := sprintf("%s: container %s: runAsNonRoot must be true", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	effective(spec, entry.c, "runAsUser") == 0
	msg := sprintf("%s: container %s: runAsUser must not be 0", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	profile := object.get(effective(spec, entry.c, "seccompProfile"), "type", "")
	not profile in {"RuntimeDefault", "Localhost"}
	msg := sprintf("%s: container %s: seccompProfile.type must be RuntimeDefault or Localhost", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not effective(spec, entry.c, "seccompProfile")
	msg := sprintf("%s: container %s: seccompProfile is not set", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not entry.c.securityContext.allowPrivilegeEscalation == false
	msg := sprintf("%s: container %s: allowPrivilegeEscalation must be false", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	entry.c.securityContext.privileged == true
	msg := sprintf("%s: container %s: privileged is not allowed", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not "ALL" in object.get(entry.c, ["securityContext", "capabilities", "drop"], [])
	msg := sprintf("%s: container %s: capabilities must drop ALL", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	count(object.get(entry.c, ["securityContext", "capabilities", "add"], [])) > 0
	msg := sprintf("%s: container %s: no capability may be added", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not entry.c.securityContext.readOnlyRootFilesystem == true
	msg := sprintf("%s: container %s: readOnlyRootFilesystem must be true", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some field in ["hostNetwork", "hostPID", "hostIPC"]
	spec[field] == true
	msg := sprintf("%s: %s is not allowed", [lib.id(obj), field])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	some port in object.get(entry.c, "ports", [])
	object.get(port, "hostPort", 0) != 0
	msg := sprintf("%s: container %s: hostPort is not allowed", [lib.id(obj), entry.c.name])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some volume in object.get(spec, "volumes", [])
	some t, _ in volume
	t != "name"
	not t in allowed_volume_types
	msg := sprintf("%s: volume %s: type %s is not allowed", [lib.id(obj), volume.name, t])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	not spec.automountServiceAccountToken == false
	msg := sprintf("%s: automountServiceAccountToken must be false", [lib.id(obj)])
}

deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not entry.c.resources.limits.memory
	msg := sprintf("%s: container %s: a memory limit is required", [lib.id(obj), entry.c.name])
}

# Image references: a tag other than latest, or a digest.
deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	not pinned(entry.c.image)
	msg := sprintf("%s: container %s: image %s needs a version tag or a digest (never latest)", [lib.id(obj), entry.c.name, entry.c.image])
}

pinned(image) if contains(image, "@sha256:")

pinned(image) if {
	not contains(image, "@")
	parts := split(image, "/")
	last := parts[count(parts) - 1]
	contains(last, ":")
	not endswith(last, ":latest")
}

# Scratch space: a read-only root filesystem needs writable /tmp from an emptyDir.
deny contains msg if {
	some obj in lib.workloads
	spec := lib.pod_spec(obj)
	some entry in lib.containers(spec)
	entry.type == "containers"
	not mounts_emptydir_at(spec, entry.c, "/tmp")
	msg := sprintf("%s: container %s: /tmp must be an emptyDir", [lib.id(obj), entry.c.name])
}

mounts_emptydir_at(spec, c, path) if {
	some m in object.get(c, "volumeMounts", [])
	m.mountPath == path
	some v in spec.volumes
	v.name == m.name
	v.emptyDir
}
