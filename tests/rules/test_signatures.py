"""RocketMQ 5's MQv2-HMAC-SHA1 signature (broker.rules.signatures)."""

from __future__ import annotations

import pytest
from rocketmq.v5.util.signature import Signature

from broker.rules.signatures import (
    SIGNATURE_ALGORITHM,
    SIGNED_HEADER,
    SignedAuthorization,
    authorization_parse,
    signature_compute,
    signature_matches,
)

pytestmark = pytest.mark.unit

DATE_TIME = "20240102T030405Z"
SECRET = "s3cr3t-ÄÖ-key"
# HMAC-SHA1 test vector (RFC 2104 style, widely published).
FOX = "The quick brown fox jumps over the lazy dog"
FOX_SHA1 = "de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9"


def header(credential: str = "orders-app", signature: str = FOX_SHA1, sep: str = ", ") -> str:
    """The header as rocketmq-clients write it."""
    return (
        f"MQv2-HMAC-SHA1 Credential={credential}{sep}SignedHeaders=x-mq-date-time{sep}"
        f"Signature={signature}"
    )


def test_the_constants_are_rocketmqs() -> None:
    assert SIGNATURE_ALGORITHM == "MQv2-HMAC-SHA1"
    assert SIGNED_HEADER == "x-mq-date-time"


def test_the_signature_is_hmac_sha1_in_lower_case_hex() -> None:
    assert signature_compute(secret="key", date_time=FOX) == FOX_SHA1


def test_the_signature_is_the_python_clients_for_a_non_ascii_secret() -> None:
    assert signature_compute(secret=SECRET, date_time=DATE_TIME) == Signature.sign(
        SECRET, DATE_TIME
    )


def test_the_header_the_python_client_writes_is_parsed() -> None:
    assert authorization_parse(header()) == SignedAuthorization(
        access_key="orders-app", signed_headers=("x-mq-date-time",), signature=FOX_SHA1
    )


def test_an_upper_case_signature_is_parsed_lower_cased() -> None:
    assert authorization_parse(header(signature=FOX_SHA1.upper())).signature == FOX_SHA1


def test_spaces_around_the_items_and_the_header_are_ignored() -> None:
    parsed = authorization_parse("  " + header(sep=" ,  ") + "  ")
    assert parsed.access_key == "orders-app"
    assert parsed.signature == FOX_SHA1


def test_spaces_around_a_value_are_ignored() -> None:
    parsed = authorization_parse(
        f"MQv2-HMAC-SHA1 Credential= ak , SignedHeaders= X-MQ-Date-Time ;x-mq-a, "
        f"Signature= {FOX_SHA1} "
    )
    assert parsed.access_key == "ak"
    assert parsed.signed_headers == ("x-mq-date-time", "x-mq-a")
    assert parsed.signature == FOX_SHA1


def test_an_empty_credential_is_an_empty_access_key() -> None:
    assert authorization_parse(header(credential="")).access_key == ""


def test_a_credential_is_taken_whole() -> None:
    assert authorization_parse(header(credential="a=b/c d")).access_key == "a=b/c d"


def test_signed_headers_are_optional() -> None:
    parsed = authorization_parse(f"MQv2-HMAC-SHA1 Credential=ak, Signature={FOX_SHA1}")
    assert parsed == SignedAuthorization(access_key="ak", signed_headers=(), signature=FOX_SHA1)


def test_other_items_are_ignored() -> None:
    parsed = authorization_parse(header() + ", Region=x")
    assert parsed.access_key == "orders-app"


NOT_HEX = "The authorization header's Signature must be 40 hex digits (HMAC-SHA1)."
NO_DATE_TIME = "The authorization header's SignedHeaders must name x-mq-date-time."


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "The authorization header must start with MQv2-HMAC-SHA1, not ''."),
        ("Bearer hm_abc", "The authorization header must start with MQv2-HMAC-SHA1, not 'Bearer'."),
        (
            header().replace("MQv2", "mqv2"),
            "The authorization header must start with MQv2-HMAC-SHA1, not 'mqv2-HMAC-SHA1'.",
        ),
        ("MQv2-HMAC-SHA1", "The authorization header's item '' is not Name=value."),
        (
            header().replace("Credential=", "Credential"),
            "The authorization header's item 'Credentialorders-app' is not Name=value.",
        ),
        (
            f"MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature={FOX_SHA1}",
            "The authorization header has no Credential.",
        ),
        (
            f"MQv2-HMAC-SHA1 credential=ak, Signature={FOX_SHA1}",
            "The authorization header has no Credential.",
        ),
        (
            "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time",
            "The authorization header has no Signature.",
        ),
        (header(signature=""), NOT_HEX),
        (header(signature=FOX_SHA1[:-1]), NOT_HEX),
        (header(signature=FOX_SHA1 + "0"), NOT_HEX),
        (header(signature=FOX_SHA1[:-1] + "g"), NOT_HEX),
        (header(signature="g" + FOX_SHA1[1:]), NOT_HEX),
        (header().replace("x-mq-date-time", "x-mq-client-id"), NO_DATE_TIME),
        (header().replace("x-mq-date-time", ""), NO_DATE_TIME),
    ],
)
def test_a_malformed_header_is_refused_saying_why(value: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        authorization_parse(value)
    assert str(raised.value) == message


def test_a_signature_made_with_the_secret_matches_in_either_case() -> None:
    good = Signature.sign(SECRET, DATE_TIME)
    assert signature_matches(secret=SECRET, date_time=DATE_TIME, signature=good)
    assert signature_matches(secret=SECRET, date_time=DATE_TIME, signature=good.upper())


@pytest.mark.parametrize(
    ("secret", "date_time"),
    [("other-secret", DATE_TIME), (SECRET, "20240102T030406Z"), ("", DATE_TIME)],
)
def test_another_secret_or_date_time_does_not_match(secret: str, date_time: str) -> None:
    good = Signature.sign(SECRET, DATE_TIME)
    assert not signature_matches(secret=secret, date_time=date_time, signature=good)


@pytest.mark.parametrize("signature", ["", "é" * 40, "zz" + FOX_SHA1[2:], FOX_SHA1[:-1]])
def test_a_signature_that_is_not_the_hex_digest_never_matches(signature: str) -> None:
    assert not signature_matches(secret="key", date_time=FOX, signature=signature)
