"""``pdtp.sweep`` (module ``pdtp.sweeps``): the best valid plan for every scenario of a
grid (models x GPU types x workloads x connectors x GPU budgets), fast.

For one (model, GPU, workload, connector) the per-side options do not depend on the budget,
so the Rust core (``src/sweep.rs``) builds them once and answers every budget exactly (each
row equals ``pdtp.solve(..., method="enumerate")``) in microseconds. Groups are spread over
a process pool (``backend="local"``) or a Ray cluster (``backend="ray"``). With ``output=``
finished rows are appended to a CSV, Parquet or JSON Lines file chunk by chunk, and a rerun
with the same file skips them, so a killed sweep loses at most one chunk.
"""

from __future__ import annotations

import csv
import importlib
import itertools
import json
import math
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _core
from ._validate import optional_positive_int, positive_int
from .check import MAX_TP
from .errors import InvalidArgumentError
from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION, SidePoint, bottleneck, resolve_context
from .workload import Workload, resolve_workload

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model

__all__ = ["COLUMNS", "KEY_COLUMNS", "FORMATS", "sweep", "scenario_key", "read_rows"]

BACKENDS = ("local", "ray")
FORMATS = {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# Budgets beyond this are not one deployment (the same cap as pdtp.solve).
MAX_GPUS = 1 << 20
# Scenarios per chunk: the unit of work sent to a worker, of progress and of flushing.
DEFAULT_CHUNK = 2048

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
    ("prefill_tp", "int"),
    ("prefill_instances", "int"),
    ("decode_tp", "int"),
    ("decode_instances", "int"),
    ("gpus_used", "int"),
    ("requests_per_s", "float"),
    ("output_tokens_per_s", "float"),
    ("ttft_ms", "float"),
    ("tpot_ms", "float"),
    ("decode_batch", "int"),
    ("prefill_capacity_rps", "float"),
    ("decode_capacity_rps", "float"),
    ("bottleneck", "str"),
    ("rule_blind_prefill_tp", "int"),
    ("rule_blind_prefill_instances", "int"),
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
_NKEY = len(KEY_COLUMNS)

Row = tuple[Any, ...]
Key = tuple[Any, ...]


# ---- the grid -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One (model, GPU, workload, connector) and some of its budgets: one Rust call."""

    model: Model
    gpu: GPU
    workload: Workload
    connector: str
    max_tp: int
    budgets: tuple[int, ...]

    def key(self, budget: int) -> Key:
        w = self.workload
        return (
            self.model.name,
            self.gpu.name,
            self.connector,
            w.isl,
            w.osl,
            _opt_float(w.ttft_ms),
            _opt_float(w.tpot_ms),
            self.max_tp,
            budget,
        )


@dataclass(frozen=True)
class _Options:
    max_acks: int | None
    gpu_memory_utilization: float
    constants: Any


def _optional(name: str) -> Any:
    """An optional dependency (pandas, pyarrow, PyYAML, Ray), imported on use only."""
    return importlib.import_module(name)


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, str | bytes | dict) or not isinstance(x, Iterable):
        return [x]
    return list(x)


def _models(x: Any) -> list[Model]:
    from .catalog import models, resolve_model

    if isinstance(x, str) and x.strip().lower() == "all":
        return models()
    out = [resolve_model(m) for m in _as_list(x)]
    if not out:
        raise InvalidArgumentError("models must name at least one model")
    return out


def _gpus(x: Any) -> list[GPU]:
    from .catalog import gpu, gpus

    if isinstance(x, str) and x.strip().lower() == "all":
        return gpus()
    out = [gpu(g) for g in _as_list(x)]
    if not out:
        raise InvalidArgumentError("gpu must name at least one GPU type")
    return out


def _budgets(x: Any) -> list[int]:
    out = sorted({positive_int("gpus", g, maximum=MAX_GPUS) for g in _as_list(x)})
    if not out:
        raise InvalidArgumentError("gpus must give at least one GPU budget")
    return out


def _workloads(x: Any) -> list[Workload]:
    return [resolve_workload(w) for w in ([None] if x is None else _as_list(x))] or [Workload()]


def _connectors(x: Any) -> list[str]:
    from .connectors import resolve_connector

    out = [resolve_connector(c).name for c in _as_list(x)]
    if not out:
        raise InvalidArgumentError("connector must name at least one connector")
    return out


def scenario_key(row: dict[str, Any]) -> Key:
    """The inputs that identify a scenario (what resuming matches on)."""
    return tuple(_coerce(c, row.get(c)) for c in KEY_COLUMNS)


# ---- one group: Rust call + rows ------------------------------------------------------------


def _explainer(
    g: Group, opts: _Options, ctx: Any, prefill: list[SidePoint], decode: list[SidePoint]
) -> Callable[[int], str]:
    """The binding reason of an infeasible budget, exactly as ``pdtp.solve`` raises it,
    memoised over budgets that ``infeasible.explain`` cannot tell apart: its text depends on
    the budget only through min(max_tp, budget), budget < 2, the smallest split that fits
    (reached only below 2·max_tp) and whether twice the smallest weight-fitting TP exceeds
    the budget."""
    from .planning.infeasible import _min_tp_for_weights, explain

    tmin = _min_tp_for_weights(ctx, ctx.model.weight_bytes)
    memo: dict[Key, str] = {}

    def reason(budget: int) -> str:
        if budget < 2 * g.max_tp:
            key: Key = (budget,)
        else:
            key = ("large", tmin is not None and 2 * tmin > budget)
        hit = memo.get(key)
        if hit is None:
            bound = min(g.max_tp, budget)
            ps = {p.tp: p for p in prefill[:bound]}
            ds = {d.tp: d for d in decode[:bound]}
            hit, _ = explain(ctx, g.workload, g.connector, budget, g.max_tp, opts.max_acks, ps, ds)
            memo[key] = hit
        return hit

    return reason


def _run_group(g: Group, opts: _Options) -> list[Row]:
    start = time.perf_counter()
    from .planning.scenario import sweep_scenario

    ctx = resolve_context(g.model, g.gpu, opts.constants, opts.gpu_memory_utilization)
    scenario = sweep_scenario(ctx, g.workload, g.connector, g.max_tp, opts.max_acks)
    prows, drows, points = _core.sweep_budgets(scenario, list(g.budgets))
    prefill = [SidePoint.from_row(r) for r in prows]
    decode = [SidePoint.from_row(r) for r in drows]
    w = g.workload
    head = (g.model.name, g.gpu.name, g.connector, w.isl, w.osl)
    slo = (_opt_float(w.ttft_ms), _opt_float(w.tpot_ms), g.max_tp)
    osl = w.osl
    reason: Callable[[int], str] | None = None
    body: list[tuple[Any, ...]] = []
    for budget, (best, blind, blind_valid) in zip(g.budgets, points):
        if blind is None:
            tail: tuple[Any, ...] = (None, None, None, None, None, None)
        else:
            bp, bnp, bd, bnd, _, _ = blind
            brps = min(bnp * prefill[bp - 1].requests_per_s, bnd * decode[bd - 1].requests_per_s)
            tail = (bp, bnp, bd, bnd, brps, blind_valid)
        if best is None:
            if reason is None:
                reason = _explainer(g, opts, ctx, prefill, decode)
            body.append((budget, "INFEASIBLE", *(None,) * 13, *tail, reason(budget)))
            continue
        p, np_, d, nd, _, used = best
        pp, dp = prefill[p - 1], decode[d - 1]
        pcap, dcap = np_ * pp.requests_per_s, nd * dp.requests_per_s
        rps = min(pcap, dcap)
        body.append(
            (
                budget,
                "OPTIMAL",
                p,
                np_,
                d,
                nd,
                used,
                rps,
                rps * osl,
                pp.latency_ms,
                dp.latency_ms,
                dp.batch,
                pcap,
                dcap,
                bottleneck(pcap, dcap),
                *tail,
                None,
            )
        )
    ms = (time.perf_counter() - start) * 1e3 / max(1, len(body))
    # Row layout: KEY (9) + plan (14) + rule-blind (6) + solve_ms + reason.
    return [(*head, *slo, r[0], *r[1:21], ms, r[21]) for r in body]


def _run_chunk(chunk: Sequence[Group], opts: _Options) -> list[Row]:
    """Worker entry point (process pool and Ray): every group of a chunk, in order."""
    out: list[Row] = []
    for g in chunk:
        out.extend(_run_group(g, opts))
    return out


def _chunks(groups: Sequence[Group], size: int) -> list[list[Group]]:
    """Split groups into chunks of at most ``size`` scenarios (a large group is cut)."""
    pieces: list[Group] = []
    for g in groups:
        for i in range(0, len(g.budgets), size):
            pieces.append(
                Group(g.model, g.gpu, g.workload, g.connector, g.max_tp, g.budgets[i : i + size])
            )
    out: list[list[Group]] = []
    current: list[Group] = []
    n = 0
    for piece in pieces:
        if current and n + len(piece.budgets) > size:
            out.append(current)
            current, n = [], 0
        current.append(piece)
        n += len(piece.budgets)
    if current:
        out.append(current)
    return out


# ---- backends -------------------------------------------------------------------------------


def _watch_parent(parent: int) -> None:
    """Worker initializer: exit when the parent dies (``kill -9`` of a sweep must not leave
    idle workers behind; a normal exit or Ctrl-C already ends them)."""
    if sys.platform.startswith("linux"):
        try:  # the kernel kills this worker when its parent dies
            import ctypes
            import signal

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="pdtp-parent-watch", daemon=True).start()


# Below this many scenarios a sweep finishes (~200k scenarios/s in one process) before
# worker processes have started and shipped their rows back: measured on 2 cores, 67,584
# scenarios took 0.30 s in-process and 0.45 s with 2 workers; 540,672 took 4.5 s vs 4.0 s.
PARALLEL_MIN_SCENARIOS = 250_000


def _default_workers(scenarios: int) -> int:
    return (os.cpu_count() or 1) if scenarios >= PARALLEL_MIN_SCENARIOS else 1


def _local(
    chunks: list[list[Group]], opts: _Options, workers: int
) -> Iterator[tuple[int, list[Row]]]:
    if workers <= 1 or len(chunks) <= 1:
        for index, chunk in enumerate(chunks):
            yield index, _run_chunk(chunk, opts)
        return
    with ProcessPoolExecutor(
        max_workers=min(workers, len(chunks)),
        initializer=_watch_parent,
        initargs=(os.getpid(),),
    ) as pool:
        pending: dict[Future[list[Row]], int] = {}
        todo = enumerate(chunks)
        # Keep a bounded queue in flight so results stream back as chunks finish.
        for index, chunk in itertools.islice(todo, 2 * workers):
            pending[pool.submit(_run_chunk, chunk, opts)] = index
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending[pool.submit(_run_chunk, nxt[1], opts)] = nxt[0]


def _ray(
    chunks: list[list[Group]], opts: _Options, workers: int | None
) -> Iterator[tuple[int, list[Row]]]:
    try:
        ray = _optional("ray")
    except ImportError:
        raise InvalidArgumentError('backend="ray" needs Ray: pip install "pdtp[ray]"') from None
    if not ray.is_initialized():
        ray.init()
    remote = ray.remote(_run_chunk)
    opts_ref = ray.put(opts)
    limit = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    todo = enumerate(chunks)
    index_of = {}
    for index, chunk in itertools.islice(todo, 2 * limit):
        index_of[remote.remote(chunk, opts_ref)] = index
    while index_of:
        done, _ = ray.wait(list(index_of), num_returns=1)
        for ref in done:
            yield index_of.pop(ref), ray.get(ref)
            nxt = next(todo, None)
            if nxt is not None:
                index_of[remote.remote(nxt[1], opts_ref)] = nxt[0]


# ---- the public entry point -----------------------------------------------------------------


def sweep(
    models: Any,
    *,
    gpus: Any,
    gpu: Any = DEFAULT_GPU,
    workloads: Any = None,
    connector: Any = "moriio",
    workers: int | None = None,
    backend: str = "local",
    max_tp: int | None = None,
    max_acks: int | None = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    constants: Any = None,
    output: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    as_frame: bool | None = None,
) -> Any:
    """The best valid P/D plan for every scenario of a grid.

    ``models`` (a model, name, ``"all"`` or a list), ``gpus`` (a budget or a list/range),
    ``gpu`` (a GPU type, ``"all"`` or a list), ``workloads`` (``None`` = defaults, a
    :class:`Workload`/dict or a list) and ``connector`` (a name or a list): the grid is their
    product. One row per scenario: its inputs, the plan (the same numbers as
    ``pdtp.solve(..., method="enumerate")``), ``status`` (``OPTIMAL`` / ``INFEASIBLE``),
    ``solve_ms`` (amortised over a group), ``reason`` (why it is infeasible: the text of
    ``pdtp.InfeasibleError``) and the ``rule_blind_*`` plan a planner ignoring the
    connector's pair rules would pick (``rule_blind_valid``: whether vLLM accepts it).

    ``workers``: processes (``None`` = every core once the grid is large enough to pay for
    starting them — ``PARALLEL_MIN_SCENARIOS`` — else this process; 1 = in this process) or, with
    ``backend="ray"``, chunks in flight. ``output``: a ``.csv``, ``.parquet`` or ``.jsonl``
    file; rows are appended chunk by chunk and scenarios already in it are skipped.
    ``progress(done, total)`` is called as scenarios finish. Returns a pandas DataFrame
    when pandas is installed (``as_frame=False``: a list of dicts).

    >>> import pdtp
    >>> rows = pdtp.sweep("llama-3.1-70b", gpus=[1, 24], gpu="mi300x", workers=1,
    ...                   as_frame=False)
    >>> [r["status"] for r in rows]
    ['INFEASIBLE', 'OPTIMAL']
    """
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    n_workers = optional_positive_int("workers", workers, maximum=4096)
    size = positive_int("chunk_size", chunk_size, maximum=1 << 24)
    tp_override = optional_positive_int("max_tp", max_tp, maximum=MAX_TP)
    opts = _Options(
        optional_positive_int("max_acks", max_acks, maximum=MAX_TP),
        gpu_memory_utilization,
        constants,
    )
    ms, gs, ws, cs = _models(models), _gpus(gpu), _workloads(workloads), _connectors(connector)
    budgets = tuple(_budgets(gpus))
    # Fail fast (here, not in a worker) on a bad utilization or constants override.
    for g in gs:
        resolve_context(ms[0], g, constants, gpu_memory_utilization)

    groups = [
        Group(m, g, w, c, tp_override or g.gpus_per_node, budgets)
        for m, g, w, c in itertools.product(ms, gs, ws, cs)
    ]
    grid = groups
    total = sum(len(g.budgets) for g in groups)
    found: dict[Key, Row] = {}
    store = _Store(pathlib.Path(output)) if output is not None else None
    if store is not None:
        wanted = {g.key(b) for g in groups for b in g.budgets}
        for row in store.read():
            if row[:_NKEY] in wanted:
                found[row[:_NKEY]] = row
        if found:
            groups = [
                Group(g.model, g.gpu, g.workload, g.connector, g.max_tp, rest)
                for g in groups
                if (rest := tuple(b for b in g.budgets if g.key(b) not in found))
            ]
    done = len(found)
    if progress is not None:
        progress(done, total)
    chunks = _chunks(groups, size)
    if backend == "ray":
        results = _ray(chunks, opts, n_workers)
    else:
        remaining = sum(len(g.budgets) for g in groups)
        results = _local(chunks, opts, n_workers or _default_workers(remaining))
    solved: list[list[Row]] = [[] for _ in chunks]
    try:
        for index, rows in results:
            if store is not None:
                store.append(rows)
            solved[index] = rows
            done += len(rows)
            if progress is not None:
                progress(done, total)
    finally:
        if store is not None:
            store.close()
    # Chunks are cut in grid order, so their concatenation is in grid order too.
    ordered = [row for rows in solved for row in rows]
    if found:
        position = {g.key(b): i for i, (g, b) in enumerate((g, b) for g in grid for b in g.budgets)}
        ordered = sorted([*found.values(), *ordered], key=lambda r: position[r[:_NKEY]])
    return _result(ordered, as_frame)


def _result(rows: list[Row], as_frame: bool | None) -> Any:
    if as_frame is not False:
        try:
            pd = _optional("pandas")
        except ImportError:
            if as_frame:
                raise InvalidArgumentError(
                    "as_frame=True needs pandas: pip install pandas"
                ) from None
        else:
            return to_frame(rows, pd)
    return [dict(zip(COLUMNS, r)) for r in rows]


def to_frame(rows: Sequence[Row], pd: Any = None) -> Any:
    """Rows (tuples in :data:`COLUMNS` order) as a typed pandas DataFrame: nullable
    ``Int64`` / ``boolean`` where a column has gaps (infeasible scenarios), NaN for floats."""
    if pd is None:
        pd = _optional("pandas")
    df = pd.DataFrame.from_records(list(rows), columns=list(COLUMNS))
    for name in COLUMNS:
        kind = TYPES[name]
        if kind == "int":
            df[name] = df[name].astype("Int64")
        elif kind == "bool":
            df[name] = df[name].astype("boolean")
        elif kind == "float":
            df[name] = df[name].astype("float64")
    return df


# ---- resumable output files -----------------------------------------------------------------


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


def _row_from_mapping(d: dict[str, Any]) -> Row:
    return tuple(_coerce(c, d.get(c)) for c in COLUMNS)


def _text_parser(kind: str) -> Callable[[str], Any]:
    if kind == "int":
        return lambda v: int(v) if v else None
    if kind == "float":
        return lambda v: float(v) if v else None
    if kind == "bool":
        return lambda v: v.strip().lower() in ("true", "1") if v else None
    return lambda v: v if v else None


# One parser per column for CSV text (a fast path for reading large files back).
_CSV_PARSERS = tuple(_text_parser(TYPES[c]) for c in COLUMNS)


def _row_from_csv(values: list[str]) -> Row:
    return tuple(f(v) for f, v in zip(_CSV_PARSERS, values))


def output_format(path: str | os.PathLike[str]) -> str:
    suffix = pathlib.Path(path).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise InvalidArgumentError(
            f"output file must end in .csv, .parquet or .jsonl, got {str(path)!r}"
        )
    return fmt


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sweep output file (CSV, Parquet or JSON Lines), typed."""
    return [dict(zip(COLUMNS, r)) for r in _Store(pathlib.Path(path)).read()]


class _Store:
    """Appends rows chunk by chunk; reads back what an earlier (possibly killed) run wrote.

    CSV and JSON Lines are appended and flushed per chunk (a torn last line from a kill is
    cut off on the next run). Parquet cannot be appended: each chunk goes to a part file in
    ``<name>.parts/``, merged into ``<name>`` when the sweep ends (or on the next run)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.format = output_format(path)
        self.parts = path.with_name(path.name + ".parts")
        self._fh: Any = None
        self._writer: Any = None
        self._n_parts = 0

    # reading
    def read(self) -> list[Row]:
        if self.format == "parquet":
            return self._read_parquet()
        if not self.path.exists():
            return []
        self._repair_tail()
        if self.format == "csv":
            with self.path.open(newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                if header is not None and tuple(header) != COLUMNS:
                    raise InvalidArgumentError(
                        f"{self.path} is not a pdtp sweep file of this version (its columns "
                        "differ); choose another output file"
                    )
                return [_row_from_csv(values) for values in reader if len(values) == len(COLUMNS)]
        rows = []
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rows.append(_row_from_mapping(json.loads(line)))
        return rows

    def _repair_tail(self) -> None:
        """Drop a partial last line (the process was killed mid-write)."""
        with self.path.open("rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            cut = data.rfind(b"\n") + 1
            f.truncate(cut)

    def _parquet_tables(self) -> list[Any]:
        """The main file and the part files of an unfinished run (parts are written to a
        temporary name and renamed, so a kill never leaves a torn one)."""
        pq = _pyarrow_parquet()
        files = [self.path] if self.path.exists() else []
        parts = sorted(self.parts.glob("part-*.parquet")) if self.parts.is_dir() else []
        self._n_parts = max((int(f.stem.split("-")[1]) for f in parts), default=0)
        tables = []
        for f in [*files, *parts]:
            table = pq.read_table(f)
            if tuple(table.column_names) != COLUMNS:
                raise InvalidArgumentError(
                    f"{f} is not a pdtp sweep file of this version (its columns differ); "
                    "choose another output file"
                )
            tables.append(table)
        return tables

    def _read_parquet(self) -> list[Row]:
        rows: list[Row] = []
        for table in self._parquet_tables():
            rows.extend(zip(*(column.to_pylist() for column in table.columns)))
        return rows

    # writing
    def append(self, rows: list[Row]) -> None:
        if not rows:
            return
        if self.format == "parquet":
            self._append_parquet(rows)
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            self._fh = self.path.open("a", newline="", encoding="utf-8")
            if self.format == "csv":
                self._writer = csv.writer(self._fh)
                if fresh:
                    self._writer.writerow(COLUMNS)
        if self.format == "csv":
            self._writer.writerows(["" if v is None else v for v in r] for r in rows)
        else:
            self._fh.writelines(json.dumps(dict(zip(COLUMNS, r))) + "\n" for r in rows)
        self._fh.flush()

    def _append_parquet(self, rows: list[Row]) -> None:
        pq = _pyarrow_parquet()
        self.parts.mkdir(parents=True, exist_ok=True)
        self._n_parts += 1
        name = self.parts / f"part-{self._n_parts:06d}.parquet"
        tmp = name.with_suffix(".tmp")
        pq.write_table(_arrow_table(rows), tmp)
        os.replace(tmp, name)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self.format == "parquet" and self.parts.is_dir():
            pq = _pyarrow_parquet()
            tables = self._parquet_tables()
            merged = _optional("pyarrow").concat_tables(tables) if tables else _arrow_table([])
            tmp = self.path.with_name(self.path.name + ".tmp")
            pq.write_table(merged, tmp)
            os.replace(tmp, self.path)
            for f in self.parts.iterdir():
                f.unlink()
            self.parts.rmdir()
            self._n_parts = 0


def _pyarrow_parquet() -> Any:
    try:
        pq = _optional("pyarrow.parquet")
    except ImportError:
        raise InvalidArgumentError(
            'Parquet output needs pyarrow: pip install "pdtp[sweep]"'
        ) from None
    return pq


def _arrow_table(rows: Sequence[Row]) -> Any:
    pa = _optional("pyarrow")

    arrow = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    cols = list(zip(*rows)) if rows else [() for _ in COLUMNS]
    return pa.table(
        {name: pa.array(list(v), type=arrow[TYPES[name]]) for name, v in zip(COLUMNS, cols)}
    )


# ---- the command line (`pdtp sweep`) --------------------------------------------------------

GRID_KEYS = (
    "models",
    "gpus",
    "gpu",
    "workloads",
    "isl",
    "osl",
    "ttft_ms",
    "tpot_ms",
    "connector",
    "max_tp",
    "max_acks",
    "gpu_memory_utilization",
    "output",
    "workers",
    "backend",
    "chunk_size",
)


def parse_ints(text: Any, field: str = "gpus") -> list[int]:
    """``"1-512"``, ``"8,16,32"``, ``"8-64:8"`` (a step) or a mix, or a list of those."""
    if isinstance(text, int) and not isinstance(text, bool):
        return [text]
    if not isinstance(text, str):
        return [v for item in _as_list(text) for v in parse_ints(item, field)]
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            span, _, step = part.partition(":")
            lo, dash, hi = span.partition("-")
            if dash:
                out.extend(range(int(lo), int(hi) + 1, int(step or 1)))
            else:
                out.append(int(span))
        except ValueError:
            raise InvalidArgumentError(
                f"{field}: expected integers, ranges like 1-512 or 8-64:8, got {part!r}"
            ) from None
    if not out:
        raise InvalidArgumentError(f"{field}: no values in {text!r}")
    return out


def parse_names(text: Any) -> Any:
    """``"all"``, ``"a,b"`` or a list: names for models / GPU types / connectors."""
    if isinstance(text, str):
        names = [t.strip() for t in text.split(",") if t.strip()]
        return names[0] if len(names) == 1 else names
    return list(text)


def _parse_slos(text: Any, field: str) -> list[float | None]:
    out: list[float | None] = []
    for item in text.split(",") if isinstance(text, str) else _as_list(text):
        if item is None or (isinstance(item, str) and item.strip().lower() in ("none", "off")):
            out.append(None)
        else:
            try:
                out.append(float(item))
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"{field}: expected milliseconds or 'none', got {item!r}"
                ) from None
    return out


def load_grid(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A sweep grid from a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file."""
    p = pathlib.Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise InvalidArgumentError(f"grid file must be .yaml, .yml or .toml, got {str(path)!r}")
    text = p.read_text(encoding="utf-8")
    if suffix in (".yaml", ".yml"):
        try:
            yaml = _optional("yaml")
        except ImportError:
            raise InvalidArgumentError(
                'YAML grid files need PyYAML: pip install "pdtp[sweep]"'
            ) from None
        data = yaml.safe_load(text) or {}
    elif suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise InvalidArgumentError(
                "TOML grid files need Python >= 3.11 (tomllib); use a YAML file instead"
            ) from None
        data = tomllib.loads(text)
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{path}: expected a mapping of grid keys")
    unknown = sorted(set(data) - set(GRID_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(GRID_KEYS)}"
        )
    return data


def grid_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`sweep` from a grid (a file's mapping merged with flags)."""
    if "gpus" not in spec or spec["gpus"] is None:
        raise InvalidArgumentError("give the GPU budgets: --gpus 1-512 (or gpus: in the file)")
    if spec.get("workloads") is not None:
        if any(spec.get(k) is not None for k in ("isl", "osl", "ttft_ms", "tpot_ms")):
            raise InvalidArgumentError("give either workloads or isl/osl/ttft_ms/tpot_ms")
        workloads = spec["workloads"]
    else:
        base = Workload()
        isls = parse_ints(spec.get("isl") or base.isl, "isl")
        osls = parse_ints(spec.get("osl") or base.osl, "osl")
        ttfts = _parse_slos(spec.get("ttft_ms", base.ttft_ms), "ttft_ms")
        tpots = _parse_slos(spec.get("tpot_ms", base.tpot_ms), "tpot_ms")
        workloads = [
            Workload(isl=i, osl=o, ttft_ms=t, tpot_ms=u)
            for i, o, t, u in itertools.product(isls, osls, ttfts, tpots)
        ]
    kwargs: dict[str, Any] = {
        "models": parse_names(spec.get("models") or "all"),
        "gpus": parse_ints(spec["gpus"]),
        "gpu": parse_names(spec.get("gpu") or DEFAULT_GPU),
        "workloads": workloads,
        "connector": parse_names(spec.get("connector") or "moriio"),
    }
    for k in ("max_tp", "max_acks", "workers", "backend", "output", "chunk_size"):
        if spec.get(k) is not None:
            kwargs[k] = spec[k]
    if spec.get("gpu_memory_utilization") is not None:
        kwargs["gpu_memory_utilization"] = float(spec["gpu_memory_utilization"])
    return kwargs


class ProgressBar:
    """A one-line progress bar with rate and ETA on a terminal's stderr; silent otherwise."""

    def __init__(self, stream: Any = None, *, enabled: bool | None = None, width: int = 30):
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self.width = width
        self.start = time.perf_counter()
        self.first: int | None = None
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first, self.start = done, now  # resumed rows do not count towards the rate
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        elapsed = now - self.start
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        frac = done / total if total else 1.0
        fill = round(frac * self.width)
        eta = (total - done) / rate if rate > 0 else math.inf
        self.stream.write(
            f"\r[{'#' * fill}{'.' * (self.width - fill)}] {done:,}/{total:,} "
            f"{frac:6.1%}  {rate:,.0f}/s  ETA {_duration(eta)} "
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--"
    s = round(seconds)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
        if s >= 3600
        else f"{s // 60:02d}:{s % 60:02d}"
    )


def cli_main(args: Any) -> int:
    """``pdtp sweep``: the grid from a YAML/TOML file, overridden by flags; rows to the
    output file (resumable) or as CSV / JSON Lines on stdout."""
    spec = load_grid(args.grid) if args.grid else {}
    flags = {
        "models": args.models,
        "gpus": args.gpus,
        "gpu": args.gpu,
        "isl": args.isl,
        "osl": args.osl,
        "ttft_ms": args.ttft,
        "tpot_ms": args.tpot,
        "connector": args.connector,
        "max_tp": args.max_tp,
        "max_acks": args.max_acks,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "output": args.output,
        "workers": args.workers,
        "backend": args.backend,
        "chunk_size": args.chunk_size,
    }
    spec.update({k: v for k, v in flags.items() if v is not None})
    kwargs = grid_arguments(spec)
    output = kwargs.get("output")
    if output is not None:
        output_format(output)  # a bad extension is a usage error before any work
    bar = ProgressBar(enabled=args.progress)
    resumed: list[int] = []

    def report(done: int, total: int) -> None:
        if not resumed:
            resumed.append(done)
        bar(done, total)

    start = time.perf_counter()
    rows = sweep(**kwargs, progress=report, as_frame=False)
    elapsed = time.perf_counter() - start
    first = resumed[0] if resumed else 0
    infeasible = sum(r["status"] != "OPTIMAL" for r in rows)
    solved = len(rows) - first
    summary = (
        f"{len(rows):,} scenarios ({infeasible:,} infeasible); {solved:,} solved in "
        f"{elapsed:.2f} s ({solved / max(elapsed, 1e-9):,.0f}/s)"
        + (f", {first:,} already in {output}" if first else "")
    )
    if output is not None:
        print(f"{summary} -> {output}")
        return 0
    if args.json:
        for r in rows:
            sys.stdout.write(json.dumps(r) + "\n")
    else:
        writer = csv.writer(sys.stdout)
        writer.writerow(COLUMNS)
        writer.writerows(["" if r[c] is None else r[c] for c in COLUMNS] for r in rows)
    if sys.stderr.isatty():
        print(summary, file=sys.stderr)
    return 0
