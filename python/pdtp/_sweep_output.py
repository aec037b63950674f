"""Sweep output files (CSV, JSON Lines, Parquet): the row format, and a store that appends
rows chunk by chunk so that a killed sweep resumes where it stopped.

What the store promises (tests/test_sweep_output.py kills real processes to check it):

- **Exactly once.** After any number of kills (``kill -9`` at any point, the final Parquet
  merge included) and reruns, the file holds every scenario once.
- **One writer.** A sweep holds an exclusive lock (``flock`` on ``<output>.lock``) from reading
  the file to its last write. A second sweep to the same output is refused, naming the holder.
  The kernel drops the lock when its process dies, so a killed sweep leaves no stale lock.
- **Only its own files.** pdtp appends to, repairs or replaces only files it recognises as
  its own — a CSV whose first line is pdtp's header, JSON Lines whose lines are pdtp rows, a
  Parquet file with pdtp's schema, a ``<output>.parts`` folder holding pdtp's marker file and
  only pdtp's part files — or empty ones. Anything else is refused, untouched.
- **Rows are validated on resume**, row by row against the schema. A kill can leave exactly
  one kind of damage, a torn last line (text formats): it is dropped with a
  :class:`SweepFileWarning` naming the file and line, and recomputed. Any other bad row (a
  garbage line, a wrong type, a repeated scenario) is refused with an error naming the file
  and line, and the file is left as it is: pdtp does not guess which rows of a damaged file
  to trust.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import math
import os
import pathlib
import re
import socket
import stat
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

from .errors import InvalidArgumentError, OutputFileError

# Column name -> type. Inputs first (the scenario key), then the plan, then the plan a
# planner blind to the connector's pair rules would pick, then bookkeeping.
_SCHEMA: tuple[tuple[str, str], ...] = (
    ("model", "str"),
    ("gpu", "str"),
    ("connector", "str"),
    ("isl", "int"),
    ("osl", "int"),
    ("slo_ttft_ms", "float"),
    ("slo_tpot_ms", "float"),
    ("max_tp", "int"),
    ("gpus", "int"),
    ("status", "str"),
    # The plan, as ``pdtp.solve`` returns it: ``mode`` is its ``serving`` ("agg" or
    # "disagg"); an aggregated plan fills the aggregated_* columns, a P/D plan prefill_*
    # and decode_*; layouts in their compact form (``tp2dp4ep``).
    ("mode", "str"),
    ("aggregated_layout", "str"),
    ("aggregated_instances", "int"),
    ("prefill_layout", "str"),
    ("prefill_tp", "int"),
    ("prefill_instances", "int"),
    ("decode_layout", "str"),
    ("decode_tp", "int"),
    ("decode_instances", "int"),
    ("gpus_used", "int"),
    ("requests_per_s", "float"),
    ("output_tokens_per_s", "float"),
    ("ttft_ms", "float"),
    ("tpot_ms", "float"),
    ("decode_batch", "int"),
    ("concurrency", "int"),
    ("prefill_capacity_rps", "float"),
    ("decode_capacity_rps", "float"),
    ("bottleneck", "str"),
    # The best plan over every pair, the connector's pair rules ignored (the plan itself
    # when they cost nothing): a P/D split, or the aggregated plan.
    ("rule_blind_mode", "str"),
    ("rule_blind_prefill_layout", "str"),
    ("rule_blind_prefill_tp", "int"),
    ("rule_blind_prefill_instances", "int"),
    ("rule_blind_decode_layout", "str"),
    ("rule_blind_decode_tp", "int"),
    ("rule_blind_decode_instances", "int"),
    ("rule_blind_requests_per_s", "float"),
    ("rule_blind_valid", "bool"),
    ("solve_ms", "float"),
    ("reason", "str"),
)
COLUMNS: tuple[str, ...] = tuple(name for name, _ in _SCHEMA)
TYPES: dict[str, str] = dict(_SCHEMA)
KEY_COLUMNS: tuple[str, ...] = COLUMNS[:9]
NKEY = len(KEY_COLUMNS)
STATUSES = ("OPTIMAL", "INFEASIBLE")
# Key columns that may be empty (a workload without that SLO).
_OPTIONAL_KEYS = frozenset({"slo_ttft_ms", "slo_tpot_ms"})
_STATUS = COLUMNS.index("status")

FORMATS = {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}

# A sweep keeps its rows in memory (~1 kB each with the DataFrame), so a grid, and a file
# read back, holds at most this many: 10 M rows is ~10 GB.
MAX_ROWS = 10_000_000
# A pdtp row is < 1 kB; a longer physical line is not one of ours.
MAX_LINE_BYTES = 1 << 16

Row = tuple[Any, ...]
Key = tuple[Any, ...]


class SweepFileWarning(UserWarning):
    """A sweep output file needed a repair pdtp can make safely (a torn last line dropped);
    the message names the file and the line."""


# ---- rows and values ---------------------------------------------------------------------------


def _coerce(column: str, value: Any) -> Any:
    """A value read back from a file (text in CSV) as the column's Python type."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    kind = TYPES.get(column, "str")
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1")
        return bool(value)
    return str(value)


def scenario_key(row: dict[str, Any]) -> Key:
    """The inputs that identify a scenario (what resuming matches on)."""
    return tuple(_coerce(c, row.get(c)) for c in KEY_COLUMNS)


def output_format(path: str | os.PathLike[str]) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise InvalidArgumentError(
            f"output file must end in .csv, .parquet or .jsonl, got {str(path)!r}"
        )
    return fmt


class _BadRow(ValueError):
    """One row does not fit the schema (the message says which column and why)."""


def _text_parser(column: str) -> Callable[[str], Any]:
    """Strict CSV text -> value for one column ("" is a missing value)."""
    kind = TYPES[column]

    def parse(v: str) -> Any:
        if not v:
            return None
        try:
            if kind == "int":
                return int(v)
            if kind == "float":
                return float(v)
        except ValueError:
            raise _BadRow(f"column {column}: expected a {_KIND_WORDS[kind]}, got {v!r}") from None
        if kind == "bool":
            if v not in ("True", "False"):
                raise _BadRow(f"column {column}: expected True or False, got {v!r}")
            return v == "True"
        return v

    return parse


_KIND_WORDS = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
# One parser per column for CSV text (a fast path for reading large files back).
_CSV_PARSERS = tuple(_text_parser(c) for c in COLUMNS)


def _check_row(row: Row) -> Row:
    """The checks beyond each column's type: the scenario key is complete, the status known."""
    for column, value in zip(KEY_COLUMNS, row):
        if value is None and column not in _OPTIONAL_KEYS:
            raise _BadRow(f"column {column}: missing (it is part of the scenario key)")
    if row[_STATUS] not in STATUSES:
        raise _BadRow(f"column status: expected one of {', '.join(STATUSES)}, got {row[_STATUS]!r}")
    return row


def _row_from_csv(values: list[str]) -> Row:
    if len(values) != len(COLUMNS):
        raise _BadRow(f"expected {len(COLUMNS)} fields, got {len(values)}")
    return _check_row(tuple(f(v) for f, v in zip(_CSV_PARSERS, values)))


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def _row_from_mapping(d: Any) -> Row:
    """A JSON Lines record as a row: exactly pdtp's columns, each of its type or null."""
    if not isinstance(d, dict):
        raise _BadRow(f"expected a JSON object, got {type(d).__name__}")
    if len(d) != len(COLUMNS) or set(d) != set(COLUMNS):
        missing = [c for c in COLUMNS if c not in d]
        extra = sorted(str(k) for k in d if k not in TYPES)
        raise _BadRow(
            "its fields are not pdtp's sweep columns"
            + (f" (missing: {', '.join(missing[:5])})" if missing else "")
            + (f" (unknown: {', '.join(extra[:5])})" if extra else "")
        )
    out: list[Any] = []
    for column in COLUMNS:
        v: Any = d[column]
        kind = TYPES[column]
        if v is not None:
            if not isinstance(v, _JSON_TYPES[kind]) or (kind != "bool" and isinstance(v, bool)):
                raise _BadRow(
                    f"column {column}: expected a {_KIND_WORDS[kind]} or null, "
                    f"got {type(v).__name__} {v!r}"[:200]
                )
            if kind == "float":
                v = float(d[column])  # JSON writes 2.0 as 2.0 but a hand edit may say 2
        out.append(v)
    return _check_row(tuple(out))


def _csv_text(rows: Sequence[Row], header: bool) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    if header:
        writer.writerow(COLUMNS)
    writer.writerows(["" if v is None else v for v in r] for r in rows)
    return buf.getvalue()


def _jsonl_text(rows: Sequence[Row]) -> str:
    return "".join(json.dumps(dict(zip(COLUMNS, r))) + "\n" for r in rows)


_CSV_HEADER = _csv_text([], header=True).encode()
# Every JSON Lines row pdtp writes starts with this (the columns keep their order).
_JSONL_PREFIX = b'{"model": '


# ---- the lock ----------------------------------------------------------------------------------

_LOCK_SIGNATURE = b"pdtp sweep lock\n"

#: Lock descriptors this process holds. A forked sweep worker inherits them, and an ``flock``
#: stays held while any copy is open: a worker outliving a killed sweep by a moment would keep
#: the output locked against the rerun that resumes it. Workers close their copies at start.
_HELD: set[int] = set()


def drop_inherited_locks() -> None:
    """In a forked worker: close the copies of the parent's lock descriptors (the parent's
    lock stays held through its own)."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


# Every fork, before the child runs anything else (a pool's workers, and anything else the
# caller forks): the child never holds the lock, not even until a worker's initializer runs.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=drop_inherited_locks)


def _try_flock(fd: int) -> bool:
    """An exclusive, non-blocking lock on an open file; False when another holds it."""
    try:
        import fcntl
    except ImportError:  # Windows: a byte-range lock (also dropped when the process dies)
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_head(fd: int, size: int = 4096) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, size)


class _Lock:
    """``<output>.lock``: held (``flock``) by the one sweep writing ``<output>``. Its text
    names the holder, for the message a second sweep gets. A lock file pdtp did not write is
    refused untouched; pdtp removes its own when the sweep ends."""

    def __init__(self, output: pathlib.Path, shown: pathlib.Path | None = None) -> None:
        self.output = output if shown is None else shown  # as the user spelled it
        self.path = output.with_name(output.name + ".lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as e:
                raise OutputFileError(
                    f"cannot write {self.output}: cannot create its lock file {self.path}: "
                    f"{e.strerror or e}"
                ) from None
            try:
                head = _read_head(fd)
                # pdtp's: empty, or its signature (whole, or cut short by a kill).
                if not (head.startswith(_LOCK_SIGNATURE) or _LOCK_SIGNATURE.startswith(head)):
                    raise OutputFileError(
                        f"{self.path} exists and was not written by pdtp; pdtp uses this name "
                        f"to lock {self.output}: move the file away or choose another output"
                    )
                if not _try_flock(fd):
                    holder = head[len(_LOCK_SIGNATURE) :].decode("utf-8", "replace").strip()
                    raise OutputFileError(
                        f"{self.output} is being written by another pdtp sweep"
                        + (f" ({holder})" if holder else "")
                        + f"; wait for it to finish, or choose another output (lock: {self.path})"
                    )
                # A finishing sweep unlinks its lock file while holding it: if the file we
                # locked is no longer the one at the path, try again with the new one.
                mine = os.fstat(fd)
                try:
                    now = os.stat(self.path)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                me = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, _LOCK_SIGNATURE + me)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd
            _HELD.add(fd)
            return
        raise OutputFileError(f"could not lock {self.output}: {self.path} keeps being replaced")

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still holding it (see acquire)
        _HELD.discard(self.fd)
        os.close(self.fd)
        self.fd = None


def _os_error(e: OSError, path: pathlib.Path, doing: str) -> OutputFileError:
    return OutputFileError(f"cannot {doing} {path}: {e.strerror or e}")


# ---- reading text files row by row -------------------------------------------------------------


class _Lines:
    """The physical lines of a binary file, decoded, with the byte offset and line number
    after each (so a reader knows where each record ends)."""

    def __init__(self, f: BinaryIO, path: pathlib.Path) -> None:
        self.f = f
        self.path = path
        self.offset = 0
        self.line = 0
        self.newline = True  # whether the last line read ended with a newline

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        raw = self.f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            raise StopIteration
        self.line += 1
        self.offset += len(raw)
        self.newline = raw.endswith(b"\n")
        if len(raw) > MAX_LINE_BYTES and not self.newline:
            raise _BadRow(f"a line longer than {MAX_LINE_BYTES} bytes (pdtp rows are < 1 kB)")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if not self.newline:  # a kill can cut a character in two
                return raw.decode("utf-8", "replace")
            raise _BadRow("not UTF-8 text") from None


class _Scan:
    """What reading a text output file found: its rows with their line numbers, where the
    last whole row ends, and the torn last line a kill left (its line number), if any."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, Row]] = []
        self.good_end = 0
        self.torn_line: int | None = None
        self.has_header = False


def _refuse(path: pathlib.Path, line: int, why: str) -> OutputFileError:
    return OutputFileError(
        f"{path}, line {line}: {why}. pdtp does not repair this (it is not the torn last "
        "line a killed sweep leaves): fix or delete that line, or choose another output"
    )


def _foreign(path: pathlib.Path, why: str) -> OutputFileError:
    return OutputFileError(
        f"{path} is not a pdtp sweep file of this version ({why}); pdtp leaves it as it "
        "is: choose another output file"
    )


def _scan_csv(path: pathlib.Path, f: BinaryIO) -> _Scan:
    scan = _Scan()
    lines = _Lines(f, path)
    reader = csv.reader(lines, strict=True)
    start = 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except (csv.Error, _BadRow) as e:
            # At the end of the file, an unterminated record is a torn write.
            at_end = not f.read(1)
            if scan.has_header and at_end and (not lines.newline or isinstance(e, csv.Error)):
                scan.torn_line = start
                break
            if not scan.has_header:
                raise _foreign(
                    path, "its first line is not pdtp's header: its columns differ"
                ) from None
            raise _refuse(path, lines.line, f"not a CSV row ({e})") from None
        if not lines.newline:  # the last line, cut short
            if not scan.has_header:
                break  # handled below: a torn header
            scan.torn_line = start
            break
        if not scan.has_header:
            if tuple(values) != COLUMNS:
                raise _foreign(path, "its first line is not pdtp's header: its columns differ")
            scan.has_header = True
        else:
            try:
                scan.rows.append((start, _row_from_csv(values)))
            except _BadRow as e:
                raise _refuse(path, start, str(e)) from None
            if len(scan.rows) > MAX_ROWS:
                raise _too_many(path)
        scan.good_end = lines.offset
        start = lines.line + 1
    if not scan.has_header and lines.offset:
        # No whole first line: pdtp's only if it is the start of pdtp's header (a sweep
        # killed while writing its first chunk).
        f.seek(0)
        if not _CSV_HEADER.startswith(f.read(len(_CSV_HEADER) + 1)):
            raise _foreign(path, "its first line is not pdtp's header: its columns differ")
        scan.torn_line = 1
    return scan


def _scan_jsonl(path: pathlib.Path, f: BinaryIO) -> _Scan:
    scan = _Scan()
    lines = _Lines(f, path)
    while True:
        try:
            text = next(lines)
        except StopIteration:
            break
        except _BadRow as e:
            raise _refuse(path, lines.line, str(e)) from None
        if not lines.newline:  # the last line, cut short
            raw = text.encode()
            if not scan.rows and not (
                raw.startswith(_JSONL_PREFIX) or _JSONL_PREFIX.startswith(raw)
            ):
                raise _foreign(path, "line 1 is not a pdtp sweep row")
            scan.torn_line = lines.line
            break
        if text.strip():
            try:
                row = _row_from_mapping(json.loads(text))
            except (ValueError, RecursionError) as e:
                why = str(e) if isinstance(e, _BadRow) else "not a JSON object"
                if not scan.rows:
                    raise _foreign(
                        path, f"line {lines.line} is not a pdtp sweep row: {why}"
                    ) from None
                raise _refuse(path, lines.line, why) from None
            scan.rows.append((lines.line, row))
            if len(scan.rows) > MAX_ROWS:
                raise _too_many(path)
        scan.good_end = lines.offset
    return scan


def _too_many(path: pathlib.Path) -> OutputFileError:
    return OutputFileError(
        f"{path} holds more than {MAX_ROWS:,} rows, pdtp's limit for one sweep file; "
        "split the sweep over several output files"
    )


def _regular_file(path: pathlib.Path) -> bool:
    """Whether ``path`` exists (as a regular file); anything else there is refused."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise _os_error(e, path, "read") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputFileError(f"{path} is not a regular file; choose another output file")
    return True


def _unique(items: Iterator[tuple[str, Row]]) -> None:
    """Refuse a file that holds a scenario twice (pdtp never writes one so); ``items`` are
    (where, row) pairs, ``where`` naming the file and line or row."""
    seen: dict[Key, str] = {}
    for where, row in items:
        key = row[:NKEY]
        first = seen.setdefault(key, where)
        if first is not where:
            raise OutputFileError(
                f"{where}: the same scenario as {first} "
                f"({', '.join(f'{c}={v}' for c, v in zip(KEY_COLUMNS, key))}); pdtp writes "
                "each scenario once, so this file was edited or joined by hand: remove one "
                "of the two rows, or choose another output"
            )


# ---- Parquet -----------------------------------------------------------------------------------

# Schema metadata of pdtp's Parquet files: {"version": 1, "merged_through": N} — the part
# files 1..N are in this file (a kill after the merge but before deleting them leaves them).
_META_KEY = b"pdtp.sweep"
_MARKER = ".pdtp-sweep-parts"
_PART = re.compile(r"part-(\d{6,})\.parquet")
_TMP = re.compile(r"(part-\d{6,}\.parquet|merge)\.tmp")


def _pyarrow() -> tuple[Any, Any]:
    try:
        pa = importlib.import_module("pyarrow")
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise InvalidArgumentError(
            'Parquet output needs pyarrow: pip install "pdtp[sweep]"'
        ) from None
    return pa, pq


def _arrow_schema(pa: Any) -> Any:
    arrow = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    return pa.schema([(c, arrow[TYPES[c]]) for c in COLUMNS])


def arrow_table(rows: Sequence[Row]) -> Any:
    """Rows as a pyarrow Table with pdtp's schema."""
    pa, _ = _pyarrow()
    schema = _arrow_schema(pa)
    cols = list(zip(*rows)) if rows else [() for _ in COLUMNS]
    return pa.table({f.name: pa.array(list(v), type=f.type) for f, v in zip(schema, cols)})


def _parquet_meta(path: pathlib.Path) -> int:
    """Check that ``path`` is a pdtp Parquet sweep file; the last part number merged in."""
    pa, pq = _pyarrow()
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises several classes for a file that is not Parquet
        raise _foreign(path, f"not a readable Parquet file: {e}") from None
    if not schema.remove_metadata().equals(_arrow_schema(pa)):
        raise _foreign(path, "its columns differ")
    raw = (schema.metadata or {}).get(_META_KEY)
    if raw is None:
        return 0  # written by an older pdtp (same columns, no metadata)
    try:
        n = json.loads(raw)["merged_through"]
    except (ValueError, KeyError, TypeError):
        raise _foreign(path, "its pdtp metadata is damaged") from None
    if not isinstance(n, int) or n < 0:
        raise _foreign(path, "its pdtp metadata is damaged")
    return n


class _Unreadable(OutputFileError):
    """A file with a .parquet name that pyarrow cannot read."""


def _parquet_rows(path: pathlib.Path) -> list[tuple[str, Row]]:
    """The rows of one Parquet file, each with where it is ("<file>, row N")."""
    _, pq = _pyarrow()
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several classes for a file that is not Parquet
        raise _Unreadable(
            f"{path} is not a pdtp sweep file of this version (not a readable Parquet file: "
            f"{e}); pdtp leaves it as it is: choose another output file"
        ) from None
    if not table.schema.remove_metadata().equals(_arrow_schema(_pyarrow()[0])):
        raise _foreign(path, "its columns differ")
    if table.num_rows > MAX_ROWS:
        raise _too_many(path)
    out = []
    for n, row in enumerate(zip(*(c.to_pylist() for c in table.columns)), 1):
        try:
            out.append((f"{path}, row {n}", _check_row(row)))
        except _BadRow as e:
            raise OutputFileError(f"{path}, row {n}: {e}") from None
    return out


# ---- the store ---------------------------------------------------------------------------------


class Store:
    """One sweep's output file, locked for the sweep's lifetime. ``open()`` checks the file is
    pdtp's, finishes what a killed run left (a torn line, Parquet parts already merged) and
    returns the rows already there; ``append`` adds a chunk; ``close`` merges Parquet parts
    and releases the lock.

    CSV and JSON Lines are appended per chunk with one ``write`` (and synced to disk when the
    sweep ends). Parquet cannot be appended: each chunk is a part file in ``<name>.parts/``
    (written to a temporary name and renamed, so a kill never leaves a torn one), merged
    into ``<name>`` — written aside, synced, then renamed over it — when the sweep ends, or
    on the next run."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        self.format = output_format(self.path)
        # The lock and the Parquet parts sit beside the file itself, not beside the name it
        # was spelled by: two sweeps into one file through a symlink (or `a/../b`) take the
        # same lock and serialise. (A hard link is another name for the file: not caught.)
        self._real = real = pathlib.Path(os.path.realpath(self.path))
        self.parts = real.with_name(real.name + ".parts")
        self._lock = _Lock(real, shown=self.path)
        self._fd: int | None = None
        self._next_part = 1
        self._merged_through = 0

    # -- reading (no lock, nothing changed: for read_rows and plots) --

    def read(self) -> list[Row]:
        """Every row, validated (a torn last line is left out, with a warning)."""
        if self.format == "parquet":
            return self._read_parquet(repair=False)
        if not _regular_file(self.path):
            return []
        scan = self._scan()
        if scan.torn_line is not None:
            _warn_torn(self.path, scan.torn_line, repaired=False, stacklevel=4)
        return [r for _, r in scan.rows]

    def _scan(self) -> _Scan:
        try:
            scanner = _scan_csv if self.format == "csv" else _scan_jsonl
            with self.path.open("rb") as f:
                scan = scanner(self.path, f)
        except OSError as e:
            raise _os_error(e, self.path, "read") from None
        _unique((f"{self.path}, line {n}", r) for n, r in scan.rows)
        return scan

    # -- writing --

    def open(self) -> list[Row]:
        """Lock the output, check and repair what is there; the rows already done."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _os_error(e, self.path.parent, "create the folder") from None
        self._lock.acquire()
        try:
            if self.format == "parquet":
                return self._read_parquet(repair=True)
            return self._open_text()
        except BaseException:
            self._lock.release()
            raise

    def _open_text(self) -> list[Row]:
        exists = _regular_file(self.path)
        scan = self._scan() if exists else _Scan()
        try:
            if scan.torn_line is not None:
                os.truncate(self.path, scan.good_end)
                _warn_torn(self.path, scan.torn_line, repaired=True, stacklevel=5)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.path, flags, 0o644)
            if self.format == "csv" and not scan.has_header:
                _write_all(self._fd, _CSV_HEADER)
        except OSError as e:
            raise _os_error(e, self.path, "write") from None
        return [r for _, r in scan.rows]

    def append(self, rows: list[Row]) -> None:
        if not rows:
            return
        try:
            if self.format == "parquet":
                self._append_part(rows)
            else:
                assert self._fd is not None, "Store.open() first"
                text = _csv_text(rows, False) if self.format == "csv" else _jsonl_text(rows)
                _write_all(self._fd, text.encode())
        except OSError as e:
            raise _os_error(e, self.path, "write") from None

    def close(self) -> None:
        try:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
            if self.format == "parquet" and self._lock.fd is not None:
                try:
                    self._merge()
                except OSError as e:
                    raise _os_error(e, self.path, "write") from None
        finally:
            self._lock.release()

    # -- Parquet --

    def _parts_dir(self) -> tuple[list[tuple[int, pathlib.Path]], list[pathlib.Path]]:
        """The part files of an unfinished run, in order, and what a kill left behind in
        the folder (temporary files, parts already merged into the main file). Refuses a
        folder that is not pdtp's, or that holds anything pdtp did not write."""
        if not self.parts.exists():
            return [], []
        if not self.parts.is_dir():
            raise OutputFileError(
                f"{self.parts} is not a folder; pdtp keeps a Parquet sweep's unmerged chunks "
                "under that name: move it away or choose another output"
            )
        try:
            entries = sorted(os.listdir(self.parts))
        except OSError as e:
            raise _os_error(e, self.parts, "read") from None
        if entries and _MARKER not in entries:
            raise OutputFileError(
                f"{self.parts} was not made by pdtp (it has no {_MARKER} file); pdtp keeps a "
                "Parquet sweep's unmerged chunks under that name and leaves this folder as "
                "it is: move it away or choose another output"
            )
        parts: list[tuple[int, pathlib.Path]] = []
        leftovers: list[pathlib.Path] = []
        for name in entries:
            m = _PART.fullmatch(name)
            if m and int(m.group(1)) > self._merged_through:
                parts.append((int(m.group(1)), self.parts / name))
            elif m or _TMP.fullmatch(name):
                leftovers.append(self.parts / name)
            elif name != _MARKER:
                raise OutputFileError(
                    f"{self.parts / name} was not written by pdtp; pdtp leaves {self.parts} "
                    "as it is: move that file away or choose another output"
                )
        return sorted(parts), leftovers

    def _read_parquet(self, repair: bool) -> list[Row]:
        main = _regular_file(self.path)
        self._merged_through = _parquet_meta(self.path) if main else 0
        parts, leftovers = self._parts_dir()
        self._next_part = max([self._merged_through, *(n for n, _ in parts)]) + 1
        found: list[tuple[str, Row]] = []
        if main:
            found.extend(_parquet_rows(self.path))
        for n, part in list(parts):
            try:
                found.extend(_parquet_rows(part))
            except _Unreadable:
                # Parts are written to a temporary name and renamed, so a kill never tears
                # one; a crash of the machine can (parts are not fsynced: they are only a
                # cache of the main file's future rows). Recomputed, like a torn line.
                warnings.warn(
                    f"{part}: unreadable (the machine crashed while writing it?); "
                    + ("dropped: its scenarios are computed again" if repair else "left out"),
                    SweepFileWarning,
                    stacklevel=5,
                )
                parts.remove((n, part))
                leftovers.append(part)
            if len(found) > MAX_ROWS:
                raise _too_many(self.path)
        _unique(iter(found))
        if repair:  # only once everything checked out: these are pdtp's own leftovers
            try:
                for f in leftovers:
                    os.unlink(f)
            except OSError as e:
                raise _os_error(e, self.parts, "clean up") from None
        return [r for _, r in found]

    def _ensure_parts_dir(self) -> None:
        marker = self.parts / _MARKER
        if not marker.exists():
            self.parts.mkdir(exist_ok=True)  # an empty folder left by a kill is reused
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)

    def _append_part(self, rows: list[Row]) -> None:
        _, pq = _pyarrow()
        self._ensure_parts_dir()
        name = self.parts / f"part-{self._next_part:06d}.parquet"
        tmp = name.with_name(name.name + ".tmp")
        pq.write_table(arrow_table(rows), tmp)
        os.replace(tmp, name)
        self._next_part += 1

    def _merge(self) -> None:
        """Fold the part files into the main file (atomically, recording which parts it
        holds), then delete them and the folder."""
        parts, leftovers = self._parts_dir()
        for f in leftovers:
            os.unlink(f)
        if not parts:
            if self.parts.exists():
                self._remove_parts_dir()
            return
        pa, pq = _pyarrow()
        files = ([self.path] if self.path.exists() else []) + [p for _, p in parts]
        tables = [pq.read_table(f).replace_schema_metadata(None) for f in files]
        last = parts[-1][0]
        merged = pa.concat_tables(tables).replace_schema_metadata(
            {_META_KEY: json.dumps({"version": 1, "merged_through": last}).encode()}
        )
        tmp = self.parts / "merge.tmp"
        pq.write_table(merged, tmp)
        _fsync_path(tmp)
        os.replace(tmp, self._real)  # the file, not a symlink naming it
        self._merged_through = last
        for _, p in parts:
            os.unlink(p)
        self._remove_parts_dir()

    def _remove_parts_dir(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.parts / _MARKER)
        os.rmdir(self.parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_path(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _warn_torn(path: pathlib.Path, line: int, repaired: bool, stacklevel: int) -> None:
    """Warn at the caller of ``pdtp.sweep`` / ``read_rows`` (``stacklevel`` frames up)."""
    warnings.warn(
        f"{path}, line {line}: a torn last line (a sweep was killed while writing it) "
        + ("was dropped; its scenarios are computed again" if repaired else "is left out"),
        SweepFileWarning,
        stacklevel=stacklevel,
    )


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sweep output file (CSV, Parquet or JSON Lines), typed and validated."""
    return [dict(zip(COLUMNS, r)) for r in Store(path).read()]
