"""The check-target rule (``broker.rules.check_targets``): which back-check URLs and addresses
the broker may reach."""

from __future__ import annotations

import ipaddress

import pytest

from broker.rules.check_targets import (
    DEFAULT_ALLOWED_NETWORKS,
    RULE_BROKER_ITSELF,
    RULE_LINK_LOCAL,
    RULE_MALFORMED,
    RULE_MULTICAST,
    RULE_NOT_ALLOWED,
    RULE_SCHEME,
    RULE_UNRESOLVED,
    RULE_UNSPECIFIED,
    SETTING,
    BrokerEndpoint,
    CheckTarget,
    Refusal,
    address_refusal,
    allowed_targets_parse,
    check_target_parse,
    host_normalize,
    name_unresolved_refusal,
)

WEBHOOK_SETTING = "HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS"

DEFAULT = allowed_targets_parse(DEFAULT_ALLOWED_NETWORKS)
EVERYWHERE = allowed_targets_parse("0.0.0.0/0,::/0")
BROKER = BrokerEndpoint(port=8000, networks=(ipaddress.ip_network("127.0.0.1/32"),))


def refusal_of(address: str, port: int = 9000, allowed=DEFAULT, broker=BROKER) -> str | None:
    refusal = address_refusal(ipaddress.ip_address(address), port, allowed=allowed, broker=broker)
    return None if refusal is None else refusal.rule


# --- The URL: scheme, host, port ------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/check", "file:///etc/passwd", "gopher://127.0.0.1:6379/_x"]
)
def test_only_http_and_https_are_accepted(url):
    refusal = check_target_parse(url)
    assert isinstance(refusal, Refusal) and refusal.rule == RULE_SCHEME
    assert "http or https" in refusal.message


def test_a_scheme_refusal_names_the_scheme_or_its_absence():
    assert check_target_parse("ftp://127.0.0.1/check").message == (
        "A check URL must be http or https, not ftp."
    )
    assert check_target_parse("127.0.0.1:9000/check").message == (
        "A check URL must be http or https, and '127.0.0.1:9000/check' has no scheme."
    )
    assert check_target_parse("ftp://h/", subject="webhook").message == (
        "A webhook URL must be http or https, not ftp."
    )


def test_a_malformed_refusal_names_the_url():
    assert check_target_parse("http:///check") == Refusal(
        RULE_MALFORMED, "The check URL 'http:///check' has no host."
    )
    unparsable = check_target_parse("http://[::1/check", subject="webhook")
    assert unparsable.rule == RULE_MALFORMED
    assert unparsable.message.startswith("The webhook URL 'http://[::1/check' cannot be parsed: ")


@pytest.mark.parametrize("url", ["http:///check", "http://[::1/check", "http://xn--/check"])
def test_a_url_without_a_host_or_unparsable_is_malformed(url):
    refusal = check_target_parse(url)
    assert isinstance(refusal, Refusal) and refusal.rule == RULE_MALFORMED


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://127.0.0.1:9000/check", ("http", "127.0.0.1", 9000, "127.0.0.1")),
        ("https://Producer.Internal./check", ("https", "producer.internal", 443, None)),
        ("HTTP://[::1]/check", ("http", "::1", 80, "::1")),
    ],
)
def test_targets_are_parsed_as_the_sender_parses_them(url, target):
    parsed = check_target_parse(url)
    assert isinstance(parsed, CheckTarget)
    address = None if parsed.address is None else str(parsed.address)
    assert (parsed.scheme, parsed.host, parsed.port, address) == target


# --- Addresses: always refused, the broker itself, the allowed networks ---------------------


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("169.254.169.254", RULE_LINK_LOCAL),  # cloud metadata
        ("fe80::1", RULE_LINK_LOCAL),
        ("::ffff:169.254.169.254", RULE_LINK_LOCAL),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", RULE_LINK_LOCAL),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", RULE_LINK_LOCAL),  # 6to4 of 169.254.169.254
        ("224.0.0.1", RULE_MULTICAST),
        ("ff02::1", RULE_MULTICAST),
        ("0.0.0.0", RULE_UNSPECIFIED),
        ("::", RULE_UNSPECIFIED),
    ],
)
def test_link_local_multicast_and_unspecified_are_refused_even_when_everything_is_allowed(
    address, rule
):
    assert refusal_of(address, allowed=EVERYWHERE) == rule
    assert refusal_of(address) == rule


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.9.9.9", "::1", "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1"]
    + ["fd00::1", "::ffff:10.0.0.1"],
)
def test_loopback_and_private_ranges_are_allowed_by_default(address):
    assert refusal_of(address) is None


@pytest.mark.parametrize("address", ["8.8.8.8", "172.32.0.1", "100.64.0.1", "2001:db8::1"])
def test_addresses_outside_the_allowed_networks_are_refused(address):
    assert refusal_of(address) == RULE_NOT_ALLOWED


def test_a_refusal_message_names_the_rule_and_the_resolved_name():
    refusal = address_refusal(
        ipaddress.ip_address("8.8.8.8"), 80, allowed=DEFAULT, host="producer.example"
    )
    assert refusal is not None
    assert refusal.message == (
        f"producer.example (8.8.8.8) is outside the networks a check may reach ({SETTING})."
    )


@pytest.mark.parametrize(
    ("address", "port", "message"),
    [
        (
            "169.254.169.254",
            80,
            "169.254.169.254 is a link-local address (cloud metadata and the like): a check URL "
            "may never reach one.",
        ),
        ("224.0.0.1", 80, "224.0.0.1 is a multicast address: a check URL may never reach one."),
        ("::", 80, ":: is the unspecified address: a check URL may never reach it."),
        (
            "127.0.0.1",
            8000,
            "127.0.0.1 port 8000 is the broker itself: a check URL may not point at it.",
        ),
        (
            "8.8.8.8",
            80,
            f"8.8.8.8 is outside the networks a check may reach ({SETTING}).",
        ),
    ],
)
def test_each_refusal_says_which_rule_the_address_broke(address, port, message):
    refusal = address_refusal(ipaddress.ip_address(address), port, allowed=DEFAULT, broker=BROKER)
    assert refusal is not None and refusal.message == message


def test_a_refusal_shows_the_address_once_when_the_host_is_the_address():
    refusal = address_refusal(ipaddress.ip_address("8.8.8.8"), 80, allowed=DEFAULT, host="8.8.8.8")
    assert refusal is not None and refusal.message.startswith("8.8.8.8 is outside")


def test_a_webhooks_refusal_names_the_webhook_and_its_own_setting():
    webhooks = allowed_targets_parse("10.0.0.0/8", setting=WEBHOOK_SETTING, subject="webhook")
    outside = address_refusal(ipaddress.ip_address("8.8.8.8"), 443, allowed=webhooks)
    assert outside is not None and outside.message == (
        f"8.8.8.8 is outside the networks a webhook may reach ({WEBHOOK_SETTING})."
    )
    metadata = address_refusal(ipaddress.ip_address("169.254.169.254"), 80, allowed=webhooks)
    assert metadata is not None and "a webhook URL may never reach one" in metadata.message


def test_an_unresolved_name_is_refused_naming_the_setting_that_would_accept_it():
    refusal = name_unresolved_refusal("producer.internal", "Name or service not known")
    assert refusal == Refusal(
        RULE_UNRESOLVED,
        "producer.internal does not resolve (Name or service not known); list it in "
        f"{SETTING} to accept it unresolved.",
    )
    webhook = name_unresolved_refusal("hooks.internal", "timeout", setting=WEBHOOK_SETTING)
    assert webhook.message.endswith(f"list it in {WEBHOOK_SETTING} to accept it unresolved.")


def test_the_broker_itself_is_refused_on_its_port_only():
    assert refusal_of("127.0.0.1", port=8000) == RULE_BROKER_ITSELF
    assert refusal_of("::ffff:127.0.0.1", port=8000) == RULE_BROKER_ITSELF
    assert refusal_of("127.0.0.1", port=8001) is None
    assert refusal_of("127.0.0.2", port=8000) is None  # it listens on 127.0.0.1 alone
    assert refusal_of("127.0.0.1", port=8000, broker=None) is None


def test_the_setting_narrows_the_networks():
    only_ten = allowed_targets_parse("10.0.0.0/8")
    assert refusal_of("10.9.9.9", allowed=only_ten) is None
    assert refusal_of("127.0.0.1", allowed=only_ten) == RULE_NOT_ALLOWED
    assert refusal_of("192.168.1.1", allowed=only_ten) == RULE_NOT_ALLOWED


# --- The setting ------------------------------------------------------------------------------


def test_the_setting_holds_networks_and_host_names():
    allowed = allowed_targets_parse(" 10.0.0.0/8, Producer.Internal. ,203.0.113.7,, fd00::/8 ")
    assert [str(n) for n in allowed.networks] == ["10.0.0.0/8", "203.0.113.7/32", "fd00::/8"]
    assert allowed.names == {"producer.internal"}
    assert allowed.allows_name("PRODUCER.internal")
    assert not allowed.allows_name("other.internal")
    # A listed name never widens the networks: its addresses are judged when a check is sent.
    assert not allowed.allows_address(ipaddress.ip_address("8.8.8.8"))


@pytest.mark.parametrize(
    "entry", ["10.0.0.1/8", "300.1.2.3", "10.0.0.0/33", "bad name", "a..b", "X10.0.0.0/8"]
)
def test_a_bad_setting_entry_is_an_error_naming_it(entry):
    with pytest.raises(ValueError, match=SETTING):
        allowed_targets_parse(entry)


@pytest.mark.parametrize("entry", ["10.0.0.1/8", "fd00::zz", "300.1.2.3"])
def test_an_entry_that_looks_like_a_network_is_refused_as_a_network(entry):
    with pytest.raises(ValueError, match="is not a valid network"):
        allowed_targets_parse(entry)


def test_a_bracketed_ipv6_entry_is_its_address():
    allowed = allowed_targets_parse("[fd00::1]")
    assert [str(n) for n in allowed.networks] == ["fd00::1/128"]


def test_a_host_name_label_is_at_most_63_characters():
    assert allowed_targets_parse("a" * 63 + ".internal").names == {"a" * 63 + ".internal"}
    with pytest.raises(ValueError, match="neither a network"):
        allowed_targets_parse("a" * 64 + ".internal")


def test_a_parsed_list_keeps_the_setting_and_subject_it_guards():
    check = allowed_targets_parse("10.0.0.0/8")
    assert (check.setting, check.subject) == (SETTING, "check")
    webhook = allowed_targets_parse("10.0.0.0/8", setting=WEBHOOK_SETTING, subject="webhook")
    assert (webhook.setting, webhook.subject) == (WEBHOOK_SETTING, "webhook")


@pytest.mark.parametrize(
    ("host", "normal"),
    [
        (" Producer.Internal. ", "producer.internal"),
        ("[::1]", "::1"),
        ("[FD00::1]", "fd00::1"),
        ("XBOX.", "xbox"),  # only brackets and a trailing dot go, never a letter
    ],
)
def test_a_host_is_normalized_to_lower_case_without_brackets_or_trailing_dot(host, normal):
    assert host_normalize(host) == normal
