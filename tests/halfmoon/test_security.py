"""Safe in production (halfmoon.security): with DJANGO_DEBUG off the web server, the Celery worker
and Celery beat refuse to start on the development SECRET_KEY, with a message saying what to set;
a key, a key file or DJANGO_DEBUG on lets them start. Each start is a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.rules.secret_keys import DEVELOPMENT_SECRET_KEY
from halfmoon.security import InsecureSecretKey, secret_key_check

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))
REFUSAL = "refuses to start: DJANGO_DEBUG is off and neither DJANGO_SECRET_KEY nor"
KEY = "a-production-key-of-this-test-0123456789"
PRINT_KEY = "from django.conf import settings; print(settings.SECRET_KEY)"


def process_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The tests' environment without any DJANGO_* variable (the suite sets a key of its own),
    with production settings, a var/ of its own and ``settings`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(
        DJANGO_SETTINGS_MODULE="halfmoon.settings",
        HALFMOON_VAR_DIR=str(tmp_path / "var"),
        PYTHONUNBUFFERED="1",
        **settings,
    )
    return env


def run(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def started(args: list[str], env: dict[str, str], line: str, timeout: float = 60) -> bool:
    """True when the long-running process ``args`` prints ``line`` (then it is stopped); False
    when it exits first or stays silent for ``timeout`` seconds."""
    log = env["HALFMOON_VAR_DIR"] + ".log"
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in Path(log).read_text():
                return True
            if process.poll() is not None:
                return False
            time.sleep(0.2)
        return False
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- The rule ------------------------------------------------------------------------------------


def test_the_development_key_is_refused_only_with_debug_off():
    with pytest.raises(InsecureSecretKey, match="web server refuses to start"):
        secret_key_check(secret_key=DEVELOPMENT_SECRET_KEY, debug=False, process="web server")
    secret_key_check(secret_key=DEVELOPMENT_SECRET_KEY, debug=True, process="web server")
    secret_key_check(secret_key=KEY, debug=False, process="web server")


# --- The web server ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["halfmoon.asgi", "halfmoon.wsgi"])
def test_the_web_server_refuses_the_development_key_in_production(tmp_path, module):
    result = run(
        [sys.executable, "-c", f"import {module}"], process_env(tmp_path, DJANGO_DEBUG="0")
    )

    assert result.returncode != 0
    assert f"web server {REFUSAL}" in result.stderr
    assert "DJANGO_SECRET_KEY_FILE" in result.stderr


def test_the_web_server_refuses_it_when_debug_is_left_at_its_default(tmp_path):
    result = run([sys.executable, "-c", "import halfmoon.asgi"], process_env(tmp_path))

    assert result.returncode != 0 and REFUSAL in result.stderr


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": KEY}, KEY),
        ({"DJANGO_DEBUG": "1"}, DEVELOPMENT_SECRET_KEY),
    ],
)
@pytest.mark.parametrize("module", ["halfmoon.asgi", "halfmoon.wsgi"])
def test_the_web_server_starts_with_a_key_or_in_debug(tmp_path, module, settings, key):
    result = run(
        [sys.executable, "-c", f"import {module}; {PRINT_KEY}"], process_env(tmp_path, **settings)
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == key


def test_the_key_may_come_from_a_file(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text(KEY + "\n")

    result = run(
        [sys.executable, "-c", f"import halfmoon.asgi; {PRINT_KEY}"],
        process_env(tmp_path, DJANGO_DEBUG="0", DJANGO_SECRET_KEY_FILE=str(key_file)),
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == KEY


def test_a_missing_key_file_stops_the_process_with_its_name(tmp_path):
    missing = tmp_path / "nowhere"

    result = run(
        [sys.executable, "-c", "import halfmoon.asgi"],
        process_env(tmp_path, DJANGO_DEBUG="0", DJANGO_SECRET_KEY_FILE=str(missing)),
    )

    assert result.returncode != 0
    assert f"DJANGO_SECRET_KEY_FILE='{missing}' cannot be read" in result.stderr


def test_management_commands_that_sign_nothing_still_run_without_a_key(tmp_path):
    result = run([sys.executable, "manage.py", "check"], process_env(tmp_path, DJANGO_DEBUG="0"))

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


# --- Celery worker and beat ----------------------------------------------------------------------

WORKER = [CELERY, "-A", "tasks", "worker", "--loglevel", "info", "--concurrency", "1"]


def beat(tmp_path: Path) -> list[str]:
    """Celery beat with a file schedule (the refusal comes before any scheduler is made)."""
    schedule = str(tmp_path / "beat-schedule")
    return [CELERY, "-A", "tasks", "beat", "--loglevel", "info", "--pidfile=", "-s", schedule]


@pytest.mark.parametrize("name", ["worker", "beat"])
def test_celery_refuses_the_development_key_in_production_at_once(tmp_path, name):
    args = WORKER if name == "worker" else beat(tmp_path)
    began = time.monotonic()

    result = run(args, process_env(tmp_path, DJANGO_DEBUG="0"), timeout=60)

    assert result.returncode != 0
    assert f"Celery {name} {REFUSAL}" in result.stderr
    assert time.monotonic() - began < 30  # it exits; it does not wait for anything


def test_a_celery_worker_with_a_key_starts(tmp_path):
    env = process_env(tmp_path, DJANGO_DEBUG="0", DJANGO_SECRET_KEY=KEY)

    own = f"security-test-{os.getpid()}"  # its own queue: it takes no other test's task
    assert started([*WORKER, "-n", f"{own}@%h", "-Q", own], env, " ready.")


def test_celery_beat_in_debug_starts(tmp_path):
    env = process_env(tmp_path, DJANGO_DEBUG="1")
    args = [*beat(tmp_path), "-S", "celery.beat:PersistentScheduler"]

    assert started(args, env, "beat: Starting...")
