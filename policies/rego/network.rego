# Network isolation of a release: default deny for ingress and egress, then only DNS and
# runner -> model servers (the release's, or a site's server named by its pods or its one address); the web console (component "console") is reachable only from the ingress controller
# and may call the model servers the runner may (a rule of the runner's own) and, over HTTPS only, the identity provider.
# Query: data.medhelm.kubernetes.network.deny
package medhelm.kubernetes.network

import rego.v1

import data.medhelm.lib

policies := [p | some p in input.manifests; p.kind == "NetworkPolicy"]

# A default-deny policy: both policy types, no rules at all.
default_deny_policies := [p |
	some p in policies
	{"Ingress", "Egress"} == {t | some t in p.spec.policyTypes}
	count(object.get(p.spec, "ingress", [])) == 0
	count(object.get(p.spec, "egress", [])) == 0
]

deny contains "no default-deny NetworkPolicy (policyTypes Ingress and Egress, no rules)" if {
	count(default_deny_policies) == 0
}

# Every workload's pods must be selected by a default-deny policy.
deny contains msg if {
	count(default_deny_policies) > 0
	some obj in lib.workloads
	labels := lib.pod_labels(obj)
	not covered(labels)
	msg := sprintf("%s: its pods are not selected by a default-deny NetworkPolicy", [lib.id(obj)])
}

covered(labels) if {
	some p in default_deny_policies
	lib.selects(p.spec.podSelector, labels)
}

# DNS: port 53, or 5353 where the DNS pods listen there (OpenShift's openshift-dns).
dns_ports := {53, 5353}

component(p) := object.get(p.spec.podSelector, ["matchLabels", "app.kubernetes.io/component"], "")

# The console's oauth2-proxy talks OIDC to the identity provider: HTTPS (443) and nothing else.
is_https_rule(rule) if {
	count(rule.ports) > 0
	every p in rule.ports {
		p.port == 443
	}
}

console_idp_rule(p, rule) if {
	component(p) == "console"
	is_https_rule(rule)
}

is_dns_rule(rule) if {
	count(rule.ports) > 0
	not non_dns_port(rule)
}

non_dns_port(rule) if {
	some p in rule.ports
	not p.port in dns_ports
}

# A single address (/32 or /128): a node-local DNS cache on its link-local address, never a range.
single_address(cidr) if endswith(cidr, "/32")

single_address(cidr) if endswith(cidr, "/128")

# Egress: every rule names its peers (no "to anywhere") and its ports; an IP block only for one address (a DNS
# cache, or a model server outside the chart that the runner calls), or for the console's identity provider.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	count(object.get(rule, "to", [])) == 0
	msg := sprintf("NetworkPolicy/%s: egress rule %d allows every destination", [p.metadata.name, i])
}

deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	count(object.get(rule, "ports", [])) == 0
	msg := sprintf("NetworkPolicy/%s: egress rule %d allows every port", [p.metadata.name, i])
}

deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	not is_dns_rule(rule)
	some peer in object.get(rule, "to", [])
	peer.ipBlock
	not console_idp_rule(p, rule)
	not console_model_server_rule(p, rule)
	not runner_server_address(p, peer)
	msg := sprintf("NetworkPolicy/%s: egress rule %d uses an ipBlock (only pod and DNS peers, and the runner's single-address servers, are allowed)", [p.metadata.name, i])
}

# A model server outside the chart, for the runner: one address (/32 or /128), no exceptions.
runner_server_address(p, peer) if {
	component(p) == "runner"
	single_address(peer.ipBlock.cidr)
	count(object.get(peer.ipBlock, "except", [])) == 0
}

# The console's IT page probes every model the runner calls: a rule of the release's runner egress (a site's
# server, held to the runner's rules above) is the console's too, and no other such rule.
runner_egress_rules contains rule if {
	some p in policies
	component(p) == "runner"
	some rule in object.get(p.spec, "egress", [])
}

console_model_server_rule(p, rule) if {
	component(p) == "console"
	rule in runner_egress_rules
}

# Or its pods, by name: a non-empty podSelector, in the policy's namespace or a namespace a non-empty
# namespaceSelector names (an OpenAI-compatible server in the cluster, networkPolicy.extraRunnerEgress).
runner_server_pods(p, peer) if {
	component(p) == "runner"
	not peer.ipBlock
	selects_named_pods(peer)
	not empty_selector(object.get(peer, "namespaceSelector", {"matchLabels": {"absent": "absent"}}))
}

deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	is_dns_rule(rule)
	some peer in object.get(rule, "to", [])
	peer.ipBlock
	not single_address(peer.ipBlock.cidr)
	msg := sprintf("NetworkPolicy/%s: egress rule %d: a DNS ipBlock must be one address (/32 or /128), not %s", [p.metadata.name, i, peer.ipBlock.cidr])
}

deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	is_dns_rule(rule)
	some peer in object.get(rule, "to", [])
	peer.ipBlock
	count(object.get(peer.ipBlock, "except", [])) > 0
	msg := sprintf("NetworkPolicy/%s: egress rule %d: a DNS ipBlock takes no exceptions", [p.metadata.name, i])
}

# A DNS peer names the DNS pods (a non-empty podSelector) or one address (the ipBlock rules above): a peer
# without a podSelector, or with an empty one, selects every pod of its namespaces (with an empty or absent
# namespaceSelector, of the whole cluster or the release's namespace) and opens port 53 to all of them.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	is_dns_rule(rule)
	some peer in object.get(rule, "to", [])
	not peer.ipBlock
	not selects_named_pods(peer)
	msg := sprintf("NetworkPolicy/%s: egress rule %d: a DNS peer must name the DNS pods (a non-empty podSelector) or one address (ipBlock), not every pod", [p.metadata.name, i])
}

selects_named_pods(peer) if count(object.get(peer, ["podSelector", "matchLabels"], {})) > 0

selects_named_pods(peer) if count(object.get(peer, ["podSelector", "matchExpressions"], [])) > 0

# An ipBlock names a site's own range, never a large share of every address: a prefix shorter than /8 (IPv4) or
# /32 (IPv6) is denied in any rule, whatever its `except` list leaves out. Denying /0 alone let two halves
# (0.0.0.0/1 and 128.0.0.0/1) name every address together. values.schema.json refuses the same blocks.
deny contains msg if {
	some p in policies
	some direction, peers_key in {"ingress": "from", "egress": "to"}
	some i, rule in object.get(p.spec, direction, [])
	some peer in object.get(rule, peers_key, [])
	broad_block(peer.ipBlock.cidr)
	msg := sprintf("NetworkPolicy/%s: %s rule %d: ipBlock %s is broader than /8 (IPv4) or /32 (IPv6)", [p.metadata.name, direction, i, peer.ipBlock.cidr])
}

broad_block(cidr) if count(split(cidr, "/")) != 2

broad_block(cidr) if {
	parts := split(cidr, "/")
	not contains(parts[0], ":")
	to_number(parts[1]) < 8
}

broad_block(cidr) if {
	parts := split(cidr, "/")
	contains(parts[0], ":")
	to_number(parts[1]) < 32
}

# The console's identity-provider rule names the identity provider, never everything: a peer with an empty (or
# absent) namespaceSelector and podSelector, or with either present but empty, selects every namespace or every
# pod of one (an ipBlock of every address is a broad block, denied above in any rule). values.schema.json refuses
# the same peers in console.egress.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	console_idp_rule(p, rule)
	some peer in object.get(rule, "to", [])
	selects_everything(peer)
	msg := sprintf("NetworkPolicy/%s: egress rule %d: an identity-provider peer selects every pod or namespace (an empty selector)", [p.metadata.name, i])
}

selects_everything(peer) if {
	not peer.ipBlock
	object.get(peer, "namespaceSelector", null) == null
	object.get(peer, "podSelector", null) == null
}

selects_everything(peer) if {
	"namespaceSelector" in object.keys(peer)
	empty_selector(peer.namespaceSelector)
}

selects_everything(peer) if {
	"podSelector" in object.keys(peer)
	empty_selector(peer.podSelector)
}

empty_selector(null)

empty_selector(selector) if {
	is_object(selector)
	count(object.get(selector, "matchLabels", {})) == 0
	count(object.get(selector, "matchExpressions", [])) == 0
}

# Egress other than DNS goes only from runner (and console) pods to model-server pods of the same release.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	not is_dns_rule(rule)
	not component(p) in {"runner", "console"}
	msg := sprintf("NetworkPolicy/%s: egress rule %d: only the runner may open connections besides DNS", [p.metadata.name, i])
}

deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "egress", [])
	not is_dns_rule(rule)
	not console_idp_rule(p, rule)
	not console_model_server_rule(p, rule)
	some peer in object.get(rule, "to", [])
	object.get(peer, ["podSelector", "matchLabels", "app.kubernetes.io/component"], "") != "model-server"
	not runner_server_address(p, peer)
	not runner_server_pods(p, peer)
	msg := sprintf("NetworkPolicy/%s: egress rule %d: a non-DNS peer must be the model servers (or, for the runner, named pods or one address; for the console, a rule of the runner's)", [p.metadata.name, i])
}

# Ingress: only model servers (and the console, from the ingress controller) accept connections, and every rule
# names its peers.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "ingress", [])
	count(object.get(rule, "from", [])) == 0
	msg := sprintf("NetworkPolicy/%s: ingress rule %d allows every source", [p.metadata.name, i])
}

# A peer with an empty selector (or none, and no ipBlock) admits every pod of a namespace, or of the cluster.
deny contains msg if {
	some p in policies
	some i, rule in object.get(p.spec, "ingress", [])
	some peer in object.get(rule, "from", [])
	selects_everything(peer)
	msg := sprintf("NetworkPolicy/%s: ingress rule %d: a peer admits every pod or namespace (an empty selector)", [p.metadata.name, i])
}

deny contains msg if {
	some p in policies
	count(object.get(p.spec, "ingress", [])) > 0
	not component(p) in {"model-server", "console"}
	msg := sprintf("NetworkPolicy/%s: only model servers may accept connections", [p.metadata.name])
}

# The console accepts connections only from the ingress controller: every peer names both its namespace and its
# pods (never an IP block, never a whole namespace), on named ports.
deny contains msg if {
	some p in policies
	component(p) == "console"
	some i, rule in object.get(p.spec, "ingress", [])
	some peer in object.get(rule, "from", [])
	not ingress_controller_peer(peer)
	msg := sprintf("NetworkPolicy/%s: ingress rule %d: the console admits only the ingress controller (namespaceSelector and podSelector)", [p.metadata.name, i])
}

deny contains msg if {
	some p in policies
	component(p) == "console"
	some i, rule in object.get(p.spec, "ingress", [])
	count(object.get(rule, "ports", [])) == 0
	msg := sprintf("NetworkPolicy/%s: ingress rule %d allows every port", [p.metadata.name, i])
}

ingress_controller_peer(peer) if {
	not peer.ipBlock
	count(object.get(peer, ["namespaceSelector", "matchLabels"], {})) > 0
	count(object.get(peer, ["podSelector", "matchLabels"], {})) > 0
}

# No Service exposes the release outside the cluster.
deny contains msg if {
	some s in input.manifests
	s.kind == "Service"
	object.get(s.spec, "type", "ClusterIP") != "ClusterIP"
	msg := sprintf("Service/%s: type %s exposes the appliance outside the cluster", [s.metadata.name, s.spec.type])
}

# Only the console (through its authenticating proxy) is exposed through an Ingress.
deny contains msg if {
	some obj in input.manifests
	obj.kind == "Ingress"
	not console_ingress(obj)
	msg := sprintf("Ingress/%s: the appliance is not exposed through an Ingress (only the console is)", [obj.metadata.name])
}

console_ingress(obj) if {
	object.get(obj.metadata, ["labels", "app.kubernetes.io/component"], "") == "console"
	not obj.spec.defaultBackend
	every rule in obj.spec.rules {
		every path in rule.http.paths {
			endswith(path.backend.service.name, "-console")
		}
	}
}
