"""Writes of the operator grants (``broker.models.OperatorGrant``): the producer and consumer
groups a console user or an access key may operate without being a full operator
(``broker.rules.grants``).

``create_console_user --role operator --producer-group G``, ``create_access_key
--operator-producer-group G`` and the Django admin all set grants here.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from django.db import transaction

from broker.models import OperatorGrant
from broker.rules.grants import CONSUMER_GROUP, PRODUCER_GROUP, OperatorScope, operator_scope_of
from broker.services.topology.writes import access_key_groups_validate

logger = logging.getLogger("halfmoon.grants")


def operator_grants_set(
    *,
    user_id: int | None = None,
    access_key_id: int | None = None,
    producer_groups: Collection[str],
    consumer_groups: Collection[str],
    granted_by: str,
) -> OperatorScope:
    """Make the grants of one console user (``user_id``) or one access key (``access_key_id``)
    exactly ``producer_groups`` and ``consumer_groups``: grants not listed are removed, listed
    ones that exist are kept as they are (their ``granted_by`` and ``granted_timestamp``), new
    ones are written with ``granted_by`` (who grants: ``manage.py``, ``admin:<username>``). Both
    empty removes every grant. The groups need not exist yet. One database transaction.

    Returns:
        the holder's scope from the grants now stored (a full operator's role is not looked at
        here: see ``broker.selectors.grants.operator_scope``).

    Raises:
        InvalidInput: ``invalid_name`` (a name outside ``^[%|a-zA-Z0-9_-]{1,127}$``).
        ValueError: neither or both of ``user_id`` and ``access_key_id`` (a programming error).
    """
    if (user_id is None) == (access_key_id is None):
        raise ValueError("name exactly one holder: user_id or access_key_id")
    access_key_groups_validate([*producer_groups, *consumer_groups])
    wanted = {(PRODUCER_GROUP, g) for g in producer_groups} | {
        (CONSUMER_GROUP, g) for g in consumer_groups
    }
    holder = {"user_id": user_id} if user_id is not None else {"access_key_id": access_key_id}
    with transaction.atomic():
        existing = {
            (kind, group): pk
            for pk, kind, group in OperatorGrant.objects.select_for_update()
            .filter(**holder)
            .values_list("pk", "kind", "group")
        }
        gone = [pk for pair, pk in existing.items() if pair not in wanted]
        if gone:
            OperatorGrant.objects.filter(pk__in=gone).delete()
        OperatorGrant.objects.bulk_create(
            [
                OperatorGrant(**holder, kind=kind, group=group, granted_by=granted_by)
                for kind, group in sorted(wanted - existing.keys())
            ],
            ignore_conflicts=True,  # a concurrent set wrote it: the same row
        )
    logger.info(
        "%s set the operator grants of %s to %s",
        granted_by,
        holder,
        sorted(wanted),
    )
    return operator_scope_of(full=False, grants=wanted)
