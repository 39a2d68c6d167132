"""Operators' work over many transactions: bulk actions (``bulk``), the audit log (``audit``) and
incident exports (``incident_export``)."""
