"""The broker's pure rules: functions and enums of plain values that touch no database, no
network and no settings (callers pass the setting values in). Each rule is written once here
and used by the services, the scan, the recovery and the API; ``tests/rules/`` tests them with
no database.

- ``states``: the spellings of a transaction's end and their mappings (EndAction ``commit``,
  Resolution action ``COMMIT``, check answer ``COMMIT_MESSAGE``, state ``COMMITTED``; likewise
  rollback and unknown).
- ``checks``: check immunity, needDiscard, needSkip, the check and undelivered backoff, the
  lease length of a scan.
- ``op_body``: the body of an Op message (RIP-50: half queue offsets, comma-separated).
- ``topics``: which topics are system topics (no producer sends to them) and which of those
  no consumer receives from; the bounds of a topic's queue_nums.
- ``check_targets``: which back-check URLs and addresses may be reached (http or https, the
  allowed networks, never link-local, multicast or the broker itself); the alerts' webhooks
  are judged by the same rule against their own allow-list.
- ``alerts``: Halfmoon's own alert kinds, when each fires on a group, and the firing/resolved
  state machine with one notification each way (reminders, silences).
- ``alert_payloads``: what a notification says: Alertmanager's webhook body, a Slack message,
  an e-mail.
"""
