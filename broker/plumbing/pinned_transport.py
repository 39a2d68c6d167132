"""DNS for the broker's outgoing requests, and the httpx transport that pins a request to
an address judged just before it connects (against DNS rebinding); the rule judging an address
is ``broker.rules.check_targets``, the settings it is judged against come from the callers
(``broker.services.checks.targets``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import socket
from typing import Any

import httpx

from broker.rules.check_targets import (
    AllowedTargets,
    BrokerEndpoint,
    IPAddress,
    Refusal,
    address_refusal,
    check_target_parse,
)

_RESOLVER = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="check-dns")


def resolve_within(host: str, port: int, timeout_s: float) -> list[IPAddress]:
    """Every address ``host`` resolves to, distinct and in ``getaddrinfo``'s order, within
    ``timeout_s`` (on a thread of a small pool, so a slow resolver never holds the caller).

    Raises:
        TimeoutError: no answer in time. OSError, UnicodeError: the name does not resolve.
    """
    future = _RESOLVER.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        return addresses_of(future.result(timeout=timeout_s))
    except concurrent.futures.TimeoutError as exc:
        raise TimeoutError(f"{host} did not resolve within {timeout_s} s") from exc


class CheckTargetRefused(httpx.ConnectError):
    """A check not sent because its target breaks the check-target rule (``refusal``)."""

    def __init__(self, refusal: Refusal, *, request: httpx.Request) -> None:
        super().__init__(refusal.message, request=request)
        self.refusal = refusal


def resolved_or_empty(host: str) -> list[IPAddress]:
    """Every address ``host`` (an IPv6 literal may keep its brackets) resolves to; none when it
    does not resolve."""
    try:
        return addresses_of(socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return []


def addresses_of(infos: list[Any]) -> list[IPAddress]:
    """The distinct addresses of ``getaddrinfo`` results, in its order (scope ids dropped)."""
    seen: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen


async def _resolve(host: str, port: int, timeout_s: float) -> list[IPAddress]:
    """Every address ``host`` resolves to, within ``timeout_s``.

    Raises:
        OSError: the name does not resolve. TimeoutError: no answer in time.
    """
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout=timeout_s
    )
    return addresses_of(infos)


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
