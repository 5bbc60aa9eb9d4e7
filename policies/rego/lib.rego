# Shared helpers: find pod specs in any workload kind. Input: {"manifests": [<Kubernetes objects>]}.
package medhelm.lib

import rego.v1

# Pod template path of each workload kind.
pod_spec(obj) := obj.spec if obj.kind == "Pod"

pod_spec(obj) := obj.spec.template.spec if obj.kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}

pod_spec(obj) := obj.spec.jobTemplate.spec.template.spec if obj.kind == "CronJob"

pod_labels(obj) := object.get(obj, ["metadata", "labels"], {}) if obj.kind == "Pod"

pod_labels(obj) := object.get(obj, ["spec", "template", "metadata", "labels"], {}) if {
	obj.kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
}

pod_labels(obj) := object.get(obj, ["spec", "jobTemplate", "spec", "template", "metadata", "labels"], {}) if {
	obj.kind == "CronJob"
}

workloads contains obj if {
	some obj in input.manifests
	pod_spec(obj)
}

# Every container of a pod spec, with its kind of container.
containers(spec) := [{"type": t, "c": c} |
	some t in ["initContainers", "containers", "ephemeralContainers"]
	some c in object.get(spec, t, [])
]

id(obj) := sprintf("%s/%s", [obj.kind, object.get(obj, ["metadata", "name"], "<unnamed>")])

# matchLabels of a selector all present in labels.
selects(selector, labels) if {
	not mismatch(selector, labels)
}

mismatch(selector, labels) if {
	some k, v in object.get(selector, "matchLabels", {})
	not labels[k] == v
}
