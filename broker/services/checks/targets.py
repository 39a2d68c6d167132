"""Back-check targets under control: the settings and DNS side of
``broker.rules.check_targets``, applied at two moments:

- a ``check_url`` being set (``check_url_refusal``, for the API, the console, the admin): the
  scheme, an IP literal's address, or every address a host name not listed by name in
  ``HALFMOON_CHECK_URL_ALLOWED_NETWORKS`` resolves to now;
- a check being sent (``pinned_transport``: ``broker.plumbing.pinned_transport``): the name
  resolved again, every address judged, the connection made to a judged address (against DNS
  rebinding); a refusal there is an undelivered check.

The alerts' webhooks are judged the same way against ``HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS``
(``allowed_targets_setting``). Reasoning: docs/design.md "Back-checks".
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from typing import Any

from django.conf import settings

from broker.conf import conf
from broker.plumbing.pinned_transport import PinnedTransport, resolve_within, resolved_or_empty
from broker.rules.check_targets import (
    AllowedTargets,
    BrokerEndpoint,
    IPAddress,
    IPNetwork,
    Refusal,
    address_refusal,
    allowed_targets_parse,
    check_target_parse,
    name_unresolved_refusal,
)


def allowed_targets() -> AllowedTargets:
    """``HALFMOON_CHECK_URL_ALLOWED_NETWORKS`` parsed (read at call time, so a test's
    ``settings`` override applies; the value was already checked at start).

    Raises:
        ValueError: an entry that is neither a network nor a host name.
    """
    return allowed_targets_setting("HALFMOON_CHECK_URL_ALLOWED_NETWORKS", subject="check")


def allowed_targets_setting(setting: str, *, subject: str) -> AllowedTargets:
    """The allow-list in the Django setting ``setting`` (a list or a comma-separated string of
    networks and host names), parsed for ``subject`` ("check", "webhook": the refusals' word).

    Raises:
        ValueError: an entry that is neither a network nor a host name.
    """
    value = getattr(settings, setting)
    return _allowed_parsed(value if isinstance(value, str) else tuple(value), setting, subject)


@functools.lru_cache(maxsize=8)
def _allowed_parsed(value: str | tuple[str, ...], setting: str, subject: str) -> AllowedTargets:
    return allowed_targets_parse(value, setting=setting, subject=subject)


def broker_endpoint() -> BrokerEndpoint:
    """The broker's own endpoint: ``HALFMOON_PORT`` on the addresses of ``HALFMOON_HOST``
    (the host and port the web server serves, ``deploy/supervisord.conf``); when that is 0.0.0.0 or ::,
    loopback and the addresses this host's name resolves to. A ``HALFMOON_HOST`` that does not
    resolve contributes no address. Cached per (host, port)."""
    return _broker_endpoint(settings.HALFMOON_HOST, settings.HALFMOON_PORT)


@functools.lru_cache(maxsize=8)
def _broker_endpoint(host: str, port: int) -> BrokerEndpoint:
    addresses: set[IPAddress] = set(resolved_or_empty(host))
    networks: list[IPNetwork] = []
    if any(a.is_unspecified for a in addresses):
        networks += [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
        addresses = set(resolved_or_empty(socket.gethostname()))
    networks += [ipaddress.ip_network(a) for a in addresses]
    return BrokerEndpoint(port=port, networks=tuple(networks))


def check_url_refusal(url: str) -> Refusal | None:
    """Judge a ``check_url`` being set: None when it may be stored, else why not.

    The scheme (http, https), then an IP literal's address, or a host name: accepted as it is
    when listed by name in ``HALFMOON_CHECK_URL_ALLOWED_NETWORKS``, else resolved now (within
    ``HALFMOON_CHECK_REQUEST_TIMEOUT_MS``) and every address judged; a name that does not
    resolve is refused (``unresolved``). Rules: ``broker.rules.check_targets``.
    """
    return target_url_refusal(
        url, allowed=allowed_targets(), resolve_timeout_ms=conf.check_request_timeout_ms
    )


def target_url_refusal(
    url: str, *, allowed: AllowedTargets, resolve_timeout_ms: int
) -> Refusal | None:
    """Judge a URL the broker will POST to (a check URL, a webhook) being set, against
    ``allowed``: None when it may be stored, else why not. As ``check_url_refusal`` says,
    with a host name resolved within ``resolve_timeout_ms``."""
    target = check_target_parse(url, subject=allowed.subject)
    if isinstance(target, Refusal):
        return target
    broker = broker_endpoint()
    if target.address is not None:
        return address_refusal(target.address, target.port, allowed=allowed, broker=broker)
    if allowed.allows_name(target.host):
        return None
    try:
        addresses = resolve_within(target.host, target.port, resolve_timeout_ms / 1000)
    except TimeoutError:
        return name_unresolved_refusal(
            target.host, f"no answer within {resolve_timeout_ms} ms", setting=allowed.setting
        )
    except (OSError, UnicodeError) as exc:
        return name_unresolved_refusal(target.host, str(exc), setting=allowed.setting)
    for address in addresses:
        refusal = address_refusal(
            address, target.port, allowed=allowed, broker=broker, host=target.host
        )
        if refusal is not None:
            return refusal
    return None


def pinned_transport(*, verify: Any = True) -> PinnedTransport:
    """The transport of one check round, with the current settings."""
    return PinnedTransport(
        allowed=allowed_targets(),
        broker=broker_endpoint(),
        resolve_timeout_s=conf.check_request_timeout_ms / 1000,
        verify=verify,
    )
