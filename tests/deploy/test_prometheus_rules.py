"""The Prometheus rules and Grafana dashboard shipped in deploy/: ``promtool check
rules`` and ``promtool test rules`` pass (Debian's ``prometheus`` package; ``.ci/run``
installs it when missing, and a missing promtool fails these tests rather than skipping
them), every shipped alert has unit tests that make it fire and keep it quiet, a severity and
a runbook section in docs/alerts.md, and every metric the rules and the dashboard read is one
``/metrics`` exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import REGISTRY
from broker.rules.alerts import KINDS

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "halfmoon-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "halfmoon-alerts-test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "halfmoon-dashboard.json"
RUNBOOK = ROOT / "docs" / "alerts.md"
METRIC = re.compile(r"\b((?:halfmoon|rocketmq)_[a-z0-9_]+)")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def promtool() -> str:
    """The promtool binary; fails the test (never skips it) when it is not installed."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: install Debian's prometheus package "
            "(apt-get install -y prometheus; .ci/run does it)"
        )
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def alerting_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the Markdown headings: lower case, punctuation dropped, spaces to
    hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug)
    return out


def exported_metrics() -> set[str]:
    """The metric family names /metrics serves (counters without ``_total``)."""
    text = generate_latest(REGISTRY).decode()
    return {family.name for family in text_string_to_metric_families(text)}


def metric_names(expression: str) -> set[str]:
    """The broker's metric names an expression reads, as families (suffixes stripped)."""
    names = set()
    for name in METRIC.findall(expression):
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names


def test_promtool_checks_the_rules():
    result = run("check", "rules", str(RULES), cwd=ROOT)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in result.stdout


def test_promtool_unit_tests_of_the_rules_pass():
    result = run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_shipped_alert_is_tested_firing_and_quiet():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    names = {rule["alert"] for rule in alerting_rules()}

    assert names == fired, f"alerts never made to fire: {names - fired}"
    assert names == quiet, f"alerts never shown quiet: {names - quiet}"


def test_every_alert_has_a_severity_and_a_runbook_section():
    sections = anchors(RUNBOOK.read_text())

    for rule in alerting_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/alerts.md" and anchor in sections, (rule["alert"], url)
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_halfmoons_own_alert_kinds_link_into_the_same_runbook():
    sections = anchors(RUNBOOK.read_text())

    for kind, spec in KINDS.items():
        path, _, anchor = spec.runbook_url.partition("#")
        assert path == "docs/alerts.md" and anchor in sections, kind


@pytest.mark.django_db
def test_the_rules_read_metrics_the_broker_exports():
    exported = exported_metrics()

    for rule in alerting_rules():
        assert metric_names(rule["expr"]) <= exported, rule["alert"]


@pytest.mark.django_db
def test_the_grafana_dashboard_reads_metrics_the_broker_exports():
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_metrics()

    assert dashboard["uid"] == "halfmoon-broker" and dashboard["title"] == "Halfmoon broker"
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    read: set[str] = set()
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names <= exported, (panel["title"], names - exported)
            read |= names
    for variable in dashboard["templating"]["list"]:
        assert metric_names(variable["definition"]) <= exported
    # Every RIP-46 family and every alerting family is on the dashboard.
    assert {
        "rocketmq_half_messages",
        "rocketmq_commit_messages",
        "rocketmq_rollback_messages",
        "rocketmq_finish_message_latency",
        "halfmoon_pending_transactions",
        "halfmoon_pending_oldest_timestamp_seconds",
        "halfmoon_pending_max_check_times",
        "halfmoon_transaction_check_max",
        "halfmoon_producer_group_checks",
        "halfmoon_producer_group_discarded",
        "halfmoon_producer_group_reachable",
        "halfmoon_producer_group_last_answer_timestamp_seconds",
        "halfmoon_consumer_group_lag",
        "halfmoon_consumer_group_dlq_messages",
    } <= read
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
