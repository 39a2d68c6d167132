"""Template context every console page gets: the alerts banner (``alerts_banner``)."""

from __future__ import annotations

from django.http import HttpRequest

from broker.rules.clock import now_ms
from broker.selectors.alerts import Banner, banner
from console.roles import VIEW


def alerts_banner(request: HttpRequest) -> dict[str, Banner]:
    """Template context processor: ``alerts_banner`` (``broker.selectors.alerts.banner``: the
    firing alerts not silenced, how many are silenced, the notifications that failed) for a
    signed-in user with the console's view permission; nothing for anyone else. The base
    template shows it on every page while anything fires."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.has_perm(VIEW):
        return {}
    return {"alerts_banner": banner(now_ms())}
