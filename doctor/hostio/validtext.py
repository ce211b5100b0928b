"""Text that encodes as UTF-8, whatever the environment handed over: undecodable bytes carried by surrogateescape
become \\xNN, other lone surrogates \\uXXXX (one C-level pass of str.translate). And text that is inert where it is
shown (`clean_text`): terminal escapes removed, control characters escaped, no line a GitHub Actions workflow
command (`::` or `##[`)."""

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


ANSI = re.compile(r"\x1b(?:\[[0-?]{0,64}[ -/]{0,16}[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# Control characters, and the bidirectional overrides that make text display other than it reads (U+202E).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What GitHub Actions reads as a workflow command: `::cmd::` at the start of a line after any (Unicode) whitespace,
# which the runner trims, and the legacy `##[cmd]` anywhere in a line.
_WORKFLOW_COMMAND = re.compile(r"^([^\S\n]*)::", re.M)
_LEGACY_COMMAND = "##["


def neutralize_workflow_commands(text: str) -> str:
    """No line of `text` can be read as a GitHub Actions workflow command. Apply after any wrapping."""
    return _WORKFLOW_COMMAND.sub(lambda m: m.group(1) + "\\::", text).replace(_LEGACY_COMMAND, "#\\#[")


def clean_text(value: str) -> str:
    """Decodable, printable, and inert under GitHub Actions."""
    value = valid_text(value)
    value = ANSI.sub("", value)
    value = _CONTROL.sub(lambda m: ("\\x%02x" if ord(m.group(0)) < 0x100 else "\\u%04x") % ord(m.group(0)), value)
    return neutralize_workflow_commands(value)
