"""``manage.py rebuild_transactions [--dry-run] [--json]``: rebuild the derived transaction
state from the commit log (``broker.services.recovery.transactions_rebuild``) and report every
difference from the stored rows.

Exit status, for scripts (e.g. run after an unclean shutdown, before starting workers):

- 0: no difference, the stored state matches the logs;
- 1: differences found, all repairable; repaired unless ``--dry-run``;
- 3: some differences cannot be repaired by the rebuild (a COMMIT journalled with no delivered
  message, a journalled resolution without a half message, ...); the others were repaired
  unless ``--dry-run``. An operator must look;
- 2 is argparse's (a usage error), and an unexpected error exits 1 with a traceback, as any
  Python program (with ``--json`` nothing is printed to stdout then).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from broker.services.metrics import metrics_rollup_reset
from broker.services.recovery import RebuildReport, transactions_rebuild

EXIT_CLEAN = 0
EXIT_DIFFERENCES = 1
EXIT_UNREPAIRABLE = 3


def exit_status(report: RebuildReport) -> int:
    """The command's exit status for ``report`` (see the module docstring)."""
    if not report.differences:
        return EXIT_CLEAN
    return EXIT_UNREPAIRABLE if report.unrepairable else EXIT_DIFFERENCES


class Command(BaseCommand):
    help = (
        "Rebuild every transaction's derived state (state, check_times, half offsets, resolution "
        "journal) from the half, Op, delivered and discarded messages and the check journal; "
        "print each difference from the stored rows and repair them (unless --dry-run). "
        "Exit status: 0 no difference, 1 differences (repaired unless --dry-run), 3 some "
        "differences need an operator."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Compare only; write nothing (reads one consistent snapshot).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print the report as one JSON object."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = transactions_rebuild(dry_run=options["dry_run"])
        if report.repaired:  # repaired rows may be counted in the /metrics rollup already
            metrics_rollup_reset()
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), default=str, indent=2))
        else:
            self._summary(report)
        status = exit_status(report)
        if status != EXIT_CLEAN:
            # CommandError prints its message to stderr and exits with returncode (manage.py);
            # call_command raises it.
            raise CommandError(
                f"{len(report.differences)} difference(s) found"
                + (f", {len(report.unrepairable)} not repairable" if report.unrepairable else "")
                + ("" if report.dry_run else f"; {report.repaired} repaired"),
                returncode=status,
            )

    def _summary(self, report: RebuildReport) -> None:
        write = self.stdout.write
        write(
            "Transaction state rebuilt from the commit log"
            + (" (dry run: nothing written)." if report.dry_run else ".")
        )
        write(f"  half messages read:  {report.half_messages}")
        write(f"  Op messages read:    {report.op_messages}")
        write(f"  transactions:        {report.transactions}")
        write(
            f"  differences:         {len(report.differences)}"
            + (f" ({len(report.unrepairable)} not repairable)" if report.unrepairable else "")
        )
        write(
            "  applied:             "
            + (f"yes, {report.repaired} repaired" if report.applied else "no (dry run)")
        )
        write(f"  time:                {report.elapsed_ms} ms")
        if not report.differences:
            write(self.style.SUCCESS("No difference."))
            return
        write("transaction_id\tfield\tstored\tderived")
        for diff in report.differences:
            line = f"{diff.transaction_id}\t{diff.field}\t{diff.stored!r}\t{diff.derived!r}"
            write(line if diff.repairable else self.style.ERROR(line + "\t(not repairable)"))
