"""Batches of a ``TransactionProducer`` (api-v1 "Batches"): many half messages sent in one
request, their local transactions run, their ends reported in one request; normal messages
and ends in batches too. Each item gets its own result or error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halfmoon_client.errors import HalfmoonError
from halfmoon_client.listener import TransactionListener
from halfmoon_client.messages import Message, SendResult, TransactionSendResult
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transaction_steps import (
    half_body,
    local_transaction_run,
    normal_body,
    send_result,
    transaction_result,
)
from halfmoon_client.transport import (
    BatchOutcome,
    JsonApi,
    TransactionEnd,
    batch_request,
    transaction_end_batch,
)


class BatchSending:
    """The batch calls of ``TransactionProducer`` (a mixin: it reads the producer's group,
    listener, ``batch_max_messages`` and API)."""

    _api: JsonApi
    producer_group: str
    listener: TransactionListener
    batch_max_messages: int

    def send_message_in_transaction_batch(
        self, msgs: Sequence[Message], arg: Any = None
    ) -> list[TransactionSendResult | HalfmoonError]:
        """Send many half messages, run each local transaction, end them all, with two
        requests per ``batch_max_messages`` messages (api-v1 "Batches").

        For each chunk of at most ``batch_max_messages``: ``POST /transactions/batch`` stores
        the half messages (one database transaction); then, in order, each stored one's
        ``listener.execute_local_transaction(msg, arg)`` runs with ``msg.transaction_id`` set
        (as ``send_message_in_transaction``); then one ``POST /transactions/end-batch``
        reports every answer (COMMIT_MESSAGE: commit, ROLLBACK_MESSAGE: rollback, UNKNOW:
        unknown).

        Args:
            msgs: the messages; idempotent per ``msg_id`` as the single send (an id sent
                before gives ``created`` False).
            arg: handed to every ``execute_local_transaction``.

        Returns:
            one item per message, in order: its ``TransactionSendResult`` (a failed end is its
            ``end_error``, as alone), or the ``HalfmoonError`` the single send would have
            raised for it (404 ``topic_not_found``, 409 ``duplicate_msg_id``, 413, ...; or the
            error of the whole request, e.g. a connection error, for each message of that
            request). A refused message runs no local transaction; the others proceed.
            Nothing is raised for a broker error.
        """
        results: list[TransactionSendResult | HalfmoonError] = []
        size = self.batch_max_messages
        for start in range(0, len(msgs), size):
            chunk = list(msgs[start : start + size])
            halves = self._post_halves([half_body(self.producer_group, m) for m in chunk])
            ran: list[tuple[int, Any, LocalTransactionState, BaseException | None]] = []
            ends: list[TransactionEnd] = []
            for msg, outcome in zip(chunk, halves, strict=True):
                if isinstance(outcome, HalfmoonError):
                    continue
                state, local_exception, end_request = local_transaction_run(
                    self.listener, msg, arg, outcome[1]
                )
                ran.append((*outcome, state, local_exception))
                ends.append(end_request)
            answers = self.end_transactions(ends) if ends else []
            done = iter(zip(ran, answers, strict=True))
            for outcome in halves:
                if isinstance(outcome, HalfmoonError):
                    results.append(outcome)
                    continue
                (status, half, state, local_exception), answer = next(done)
                if isinstance(answer, HalfmoonError):
                    end, end_error = {}, answer
                else:
                    end, end_error = answer, None
                results.append(
                    transaction_result(status, half, state, local_exception, end, end_error)
                )
        return results

    def end_transactions(
        self, ends: Sequence[TransactionEnd]
    ) -> list[dict[str, Any] | HalfmoonError]:
        """End many transactions of this group (``POST /api/v1/transactions/end-batch``, one
        request per ``batch_max_messages`` ends; one database transaction each, rows locked
        in id order).

        Args:
            ends: ``TransactionEnd(transaction_id, state, remark=None,
                from_transaction_check=False)`` each.

        Returns:
            per end, in order: what ``end_transaction`` would return
            (``{"transaction_id", "state", ...}``), or the ``HalfmoonError`` it would have
            raised (404 unknown id, 403 another group's, 409 ``transaction_already_resolved``
            with ``details["state"]``). Nothing is raised for a broker error.
        """
        return transaction_end_batch(
            self._api,
            producer_group=self.producer_group,
            ends=ends,
            max_items=self.batch_max_messages,
        )

    def send_batch(self, msgs: Sequence[Message]) -> list[SendResult | HalfmoonError]:
        """Send normal messages, visible to consumers at once (RocketMQ's batch send,
        ``POST /api/v1/messages/batch``, one request per ``batch_max_messages``).

        Returns:
            per message, in order: its ``SendResult``, or the ``HalfmoonError`` ``send`` would
            have raised for it (404 ``topic_not_found``, 413, ...; or the whole request's error
            for each message of that request). Nothing is raised for a broker error.
        """
        bodies = [normal_body(self.producer_group, m) for m in msgs]
        outcomes = batch_request(
            self._api,
            "/api/v1/messages/batch",
            "messages",
            bodies,
            max_items=self.batch_max_messages,
        )
        return [o if isinstance(o, HalfmoonError) else send_result(o[1]) for o in outcomes]

    def _post_halves(self, bodies: list[dict[str, Any]]) -> list[BatchOutcome]:
        """``POST /transactions/batch`` of ``bodies``: per item ``(status, half)`` or its
        error (``batch_request``)."""
        return batch_request(
            self._api,
            "/api/v1/transactions/batch",
            "messages",
            bodies,
            max_items=self.batch_max_messages,
        )
