"""broker.remoting.server.advertised_of: the broker address routes and offsetMsgIds name."""

from __future__ import annotations

import pytest

from broker.remoting.server import advertised_of


def test_default_is_loopback_and_the_broker_port():
    advertised = advertised_of("", 10911)
    assert (advertised.host, advertised.port, advertised.address) == (
        "127.0.0.1",
        10911,
        "127.0.0.1:10911",
    )


def test_an_address_is_taken_as_given_and_a_host_name_resolved():
    assert advertised_of("10.0.0.5:20911", 10911).address == "10.0.0.5:20911"
    assert advertised_of("localhost:20911", 10911).address == "127.0.0.1:20911"


@pytest.mark.parametrize("bad", ["10.0.0.5", "10.0.0.5:port", ":"])
def test_a_malformed_address_is_refused(bad):
    with pytest.raises(ValueError):
        advertised_of(bad, 10911)
