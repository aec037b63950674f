"""``pdtp.sweep`` (module ``pdtp.sweeps``): the best valid plan for every scenario of a
grid (models x GPU types x workloads x connectors x GPU budgets), fast.

Each row is the plan ``pdtp.solve`` returns with the same arguments and its defaults — mode
auto (P/D splits and aggregated instances), the default layouts (TP; TP+EP and DP+EP for MoE
models; PP where no layout in one node holds the weights) — with ``mode`` and layout columns.
For one (model, GPU, workload, connector) the candidate instances' operating points do not
depend on the budget, so the Rust core (``src/sweep.rs``) builds them once and answers each
budget with the closed forms ``solve`` starts its search from (exact for one model on one GPU
type; tests check rows against ``solve``'s oracle and CP-SAT). Groups are spread over
a process pool (``backend="local"``) or a Ray cluster (``backend="ray"``). With ``output=``
finished rows are appended to a CSV, Parquet or JSON Lines file chunk by chunk, and a rerun
with the same file skips them, so a killed sweep loses at most one chunk.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import itertools
import json
import math
import os
import pathlib
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _core
from ._sweep_output import (
    COLUMNS,
    FORMATS,
    KEY_COLUMNS,
    MAX_ROWS,
    NKEY,
    TYPES,
    Key,
    Row,
    Store,
    SweepFileWarning,
    output_format,
    read_rows,
    scenario_key,
)
from ._validate import MAX_TP, optional_positive_int, positive_int, positive_number, public_api
from ._validate import short_repr as _short
from .errors import ArgumentTypeError, InvalidArgumentError, PdtpError
from .layout import Layout
from .perf import DEFAULT_GPU, DEFAULT_UTILIZATION, bottleneck, resolve_context
from .scenario import takes_scenario
from .workload import MAX_TOKENS, Workload, resolve_workload

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "FORMATS",
    "SweepFileWarning",
    "sweep",
    "scenario_key",
    "read_rows",
]

BACKENDS = ("local", "ray")
# Budgets beyond this are not one deployment (the same cap as pdtp.solve).
MAX_GPUS = 1 << 20
# Scenarios per chunk: the unit of work sent to a worker, of progress and of flushing.
DEFAULT_CHUNK = 2048


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
    if isinstance(x, range) and x:  # checked by its ends, not value by value
        for end in (x[0], x[-1]):  # (min() and max() would walk the range)
            positive_int("gpus", end, maximum=MAX_GPUS)
        return sorted(x)
    values = [x] if isinstance(x, str | bytes | dict) or not isinstance(x, Iterable) else x
    out_set: set[int] = set()
    for n, g in enumerate(values):
        if n >= MAX_ROWS:
            raise InvalidArgumentError(f"gpus: more than {MAX_ROWS:,} budgets")
        out_set.add(positive_int("gpus", g, maximum=MAX_GPUS))
    out = sorted(out_set)
    if not out:
        raise InvalidArgumentError("gpus must give at least one GPU budget")
    return out


def _workloads(x: Any) -> list[Workload]:
    return [resolve_workload(w) for w in ([None] if x is None else _as_list(x))] or [Workload()]


def _connectors(x: Any, vllm_version: Any = None) -> list[str]:
    """Each connector as the row's ``connector`` value and the core's key: its name (the
    newest release's rules), or ``name@X.Y.Z`` when a release is pinned (by ``vllm_version``
    or in the name itself)."""
    from .connectors import resolve_connector

    out = []
    for c in _as_list(x):
        conn = resolve_connector(c, vllm_version)
        pinned = vllm_version is not None or (isinstance(c, str) and "@" in c)
        out.append(conn.key if pinned else conn.name)
    if not out:
        raise InvalidArgumentError("connector must name at least one connector")
    return out


# ---- one group: Rust call + rows ------------------------------------------------------------


def _scenario(g: Group, opts: _Options, gpus: int) -> Any:
    """The scenario ``pdtp.solve`` builds for this group on ``gpus`` GPUs (its defaults:
    mode auto, the default layouts)."""
    from .planning import scenario

    pool = scenario.resolve_pool(gpus, None, g.gpu, None, None)
    return scenario.build(
        [(g.model, g.workload, 0.0, 1.0, None)],
        pool,
        connector=g.connector,
        objective="throughput",
        max_tp=g.max_tp,
        max_acks=opts.max_acks,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        constants=opts.constants,
        mode="auto",
        layouts=None,
    )


def _reason(g: Group, opts: _Options, budget: int) -> str:
    """Why ``pdtp.solve`` finds no plan on this budget: its own error, word for word."""
    from .planning import infeasible

    sc = _scenario(g, opts, budget)
    return str(infeasible.no_pair(sc, _core.candidates(sc.core)))


# A candidate row of `_core.sweep_space`: (role, layout, gpus, requests_per_s, ttft_s,
# latency_s, batch, concurrency).
_ROLE, _LAYOUT, _RPS, _TTFT, _LATENCY, _BATCH, _CONC = 0, 1, 3, 4, 5, 6, 7


def _plan_columns(rows: list[Any], plan: Any, osl: int, names: list[str]) -> tuple[Any, ...]:
    """The plan columns of one budget's best plan (``Plan`` fields, as ``plan.build``)."""
    pi, np_, di, nd, used = plan
    p, d = rows[pi], rows[di]
    agg = pi == di
    pcap, dcap = np_ * p[_RPS], nd * d[_RPS]
    rps = min(pcap, dcap)
    pl, dl = names[pi], names[di]
    return (
        "agg" if agg else "disagg",
        pl if agg else None,
        np_ if agg else None,
        None if agg else pl,
        None if agg else p[_LAYOUT][0],
        None if agg else np_,
        None if agg else dl,
        None if agg else d[_LAYOUT][0],
        None if agg else nd,
        used,
        rps,
        rps * osl,
        p[_TTFT] * 1e3,
        d[_LATENCY] * 1e3,
        d[_BATCH],
        p[_CONC] * np_ if agg else None,
        pcap,
        dcap,
        "aggregated" if agg else bottleneck(pcap, dcap),
    )


def _blind_columns(rows: list[Any], plan: Any, valid: bool, names: list[str]) -> tuple[Any, ...]:
    pi, np_, di, nd, _ = plan
    p, d = rows[pi], rows[di]
    if pi == di:
        return ("agg", names[pi], p[_LAYOUT][0], np_, None, None, None, np_ * p[_RPS], valid)
    rps = min(np_ * p[_RPS], nd * d[_RPS])
    return ("disagg", names[pi], p[_LAYOUT][0], np_, names[di], d[_LAYOUT][0], nd, rps, valid)


_NO_PLAN = (None,) * 19
_NO_BLIND = (None,) * 9


def _run_group(g: Group, opts: _Options) -> list[Row]:
    start = time.perf_counter()
    scenario = _scenario(g, opts, max(g.budgets))
    rows, points = _core.sweep_space(scenario.core, list(g.budgets))
    w = g.workload
    head = (g.model.name, g.gpu.name, g.connector, w.isl, w.osl)
    slo = (_opt_float(w.ttft_ms), _opt_float(w.tpot_ms), g.max_tp)
    # Each candidate row's layout name, once per group (rows repeat over the budgets).
    names = [str(Layout(*r[1])) for r in rows]  # r[1]: the layout
    body: list[tuple[Any, ...]] = []
    for budget, (best, blind) in zip(g.budgets, points):
        if best is None:
            tail = _NO_BLIND if blind is None else _blind_columns(rows, blind, False, names)
            body.append((budget, "INFEASIBLE", *_NO_PLAN, *tail, _reason(g, opts, budget)))
            continue
        plan = _plan_columns(rows, best, w.osl, names)
        if blind is None:
            tail = _blind_columns(rows, best, True, names)
        else:
            tail = _blind_columns(rows, blind, False, names)
        body.append((budget, "OPTIMAL", *plan, *tail, None))
    ms = (time.perf_counter() - start) * 1e3 / max(1, len(body))
    # Row layout: KEY (9) + status + plan (19) + rule-blind (9) + solve_ms + reason.
    return [(*head, *slo, r[0], *r[1:-1], ms, r[-1]) for r in body]


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
    import signal

    # Ctrl-C reaches the whole process group; the parent alone handles it (it cancels the
    # queued chunks and exits 130), so a worker finishes its chunk instead of printing a
    # KeyboardInterrupt traceback of its own. The parent forked this worker with SIGINT
    # blocked (see _sigint_blocked): ignore it first, then unblock (a pending one is dropped).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
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


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back while worker processes are forked, so that a Ctrl-C in that moment
    reaches the parent afterwards and never a worker that has not yet set it aside."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _local(
    chunks: list[list[Group]], opts: _Options, workers: int
) -> Iterator[tuple[int, list[Row]]]:
    if workers <= 1 or len(chunks) <= 1:
        for index, chunk in enumerate(chunks):
            yield index, _run_chunk(chunk, opts)
        return
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(chunks)),
        initializer=_watch_parent,
        initargs=(os.getpid(),),
    )
    try:
        pending: dict[Future[list[Row]], int] = {}
        todo = enumerate(chunks)
        # Keep a bounded queue in flight so results stream back as chunks finish. The first
        # submit forks the workers.
        with _sigint_blocked():
            for index, chunk in itertools.islice(todo, 2 * workers):
                pending[pool.submit(_run_chunk, chunk, opts)] = index
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
                nxt = next(todo, None)
                if nxt is not None:
                    pending[pool.submit(_run_chunk, nxt[1], opts)] = nxt[0]
    except BaseException:
        # Ctrl-C, an error, or the caller stopped reading: drop the queued chunks rather
        # than solve them first (what the `with` form's shutdown would do).
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


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


@takes_scenario(renames={"model": "models", "workload": "workloads"})
@public_api
def sweep(
    models: Any,
    *,
    gpus: Any,
    gpu: Any = DEFAULT_GPU,
    workloads: Any = None,
    connector: Any = None,
    vllm_version: str | None = None,
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
    """The plan ``pdtp.solve`` picks for every scenario of a grid (its defaults: mode auto,
    the default layouts).

    ``models`` (a model, name, ``"all"`` or a list), ``gpus`` (a budget or a list/range),
    ``gpu`` (a GPU type, ``"all"`` or a list), ``workloads`` (``None`` = defaults, a
    :class:`Workload`/dict or a list) and ``connector`` (a name or a list): the grid is their
    product. ``vllm_version`` (default: the newest release pdtp knows) applies every connector's
    rules of that vLLM release; the rows then name the connector as ``name@X.Y.Z`` (a name like
    ``"nixl@0.13.0"`` pins one connector's release). One row per scenario: its inputs, the plan
    (the same numbers as ``pdtp.solve``: ``mode`` ``agg`` or ``disagg``, the
    ``aggregated_*`` or ``prefill_*``/``decode_*`` layouts and counts), ``status`` (``OPTIMAL`` /
    ``INFEASIBLE``), ``solve_ms`` (amortised over a group), ``reason`` (why it is infeasible:
    the text of ``pdtp.InfeasibleError``) and the ``rule_blind_*`` plan a planner ignoring the
    connector's pair rules would pick (``rule_blind_valid``: whether vLLM accepts it).

    ``workers``: processes (``None`` = every core once the grid is large enough to pay for
    starting them — ``PARALLEL_MIN_SCENARIOS`` — else this process; 1 = in this process) or, with
    ``backend="ray"``, chunks in flight. ``output``: a ``.csv``, ``.parquet`` or ``.jsonl``
    file; rows are appended chunk by chunk and scenarios already in it are skipped.
    ``progress(done, total)`` is called as scenarios finish. Returns a pandas DataFrame
    when pandas is installed (``as_frame=False``: a list of dicts).

    >>> import pdtp
    >>> rows = pdtp.sweep("llama-3.1-70b", gpus=[1, 24], gpu="h100", workers=1,
    ...                   as_frame=False)
    >>> [(r["status"], r["mode"]) for r in rows]
    [('INFEASIBLE', None), ('OPTIMAL', 'disagg')]
    """
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if output is not None and not isinstance(output, str | os.PathLike):
        raise ArgumentTypeError(
            f"output must be a file name (str or path), got {type(output).__name__}"
        )
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(
            f"progress must be a function (done, total), got {type(progress).__name__}"
        )
    n_workers = optional_positive_int("workers", workers, maximum=4096)
    size = positive_int("chunk_size", chunk_size, maximum=1 << 24)
    tp_override = optional_positive_int("max_tp", max_tp, maximum=MAX_TP)
    opts = _Options(
        optional_positive_int("max_acks", max_acks, maximum=MAX_TP),
        gpu_memory_utilization,
        constants,
    )
    ms, gs, ws, cs = (
        _models(models),
        _gpus(gpu),
        _workloads(workloads),
        None if connector is None else _connectors(connector, vllm_version),
    )
    # No connector named: each GPU type's vendor default (MoRIIO needs AMD's MoRI).
    from .connectors import default_connector

    per_gpu = {
        g.name: cs if cs is not None else _connectors(default_connector(g.vendor)[0], vllm_version)
        for g in gs
    }
    budgets = tuple(_budgets(gpus))
    # Fail fast (here, not in a worker) on a bad utilization or constants override.
    for g in gs:
        resolve_context(ms[0], g, constants, gpu_memory_utilization)

    n_cs = len(cs) if cs is not None else 1
    total = len(ms) * len(gs) * len(ws) * n_cs * len(budgets)
    if total > MAX_ROWS:
        raise InvalidArgumentError(
            f"the grid has {total:,} scenarios ({len(ms)} models x {len(gs)} GPU types x "
            f"{len(ws)} workloads x {n_cs} connectors x {len(budgets)} budgets); a sweep "
            f"holds at most {MAX_ROWS:,}: split it into several sweeps"
        )
    groups = [
        Group(m, g, w, c, tp_override or g.gpus_per_node, budgets)
        for m, g, w in itertools.product(ms, gs, ws)
        for c in per_gpu[g.name]
    ]
    grid = groups
    found: dict[Key, Row] = {}
    # The output stays locked from reading what is there to the last row written.
    store = Store(output) if output is not None else None
    if store is not None:
        existing = store.open()
    try:
        if store is not None:
            wanted = {g.key(b) for g in groups for b in g.budgets}
            found = {row[:NKEY]: row for row in existing if row[:NKEY] in wanted}
            del existing
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
        ordered = sorted([*found.values(), *ordered], key=lambda r: position[r[:NKEY]])
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


# ---- the command line (`pdtp sweep`) --------------------------------------------------------

# A grid field (budgets, prompt lengths, ...) lists at most this many values, and a grid
# file is at most this big: far above any real grid, far below what exhausts memory.
MAX_FIELD_VALUES = 1 << 20
MAX_GRID_FILE_BYTES = 1 << 20


def parse_ints(text: Any, field: str = "gpus", *, maximum: int | None = None) -> list[int]:
    """``"1-512"``, ``"8,16,32"``, ``"8-64:8"`` (a step) or a mix, or a list of those: each
    value a positive integer (at most ``maximum``), at most ``MAX_FIELD_VALUES`` of them."""
    out: list[int] = []
    for item in [text] if isinstance(text, int | str) else _as_list(text):
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ArgumentTypeError(
                f"{field}: expected integers or ranges like 1-512 or 8-64:8, got "
                f"{type(item).__name__} {_short(item)}"
            )
        parts = [item] if isinstance(item, int) else item.replace(" ", "").split(",")
        for part in parts:
            if part == "":
                continue
            if isinstance(part, int):
                values: Sequence[int] = [part]
            else:
                try:
                    span, _, step = part.partition(":")
                    lo, dash, hi = span.partition("-")
                    values = range(int(lo), int(hi) + 1, int(step or 1)) if dash else [int(span)]
                except ValueError:
                    raise InvalidArgumentError(
                        f"{field}: expected integers, ranges like 1-512 or 8-64:8 (a step >= 1),"
                        f" got {_short(part)}"
                    ) from None
            if len(out) + len(values) > MAX_FIELD_VALUES:
                raise InvalidArgumentError(
                    f"{field}: {_short(text)} has more than {MAX_FIELD_VALUES:,} values, "
                    "pdtp's limit for one grid field"
                )
            for v in (values[0], values[-1]) if values else ():  # a range's extremes
                positive_int(field, v, maximum=maximum)
            out.extend(values)
    if not out:
        raise InvalidArgumentError(f"{field}: no values in {_short(text)}")
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
            continue
        try:
            value = float(item) if isinstance(item, str) else item
        except ValueError:
            value = item
        try:
            out.append(positive_number(field, value))
        except PdtpError:
            raise InvalidArgumentError(
                f"{field}: expected milliseconds (a positive number) or 'none', got {_short(item)}"
            ) from None
        if len(out) > MAX_FIELD_VALUES:
            raise InvalidArgumentError(f"{field}: more than {MAX_FIELD_VALUES:,} values")
    return out


# What each grid-file key accepts (checked before use, so that a wrong type is one error
# naming the file and the key, never a crash): a description and a check.
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _one_or_list(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: ok(v) or (isinstance(v, list) and bool(v) and all(ok(x) for x in v))


_names = _one_or_list(lambda v: isinstance(v, str))
_ints = _one_or_list(lambda v: _is_int(v) or isinstance(v, str))
_slos = _one_or_list(lambda v: v is None or _is_number(v) or isinstance(v, str))
GRID_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "models": ("a model name, 'all', or a list of names", _names),
    "gpus": ("GPU budgets: an integer, a range like '1-512' or '8-64:8', or a list", _ints),
    "gpu": ("a GPU type, 'all', or a list of GPU types", _names),
    "workloads": (
        "a mapping {isl, osl, ttft_ms, tpot_ms} or a list of them",
        _one_or_list(lambda v: isinstance(v, dict)),
    ),
    "isl": ("prompt tokens: an integer, a range, or a list", _ints),
    "osl": ("output tokens: an integer, a range, or a list", _ints),
    "ttft_ms": ("a TTFT bound in ms, 'none', or a list", _slos),
    "tpot_ms": ("a TPOT bound in ms, 'none', or a list", _slos),
    "connector": ("a connector name or a list of names", _names),
    "vllm_version": ("a vLLM release like '0.33.0'", lambda v: isinstance(v, str)),
    "max_tp": ("a positive integer", _is_int),
    "max_acks": ("a positive integer", _is_int),
    "gpu_memory_utilization": ("a number in (0, 1]", _is_number),
    "output": ("a file name ending in .csv, .parquet or .jsonl", lambda v: isinstance(v, str)),
    "workers": ("a positive integer", _is_int),
    "backend": (f"one of {', '.join(BACKENDS)}", lambda v: v in BACKENDS),
    "chunk_size": ("a positive integer", _is_int),
}
GRID_KEYS = tuple(GRID_FIELDS)


def _read_grid_text(p: pathlib.Path) -> str:
    from ._io import read_capped_text

    # bounded as read: a device or a huge file must not exhaust memory
    return read_capped_text(p, limit=MAX_GRID_FILE_BYTES, what="grid file")


def load_grid(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A sweep grid from a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file, checked: a
    file that cannot be parsed, an unknown key or a value of the wrong type or range is one
    :class:`pdtp.InvalidArgumentError` naming the file and the key."""
    p = pathlib.Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise InvalidArgumentError(f"grid file must be .yaml, .yml or .toml, got {str(path)!r}")
    text = _read_grid_text(p)
    try:
        if suffix in (".yaml", ".yml"):
            try:
                yaml = _optional("yaml")
            except ImportError:
                raise InvalidArgumentError(
                    'YAML grid files need PyYAML: pip install "pdtp[sweep]"'
                ) from None
            try:
                # safe_load builds plain data only: a !!python/... tag is an error here.
                stream = io.StringIO(text)
                stream.name = str(p)  # YAML's messages name the file
                data = yaml.safe_load(stream)
            except yaml.YAMLError as e:
                # One line (PyYAML's text spans four): what is wrong, and where.
                what = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
                mark = getattr(e, "problem_mark", None)
                where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
                raise InvalidArgumentError(
                    f"{p}: not valid YAML for a grid file: {' '.join(str(what).split())}{where}"
                ) from None
        else:
            try:
                import tomllib
            except ImportError:  # Python 3.10
                raise InvalidArgumentError(
                    "TOML grid files need Python >= 3.11 (tomllib); use a YAML file instead"
                ) from None
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                raise InvalidArgumentError(f"{p}: not valid TOML: {e}") from None
    except RecursionError:
        raise InvalidArgumentError(f"{p}: nested too deeply for a grid file") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"{p}: expected a mapping of grid keys ({', '.join(GRID_KEYS)}), got "
            f"{type(data).__name__}"
        )
    unknown = sorted(str(k) for k in data if k not in GRID_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"{p}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(GRID_KEYS)}"
        )
    for key, value in data.items():
        allowed, ok = GRID_FIELDS[key]
        if value is not None and not ok(value):
            raise InvalidArgumentError(
                f"{p}: {key} must be {allowed}, got {type(value).__name__} {_short(value)}"
            )
        try:
            _check_grid_value(key, value)
        except PdtpError as e:
            raise InvalidArgumentError(f"{p}: {e}") from None
    return data


def _check_grid_value(key: str, value: Any) -> None:
    """The value checks of one grid key, with the parsers the sweep itself uses."""
    if value is None:
        return
    if key == "gpus":
        parse_ints(value, "gpus", maximum=MAX_GPUS)
    elif key in ("isl", "osl"):
        parse_ints(value, key, maximum=MAX_TOKENS)
    elif key in ("ttft_ms", "tpot_ms"):
        _parse_slos(value, key)
    elif key == "workloads":
        for i, w in enumerate(_as_list(value)):
            try:
                resolve_workload(w)
            except PdtpError as e:
                raise InvalidArgumentError(f"workloads[{i}]: {e}") from None
    elif key in ("max_tp", "max_acks"):
        positive_int(key, value, maximum=MAX_TP)
    elif key in ("workers", "chunk_size"):
        positive_int(key, value)
    elif key == "gpu_memory_utilization":
        positive_number(key, value)
    elif key == "output":
        output_format(value)
    elif key == "vllm_version":
        from .connectors import check_release

        check_release(value)  # a release some connector covers


def grid_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`sweep` from a grid (a file's mapping merged with flags)."""
    if spec.get("gpus") is None:
        raise InvalidArgumentError("give the GPU budgets: --gpus 1-512 (or gpus: in the file)")

    def given(key: str, default: Any) -> Any:
        value = spec.get(key)
        return default if value is None else value

    if spec.get("workloads") is not None:
        if any(spec.get(k) is not None for k in ("isl", "osl", "ttft_ms", "tpot_ms")):
            raise InvalidArgumentError("give either workloads or isl/osl/ttft_ms/tpot_ms")
        workloads = spec["workloads"]
    else:
        base = Workload()
        isls = parse_ints(given("isl", base.isl), "isl", maximum=MAX_TOKENS)
        osls = parse_ints(given("osl", base.osl), "osl", maximum=MAX_TOKENS)
        ttfts = _parse_slos(spec.get("ttft_ms", base.ttft_ms), "ttft_ms")
        tpots = _parse_slos(spec.get("tpot_ms", base.tpot_ms), "tpot_ms")
        n = len(isls) * len(osls) * len(ttfts) * len(tpots)
        if n > MAX_ROWS:
            raise InvalidArgumentError(
                f"isl x osl x ttft_ms x tpot_ms make {n:,} workloads; a sweep holds at most "
                f"{MAX_ROWS:,} scenarios"
            )
        workloads = [
            Workload(isl=i, osl=o, ttft_ms=t, tpot_ms=u)
            for i, o, t, u in itertools.product(isls, osls, ttfts, tpots)
        ]
    kwargs: dict[str, Any] = {
        "models": parse_names(given("models", "all")),
        "gpus": parse_ints(spec["gpus"], "gpus", maximum=MAX_GPUS),
        "gpu": parse_names(given("gpu", DEFAULT_GPU)),
        "workloads": workloads,
        "connector": None if spec.get("connector") is None else parse_names(spec["connector"]),
    }
    for k in ("vllm_version", "max_tp", "max_acks", "workers", "backend", "output", "chunk_size"):
        if spec.get(k) is not None:
            kwargs[k] = spec[k]
    if spec.get("gpu_memory_utilization") is not None:
        kwargs["gpu_memory_utilization"] = spec["gpu_memory_utilization"]
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
        "vllm_version": args.vllm_version,
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SweepFileWarning)
        rows = sweep(**kwargs, progress=report, as_frame=False)
    for w in caught:  # a repaired output file is news for the user, not a Python warning
        if issubclass(w.category, SweepFileWarning):
            print(f"pdtp sweep: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
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
