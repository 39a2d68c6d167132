"""Which back-check targets the broker may reach: the one definition of the check-target rule.

A ``check_url`` (or an alert's webhook) must be http or https; link-local, multicast and
unspecified addresses (an IPv4 address embedded in IPv6 judged too) and the broker's own
endpoint are always refused; every other address must lie in the allowed networks
(``HALFMOON_CHECK_URL_ALLOWED_NETWORKS``, or ``HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS`` for
webhooks). A listed host name is accepted unresolved when the URL is set; when a check is sent
every address it resolves to must pass (DNS rebinding). Refused: 400 ``check_url_not_allowed``.

Pure: no DNS, no settings, no database; the services resolve names and pass the addresses and
settings in (``broker.services.checks.targets``). More: docs/design.md, "Module notes",
broker/rules/check_targets.py."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SETTING = "HALFMOON_CHECK_URL_ALLOWED_NETWORKS"
"""The setting's name, as the refusals' messages name it."""

DEFAULT_ALLOWED_NETWORKS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)
"""Loopback and the private ranges (RFC 1918, RFC 4193 unique local)."""

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

# The rule a refusal broke: ``details.rule`` of the 400 and part of an undelivered check's error.
RULE_MALFORMED = "malformed"
RULE_SCHEME = "scheme"
RULE_LINK_LOCAL = "link_local"
RULE_MULTICAST = "multicast"
RULE_UNSPECIFIED = "unspecified"
RULE_BROKER_ITSELF = "broker_itself"
RULE_NOT_ALLOWED = "not_allowed"
RULE_UNRESOLVED = "unresolved"

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True)
class Refusal:
    """Why a check target is refused: ``rule`` (one of the ``RULE_*`` names) and one sentence
    for people that names the rule."""

    rule: str
    message: str


@dataclass(frozen=True)
class AllowedTargets:
    """A parsed allow-list (``HALFMOON_CHECK_URL_ALLOWED_NETWORKS``, or another ``setting``
    with the same syntax): ``networks`` every reached address must lie in, and host ``names``
    accepted at set time without resolving (lower case, no trailing dot). ``subject`` names
    what the list guards in refusals ("check": a check URL; "webhook": a webhook URL)."""

    networks: tuple[IPNetwork, ...]
    names: frozenset[str] = frozenset()
    setting: str = SETTING
    subject: str = "check"

    def allows_address(self, address: IPAddress) -> bool:
        """True when ``address`` (an IPv4-mapped IPv6 address counts as its IPv4 address) lies
        in one of the networks."""
        address = _unmapped(address)
        return any(address in network for network in self.networks)

    def allows_name(self, host: str) -> bool:
        """True when the host name ``host`` is listed by name (case and a trailing dot
        ignored)."""
        return host_normalize(host) in self.names


@dataclass(frozen=True)
class BrokerEndpoint:
    """Where the broker itself serves: ``port`` on the addresses of ``networks`` (its
    ``HALFMOON_HOST`` as /32 or /128; loopback and every address of this host when it listens
    on 0.0.0.0 or ::, which the service fills in)."""

    port: int
    networks: tuple[IPNetwork, ...] = ()

    def is_self(self, address: IPAddress, port: int) -> bool:
        """True when ``address:port`` is this endpoint (an IPv4-mapped address as its IPv4)."""
        address = _unmapped(address)
        return port == self.port and any(address in network for network in self.networks)


@dataclass(frozen=True)
class CheckTarget:
    """A ``check_url`` as the sender (httpx) parses it: ``scheme``, ``host`` (lower case,
    without brackets or trailing dot), effective ``port`` (80 / 443 by default) and
    ``address`` when the host is an IP literal (else None: a name to resolve)."""

    scheme: str
    host: str
    port: int
    address: IPAddress | None


def host_normalize(host: str) -> str:
    """``host`` in lower case without IPv6 brackets or a trailing dot."""
    return host.strip().strip("[]").rstrip(".").lower()


def allowed_targets_parse(
    entries: str | Iterable[str], *, setting: str = SETTING, subject: str = "check"
) -> AllowedTargets:
    """Parse the setting: comma-separated (or an iterable of) CIDR networks (``10.0.0.0/8``,
    ``fc00::/7``; a bare address is its /32 or /128) and host names (``producer.internal``).
    Blank entries are skipped. ``setting`` and ``subject``: the setting's name and what it
    guards, for messages (``AllowedTargets``).

    Raises:
        ValueError: an entry that is neither a network (host bits set count as an error, e.g.
            ``10.0.0.1/8``) nor a host name (letters, digits, ``-``, ``_`` and dots).
    """
    if isinstance(entries, str):
        entries = entries.split(",")
    networks: list[IPNetwork] = []
    names: set[str] = set()
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=True))
            continue
        except ValueError as exc:
            if "/" in entry or ":" in entry or _looks_numeric(entry):
                raise ValueError(f"{setting}: {entry!r} is not a valid network: {exc}") from exc
        name = host_normalize(entry)
        labels = name.split(".")
        if not name or not all(
            label and len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label)
            for label in labels
        ):
            raise ValueError(f"{setting}: {entry!r} is neither a network (CIDR) nor a host name")
        names.add(name)
    return AllowedTargets(
        networks=tuple(networks), names=frozenset(names), setting=setting, subject=subject
    )


def _looks_numeric(entry: str) -> bool:
    return all(c.isdigit() or c == "." for c in entry)


def check_target_parse(url: str, *, subject: str = "check") -> CheckTarget | Refusal:
    """Parse ``url`` as the sender will (``httpx.URL``) and apply the scheme part of the rule
    (``subject``: what the URL is for, in messages: "check" or "webhook").

    Returns the target, or the ``Refusal`` (``malformed``: unparsable or no host; ``scheme``:
    not http or https).
    """
    try:
        parsed = httpx.URL(url)
        scheme, host, port = parsed.scheme.lower(), host_normalize(parsed.host), parsed.port
    except (httpx.InvalidURL, TypeError, ValueError) as exc:  # IDNA errors are ValueErrors
        return Refusal(RULE_MALFORMED, f"The {subject} URL {url!r} cannot be parsed: {exc}.")
    if scheme not in SCHEMES:
        shown = f"not {scheme}" if scheme else f"and {url!r} has no scheme"
        return Refusal(RULE_SCHEME, f"A {subject} URL must be http or https, {shown}.")
    if not host:
        return Refusal(RULE_MALFORMED, f"The {subject} URL {url!r} has no host.")
    try:
        address: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    return CheckTarget(
        scheme=scheme, host=host, port=port or DEFAULT_PORTS[scheme], address=address
    )


def address_refusal(
    address: IPAddress,
    port: int,
    *,
    allowed: AllowedTargets,
    broker: BrokerEndpoint | None = None,
    host: str | None = None,
) -> Refusal | None:
    """Judge one address a check would connect to (``port``: the URL's effective port;
    ``host``: the name it was resolved from, for the message). Returns None when it may be
    reached, else the first rule it breaks, in this order: link-local, multicast, unspecified
    (always refused, also inside an IPv4-mapped, NAT64 or 6to4 address), the broker itself,
    outside the allowed networks. The messages name ``allowed.subject`` and
    ``allowed.setting``."""
    shown = f"{host} ({address})" if host and host != str(address) else str(address)
    what = f"a {allowed.subject} URL"
    for candidate in _judged_forms(address):
        if candidate.is_link_local:
            return Refusal(
                RULE_LINK_LOCAL,
                f"{shown} is a link-local address (cloud metadata and the like): {what} "
                "may never reach one.",
            )
        if candidate.is_multicast:
            return Refusal(
                RULE_MULTICAST, f"{shown} is a multicast address: {what} may never reach one."
            )
        if candidate.is_unspecified:
            return Refusal(
                RULE_UNSPECIFIED,
                f"{shown} is the unspecified address: {what} may never reach it.",
            )
    if broker is not None and broker.is_self(address, port):
        return Refusal(
            RULE_BROKER_ITSELF,
            f"{shown} port {port} is the broker itself: {what} may not point at it.",
        )
    if not allowed.allows_address(address):
        return Refusal(
            RULE_NOT_ALLOWED,
            f"{shown} is outside the networks a {allowed.subject} may reach ({allowed.setting}).",
        )
    return None


def name_unresolved_refusal(host: str, error: str, *, setting: str = SETTING) -> Refusal:
    """The refusal of a host name that is not listed in the setting (``setting``) and could
    not be resolved when the URL was set (``error``: why, e.g. the resolver's message)."""
    return Refusal(
        RULE_UNRESOLVED,
        f"{host} does not resolve ({error}); list it in {setting} to accept it unresolved.",
    )


def _unmapped(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) as its IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _judged_forms(address: IPAddress) -> list[IPAddress]:
    """``address`` and the IPv4 addresses an IPv6 one carries to (mapped, NAT64, 6to4)."""
    forms: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            forms.append(address.sixtofour)
        if address in _NAT64:
            forms.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return forms
