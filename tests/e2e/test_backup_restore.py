"""A base backup plus WAL archiving, restored to a point in time on a fresh server, as
docs/operations.md "Backups" describes; the archive is newer than the restore point.

A PostgreSQL cluster of the test's own archives its WAL; ``pg_basebackup`` is taken before
anything is written. A broker (its web server) commits a first batch of transactions through
the API, ``manage.py archive`` exports them; a restore point is made; a second batch is
committed and archived, so the Parquet archive holds segments newer than the restore point.
The backup is then restored on a fresh cluster up to the restore point (the WAL replayed from
the archive) and promoted.

What is proved on the restored database:
- ``manage.py rebuild_transactions --dry-run`` exits 0 (no difference): the first batch is
  there, committed; the second is not;
- ``manage.py archive`` adopts the archive's newer segments: nothing is written again (every
  archive file unchanged), the watermark reaches past the archive's newest segment;
- the broker serves: a transaction sent and committed through the API gets a commit log offset
  and a queue offset above every one the archive holds.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.backups import pitr_restore, restore_point, wal_archive, wal_switch_archived
from tests.e2e.processes import Stack, broker_env, free_port, manage
from tests.e2e.services import PrivatePostgres, pg_bin

pytestmark = pytest.mark.e2e

TOPIC = "BackupTopic"
GROUP = "BackupGroup"
DATABASE = "halfmoon_backup"
BATCH = 20
SEGMENT_MS = 1000
LAG_MS = 500
SETTINGS = {
    "HALFMOON_ARCHIVE_SEGMENT_MS": str(SEGMENT_MS),
    "HALFMOON_ARCHIVE_LAG_MS": str(LAG_MS),
    "HALFMOON_SPARK_MASTER": "local[1]",
    "HALFMOON_SPARK_DRIVER_MEMORY": "512m",
    "HALFMOON_LOG_LEVEL": "INFO",
}
ARCHIVE_S = 300  # one `manage.py archive`: a Spark JVM's start on a loaded machine, then writes


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _segments_closed(after_ms: int, timeout_s: float = 30) -> None:
    """Wait until the segment holding ``after_ms`` is closed (its end plus the lag passed)."""
    closed_at = after_ms // SEGMENT_MS * SEGMENT_MS + SEGMENT_MS + LAG_MS
    deadline = time.monotonic() + timeout_s
    while _now_ms() < closed_at:
        assert time.monotonic() < deadline, "the clock did not reach the segment's close"
        time.sleep(0.05)


def _commit_batch(client: httpx.Client, tag: str) -> list[str]:
    """``BATCH`` transactions sent and committed through the API; their ids."""
    ids = []
    for n in range(BATCH):
        sent = client.post(
            "/api/v1/transactions",
            json={"producer_group": GROUP, "topic": TOPIC, "body": f"{tag} {n}", "keys": tag},
        )
        assert sent.status_code == 201, sent.text
        ended = client.post(
            f"/api/v1/transactions/{sent.json()['transaction_id']}/end",
            json={"producer_group": GROUP, "action": "commit"},
        )
        assert ended.status_code == 200 and ended.json()["state"] == "COMMITTED", ended.text
        ids.append(sent.json()["transaction_id"])
    return ids


def _query(url: str, sql: str, params: list | None = None) -> list[tuple]:
    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        return conn.execute(sql, params or []).fetchall()


def _archive_files(uri: Path) -> dict[str, tuple[int, int]]:
    """Every file in place in the archive (not under ``_tmp``): (modification time ns, size)."""
    return {
        str(p.relative_to(uri)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in uri.rglob("*")
        if p.is_file() and not str(p.relative_to(uri)).startswith("_tmp/")
    }


def _manifests(uri: Path) -> list[dict]:
    return sorted(
        (json.loads(p.read_text()) for p in (uri / "_segments").glob("*.json")),
        key=lambda m: m["start_ms"],
    )


def _count(output: str, label: str) -> int:
    found = re.search(rf"^{label}: (\d+)", output, re.MULTILINE)
    return int(found.group(1)) if found else 0


def _watermark(url: str) -> int:
    return _query(url, "SELECT archived_until_timestamp FROM broker_archivewatermark")[0][0]


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed")
def test_a_point_in_time_restore_older_than_the_archive_adopts_it_and_serves(
    tmp_path: Path,
) -> None:
    archive_uri = tmp_path / "archive"
    primary = PrivatePostgres(free_port())
    restored: PrivatePostgres | None = None
    stack: Stack | None = None
    try:
        primary.init()
        wal_dir, wal_settings = wal_archive(primary)
        primary.configure(wal_settings)
        primary.start()
        url = primary.create_database(DATABASE)
        env = broker_env(
            database_url=url,
            redis_url="redis://127.0.0.1:6379/11",
            var_dir=tmp_path / "var",
            settings={**SETTINGS, "HALFMOON_ARCHIVE_URI": str(archive_uri)},
        )
        manage(env, "migrate", "--noinput", timeout_s=300)
        token = manage(env, "create_access_key", "backup-admin", "--admin").strip().split()[-1]

        # The base backup, before anything is written: the restore replays all from the WAL.
        backup = primary.directory / "base_backup"
        began = time.monotonic()
        primary.base_backup(backup)
        backup_s = time.monotonic() - began

        stack = Stack(env, tmp_path)
        base = stack.start_web(free_port())
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            created = client.post("/api/v1/topics", json={"name": TOPIC, "queue_nums": 2})
            assert created.status_code == 201, created.text
            group = client.post("/api/v1/producer-groups", json={"name": GROUP, "check_url": None})
            assert group.status_code == 201, group.text
            first = _commit_batch(client, "first")
            _segments_closed(_now_ms())
            out = manage(env, "archive", "--no-prune", timeout_s=ARCHIVE_S)
            assert _count(out, "segments written") >= 1, out
            restore_point(primary, "before_second")
            second = _commit_batch(client, "second")
        stack.stop()
        stack = None
        _segments_closed(_now_ms())
        out = manage(env, "archive", "--no-prune", timeout_s=ARCHIVE_S)
        assert _count(out, "segments written") >= 1, out
        newest_end = _manifests(archive_uri)[-1]["end_ms"]
        archived_top = max(m["max_commit_log_offset"] or 0 for m in _manifests(archive_uri))
        archived_queues: dict[tuple[str, int], int] = {}
        for manifest in _manifests(archive_uri):
            for topic, queue_id, offset in manifest["max_queue_offsets"]:
                key = (topic, queue_id)
                archived_queues[key] = max(archived_queues.get(key, offset), offset)
        assert _query(url, "SELECT max(commit_log_offset) FROM broker_message")[0][0] == (
            archived_top
        )
        size_mb = _query(url, "SELECT pg_database_size(current_database())")[0][0] / 2**20
        wal_switch_archived(primary, wal_dir)
        primary.stop()  # the server is lost; its base backup and WAL archive are what is left

        began = time.monotonic()
        restored = pitr_restore(backup, wal_dir, port=free_port(), target_name="before_second")
        restore_s = time.monotonic() - began
        print(
            f"\nbackup: {backup_s:.1f} s; restore to the restore point, promoted: "
            f"{restore_s:.1f} s; database {size_mb:.1f} MB"
        )
        url = restored.url(DATABASE)
        env = {**env, "DATABASE_URL": url}

        # The restored database: the first batch committed, the second gone.
        states = dict(
            _query(
                url,
                "SELECT transaction_id, state FROM broker_transaction WHERE transaction_id = "
                "ANY(%s)",
                [first + second],
            )
        )
        assert states == dict.fromkeys(first, "COMMITTED")
        assert _watermark(url) < newest_end
        manage(env, "rebuild_transactions", "--dry-run")  # exit 0: no difference

        # The archive's newer segments are adopted, not written again.
        files = _archive_files(archive_uri)
        out = manage(env, "archive", timeout_s=ARCHIVE_S)
        assert _count(out, "segments written") == 0, out
        assert _count(out, "segments adopted") >= 1, out
        assert _archive_files(archive_uri) == files
        assert _watermark(url) >= newest_end
        recorded = _query(url, "SELECT max(end_timestamp) FROM broker_archivesegment")[0][0]
        assert recorded == newest_end
        manage(env, "rebuild_transactions", "--dry-run")

        # The broker serves, above every offset the archive holds.
        stack = Stack(env, tmp_path / "restored")
        (tmp_path / "restored").mkdir()
        base = stack.start_web(free_port())
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            (after,) = _commit_batch_one(client)
        assert after["commit_log_offset"] > archived_top
        assert after["queue_offset"] > archived_queues.get((TOPIC, after["queue_id"]), -1)
        delivered = _query(
            url,
            "SELECT commit_log_offset FROM broker_message WHERE msg_id = %s",
            [after["msg_id"]],
        )
        assert delivered and all(offset > archived_top for (offset,) in delivered)
    finally:
        if stack is not None:
            stack.stop()
        if restored is not None:
            restored.remove()
        primary.remove()


def _commit_batch_one(client: httpx.Client) -> list[dict]:
    """One transaction sent and committed: the send's and the end's answers merged."""
    sent = client.post(
        "/api/v1/transactions",
        json={"producer_group": GROUP, "topic": TOPIC, "body": "after the restore"},
    )
    assert sent.status_code == 201, sent.text
    ended = client.post(
        f"/api/v1/transactions/{sent.json()['transaction_id']}/end",
        json={"producer_group": GROUP, "action": "commit"},
    )
    assert ended.status_code == 200 and ended.json()["state"] == "COMMITTED", ended.text
    return [{**ended.json(), "commit_log_offset": sent.json()["commit_log_offset"]}]
