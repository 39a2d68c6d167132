"""``manage.py archive [--until ISO8601|ms] [--no-prune]``: export every closed segment of the
logs to the archive now (``broker.services.archive.export.archive_export``, what beat runs every
HALFMOON_ARCHIVE_INTERVAL_MS), then prune the hot database; print the segments and rows
written and the rows pruned.

Exit status: 0 done (also when nothing was due); 1 another export holds the archive's lease,
or the export failed; 2 a usage error.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from broker.management.commands.reconcile import timestamp_ms
from broker.rules.audit import iso_utc
from broker.services.archive.export import archive_export


class Command(BaseCommand):
    help = (
        "Archive every closed time segment of the logs to Parquet under HALFMOON_ARCHIVE_URI "
        "(segments ending at or before --until, if given), then prune the archived, final rows "
        "older than HALFMOON_FILE_RESERVED_HOURS (unless --no-prune). Prints the segments and "
        "rows written."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--until",
            type=timestamp_ms,
            help="Archive no segment ending after this time (ISO 8601, UTC unless a zone is "
            "given, or ms). Default: every closed segment.",
        )
        parser.add_argument("--no-prune", action="store_true", help="Export only; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        result = archive_export(until_ms=options["until"], prune=not options["no_prune"])
        if result.skipped:
            raise CommandError(
                "Another archive export is running (it holds the lease).", returncode=1
            )
        write = self.stdout.write
        write(f"segments written: {result.segments}")
        for table, rows in result.rows.items():
            write(f"  {table}: {rows}")
        if result.adopted:
            write(
                f"segments adopted: {result.adopted} (already in the archive; see "
                'docs/operations.md "Backups")'
            )
        write(f"archived until: {iso_utc(result.archived_until_ms)} ({result.archived_until_ms})")
        if options["no_prune"]:
            return
        write(f"rows pruned: {sum(result.pruned.values())}")
        for label, rows in sorted(result.pruned.items()):
            write(f"  {label}: {rows}")
