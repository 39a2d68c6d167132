"""Rebuilding the derived transaction state from the commit log (RocketMQ 3.1's
``TransactionStateService.recreateStateTable`` rebuilds the transaction state table from its
redo log after an abnormal shutdown).

Halfmoon keeps one ``Transaction`` row per transaction so that a scan finds due checks with an
index read. Every fact in that row follows from append-only records, and ``transactions_rebuild``
recomputes it from them, reports each difference and (unless ``dry_run``) rewrites the rows.

What is authoritative, strongest first (the rebuild never rewrites a message):

1. **The commit log** (``Message``), append-only and written in the same database transaction
   as the rows it explains:
   - the newest half message of a msg_id on ``RMQ_SYS_TRANS_HALF_TOPIC`` is the transaction's
     current half message (a resume re-appends a copy, as RocketMQ's
     ``resumeCheckHalfMessage``); it fixes the producer group, real topic and queue
     (``PGROUP``, ``REAL_TOPIC``, ``REAL_QID``), tags, keys, half queue offset, commit log
     offset and born time;
   - a message delivered from it (``prepared_transaction_offset`` = its commit log offset)
     makes the transaction COMMITTED, whatever a row or the journal says: consumers may
     already have it, and it is never taken back;
   - an Op message on ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` naming its half queue offset (RIP-50
     bodies ``12,13,14,``) makes it resolved: COMMITTED with a delivered message, else
     ROLLED_BACK (RocketMQ's rule: an Op message without a delivery is a rollback);
   - a copy on ``TRANS_CHECK_MAX_TIME_TOPIC`` stored after the current half message, with no
     resolution, makes it DISCARDED with that copy's ``DISCARD_REASON``.
2. **The journals**, append-only rows written in the same database transaction as the state
   change: ``Resolution`` (action, ``resolved_by``, time; durable before a producer is
   answered, flushed into Op messages later) and ``TransactionEvent``. ``check_times`` is the
   number of ``check_sent`` events after the last ``resumed`` one, in insertion (id) order:
   a test clock can make timestamps disagree, a row lock cannot.
3. **The Transaction row** is derived and gives way to both. Only scheduling is kept from it
   (``next_check_timestamp`` of a PREPARED row, ``undelivered_checks``, ``check_immunity_ms``,
   which depends on ``HALFMOON_TRANSACTION_TIMEOUT_MS`` at prepare time and is not compared).

Where the journal and the commit log disagree, the rebuild repairs the journal to match the
log, except where doing so would invent or destroy a delivery:
- no ``Resolution`` for a transaction the Op log or a delivery resolves: one is written (its
  ``resolved_by`` taken from the row if the row agrees on the state, else ``producer``);
- ``op_commit_log_offset`` set but that Op message does not name the half offset: it is set to
  the Op message that does, or to NULL, so that ``op_flush`` writes it (again);
- ``op_commit_log_offset`` NULL although an Op message names the offset: set to that message,
  so the flusher does not name it twice;
- ``ROLLBACK`` journalled but the message was delivered: the journal says ``COMMIT``;
- ``COMMIT`` journalled but nothing delivered: reported, **not repaired** (the rebuild reads
  no message bodies and never delivers; turning it into a rollback would contradict what the
  producer was told). An operator decides;
- a ``Resolution`` naming another half offset than the current half message's: reported,
  not repaired;
- a row (or a journal row) for a transaction with no half message: the row is deleted if it
  has no ``Resolution``; with one, reported and not repaired.

A half message is superseded when a newer copy of its msg_id exists. The rebuild looks for one
only where the check journal has a ``resumed`` event or the row does not point at that half
message, so missing a copy would take both the row and the journal to be wrong. An operator's
resolution of a DISCARDED transaction clears ``discard_reason``: it is derived only for
DISCARDED transactions.

Cost: per half queue, the Op queue once (8 bytes of memory per half queue offset, see
``oplog.OpIndex``), then the half queue in chunks of ``CHUNK_SIZE`` by queue offset (its unique
index), each chunk about seven indexed queries (range scans by half queue offset and commit
log offset, and index probes with the chunk's ids); then one anti-join for rows without a half
message.
No message body is read except the Op messages'. A dry run reads one snapshot (one REPEATABLE
READ, READ ONLY transaction on PostgreSQL), so it can run beside a live broker without
reporting transitions in flight. A repair locks each chunk's ``Transaction`` and ``Resolution``
rows before reading their logs, so it serialises with ends, checks, resumes and Op flushes
(which all lock those rows first); it is still meant for a quiet broker.

Modules, one job each:

- ``report``: ``Difference``, ``RebuildReport`` and the difference kinds;
- ``derive``: the pure derivation of one transaction from its logs (no database);
- ``oplog``: the Op log index of a half queue (``OpIndex``, ``op_index_read``);
- ``reads``: the queries and the consistent snapshot; ``chunk``: a chunk's logs per transaction;
- ``compare``: the differences of one transaction; ``repair``: the repair plan and its writes;
- ``rebuild``: ``transactions_rebuild``.
"""

from broker.rules.recovery_report import (
    COMPARED_FIELDS,
    DELIVERED_MESSAGE,
    EXTRA,
    MISSING,
    RESOLUTION,
    RESOLUTION_ACTION,
    RESOLUTION_HALF_OFFSET,
    RESOLUTION_OP_OFFSET,
    Difference,
    RebuildReport,
)
from broker.services.recovery.rebuild import CHUNK_SIZE, transactions_rebuild

__all__ = [
    "CHUNK_SIZE",
    "COMPARED_FIELDS",
    "DELIVERED_MESSAGE",
    "EXTRA",
    "MISSING",
    "RESOLUTION",
    "RESOLUTION_ACTION",
    "RESOLUTION_HALF_OFFSET",
    "RESOLUTION_OP_OFFSET",
    "Difference",
    "RebuildReport",
    "transactions_rebuild",
]
