"""Body previews: text, pretty JSON, hex for binary, capped with a note when cut."""

import json

from broker.rules.preview import BodyPreview, body_preview, hex_dump


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


def test_hex_dump_offsets_count_from_start():
    assert hex_dump(b"A", start=32).startswith("00000020  41")
