"""A small YAML writer for Kubernetes manifests (dicts, lists, strings, numbers, booleans,
None), so ``import pdtp`` needs no YAML library. Every string is written double-quoted with
YAML escapes, so no value from input can change the document's structure."""

from __future__ import annotations

import re
from typing import Any

# Strings written unquoted: a letter first, then word characters, '.', '/', '-' — and none of
# the words YAML 1.1 reads as booleans or null.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_RESERVED = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(text: str) -> str:
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for k, v in value.items():
            key = quote(str(k))
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:")
                out += _lines(v, indent + 2)
            else:
                out.append(f"{pad}{key}: {_inline(v)}")
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for v in value:
            if isinstance(v, (dict, list)) and v:
                inner = _lines(v, indent + 2)
                out.append(f"{pad}- {inner[0].lstrip()}")
                out += inner[1:]
            else:
                out.append(f"{pad}- {_inline(v)}")
        return out
    return [pad + _scalar(value)]


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(doc: Any) -> str:
    return "\n".join(_lines(doc, 0)) + "\n"


def dump_all(docs: list[Any]) -> str:
    return "".join("---\n" + dump(d) for d in docs)
