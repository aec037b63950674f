"""Bounded reads of input files: one helper for every file pdtp reads (trace, hosts file,
plan, grid, demands, calibration points, model config).

What is read is capped, not the size the file reports: a device reports size 0 and
``/dev/zero`` never ends, so a check of ``st_size`` bounds nothing. A file is opened without
blocking (a FIFO with no writer would otherwise hang the open), then:

* a regular file, a pipe or a FIFO (``<(cmd)``, ``/dev/stdin`` fed by a pipe) is read to at
  most ``limit + 1`` bytes; more than ``limit`` is refused, so memory stays under the limit
  whatever the file holds;
* a device (``/dev/zero``, a terminal), a socket or a folder is refused before any read.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from typing import Any

from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["MAX_JSON_DEPTH", "json_depth", "loads_json", "read_capped", "read_capped_text"]

_CHUNK = 1 << 20
# Nesting deeper than this is no pdtp input (a config.json nests 3-4 levels, a plan 4);
# refused before the JSON parser recurses into it (100,000 levels is a RecursionError).
MAX_JSON_DEPTH = 64


def _kind(mode: int) -> str | None:
    """What a non-readable file is, in words; None for a file, a pipe or a FIFO."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_capped(
    path: str | os.PathLike[str],
    *,
    limit: int,
    what: str,
    error: type[Exception] = InvalidArgumentError,
    stdin: bool = False,
) -> bytes:
    """The bytes of ``path`` (``-`` is standard input where ``stdin`` is true), at most
    ``limit`` of them. Errors are ``error`` naming ``what`` and the path: cannot be read, is
    a device/socket/folder, or holds more than ``limit`` bytes (found after reading
    ``limit + 1``, never by trusting the reported size)."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise ArgumentTypeError(
            f"{what} must be a path (str or os.PathLike), got {type(path).__name__}"
        )
    name = os.fspath(path)
    if isinstance(name, bytes):
        raise ArgumentTypeError(f"{what} must be a str path, got a bytes path")
    label = f"{what} {_quoted(name)}"
    if stdin and name == "-":
        fd = sys.stdin.fileno() if sys.stdin is not None else -1
        if fd < 0:
            raise error(f"{what}: standard input is closed")
        try:
            return _read_fd(fd, limit, label, error)
        except OSError as e:
            raise error(f"cannot read {what} from standard input: {e.strerror or e}") from None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise error(f"cannot read {label}: {reason}") from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise error(f"{label} is {kind}, not a file: pass a regular file (or a pipe)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a FIFO's writer may be slower than us
        return _read_fd(fd, limit, label, error)
    except OSError as e:
        raise error(f"cannot read {label}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int, label: str, error: type[Exception]) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise error(f"{label} is larger than {_size(limit)}, the most pdtp reads for it")
    return b"".join(chunks)


def read_capped_text(
    path: str | os.PathLike[str],
    *,
    limit: int,
    what: str,
    error: type[Exception] = InvalidArgumentError,
    stdin: bool = False,
    encoding: str = "utf-8",
) -> str:
    """:func:`read_capped`, checked to be text (no NUL byte) and decoded."""
    data = read_capped(path, limit=limit, what=what, error=error, stdin=stdin)
    label = f"{what} {_quoted(os.fspath(path))}"
    if b"\0" in data:
        raise error(f"{label} is not a text file (it holds NUL bytes)")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise error(f"{label} is not UTF-8 text (byte {e.start})") from None


def _quoted(name: str) -> str:
    # Whole (a path is at most PATH_MAX, and the CLI finds it in the message to name its
    # flag); a longer text is bounded by PdtpError itself.
    return repr(name)


def _size(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB ({n:,} bytes)"
    return f"{n:,} bytes"


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings (regex scans, no recursion)."""
    depth = deepest = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def loads_json(text: str, label: str, *, error: type[Exception] = InvalidArgumentError) -> Any:
    """``json.loads(text)`` whose every failure is ``error`` naming ``label``: invalid JSON,
    nesting deeper than :data:`MAX_JSON_DEPTH`, an integer past Python's digit limit."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise error(f"{label}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text)
    except RecursionError:  # belt and braces: the depth check above should catch it
        raise error(f"{label}: JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise error(f"{label}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # an integer with more digits than int() converts
        raise error(f"{label}: not usable JSON ({str(e)[:120]})") from None
