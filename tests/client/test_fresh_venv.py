"""``pip install ./client`` into a fresh virtual environment with no Django, then run the seed's
producer and consumer (``python -m halfmoon_client.examples.seed_demo``) from it against a real
broker: pytest-django's live server (PostgreSQL, Redis) with short check settings, whose
back-check rounds this test runs as a Celery worker would.

Marked e2e: it builds a venv and installs the client and httpx with pip (about 10-20 s).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from broker.conf import conf
from broker.constants import HALF_TOPIC
from broker.models import Message, Transaction, TransactionEvent
from broker.services.checks import check_round
from broker.services.topology.writes import access_key_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT_S = 60
EXPECTED_CONSUMED = ["Hello RocketMQ 1", "Hello RocketMQ 4", "Hello RocketMQ 7"]


def run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv (no system site-packages) holding only pip, the client and
    httpx. The client is installed from a copy of client/, so the build leaves nothing in
    the work tree."""
    tmp = tmp_path_factory.mktemp("client-venv")
    source = shutil.copytree(
        ROOT / "client", tmp / "client", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    venv = tmp / "venv"
    made = run(sys.executable, "-m", "venv", venv, timeout=120)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run(python, "-m", "pip", "install", "-q", source)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def test_the_fresh_venv_has_the_client_and_no_django(client_python):
    django = run(client_python, "-c", "import django")
    assert django.returncode != 0
    assert "No module named 'django'" in django.stderr

    where = run(
        client_python, "-c", "import halfmoon_client, httpx; print(halfmoon_client.__file__)"
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(client_python.parents[1])  # not the checkout

    listed = run(client_python, "-m", "pip", "list", "--format", "json")
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "halfmoon-client" in names and "httpx" in names
    assert not names & {"django", "halfmoon", "djangorestframework", "celery"}


def test_the_seed_demo_runs_from_the_fresh_venv(client_python, live_server, broker_settings):
    broker_settings.update(
        HALFMOON_TRANSACTION_TIMEOUT_MS=1000,
        HALFMOON_TRANSACTION_CHECK_INTERVAL_MS=1000,
        HALFMOON_TRANSACTION_CHECK_MAX=3,
    )
    _, admin_token = access_key_create(name="demo-admin", is_admin=True)
    command = [
        client_python, "-m", "halfmoon_client.examples.seed_demo", "--url", live_server.url,
        "--token", admin_token, "--timeout-s", str(DEMO_TIMEOUT_S),
    ]  # fmt: skip
    demo = subprocess.Popen(
        [str(a) for a in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # The broker's side: back-check rounds on every half queue, as a worker's scans would.
        deadline = time.monotonic() + DEMO_TIMEOUT_S + 30
        while demo.poll() is None and time.monotonic() < deadline:
            for queue_id in range(conf.half_queue_nums):
                check_round(half_queue_id=queue_id)
            time.sleep(0.2)
    finally:
        if demo.poll() is None:
            demo.kill()
        stdout, stderr = demo.communicate(timeout=30)
    output = f"exit {demo.returncode}\n{stdout}\n{stderr}"
    lines = stdout.splitlines()

    assert demo.returncode == 0, output
    assert "Committed: 1, 4, 7 (check times 1, 1, 1)" in lines, output
    assert "Rolled back: 2, 5, 8 (check times 1, 1, 1)" in lines, output
    assert "Discarded after 3 checks: 0, 3, 6, 9" in lines, output
    assert lines[lines.index("Consumed:") + 1 :] == EXPECTED_CONSUMED, output

    # What reached the broker: ten half messages, their back-checks answered over the signed
    # check endpoint, the commits delivered on TranTest.
    assert Message.objects.filter(topic=HALF_TOPIC).count() == 10
    states = Counter(Transaction.objects.values_list("state", "check_times", "resolved_by"))
    assert states == Counter(
        {
            ("COMMITTED", 1, "check"): 3,
            ("ROLLED_BACK", 1, "check"): 3,
            ("DISCARDED", 3, "discard"): 4,
        }
    )
    answers = Counter(
        TransactionEvent.objects.filter(kind=TransactionEvent.Kind.CHECK_SENT).values_list(
            "outcome", flat=True
        )
    )
    assert answers == Counter({"COMMIT_MESSAGE": 3, "ROLLBACK_MESSAGE": 3, "UNKNOW": 12})
    delivered = Message.objects.filter(topic="TranTest").order_by("body")
    assert [bytes(m.body).decode() for m in delivered] == EXPECTED_CONSUMED
