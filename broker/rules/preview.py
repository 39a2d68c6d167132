"""How the console shows a message body: text, pretty-printed JSON, or a hex dump for binary,
capped in size (pure: bytes in, display text out; no database).

RocketMQ stores bodies as opaque bytes; the dashboard's message view shows them as text. Here
a body sent as text (``body`` in api-v1) or any body that is valid UTF-8 without control
characters is text; text that parses as JSON is re-indented; anything else is a hex dump of
16 bytes a line (offset, hex, printable ASCII), as ``hexdump -C`` prints it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

PREVIEW_TEXT_MAX_BYTES = 64 * 1024
"""Largest part of a text or JSON body shown (bytes)."""

PREVIEW_HEX_MAX_BYTES = 4 * 1024
"""Largest part of a binary body shown as hex (bytes; a hex dump is ~4.3 times its input)."""

_HEX_LINE_BYTES = 16
_ALLOWED_CONTROL = frozenset("\t\n\r")

PreviewKind = Literal["empty", "text", "json", "hex"]


@dataclass(frozen=True)
class BodyPreview:
    """What to show of a body.

    ``kind``: empty, text, json (pretty-printed) or hex (a dump); ``text``: the display text;
    ``size``: the whole body (bytes); ``shown``: the bytes of the body the text covers;
    ``truncated``: ``shown < size`` (the text stops at the cap).
    """

    kind: PreviewKind
    text: str
    size: int
    shown: int

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def _as_text(body: bytes, *, is_text: bool) -> str | None:
    """The body as text, or None when it is binary: not UTF-8, or (unless it was sent as
    text) holding control characters other than tab and line ends."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not is_text and any(ch < " " and ch not in _ALLOWED_CONTROL for ch in text):
        return None
    return text


def _utf8_prefix(body: bytes, max_bytes: int) -> bytes:
    """The longest prefix of ``body`` (valid UTF-8, longer than ``max_bytes``) of at most
    ``max_bytes`` that does not cut a character in two."""
    cut = max_bytes
    # The first byte left out continues a character (0b10xxxxxx): that character would be
    # cut in two, so the cut moves back to the character's first byte (valid UTF-8 never
    # starts with a continuation byte, so this stops at 0 at the latest).
    while (body[cut] & 0xC0) == 0x80:
        cut -= 1
    return body[:cut]


def hex_dump(data: bytes, *, start: int = 0) -> str:
    """``data`` as ``hexdump -C`` lines: ``OFFSET  HEX (16 bytes, split 8+8)  |ASCII|``, the
    offset counted from ``start``, non-printable bytes shown as ``.`` in the ASCII column."""
    lines = []
    for i in range(0, len(data), _HEX_LINE_BYTES):
        chunk = data[i : i + _HEX_LINE_BYTES]
        left = " ".join(f"{b:02x}" for b in chunk[:8])
        right = " ".join(f"{b:02x}" for b in chunk[8:])
        ascii_part = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{start + i:08x}  {left:<23}  {right:<23}  |{ascii_part}|")
    return "\n".join(lines)


def body_preview(
    body: bytes,
    *,
    is_text: bool = False,
    text_max_bytes: int = PREVIEW_TEXT_MAX_BYTES,
    hex_max_bytes: int = PREVIEW_HEX_MAX_BYTES,
) -> BodyPreview:
    """The preview of a message body.

    Args:
        body: the stored bytes.
        is_text: the body was sent as text (``Message.body_is_text``); then any valid UTF-8
            counts as text, control characters included.
        text_max_bytes: at most this many bytes of a text body are shown (cut at a character
            boundary); a JSON body longer than this is shown as cut text, not parsed.
        hex_max_bytes: at most this many bytes of a binary body are dumped.

    Returns:
        a ``BodyPreview``; ``kind`` json only when the whole body is a JSON object or array.
    """
    size = len(body)
    if size == 0:
        return BodyPreview(kind="empty", text="", size=0, shown=0)
    text = _as_text(body, is_text=is_text)
    if text is None:
        part = body[:hex_max_bytes]
        return BodyPreview(kind="hex", text=hex_dump(part), size=size, shown=len(part))
    if size <= text_max_bytes:
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                pretty = json.dumps(parsed, indent=2, ensure_ascii=False, sort_keys=False)
                return BodyPreview(kind="json", text=pretty, size=size, shown=size)
        return BodyPreview(kind="text", text=text, size=size, shown=size)
    part = _utf8_prefix(body, text_max_bytes)
    return BodyPreview(kind="text", text=part.decode("utf-8"), size=size, shown=len(part))
