"""Back-check targets under control: the settings and DNS side of
``broker.rules.check_targets``.

Two moments apply the rule:

- when a ``check_url`` is set (``check_url_refusal``, called by
  ``broker.services.topology.writes.check_url_validate`` for the API, the console, the Django admin):
  the scheme, an IP literal's address, or, for a host name not listed by name in
  ``HALFMOON_CHECK_URL_ALLOWED_NETWORKS``, every address it resolves to now;
- when a check is sent (``PinnedTransport``, the httpx transport of the check round): the
  name is resolved again, every address judged, and the connection made to a judged address
  (the URL's host pinned to it, the ``Host`` header and the TLS server name kept), so a name
  that resolves elsewhere by then (DNS rebinding) reaches nothing it should not. A refusal
  there raises ``CheckTargetRefused`` (an ``httpx.ConnectError``): the check is undelivered,
  like a refused connection, with the refusal in the journal's error.

The alerts' webhooks (``broker.services.alerts.webhooks``) are judged by the same two
moments, ``target_url_refusal`` and ``PinnedTransport``, against their own allow-list
(``HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS``, read by ``allowed_targets_setting``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import socket
from typing import Any

import httpx
from django.conf import settings

from broker.conf import conf
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

_RESOLVER = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="check-dns")


class CheckTargetRefused(httpx.ConnectError):
    """A check not sent because its target breaks the check-target rule (``refusal``)."""

    def __init__(self, refusal: Refusal, *, request: httpx.Request) -> None:
        super().__init__(refusal.message, request=request)
        self.refusal = refusal


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
    addresses: set[IPAddress] = set(_resolved_or_empty(host))
    networks: list[IPNetwork] = []
    if any(a.is_unspecified for a in addresses):
        networks += [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
        addresses = set(_resolved_or_empty(socket.gethostname()))
    networks += [ipaddress.ip_network(a) for a in addresses]
    return BrokerEndpoint(port=port, networks=tuple(networks))


def _resolved_or_empty(host: str) -> list[IPAddress]:
    try:
        return _addresses(socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return []


def _addresses(infos: list[Any]) -> list[IPAddress]:
    """The distinct addresses of ``getaddrinfo`` results, in its order (scope ids dropped)."""
    seen: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen


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
    future = _RESOLVER.submit(socket.getaddrinfo, target.host, target.port, 0, socket.SOCK_STREAM)
    try:
        addresses = _addresses(future.result(timeout=resolve_timeout_ms / 1000))
    except concurrent.futures.TimeoutError:
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


async def _resolve(host: str, port: int, timeout_s: float) -> list[IPAddress]:
    """Every address ``host`` resolves to, within ``timeout_s``.

    Raises:
        OSError: the name does not resolve. TimeoutError: no answer in time.
    """
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout=timeout_s
    )
    return _addresses(infos)


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that judges each request's target just before it connects.

    It resolves the URL's host (``HALFMOON_CHECK_REQUEST_TIMEOUT_MS`` at most), judges every
    address with ``broker.rules.check_targets.address_refusal`` (raising ``CheckTargetRefused``
    if any is refused), then sends the request to the first address that accepts a
    connection: the URL's host is replaced by that address, while the ``Host`` header (set
    from the original URL) and the TLS server name (httpcore's ``sni_hostname``, which the
    certificate is verified against) stay the name. Each host name gets its own connection
    pool, so a TLS connection verified for one name never carries another's request.

    ``verify``: httpx's TLS verification (True: the system's CAs; tests pass an SSL context).
    """

    def __init__(
        self,
        *,
        allowed: AllowedTargets,
        broker: BrokerEndpoint | None,
        resolve_timeout_s: float,
        verify: Any = True,
    ) -> None:
        self._allowed = allowed
        self._broker = broker
        self._resolve_timeout_s = resolve_timeout_s
        self._verify = verify
        self._pools: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Judge, pin and send ``request``.

        Raises:
            CheckTargetRefused: the URL or one of its addresses is refused.
            httpx.ConnectError: the name does not resolve, or no address accepts a connection.
            httpx.ConnectTimeout: the name did not resolve in time.
        """
        target = check_target_parse(str(request.url), subject=self._allowed.subject)
        if isinstance(target, Refusal):
            raise CheckTargetRefused(target, request=request)
        if target.address is not None:
            addresses = [target.address]
        else:
            try:
                addresses = await _resolve(target.host, target.port, self._resolve_timeout_s)
            except TimeoutError as exc:
                raise httpx.ConnectTimeout(
                    f"{target.host} did not resolve in time", request=request
                ) from exc
            except (OSError, UnicodeError) as exc:
                raise httpx.ConnectError(
                    f"{target.host} does not resolve: {exc}", request=request
                ) from exc
            if not addresses:
                raise httpx.ConnectError(f"{target.host} resolves to nothing", request=request)
        for address in addresses:
            refusal = address_refusal(
                address, target.port, allowed=self._allowed, broker=self._broker, host=target.host
            )
            if refusal is not None:
                raise CheckTargetRefused(refusal, request=request)
        pool = self._pools.get(target.host)
        if pool is None:
            pool = httpx.AsyncHTTPTransport(verify=self._verify, trust_env=False)
            self._pools[target.host] = pool
        request.extensions = {**request.extensions, "sni_hostname": target.host}
        original = request.url
        try:
            for address in addresses[:-1]:
                request.url = original.copy_with(host=str(address))
                try:
                    return await pool.handle_async_request(request)
                except httpx.ConnectError:  # nothing was sent: try the next address
                    continue
            request.url = original.copy_with(host=str(addresses[-1]))
            return await pool.handle_async_request(request)
        finally:
            request.url = original

    async def aclose(self) -> None:
        """Close every host's connection pool."""
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()


def pinned_transport(*, verify: Any = True) -> PinnedTransport:
    """The transport of one check round, with the current settings."""
    return PinnedTransport(
        allowed=allowed_targets(),
        broker=broker_endpoint(),
        resolve_timeout_s=conf.check_request_timeout_ms / 1000,
        verify=verify,
    )
