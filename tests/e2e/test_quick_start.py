"""The README's quick start from a fresh clone, with no database configured: ``bin/run`` starts
the embedded PostgreSQL and the seed demo and the batch end work against it.

The clone is the working tree's tracked and untracked-not-ignored files (``git ls-files -co
--exclude-standard``, so it holds what would be committed) in a new directory, with ``.venv`` a
link to this checkout's. ``bin/run --no-setup`` runs there with no ``DATABASE_URL`` (nor any
``HALFMOON_*``, ``DJANGO_*``, ``CELERY_*`` variable of this environment), the embedded server
on a port where nothing answers (``HALFMOON_EMBEDDED_POSTGRES_PORT``), the web server on
another, and this run's Redis database. What must hold:

- the embedded server runs under supervisord with its data directory in the clone's
  ``var/postgres``, on that port;
- the clone's code is what runs: every program's working directory is the clone (``python -m``,
  ``manage.py`` and Celery put it first on ``sys.path``, ahead of the editable install of this
  checkout), and a mark added to the clone's sign-in template shows in the web server's page;
- ``manage.py demo`` (the README's short check settings) consumes exactly 1, 4 and 7;
- an admin key from ``manage.py create_access_key`` commits and rolls back through
  ``POST /api/v1/transactions/end-batch`` (200, one result per end);
- SIGINT to supervisord stops every process it started, the server included.

Every wait is on a condition (``/healthz``, the server's ``postmaster.pid``), never a fixed
sleep; whatever is left is killed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis

from halfmoon.embedded_base import answers
from tests.e2e.processes import ROOT, BinRun, free_port, healthy, main_processes, manage
from tests.e2e.test_demo import CHECK_SETTINGS, demo_outcome_check, demo_run

pytestmark = pytest.mark.e2e

STARTUP_TIMEOUT_S = 240  # initdb, then every migration on a new database, on a loaded machine
STOP_TIMEOUT_S = 90
PROGRAMS = ("web", "worker", "beat", "pipeline", "timer")
CLONE_MARK = "<!-- quick-start clone -->"


@contextmanager
def fresh_clone() -> Iterator[Path]:
    """A copy of the working tree's tracked and untracked-not-ignored files, ``.venv`` a link to
    this checkout's; removed afterwards. It lies in a directory of its own under the system's
    temporary directory, mode 0755: run as root, the embedded server runs as another user
    (halfmoon.embedded), which must reach the clone's ``var/``."""
    top = Path(tempfile.mkdtemp(prefix="halfmoon-quick-start-"))
    top.chmod(0o755)
    clone = top / "halfmoon"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    try:
        for name in filter(None, listed.split("\0")):
            source = ROOT / name
            if not source.exists() and not source.is_symlink():
                continue  # deleted in the working tree, not yet in the index
            target = clone / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        (clone / ".venv").symlink_to(ROOT / ".venv")
        yield clone
    finally:
        shutil.rmtree(top, ignore_errors=True)


def quick_start_env(redis_url: str, web_port: int, pg_port: int) -> dict[str, str]:
    """This environment less the database and every Halfmoon, Django and Celery setting, plus
    the ports, one web server, this run's Redis database and the README's short check
    settings."""
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("HALFMOON_", "CELERY_", "DJANGO_", "DATABASE_URL"))
        },
        "REDIS_URL": redis_url,
        "HALFMOON_PORT": str(web_port),
        "HALFMOON_EMBEDDED_POSTGRES_PORT": str(pg_port),
        "HALFMOON_GRPC_PORT": str(free_port()),  # not 8081: another worker's bin/run may hold it
        "WEB_CONCURRENCY": "1",
        "PYTHONUNBUFFERED": "1",
        **CHECK_SETTINGS,
    }


def postmaster(data_dir: Path) -> tuple[int, int] | None:
    """(pid, port) from the server's ``postmaster.pid``, or None while there is none."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def test_bin_run_from_a_fresh_clone_on_the_embedded_postgresql() -> None:
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()  # no Celery task left by other tests
    web_port, pg_port = free_port(), free_port()
    assert not answers("127.0.0.1", pg_port)
    url = f"http://127.0.0.1:{web_port}"

    with fresh_clone() as clone:
        login = clone / "templates" / "console" / "auth" / "login.html"
        block = "{% block content %}"
        login.write_text(login.read_text().replace(block, block + CLONE_MARK, 1))
        env = quick_start_env(redis_url, web_port, pg_port)
        var = clone / "var"
        run = BinRun(
            clone, env, clone.parent / "run.log", var, ("postgres", "web_0", "worker", "beat")
        )
        try:
            run.wait_until("/healthz", lambda: healthy(url), STARTUP_TIMEOUT_S)
            run.wait_until(
                "web, worker, beat, pipeline and timer",
                lambda: set(main_processes(run.root)) == set(PROGRAMS),
                STARTUP_TIMEOUT_S,
            )

            # The embedded server: the clone's var/postgres, on the chosen port, run by
            # supervisord (a descendant of bin/run, which became supervisord).
            assert (var / "postgres" / "PG_VERSION").exists(), run.report()
            server = postmaster(var / "postgres")
            assert server is not None and server[1] == pg_port, (server, run.report())
            assert server[0] in {p.pid for p in run.root.children(recursive=True)}, run.report()

            # The clone's code runs.
            for name, proc in main_processes(run.root).items():
                assert Path(proc.cwd()) == clone, (name, proc.cwd())
            page = httpx.get(f"{url}/console/login/", timeout=30)
            assert page.status_code == 200 and CLONE_MARK in page.text, page.text[-500:]
            where = manage(
                env,
                "shell",
                "-c",
                "import broker, console, halfmoon, tasks; "
                "print(*(m.__file__ for m in (broker, console, halfmoon, tasks)))",
                cwd=clone,
            )
            files = where.splitlines()[-1].split()  # after the shell's own notice
            assert len(files) == 4 and all(Path(f).is_relative_to(clone) for f in files), where

            # The README's demo, from another terminal: no database setting needed.
            demo = demo_run(env, url, clone, run.report)
            demo_outcome_check(
                demo, f"postgres://postgres@127.0.0.1:{pg_port}/halfmoon", run.report()
            )

            # An admin key, then a batch end over the API.
            token = manage(env, "create_access_key", "quick-start", "--admin", cwd=clone)
            headers = {"Authorization": f"Bearer {token.split()[-1]}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                made = api.post("/api/v1/topics", json={"name": "QuickStart", "queue_nums": 1})
                assert made.status_code == 201, made.text
                made = api.post("/api/v1/producer-groups", json={"name": "QuickStartGroup"})
                assert made.status_code == 201, made.text
                ids = []
                for body in ("kept", "dropped"):
                    half = api.post(
                        "/api/v1/transactions",
                        json={"producer_group": "QuickStartGroup", "topic": "QuickStart",
                              "body": body},
                    )  # fmt: skip
                    assert half.status_code == 201, half.text
                    ids.append(half.json()["transaction_id"])
                ended = api.post(
                    "/api/v1/transactions/end-batch",
                    json={
                        "ends": [
                            {"transaction_id": ids[0], "producer_group": "QuickStartGroup",
                             "action": "commit"},
                            {"transaction_id": ids[1], "producer_group": "QuickStartGroup",
                             "action": "rollback"},
                        ]
                    },
                )  # fmt: skip
                assert ended.status_code == 200, ended.text
                results = ended.json()["results"]
                assert [r["status"] for r in results] == [200, 200], results
                assert [r["body"]["state"] for r in results] == ["COMMITTED", "ROLLED_BACK"]

            # Ctrl-C: supervisord stops every program, the server last.
            run.interrupt(STOP_TIMEOUT_S)
            assert postmaster(var / "postgres") is None, run.report()
            assert not answers("127.0.0.1", pg_port)
        finally:
            run.kill()
