"""Body previews: text, pretty JSON, hex for binary, capped with a note when cut."""

import json

import pytest

from broker.rules.preview import BodyPreview, body_preview, hex_dump

MIXED = ["aé€😀b€é😀", "😀é€a"]  # characters of 1, 2, 3 and 4 bytes in UTF-8
CUTS = [(text, cap) for text in MIXED for cap in range(len(text.encode()))]


def test_empty_body():
    assert body_preview(b"") == BodyPreview(kind="empty", text="", size=0, shown=0)


def test_text_body_is_shown_as_it_is():
    preview = body_preview("order 42 paid ✓".encode(), is_text=True)
    assert preview.kind == "text"
    assert preview.text == "order 42 paid ✓"
    assert preview.size == len("order 42 paid ✓".encode())
    assert not preview.truncated


def test_json_object_is_pretty_printed():
    preview = body_preview(b'{"order":42,"items":[1,2],"name":"\xc3\xa9"}', is_text=True)
    assert preview.kind == "json"
    assert preview.text == json.dumps(
        {"order": 42, "items": [1, 2], "name": "é"}, indent=2, ensure_ascii=False
    )
    assert "\n  " in preview.text


def test_json_preview_covers_the_whole_body():
    body = b'{"b": 1, "a": [true, null]}'
    assert body_preview(body) == BodyPreview(
        kind="json",
        text='{\n  "b": 1,\n  "a": [\n    true,\n    null\n  ]\n}',
        size=len(body),
        shown=len(body),
    )


def test_a_json_array_and_json_after_leading_blanks_are_pretty_printed():
    assert body_preview(b"[1, 2]").text == "[\n  1,\n  2\n]"
    assert body_preview(b'\n  {"a": 1}').kind == "json"


def test_a_body_exactly_at_the_cap_is_shown_whole():
    body = b'{"a": 1}'
    preview = body_preview(body, text_max_bytes=len(body))
    assert (preview.kind, preview.shown, preview.truncated) == ("json", len(body), False)


def test_a_body_sent_as_text_stays_text_with_control_characters():
    assert body_preview(b"ring\x07bell", is_text=True) == BodyPreview(
        kind="text", text="ring\x07bell", size=9, shown=9
    )


def test_json_scalar_or_broken_json_stays_text():
    assert body_preview(b"42", is_text=True).kind == "text"
    assert body_preview(b'{"order": 42', is_text=True).kind == "text"


def test_binary_is_a_hex_dump():
    body = bytes(range(20))
    preview = body_preview(body, is_text=False)
    assert preview.kind == "hex"
    lines = preview.text.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |")
    assert lines[1].startswith("00000010  10 11 12 13")
    assert lines[1].endswith("|....|")


def test_utf8_sent_as_base64_is_text_unless_it_holds_control_bytes():
    assert body_preview(b"plain words\n", is_text=False).kind == "text"
    assert body_preview(b"ab\x00cd", is_text=False).kind == "hex"
    assert body_preview(b"\xff\xfe", is_text=True).kind == "hex"  # not UTF-8 at all


def test_long_text_is_cut_at_the_cap_on_a_character_boundary():
    body = ("é" * 10).encode()  # 20 bytes, 2 per character
    preview = body_preview(body, is_text=True, text_max_bytes=7)
    assert preview.kind == "text"
    assert preview.text == "ééé"
    assert (preview.shown, preview.size, preview.truncated) == (6, 20, True)


@pytest.mark.parametrize(("text", "cap"), CUTS)
def test_a_cut_keeps_every_whole_character_that_fits_and_no_part_of_the_next(text, cap):
    preview = body_preview(text.encode(), is_text=True, text_max_bytes=cap)
    fitting = max((text[:n] for n in range(len(text)) if len(text[:n].encode()) <= cap), key=len)
    assert (preview.text, preview.shown, preview.truncated) == (
        fitting,
        len(fitting.encode()),
        True,
    )


def test_long_json_is_not_parsed_but_cut():
    body = json.dumps({"k": "v" * 100}).encode()
    preview = body_preview(body, is_text=True, text_max_bytes=50)
    assert preview.kind == "text"
    assert preview.truncated and len(preview.text) == 50


def test_binary_is_cut_at_its_own_cap():
    preview = body_preview(bytes(1000), hex_max_bytes=64)
    assert preview.kind == "hex"
    assert (preview.shown, preview.size, preview.truncated) == (64, 1000, True)
    assert len(preview.text.splitlines()) == 4


def test_the_hex_dumps_ascii_column_shows_printable_bytes_and_dots_for_the_rest():
    line = hex_dump(bytes([0x1F, 0x20, 0x21, 0x41, 0x7E, 0x7F, 0x80, 0xFF]))
    assert line == "00000000  1f 20 21 41 7e 7f 80 ff" + " " * 27 + "|. !A~...|"


def test_hex_dump_offsets_count_from_start():
    assert hex_dump(b"A", start=32).startswith("00000020  41")
