"""The system-topic rule, written once in broker.rules.topics: producers send to no system topic;
consumers receive from none of the undeliverable ones, but may read %RETRY% and %DLQ% topics."""

import re

import pytest

from broker.rules.topics import is_system_topic, is_undeliverable_topic, system_topic_pattern

SYSTEM = [
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_ANYTHING",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "%DLQ%OrderConsumers",
    "%RETRY%OrderConsumers",
]
USER = [
    "TranTest",
    "Orders",
    "rmq_sys_lowercase",  # the prefixes are case-sensitive, as RocketMQ's
    "MY_RMQ_SYS_TOPIC",  # a prefix, not a substring
    "TRANS_CHECK_MAX_TIME_TOPIC_2",  # the discard topic is one exact name
    "XTRANS_CHECK_MAX_TIME_TOPIC",
    "%ORDERS%",  # a % alone does not make a system topic
    "RMQ.SYS_X",  # a prefix's characters are literal, not a pattern's
]


@pytest.mark.parametrize(
    "name",
    ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "RMQ_SYS_ANYTHING"],
)
def test_rmq_sys_topics_are_system_and_never_delivered(name):
    assert is_system_topic(name)
    assert is_undeliverable_topic(name)


def test_the_discard_topic_is_system_and_never_delivered():
    assert is_system_topic("TRANS_CHECK_MAX_TIME_TOPIC")
    assert is_undeliverable_topic("TRANS_CHECK_MAX_TIME_TOPIC")


@pytest.mark.parametrize("name", ["%DLQ%OrderConsumers", "%RETRY%OrderConsumers"])
def test_retry_and_dead_letter_topics_are_system_but_a_consumer_may_read_them(name):
    assert is_system_topic(name)
    assert not is_undeliverable_topic(name)


@pytest.mark.parametrize("name", USER)
def test_other_names_are_user_topics(name):
    assert not is_system_topic(name)
    assert not is_undeliverable_topic(name)


@pytest.mark.parametrize("name", SYSTEM + USER)
def test_the_schemas_pattern_matches_exactly_the_system_topics(name):
    assert bool(re.search(system_topic_pattern(), name)) is is_system_topic(name)
