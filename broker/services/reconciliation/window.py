"""Which window a reconciliation judges: the half messages stored in ``[since, until)`` as of
the archive's watermark, by default from the end of the last successful run to what has
settled (``broker.rules.anomalies.settle_ms``), and the job's parameters for it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from broker.errors import InvalidInput
from broker.models import (
    ArchiveSegment,
    ReconciliationRun,
)
from broker.rules.anomalies import ReconcileParams
from broker.selectors.reconciliation import reconciliation_params, reconciliation_settle_ms
from broker.services.archive.watermark import archived_until_or_none

if TYPE_CHECKING:  # Spark is imported only by the process that runs the job
    pass


def _archived_until() -> int:
    """``as_of``: how far the archive reaches (ms). Raises InvalidInput ``archive_empty``."""
    as_of = archived_until_or_none()
    if not as_of:
        raise InvalidInput(
            "Nothing is archived yet: the reconciliation reads the archive, which the archive "
            "export (beat, or manage.py archive) writes first.",
            code="archive_empty",
        )
    return as_of


def _default_since() -> int | None:
    """The latest ``until`` of the SUCCEEDED runs, else the first archived segment's start (ms)."""
    last = (
        ReconciliationRun.objects.filter(state=ReconciliationRun.State.SUCCEEDED)
        .order_by("-until_timestamp")
        .values_list("until_timestamp", flat=True)
        .first()
    )
    if last is not None:
        return last
    return (
        ArchiveSegment.objects.order_by("start_timestamp")
        .values_list("start_timestamp", flat=True)
        .first()
    )


def reconciliation_window(
    *, since_ms: int | None = None, until_ms: int | None = None
) -> ReconcileParams:
    """The parameters of a run over ``[since_ms, until_ms)`` (defaults and rules in the
    module's docstring), as of the archive's watermark now.

    Raises:
        InvalidInput: ``archive_empty`` (nothing archived yet), ``until_past_archive``
            (``until_ms`` > as_of; ``details``: until, as_of), ``nothing_to_reconcile``
            (the window is empty: ``since >= until``; ``details``: since, until, as_of).
    """
    as_of = _archived_until()
    params = reconciliation_params(since_ms=0, until_ms=as_of, as_of_ms=as_of)
    if until_ms is None:
        until_ms = as_of - reconciliation_settle_ms()
    elif until_ms > as_of:
        raise InvalidInput(
            f"until {until_ms} is past what the archive holds ({as_of}): archive first, or ask "
            "for an earlier until.",
            code="until_past_archive",
            details={"until": until_ms, "as_of": as_of},
        )
    if since_ms is None:
        since_ms = _default_since()
    if since_ms is None or since_ms >= until_ms:
        raise InvalidInput(
            "Nothing to reconcile: no transaction can have settled since the last run "
            "(the window [since, until) is empty).",
            code="nothing_to_reconcile",
            details={"since": since_ms, "until": until_ms, "as_of": as_of},
        )
    return dataclasses.replace(params, since_ms=since_ms, until_ms=until_ms)
