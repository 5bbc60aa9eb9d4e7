"""The appliance's use cases, between its front ends (the CLI, the console, the demo, the bench) and the
pipeline's packages: register a dataset, evaluate, merge shards, request and release an export, rotate keys.

A use case takes the caller's ``AppContext`` (home, actor, spec registry, egress policy), drives the stages in
order and writes the audit records; the store below it holds all SQL and knows nothing of audit or specs.
"""
