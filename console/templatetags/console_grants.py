"""Template filters of the scoped operators' object permissions (``console.permissions``):
controls on one object are shown only to who may act on it.

- ``{% if user|may_operate:tx %}``: a ``Transaction``, ``ProducerGroup``, ``ConsumerGroup`` or
  ``GroupRef`` (Django's ``has_perm("console.operate_console", obj)``);
- ``{% if user|may_operate_producer_group:name %}``, ``{% if
  user|may_operate_consumer_group:name %}``: a group by name.

The views check again; these only decide what is drawn. One grants query per request (the
scope is cached on the user).
"""

from __future__ import annotations

from typing import Any

from django import template

from console import permissions
from console.roles import OPERATE

register = template.Library()


@register.filter
def may_operate(user: Any, obj: Any) -> bool:
    """May ``user`` act on ``obj`` (a transaction, a producer or consumer group)?"""
    if user is None or not getattr(user, "is_authenticated", False) or obj in (None, ""):
        return False
    return user.has_perm(OPERATE, obj)


@register.filter
def may_operate_producer_group(user: Any, name: str) -> bool:
    """May ``user`` act on the transactions of producer group ``name``?"""
    if user is None or not getattr(user, "is_authenticated", False) or not name:
        return False
    return permissions.may_operate_producer_group(user, str(name))


@register.filter
def may_operate_consumer_group(user: Any, name: str) -> bool:
    """May ``user`` operate consumer group ``name``?"""
    if user is None or not getattr(user, "is_authenticated", False) or not name:
        return False
    return permissions.may_operate_consumer_group(user, str(name))
