"""An archive segment's manifest: its text, which manifests a database adopts, and the offsets
it then moves past."""

import json

import pytest

from broker.rules.archive_manifest import (
    OffsetFloors,
    SegmentManifest,
    manifest_format,
    manifest_parse,
    manifests_adoptable,
    offset_floors,
)

SEGMENT = 600_000


def _manifest(start: int, end: int | None = None, **kwargs) -> SegmentManifest:
    return SegmentManifest(
        start_ms=start, end_ms=start + SEGMENT if end is None else end, rows={}, **kwargs
    )


def test_a_manifest_reads_back_as_written():
    manifest = SegmentManifest(
        start_ms=1_800_000,
        end_ms=2_400_000,
        rows={"commit_log": 7, "resolutions": 2, "transaction_events": 0, "delivery_events": 3},
        max_commit_log_offset=41,
        max_queue_offsets={("TranTest", 1): 5, ("RMQ_SYS_TRANS_HALF_TOPIC", 0): 9},
        max_ids={"delivery_events": 12},
        archived_ms=2_500_000,
        duration_ms=1_234,
    )
    text = manifest_format(manifest)
    assert manifest_parse(text) == manifest
    data = json.loads(text)
    assert data["version"] == 1
    assert data["max_queue_offsets"] == [["RMQ_SYS_TRANS_HALF_TOPIC", 0, 9], ["TranTest", 1, 5]]
    empty = _manifest(0)
    assert manifest_parse(manifest_format(empty)) == empty
    assert json.loads(manifest_format(empty))["max_commit_log_offset"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=2), "not a version 1 manifest"),
        (lambda d: d.pop("rows"), "field missing or malformed"),
        (lambda d: d.update(start_ms="1"), "start_ms is not an integer"),
        (lambda d: d.update(end_ms=True), "end_ms is not an integer"),
        (lambda d: d.update(end_ms=d["start_ms"]), "is empty"),
        (lambda d: d.update(rows={"commit_log": 1.5}), r"rows.commit_log is not an integer"),
        (lambda d: d.update(max_commit_log_offset="9"), "max_commit_log_offset is not"),
        (lambda d: d.update(max_queue_offsets=[["T", "0", 1]]), "queue_id is not"),
        (lambda d: d.update(max_queue_offsets=[["T", 0, None]]), "queue offset is not"),
        (lambda d: d.update(max_ids={"delivery_events": "3"}), "max_ids.delivery_events"),
        (lambda d: d.update(archived_ms=None), "archived_ms is not"),
        (lambda d: d.pop("duration_ms"), "field missing"),
        (lambda d: d.update(max_ids=[1]), "field missing or malformed"),
    ],
)
def test_a_malformed_manifest_is_refused(change, message):
    data = json.loads(manifest_format(_manifest(0)))
    change(data)
    with pytest.raises(ValueError, match=message):
        manifest_parse(json.dumps(data))


def test_text_that_is_no_manifest_is_refused():
    with pytest.raises(ValueError, match="not JSON"):
        manifest_parse("{")
    with pytest.raises(ValueError, match="not a version 1"):
        manifest_parse("[1]")


def test_adoptable_manifests_run_from_the_watermark_in_order_up_to_the_closed_end():
    a, b, c = _manifest(0), _manifest(3 * SEGMENT), _manifest(4 * SEGMENT)
    later = _manifest(9 * SEGMENT)
    # Sorted, gaps allowed (the export skipped empty stretches), up to the closed end.
    found = manifests_adoptable([later, c, a, b], from_ms=0, until_ms=5 * SEGMENT)
    assert found == [a, b, c]
    assert manifests_adoptable([later, c, a, b], from_ms=0, until_ms=10 * SEGMENT) == [
        a,
        b,
        c,
        later,
    ]
    # Those before the watermark are the database's already.
    assert manifests_adoptable([a, b, c], from_ms=SEGMENT, until_ms=5 * SEGMENT) == [b, c]
    assert manifests_adoptable([a, b], from_ms=3 * SEGMENT, until_ms=4 * SEGMENT) == [b]
    assert manifests_adoptable([a, b], from_ms=3 * SEGMENT, until_ms=4 * SEGMENT - 1) == []
    assert manifests_adoptable([], from_ms=0, until_ms=SEGMENT) == []


def test_adoption_stops_at_a_manifest_overlapping_its_predecessor():
    a = _manifest(0)
    overlapping = _manifest(SEGMENT - 1, 2 * SEGMENT)
    after = _manifest(2 * SEGMENT)
    assert manifests_adoptable([a, overlapping, after], from_ms=0, until_ms=9 * SEGMENT) == [a]
    touching = _manifest(SEGMENT, 2 * SEGMENT)
    assert manifests_adoptable([a, touching], from_ms=0, until_ms=9 * SEGMENT) == [a, touching]


def test_offset_floors_are_the_largest_of_all_manifests():
    floors = offset_floors(
        [
            _manifest(
                0,
                max_commit_log_offset=40,
                max_queue_offsets={("T", 0): 3, ("T", 1): 8},
                max_ids={"delivery_events": 5},
            ),
            _manifest(SEGMENT),  # no rows with offsets
            _manifest(
                2 * SEGMENT,
                max_commit_log_offset=90,
                max_queue_offsets={("T", 0): 6, ("U", 0): 1},
                max_ids={"delivery_events": 4, "transaction_events": 2},
            ),
            _manifest(3 * SEGMENT, max_commit_log_offset=60, max_queue_offsets={("T", 1): 7}),
        ]
    )
    assert floors == OffsetFloors(
        commit_log_offset=90,
        queue_offsets={("T", 0): 6, ("T", 1): 8, ("U", 0): 1},
        ids={"delivery_events": 5, "transaction_events": 2},
    )
    assert offset_floors([]) == OffsetFloors(None, {}, {})
    assert offset_floors([_manifest(0, max_commit_log_offset=0)]).commit_log_offset == 0
