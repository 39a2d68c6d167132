"""Back-checks: ask a producer of the group about a PREPARED transaction
(RocketMQ TransactionalMessageCheckService, TransactionalMessageServiceImpl.check,
AbstractTransactionalMessageCheckListener.resolveHalfMsg).

One module per job, named for what RocketMQ calls it:

- ``scan``: ``half_queue_scan`` (RocketMQ ``check()`` of one half queue: its lease, the
  MAX_PROCESS_TIME_LIMIT budget, the rounds, then Op flush and checkpoints),
  ``half_queue_scans_dispatch`` (beat's fan-out) and ``check_round``.
- ``claim``: step 1 of a round, ``check_claim``: lock the due transactions (``SKIP LOCKED``,
  per-group caps, groups in backoff left out), discard by needSkip / needDiscard, move the
  others' next check one interval ahead, queue check requests for groups that poll.
- ``rate_limit``: ``check_rate_limit``, the per-group checks per second across workers (Redis).
- ``transport``: step 2, ``checks_send``: POST the signed checks in parallel (httpx), outside
  any database transaction, and ``check_answer_parse`` of the LocalTransactionState answers.
- ``telemetry``: step 2 for half messages sent over gRPC, ``telemetry_checks_send``: write
  ``RecoverOrphanedTransactionCommand`` on the telemetry stream of a live RocketMQ client of
  the group (the sender first), through the gRPC server process holding it.
- ``outcomes``: step 3, ``check_outcomes_apply``: count delivered checks, apply COMMIT/ROLLBACK
  through ``transaction_end``, retry undelivered checks with backoff, back off silent groups.
- ``checkpoint``: ``checkpoint_advance`` (updateConsumeOffset, calculateOpOffset of
  ``CID_RMQ_SYS_TRANS``).
- ``polling``: ``check_requests_poll``, the hand-out to producers that poll.
- ``payload``: ``check_payload``, ``CheckJob``, ``CheckOutcome``.
- ``targets``: the check-target rule's settings and DNS side: ``check_url_refusal`` when a
  ``check_url`` is set, ``PinnedTransport`` (resolve, judge every address, connect to the judged
  one) when a check is sent.

The due checks are found through the PREPARED rows' index, so a round's cost follows the
pending transactions, never the history. The rules themselves (discard, backoff, next check,
answers, Op bodies) are in ``broker.rules``.
"""

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
