"""The broker's pure rules: functions and enums of plain values that touch no database, no
network and no settings (callers pass the setting values in). Each rule is written once here
and used by the services, the scan, the recovery and the API; ``tests/rules/`` tests them with
no database.

More: docs/design.md, "Module notes", broker/rules/__init__.py."""
