"""Back-checks: ask a producer of the group about a PREPARED transaction
(RocketMQ TransactionalMessageCheckService, TransactionalMessageServiceImpl.check,
AbstractTransactionalMessageCheckListener.resolveHalfMsg).

More: docs/design.md, "Module notes", broker/services/checks/__init__.py."""

from broker.services.checks.checkpoint import OP_READ_BATCH, checkpoint_advance
from broker.services.checks.claim import check_claim
from broker.services.checks.outcomes import check_delivered_record, check_outcomes_apply
from broker.services.checks.payload import CheckJob, CheckOutcome, check_payload
from broker.services.checks.polling import check_requests_poll
from broker.services.checks.rate_limit import check_rate_limit
from broker.services.checks.scan import (
    check_round,
    checks_deliver,
    half_queue_scan,
    half_queue_scans_dispatch,
)
from broker.services.checks.telemetry import telemetry_checks_send
from broker.services.checks.transport import check_answer_parse, checks_send

__all__ = [
    "OP_READ_BATCH",
    "CheckJob",
    "CheckOutcome",
    "check_answer_parse",
    "check_claim",
    "check_delivered_record",
    "check_outcomes_apply",
    "check_payload",
    "check_rate_limit",
    "check_requests_poll",
    "check_round",
    "checkpoint_advance",
    "checks_deliver",
    "checks_send",
    "half_queue_scan",
    "half_queue_scans_dispatch",
    "telemetry_checks_send",
]
