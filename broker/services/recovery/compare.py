"""Compare one transaction's stored row and ``Resolution`` with what its logs say
(``derive``), report each difference and plan its repair. No database: the plan is written by
``RepairPlan.apply``.

What is repaired and what is left to an operator is the package docstring's list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.rules.recovery import (
    DerivedTransaction,
    TransactionLogs,
    is_resolved,
    journal_conflict,
    journalled_op_offset,
    resolution_action,
    transaction_derive,
)
from broker.rules.recovery_report import (
    COMPARED_FIELDS,
    MISSING,
    RESOLUTION,
    RESOLUTION_ACTION,
    RESOLUTION_OP_OFFSET,
)
from broker.rules.states import TransactionState
from broker.services.recovery.repair import RepairPlan

REBUILT_REASON = "rebuilt from the commit log"
"""The ``reason`` of a ``Resolution`` the rebuild writes."""


def transaction_compare(
    logs: TransactionLogs,
    row: Mapping[str, Any] | None,
    plan: RepairPlan,
    *,
    transaction_timeout_ms: int,
    check_interval_ms: int,
) -> None:
    """Derive the transaction of ``logs``, compare it with its stored ``row`` (``values()`` of
    ``reads.STORED_FIELDS``, or None) and its ``Resolution``, and add the differences and their
    repairs to ``plan``. A journal that contradicts the commit log (``journal_conflict``) is
    reported alone and nothing about the transaction is repaired: an operator decides."""
    conflict = journal_conflict(logs)
    if conflict is not None:
        plan.differences.append(conflict)
        return
    derived = transaction_derive(
        logs,
        row,
        transaction_timeout_ms=transaction_timeout_ms,
        check_interval_ms=check_interval_ms,
    )
    if row is None:
        _row_missing(logs.half.msg_id, derived, plan)
    else:
        _row_compare(logs.half.msg_id, row, derived, plan)
    if is_resolved(derived.state):
        _resolution_compare(logs, derived, plan)


def _row_missing(tid: str, derived: DerivedTransaction, plan: RepairPlan) -> None:
    plan.diff(tid, MISSING, None, derived.state)
    plan.create.append(
        {
            "transaction_id": tid,
            **derived.columns,
            "check_immunity_ms": derived.check_immunity_ms,
            "next_check_timestamp": derived.next_check_timestamp,
            "last_check_timestamp": derived.last_check_timestamp,
            "resolved_timestamp": derived.resolved_timestamp,
        }
    )


def _row_compare(
    tid: str, row: Mapping[str, Any], derived: DerivedTransaction, plan: RepairPlan
) -> None:
    """Every compared column, and whether a next check is scheduled. A changed row gets the
    derived scheduling too: no next check unless PREPARED, and the derived one if it had none."""
    changed: dict[str, Any] = {}
    for name in COMPARED_FIELDS:
        if row[name] != derived.columns[name]:
            plan.diff(tid, name, row[name], derived.columns[name])
            changed[name] = derived.columns[name]
    next_check = derived.next_check_timestamp
    if (row["next_check_timestamp"] is None) != (next_check is None):
        plan.diff(tid, "next_check_timestamp", row["next_check_timestamp"], next_check)
        changed["next_check_timestamp"] = next_check
    if not changed:
        return
    changed["last_check_timestamp"] = derived.last_check_timestamp
    if "state" in changed or row["resolved_timestamp"] is None:
        changed["resolved_timestamp"] = derived.resolved_timestamp
    if derived.state != TransactionState.PREPARED:
        changed["next_check_timestamp"] = None
    elif row["next_check_timestamp"] is None:
        changed["next_check_timestamp"] = next_check
    plan.update[tid] = changed


def _resolution_compare(
    logs: TransactionLogs, derived: DerivedTransaction, plan: RepairPlan
) -> None:
    """The ``Resolution`` of a resolved transaction: written if missing (pointing at the first
    Op message naming its offset, if any), else its action and Op message set right."""
    tid, action, journalled = logs.half.msg_id, resolution_action(derived.state), logs.resolution
    if journalled is None:
        plan.diff(tid, RESOLUTION, None, action)
        if logs.op_named is not None and derived.resolved_timestamp is None:
            plan.op_timestamps_wanted.add(logs.op_named)
        plan.resolution_create.append(
            {
                "transaction_id": tid,
                "half_queue_id": logs.half_queue_id,
                "half_queue_offset": logs.half.queue_offset,
                "action": action,
                "resolved_by": derived.resolved_by,
                "reason": REBUILT_REASON,
                "resolved_timestamp": derived.resolved_timestamp,
                "op_commit_log_offset": logs.op_named,
            }
        )
        return
    repairs: dict[str, Any] = {}
    if journalled.action != action:
        plan.diff(tid, RESOLUTION_ACTION, journalled.action, action)
        repairs["action"] = action
    op_derived = journalled_op_offset(logs)
    if journalled.op_commit_log_offset != op_derived:
        plan.diff(tid, RESOLUTION_OP_OFFSET, journalled.op_commit_log_offset, op_derived)
        repairs["op_commit_log_offset"] = op_derived
    if repairs:
        plan.resolution_update[journalled.id] = repairs
