"""Fuzz the HTTP API with schemathesis against a broker, every check enabled.

    .venv/bin/python bench/fuzz.py [--requests 10000] [--url URL --token ADMIN_TOKEN] [--seed N]
                                   [--operation "GET /api/v1/transactions" ...]

Without ``--url`` it starts a broker as bench/throughput.py does (database ``halfmoon_fuzz``
recreated, ``DATABASE_URL`` to change; Redis database 12 unless ``REDIS_URL``; 2 web
processes, production settings) and stops it at the end. It seeds a topic, groups and a half
message, reads the document through ``tests.schema_bounds.generator_document`` and sends cases
of every operation, half schema-valid and half not, until ``--requests`` requests were sent
(``--requests 20``: a smoke run); ``--operation`` (repeatable) keeps only the operations named
``METHOD /path`` as the document spells them. ``positive_data_acceptance`` admits only the documented refusals no schema
can state (``tests.schema_bounds.refusal_documented``), as tests/api/test_schemathesis.py.
Each distinct failure is printed once (with the error code answered); the last line is::

    requests=<n> server_errors=<n> schema_violations=<n>
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

BENCH_DIR = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH_DIR.parent), str(BENCH_DIR)]

from throughput import (  # noqa: E402
    CHILDREN,
    LOG_DIR,
    Pg,
    _exit_on_signal,
    base_env,
    pick_port,
    run,
    start_web,
    wait_http,
)

from tests.schema_bounds import (  # noqa: E402
    generator_document,
    positive_data_acceptance_documented,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/halfmoon_fuzz"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
EXAMPLES_PER_ROUND = 50  # cases per operation and generation mode before the next operation
SMOKE_EXAMPLES = 2  # per operation and mode when the budget is below one round of operations
TOPIC, PRODUCER_GROUP, CONSUMER_GROUP, TRANSACTION_ID = "FuzzTopic", "FuzzG", "FuzzC", "FUZZ-TX-1"


def start_broker(database_url: str) -> tuple[str, str]:
    """Recreate and migrate the bench database, make an admin key, serve the broker; return
    its base URL and the admin token."""
    pg = Pg.parse(database_url)
    env = base_env(pg.url_for(pg.dbname), "halfmoon.settings")
    env["REDIS_URL"] = os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)
    pg.recreate(pg.dbname)
    manage = [sys.executable, str(BENCH_DIR.parent / "manage.py")]
    run([*manage, "migrate", "--noinput", "-v", "0"], env=env)
    out = run([*manage, "create_access_key", "fuzz-admin", "--admin"], env=env)
    token = out.strip().splitlines()[-1].strip()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / "fuzz-uvicorn.log"
    port = pick_port(None)
    server = start_web(env, port, log)
    wait_http(port, "/healthz", server, log)
    print(f"fuzz: broker on port {port}, database {pg.dbname}, log {log}")
    return f"http://127.0.0.1:{port}", token


def seed(url: str, token: str) -> None:
    """A topic, a producer group without check_url, a consumer group and a half message (an
    answer of 409, from an earlier run against the same broker, is fine)."""
    headers = {"Authorization": f"Bearer {token}"}
    for path, body in [
        ("/api/v1/topics", {"name": TOPIC, "queue_nums": 2}),
        ("/api/v1/producer-groups", {"name": PRODUCER_GROUP, "check_url": None}),
        ("/api/v1/consumer-groups", {"name": CONSUMER_GROUP}),
        (
            "/api/v1/transactions",
            {
                "producer_group": PRODUCER_GROUP,
                "topic": TOPIC,
                "body": "seed",
                "msg_id": TRANSACTION_ID,
            },
        ),
    ]:
        response = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)
        if response.status_code not in (200, 201, 409):
            raise SystemExit(f"seeding {path} failed: {response.status_code} {response.text}")


class Tally:
    """What the run saw: requests sent, 5xx answers, other failed checks and one example of
    each distinct failure."""

    def __init__(self) -> None:
        self.requests = 0
        self.server_errors = 0
        self.schema_violations = 0
        self.statuses: Counter[int] = Counter()
        self.seen: Counter[tuple[str, str]] = Counter()

    def failure(self, label: str, failure: Any, answer: str = "", sent: str = "") -> None:
        """Count one failed check of a case (a 5xx is counted by ``after_call``); ``answer``
        (the status and error code the case got) and ``sent`` (the request's URL) are printed
        with its first occurrence."""
        title = getattr(failure, "title", type(failure).__name__)
        if title != "Server error":
            self.schema_violations += 1
        key = (label, title)
        self.seen[key] += 1
        if self.seen[key] == 1:
            message = str(getattr(failure, "message", "")).strip().splitlines()
            print(f"FAIL {label}: {title} [{answer}]: {' '.join(message)[:400]}")
            if sent:
                print(f"  sent: {sent[:400]}")


def fuzz(
    url: str, token: str, budget: int, seed_value: int | None, only: list[str] | None = None
) -> Tally:
    """Send schemathesis cases to ``url`` until ``budget`` requests were sent; ``only``: the
    operations (``METHOD /path``) to fuzz, every one when None or empty."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.config import SchemathesisConfig
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    document = httpx.get(
        f"{url}/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"}, timeout=30
    ).json()
    config = SchemathesisConfig.from_dict({"auth": {"openapi": {"accessKey": {"bearer": token}}}})
    schema = schemathesis.openapi.from_dict(generator_document(document), config=config)
    tally = Tally()

    @schema.hook
    def after_call(context: Any, case: Any, response: Any) -> None:
        tally.requests += 1
        tally.statuses[response.status_code] += 1
        if response.status_code >= 500:
            tally.server_errors += 1

    operations = [result.ok() for result in schema.get_all_operations()]
    if only:
        operations = [op for op in operations if f"{op.method.upper()} {op.path}" in only]
        if not operations:
            raise SystemExit(f"no operation of the document is one of {only}")
    print(f"fuzz: {len(operations)} operations from {url}/api/schema/")
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    examples = EXAMPLES_PER_ROUND if budget >= 4 * len(operations) else SMOKE_EXAMPLES
    while tally.requests < budget:
        for operation in operations:
            for mode in modes:
                if tally.requests >= budget:
                    return tally
                label = f"{operation.method.upper()} {operation.path}"

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(
                    max_examples=examples,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                    derandomize=seed_value is not None,
                )
                def one(case: Any) -> None:
                    if tally.requests >= budget:
                        return
                    response = case.call(base_url=url)
                    try:
                        case.validate_response(
                            response,
                            excluded_checks=[positive_data_acceptance],
                            additional_checks=[positive_data_acceptance_documented],
                            transport_kwargs={"base_url": url},
                        )
                    except BaseException as exc:  # noqa: BLE001 - a failed check, counted
                        if isinstance(exc, KeyboardInterrupt | SystemExit):
                            raise
                        answer = f"{response.status_code} {_error_code(response)}".strip()
                        for failure in getattr(exc, "exceptions", None) or [exc]:
                            sent = str(getattr(response.request, "url", ""))
                            tally.failure(label, failure, answer, sent)  # noqa: B023

                one()
    return tally


def _error_code(response: Any) -> str:
    """The ``error.code`` of an error body, or "" for any other answer."""
    try:
        return str(response.json()["error"]["code"])
    except Exception:  # noqa: BLE001 - not the error body: no code
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests to send")
    parser.add_argument("--url", help="a running broker (default: start one)")
    parser.add_argument("--token", help="an admin access key of --url")
    parser.add_argument("--seed", type=int, help="derandomize (same cases on every run)")
    parser.add_argument(
        "--operation", action="append", help='only this operation, e.g. "GET /api/v1/topics"'
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if args.url and not args.token:
        raise SystemExit("--url needs --token (an admin key of that broker)")
    started = time.monotonic()
    try:
        if args.url:
            url, token = args.url.rstrip("/"), args.token
        else:
            url, token = start_broker(os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL))
        seed(url, token)
        tally = fuzz(url, token, args.requests, args.seed, args.operation)
    finally:
        CHILDREN.stop_all()
    print(
        f"fuzz: {tally.requests} requests in {time.monotonic() - started:.0f} s; "
        f"statuses {dict(sorted(tally.statuses.items()))}; {len(tally.seen)} distinct failures"
        + "".join(f"\n  {n:5d}  {label}: {title}" for (label, title), n in tally.seen.items())
    )
    print(
        f"requests={tally.requests} server_errors={tally.server_errors} "
        f"schema_violations={tally.schema_violations}"
    )


if __name__ == "__main__":
    main()
