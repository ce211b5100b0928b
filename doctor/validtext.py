"""Text that encodes as UTF-8, whatever the environment handed over: undecodable bytes carried by surrogateescape
become \\xNN, other lone surrogates \\uXXXX (one C-level pass of str.translate)."""

from __future__ import annotations

import re

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _surrogate_escape(code: int) -> str:
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte carried by surrogateescape (os.environ, file names)
        return "\\x%02x" % (code - 0xDC00)
    return "\\u%04x" % code


_SURROGATES = {code: _surrogate_escape(code) for code in range(0xD800, 0xE000)}


def valid_text(value: str) -> str:
    """A str that encodes as UTF-8: undecodable bytes as \\xNN, other lone surrogates as \\uXXXX."""
    return value.translate(_SURROGATES) if _SURROGATE.search(value) else value
