"""The audit trail: who did what, to which ids and hashes, with what outcome. Never patient text."""

from medhelm_local.audit.trail import AuditTrail, audit_event

__all__ = ["AuditTrail", "audit_event"]
