"""The one table of the bare baseline, created with plain SQL by ``bench/throughput.py``."""

from __future__ import annotations

from django.db import models

CREATE_TABLE_SQL = """
CREATE TABLE bare_row (
    id bigserial PRIMARY KEY,
    msg_id varchar(64) NOT NULL UNIQUE,
    body bytea NOT NULL,
    state varchar(16) NOT NULL,
    created_ms bigint NOT NULL,
    resolved_ms bigint
)
"""


class Row(models.Model):
    """A half row: inserted PREPARED, later COMMITTED under a row lock."""

    msg_id = models.CharField(max_length=64, unique=True)
    body = models.BinaryField()
    state = models.CharField(max_length=16)
    created_ms = models.BigIntegerField()
    resolved_ms = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "bare_row"

    def __str__(self) -> str:
        return f"{self.msg_id} {self.state}"
