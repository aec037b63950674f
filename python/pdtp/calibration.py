"""Fit the performance model's efficiency constants to measured serving points.

A *point* is one measured row with the columns of ``reference/perf-points.csv``::

    source, model, gpu, engine, weight_dtype, tp, isl, osl, concurrency,
    ttft_ms, tpot_ms, output_tokens_per_s, note

(``source``, ``engine`` and ``note`` are informational; an optional ``kv_dtype`` column sets
the KV-cache dtype, and a note that mentions "fp8 KV cache" does the same when the column is
absent, as in the reference CSV). One row may carry several measurements; each is compared
with the matching prediction of :func:`predict_point`:

``tpot_ms`` (needs ``concurrency`` C) — aggregated serving at a fixed concurrency. The decode
    step at batch C and mean context ``isl + osl/2`` (what :func:`pdtp.predict_decode`
    computes), plus an *aggregated-serving correction*: in steady state one request finishes,
    and so one new prompt arrives, every ``osl/C`` steps, so each step also carries the prefill
    work of ``C/osl`` prompts (vLLM's chunked prefill mixes them into the decode steps). The
    extra work of one prompt inside a step that already reads the weights and pays the fixed
    overheads is ``t_p(isl) − t_p(1)``. Disaggregated decode instances never see this term,
    which is why it lives here and not in the Rust core.
``ttft_ms`` — ``q · t_p(isl)``: the prefill time scaled by the queueing factor
    ``ttft_queue_factor``, as in pdtp's disaggregated TTFT but without a KV transfer (these are
    aggregated measurements). At high concurrency the measured TTFT also holds time queued
    behind other prompts, which grows with the concurrency; the fit is on the median error, so
    those rows pull ``q`` only as far as the typical row needs.
``output_tokens_per_s`` without ``concurrency`` — the maximum throughput of ONE instance doing
    both prefill and decode: each request costs ``t_p`` of prefill plus ``osl`` decode steps
    shared by a batch B, so ``R = 1 / (t_p + osl·t_d(B)/B)`` requests/s and ``R·osl`` output
    tokens/s, with B the largest batch memory allows, capped by the engine's ``max_num_seqs``:
    the row's ``max_num_seqs`` column when it has one; else 256 for an ``engine`` of vLLM
    before 0.9 (its default then — 1024 on ≥ 70 GiB GPUs came with vLLM PR #17885); else
    :attr:`Constants.max_num_seqs`. With a ``concurrency`` C the rate is Little's law instead:
    ``C·osl / (TTFT + osl·TPOT)``.

:func:`calibrate` minimises a robust error (:func:`objective`: per measurement kind, the median
absolute relative error plus a small share of the mean error capped at 50%, which breaks ties
where the median is flat) by a deterministic, derivative-free search over bounded ranges
(:data:`BOUNDS`): a grid and coordinate search on a smooth stand-in for that error, then a
pattern search (single constants and pairs) on the error itself.
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import _core
from .constants import Constants, constants_for
from .errors import ConfigError, InvalidArgumentError, PdtpError
from .perf import DEFAULT_UTILIZATION, gpu_inputs, model_inputs

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model

__all__ = [
    "BOUNDS",
    "DEFAULT_FIT",
    "KINDS",
    "PerfPoint",
    "PointError",
    "calibrate",
    "load_points",
    "objective",
    "point_errors",
    "predict_point",
    "summarize",
]

#: Measurement kinds, by the column that holds them.
KINDS: tuple[str, ...] = ("tpot_ms", "ttft_ms", "output_tokens_per_s")

#: Fittable constants: (lower, upper, searched on a log scale). The ranges are physical: a
#: GPU reaches at most its peak, fixed per-step overheads are under 10 ms, and an all-reduce's
#: launch latency is under 200 µs. Zero is excluded because every constant is positive.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "mbu": (0.3, 1.0, False),
    "mfu_prefill": (0.1, 1.0, False),
    "mfu_decode": (0.1, 1.0, False),
    "step_overhead_s": (1e-5, 10e-3, True),
    "allreduce_latency_s": (1e-7, 200e-6, True),
    "ttft_queue_factor": (1.0, 10.0, False),
    "reserve_bytes": (1e9, 32e9, True),
}

#: What :func:`calibrate` fits unless told otherwise.
DEFAULT_FIT: tuple[str, ...] = (
    "mbu",
    "mfu_prefill",
    "mfu_decode",
    "step_overhead_s",
    "allreduce_latency_s",
    "ttft_queue_factor",
)

_REQUIRED = ("model", "gpu", "tp", "isl", "osl")
# Errors above this count as this much in the tie-breaking mean, so a saturated benchmark row
# (TTFT of a minute when the model says a second) cannot drag the fit.
_CAP = 0.5
_TIE_WEIGHT = 0.25


# ---- points -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PerfPoint:
    """One measured row, resolved: model (at the row's dtypes), GPU and numbers."""

    row: int
    where: str
    model: Model
    gpu: GPU
    tp: int
    isl: int
    osl: int
    concurrency: int | None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens_per_s: float | None
    #: The engine's batch cap for throughput rows (None: the constants' max_num_seqs).
    max_num_seqs: int | None = None
    source: str = ""
    note: str = ""

    @property
    def kinds(self) -> tuple[str, ...]:
        """The measurement kinds this row holds (columns of :data:`KINDS`)."""
        return tuple(k for k in KINDS if getattr(self, k) is not None)

    def measured(self, kind: str) -> float:
        value = getattr(self, kind)
        if value is None:
            raise InvalidArgumentError(f"{self.where}: has no {kind} measurement")
        return float(value)


@dataclass(frozen=True)
class PointError:
    """One measurement compared with its prediction."""

    point: PerfPoint
    kind: str
    measured: float
    predicted: float

    @property
    def rel_error(self) -> float:
        """Absolute relative error ``|predicted / measured − 1|``."""
        return abs(self.predicted / self.measured - 1.0)


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    # pandas writes empty cells as NaN.
    return isinstance(value, float) and math.isnan(value)


def _number(where: str, field: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{where}: field {field!r} must be a number, got {value!r}")
    if isinstance(value, numbers.Real):
        v = float(value)
    elif isinstance(value, str):
        try:
            v = float(value.strip())
        except ValueError:
            raise InvalidArgumentError(
                f"{where}: field {field!r} must be a number, got {value!r}"
            ) from None
    else:
        raise InvalidArgumentError(
            f"{where}: field {field!r} must be a number, got {type(value).__name__} {value!r}"
        )
    if not (v > 0 and math.isfinite(v)):
        raise InvalidArgumentError(
            f"{where}: field {field!r} must be a positive finite number, got {value!r}"
        )
    return v


def _integer(where: str, field: str, value: Any) -> int:
    v = _number(where, field, value)
    # CSV readers and pandas turn integer columns with gaps into floats: 8.0 is 8.
    if v != int(v) or v > 1 << 24:
        raise InvalidArgumentError(
            f"{where}: field {field!r} must be a positive integer, got {value!r}"
        )
    return int(v)


@lru_cache(maxsize=256)
def _resolve(name: str, weight_dtype: str | None, kv_dtype: str | None) -> Model:
    from .catalog import resolve_model

    return resolve_model(name, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


@lru_cache(maxsize=64)
def _find_gpu(name: str) -> GPU:
    from .catalog import gpu

    return gpu(name)


def _parse_row(raw: Mapping[str, Any], row: int, where: str) -> PerfPoint:
    if not isinstance(raw, Mapping):
        raise InvalidArgumentError(
            f"{where}: a point must be a mapping of column to value, got {type(raw).__name__}"
        )
    for field in _REQUIRED:
        if _missing(raw.get(field)):
            raise InvalidArgumentError(f"{where}: field {field!r} is required and empty")
    names: dict[str, str] = {}
    for field in ("model", "gpu", "weight_dtype", "kv_dtype"):
        value = raw.get(field)
        if _missing(value):
            continue
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"{where}: field {field!r} must be a string, got {type(value).__name__} {value!r}"
            )
        names[field] = value.strip()
    note = "" if _missing(raw.get("note")) else str(raw.get("note"))
    kv_dtype = names.get("kv_dtype")
    if kv_dtype is None and "fp8 kv" in note.lower():
        kv_dtype = "fp8"
    try:
        model = _resolve(names["model"], names.get("weight_dtype"), kv_dtype)
    except InvalidArgumentError as exc:  # a bad dtype spelling
        field = "weight_dtype" if "weight_dtype" in str(exc) else "kv_dtype"
        raise InvalidArgumentError(f"{where}: field {field!r}: {exc}") from None
    except PdtpError as exc:  # unknown model, unreadable config
        raise ConfigError(f"{where}: field 'model': {exc}") from None
    try:
        gpu = _find_gpu(names["gpu"])
    except PdtpError as exc:
        raise ConfigError(f"{where}: field 'gpu': {exc}") from None
    tp, isl, osl = (_integer(where, f, raw[f]) for f in ("tp", "isl", "osl"))
    conc = raw.get("concurrency")
    concurrency = None if _missing(conc) else _integer(where, "concurrency", conc)
    values = {k: None if _missing(raw.get(k)) else _number(where, k, raw[k]) for k in KINDS}
    if all(v is None for v in values.values()):
        raise InvalidArgumentError(
            f"{where}: no measurement: give at least one of {', '.join(KINDS)}"
        )
    mns = raw.get("max_num_seqs")
    if _missing(mns):
        max_num_seqs = _engine_max_num_seqs(raw.get("engine"))
    else:
        max_num_seqs = _integer(where, "max_num_seqs", mns)
    if values["tpot_ms"] is not None and concurrency is None:
        raise InvalidArgumentError(
            f"{where}: field 'concurrency' is required with tpot_ms (the decode batch)"
        )
    point = PerfPoint(
        row=row,
        where=where,
        model=model,
        gpu=gpu,
        tp=tp,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        ttft_ms=values["ttft_ms"],
        tpot_ms=values["tpot_ms"],
        output_tokens_per_s=values["output_tokens_per_s"],
        max_num_seqs=max_num_seqs,
        source="" if _missing(raw.get("source")) else str(raw.get("source")),
        note=note,
    )
    if not _Evaluator(point).weights_fit(constants_for(gpu.name)):
        raise InvalidArgumentError(
            f"{where}: fields 'model'/'tp': {model.name} ({model.weight_dtype}) does not fit "
            f"on tp={tp} {gpu.name} GPUs"
        )
    return point


_VLLM_VERSION = re.compile(r"\bvllm\s*v?(\d+)\.(\d+)", re.IGNORECASE)


def _engine_max_num_seqs(engine: Any) -> int | None:
    """vLLM before 0.9 defaulted ``max_num_seqs`` to 256 everywhere; later versions raised it
    to 1024 on GPUs with at least 70 GiB (the constants' default). A throughput row measured
    on an old vLLM therefore ran batches of at most 256."""
    if not isinstance(engine, str):
        return None
    match = _VLLM_VERSION.search(engine)
    if match and (int(match.group(1)), int(match.group(2))) < (0, 9):
        return 256
    return None


def _raw_rows(points: Any) -> list[tuple[Mapping[str, Any], str]]:
    """(row, where) pairs from a CSV path, a pandas DataFrame or an iterable of mappings."""
    if isinstance(points, str | os.PathLike):
        path = os.fspath(points)
        name = os.path.basename(path)
        out: list[tuple[Mapping[str, Any], str]] = []
        try:
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                for i, r in enumerate(reader, 1):
                    # line_num is the file line the row ended on (quoted newlines included).
                    out.append((r, f"row {i} (line {reader.line_num} of {name})"))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise InvalidArgumentError(f"cannot read points file {path!r}: {exc}") from None
        return out
    # A DataFrame, recognised without importing pandas.
    if type(points).__module__.startswith("pandas") and hasattr(points, "to_dict"):
        records = points.to_dict("records")
        return [(r, f"row {i}") for i, r in enumerate(records, 1)]
    if isinstance(points, Mapping) or not isinstance(points, Iterable):
        raise InvalidArgumentError(
            "points must be a path to a CSV file, an iterable of row dicts or a pandas "
            f"DataFrame, got {type(points).__name__}"
        )
    return [(r, f"row {i}") for i, r in enumerate(points, 1)]


def load_points(points: Any, *, gpu: Any = None) -> list[PerfPoint]:
    """Parse and resolve measured rows (see the module docstring for the columns). With
    ``gpu``, only that GPU type's rows are kept. Rows are numbered from 1 in errors."""
    if isinstance(points, Sequence) and points and all(isinstance(p, PerfPoint) for p in points):
        parsed: list[PerfPoint] = list(points)
    else:
        parsed = [_parse_row(raw, i, where) for i, (raw, where) in enumerate(_raw_rows(points), 1)]
    if not parsed:
        raise InvalidArgumentError("no points: calibration needs at least one measured row")
    if gpu is not None:
        from .catalog import gpu as find_gpu

        name = find_gpu(gpu).name
        kept = [p for p in parsed if p.gpu.name == name]
        if not kept:
            present = sorted({p.gpu.name for p in parsed})
            raise InvalidArgumentError(f"no points for gpu {name!r}; the rows have {present}")
        parsed = kept
    return parsed


# ---- predictions --------------------------------------------------------------------------


def _constant_dict(c: Constants) -> dict[str, float]:
    return {k: float(v) for k, v in c.to_dict().items()}


class _Evaluator:
    """Predictions for one point straight from the Rust core, skipping the public wrappers'
    name resolution and validation (the point was validated once; the fit calls this a few
    hundred thousand times)."""

    __slots__ = ("g", "key", "m", "p")

    def __init__(self, point: PerfPoint) -> None:
        self.p = point
        self.m = model_inputs(point.model)
        self.g = gpu_inputs(point.gpu, point.model.weight_dtype)
        # Rows that share model, GPU and tp share prefill times (the input dicts are cached
        # per model / GPU, so their ids identify them).
        self.key = (id(self.m), id(self.g), point.tp)

    def weights_fit(self, c: Constants) -> bool:
        return bool(
            _core.predict_prefill(
                self.m, self.g, _constant_dict(c), self.p.tp, 1.0, DEFAULT_UTILIZATION
            )[5]
        )

    def prefill_s(
        self, c: dict[str, float], isl: float, cache: dict[Any, float] | None = None
    ) -> float:
        if cache is not None:
            hit = cache.get((self.key, isl))
            if hit is not None:
                return hit
        t = _core.predict_prefill(self.m, self.g, c, self.p.tp, isl, DEFAULT_UTILIZATION)[0]
        if cache is not None:
            cache[(self.key, isl)] = t
        return t

    def decode(self, c: dict[str, float], batch: float) -> tuple[float, int]:
        p = self.p
        step, max_batch, _, _ = _core.predict_decode(
            self.m, self.g, c, p.tp, float(p.isl), float(p.osl), batch, DEFAULT_UTILIZATION
        )
        return step, max_batch

    def tpot_s(
        self,
        c: dict[str, float],
        concurrency: int,
        prefill: float,
        cache: dict[Any, float] | None = None,
    ) -> float:
        """Aggregated TPOT at ``concurrency``; ``prefill`` is ``t_p(isl)``."""
        p = self.p
        step, _ = self.decode(c, float(concurrency))
        # Aggregated-serving correction (module docstring): each step carries C/osl prompts'
        # prefill work beyond what the decode step already pays (weights, fixed overheads).
        extra = max(prefill - self.prefill_s(c, 1.0, cache), 0.0)
        return step + concurrency / p.osl * extra

    def max_throughput(self, c: dict[str, float], prefill: float) -> float:
        """Output tokens/s of one instance at the largest batch memory and the engine allow."""
        p = self.p
        if p.max_num_seqs is not None:
            c = {**c, "max_num_seqs": float(p.max_num_seqs)}
        _, max_batch = self.decode(c, 1.0)
        if max_batch < 1:
            return 0.0
        step, _ = self.decode(c, float(max_batch))
        return p.osl / (prefill + p.osl * step / max_batch)

    def predict(
        self, c: dict[str, float], cache: dict[Any, float] | None = None
    ) -> dict[str, float]:
        """Predictions under constants ``c``; ``cache`` (one per ``c``) shares prefill times
        between rows."""
        p = self.p
        prefill = self.prefill_s(c, float(p.isl), cache)
        ttft = c["ttft_queue_factor"] * prefill
        out: dict[str, float] = {}
        tpot = None
        if p.concurrency is not None and (p.tpot_ms is not None or p.output_tokens_per_s):
            tpot = self.tpot_s(c, p.concurrency, prefill, cache)
        if p.tpot_ms is not None and tpot is not None:
            out["tpot_ms"] = tpot * 1e3
        if p.ttft_ms is not None:
            out["ttft_ms"] = ttft * 1e3
        if p.output_tokens_per_s is not None:
            if p.concurrency is not None and tpot is not None:
                # Little's law over one request's life: TTFT, then osl tokens at TPOT.
                out["output_tokens_per_s"] = p.concurrency * p.osl / (ttft + p.osl * tpot)
            else:
                out["output_tokens_per_s"] = self.max_throughput(c, prefill)
        return out


def predict_point(row: PerfPoint | Mapping[str, Any], constants: Any = None) -> dict[str, float]:
    """Predicted values for each measurement a row holds: ``tpot_ms``, ``ttft_ms`` and/or
    ``output_tokens_per_s`` (see the module docstring for what each assumes). ``constants``
    is a :class:`Constants`, a dict of overrides, or ``None`` for the row's GPU defaults.

    >>> from pdtp.calibration import predict_point
    >>> row = {"model": "Qwen/Qwen3-32B", "gpu": "h100", "tp": 4, "isl": 1024, "osl": 128,
    ...        "concurrency": 8, "tpot_ms": 11.8}
    >>> 5 < predict_point(row)["tpot_ms"] < 25
    True
    """
    point = row if isinstance(row, PerfPoint) else load_points([row])[0]
    c = constants_for(point.gpu.name, constants)
    return _Evaluator(point).predict(_constant_dict(c))


def point_errors(points: Any, constants: Any = None) -> list[PointError]:
    """Every measurement of ``points`` with its prediction, in row order. ``constants`` as in
    :func:`predict_point` (``None``: each row's GPU defaults)."""
    out: list[PointError] = []
    for point in load_points(points):
        predicted = predict_point(point, constants)
        out.extend(PointError(point, k, point.measured(k), predicted[k]) for k in point.kinds)
    return out


def summarize(errors: Iterable[float]) -> dict[str, float]:
    """``n``, ``median`` and ``p90`` of absolute relative errors (NaN when empty)."""
    xs = sorted(errors)
    if not xs:
        return {"n": 0, "median": math.nan, "p90": math.nan}
    return {"n": len(xs), "median": statistics.median(xs), "p90": _quantile(xs, 0.9)}


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    # Linear interpolation between closest ranks (numpy's default), without numpy.
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def objective(errors_by_kind: Mapping[str, Sequence[float]]) -> float:
    """The robust loss :func:`calibrate` minimises. Per kind: the median absolute relative
    error plus a quarter of the mean error capped at 50%. Kinds are averaged with weights
    ``sqrt(n)``.

    Per-kind medians keep the TPOT half of the measurements from deciding the median alone;
    ``sqrt(n)`` lets three throughput rows count without letting them outweigh ninety TPOT
    rows; the capped mean breaks ties where a median is flat and ignores saturated rows."""
    total = weight = 0.0
    for errs in errors_by_kind.values():
        if errs:
            capped = sum(min(e, _CAP) for e in errs) / len(errs)
            w = math.sqrt(len(errs))
            total += w * (statistics.median(errs) + _TIE_WEIGHT * capped)
            weight += w
    return total / weight if weight else math.inf


# ---- the fit --------------------------------------------------------------------------------


def _to_unit(name: str, value: float) -> float:
    lo, hi, log = BOUNDS[name]
    value = min(max(value, lo), hi)
    if log:
        return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return (value - lo) / (hi - lo)


def _from_unit(name: str, u: float) -> float:
    lo, hi, log = BOUNDS[name]
    u = min(max(u, 0.0), 1.0)
    if log:
        return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return lo + u * (hi - lo)


def _smooth_objective(errors_by_kind: Mapping[str, Sequence[float]]) -> float:
    """A smooth robust loss for the search's first stage: per kind, the mean of a
    pseudo-Huber loss that saturates at :data:`_CAP`; kinds weighted ``sqrt(n)``."""
    total = weight = 0.0
    for errs in errors_by_kind.values():
        if errs:
            rho = [math.sqrt(e * e + 1e-4) - 1e-2 for e in errs]
            mean = sum(r * _CAP / (r + _CAP) for r in rho) / len(rho)
            w = math.sqrt(len(errs))
            total += w * mean
            weight += w
    return total / weight if weight else math.inf


def _search(
    loss: Callable[[list[float]], float],
    start: list[float],
    *,
    active: list[int] | None = None,
    grid: bool = False,
    first_step: float = 1 / 32,
    last_step: float = 1 / 4096,
    use_pairs: bool = True,
) -> tuple[list[float], list[int]]:
    """Minimise ``loss`` over the unit cube from ``start``, deterministically, moving only the
    ``active`` coordinates (default all). Returns the point and the coordinates searched."""
    u = list(start)
    best = loss(u)
    active = list(range(len(u))) if active is None else active
    if grid:
        # A 21-point grid per coordinate, twice round. A constant the rows say nothing about
        # (the whole grid gives one loss) is dropped from the pattern search, or pair moves
        # would drag it along with an informative partner.
        sensitive: set[int] = set()
        for _ in range(2):
            for i in active:
                for x in (k / 20 for k in range(21)):
                    trial = [*u[:i], x, *u[i + 1 :]]
                    value = loss(trial)
                    if value != best:
                        sensitive.add(i)
                    if value < best - 1e-12:
                        best, u = value, trial
        active = [i for i in active if i in sensitive]
    # Pattern search: try ±step on each coordinate, keep moving while it helps; when a whole
    # sweep finds nothing, try moving pairs together (constants that trade off, such as
    # ttft_queue_factor against mfu_prefill in TTFT, only improve jointly), then halve.
    moves = [((i, d),) for i in active for d in (1.0, -1.0)]
    pairs = [
        ((i, di), (j, dj))
        for i in active
        for j in active
        if i < j and use_pairs
        for di in (1.0, -1.0)
        for dj in (1.0, -1.0)
    ]
    step = first_step
    while step >= last_step:
        improved = False
        for group in (moves, pairs):
            for move in group:
                while True:
                    trial = list(u)
                    for i, d in move:
                        trial[i] = min(max(u[i] + d * step, 0.0), 1.0)
                    if trial == u:
                        break
                    value = loss(trial)
                    if value < best - 1e-12:
                        best, u, improved = value, trial, True
                    else:
                        break
            if improved:
                break
        if not improved:
            step /= 2
    return u, active


def calibrate(
    points: Any,
    *,
    gpu: Any = None,
    base: Any = None,
    fit: Iterable[str] = DEFAULT_FIT,
) -> Constants:
    """Fit efficiency constants to measured points and return them as a :class:`Constants`.

    ``points``: a path to a CSV with the columns of ``reference/perf-points.csv``, an
    iterable of row dicts (numeric strings are fine) or a pandas DataFrame. ``gpu``: use only
    that GPU type's rows. ``base``: where the search starts and what the fit leaves alone — a
    :class:`Constants`, a dict of overrides on the GPU's defaults, or ``None`` (the defaults of
    the rows' GPU type, or the generic constants when the rows mix types). ``fit``: the
    constants to fit, each searched within :data:`BOUNDS`.

    The search is deterministic and derivative-free, in two stages. First, on a smooth
    stand-in for the robust error (a saturating pseudo-Huber mean), a 21-point grid over each
    constant's range, twice round, then a coordinate search halving its step down to 1/4096
    of the range. Then, on :func:`objective` itself, a pattern search over single constants
    and pairs (constants that trade off, such as ``ttft_queue_factor`` and ``mfu_prefill``,
    improve only together). A move is kept only when it lowers the loss strictly, and a
    constant the rows say nothing about (``ttft_queue_factor`` without TTFT rows) keeps its
    base value.

    >>> import pdtp
    >>> rows = [{"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1000, "osl": 200,
    ...          "concurrency": b, "tpot_ms": t} for b, t in ((1, 7.4), (32, 9.5), (128, 14.0))]
    >>> c = pdtp.calibrate(rows, fit=("mbu", "step_overhead_s"))
    >>> 0.3 <= c.mbu <= 1.0
    True
    """
    parsed = load_points(points, gpu=gpu)
    names = list(dict.fromkeys(fit if not isinstance(fit, str) else (fit,)))
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise InvalidArgumentError(
            f"cannot fit {unknown}: fittable constants are {', '.join(BOUNDS)}"
        )
    gpu_names = {p.gpu.name for p in parsed}
    start = constants_for(next(iter(gpu_names)) if len(gpu_names) == 1 else "", base)
    if not names:
        return start

    evaluators = [(_Evaluator(p), {k: p.measured(k) for k in p.kinds}) for p in parsed]
    consts = _constant_dict(start)
    kinds = sorted({k for p in parsed for k in p.kinds})

    def errors(u: Sequence[float]) -> dict[str, list[float]]:
        c = dict(consts)
        for name, x in zip(names, u):
            c[name] = _from_unit(name, x)
        by_kind: dict[str, list[float]] = {k: [] for k in kinds}
        cache: dict[Any, float] = {}
        for ev, measured in evaluators:
            for kind, value in ev.predict(c, cache).items():
                by_kind[kind].append(abs(value / measured[kind] - 1.0))
        return by_kind

    u = [_to_unit(n, consts[n]) for n in names]
    # Stage 1 on a smooth stand-in for the median (kinks stall a pattern search short of a
    # valley's floor), with a coarse grid first to find the right basin; stage 2 polishes the
    # robust objective itself from there.
    u, active = _search(lambda x: _smooth_objective(errors(x)), u, grid=True, use_pairs=False)
    u, _ = _search(lambda x: objective(errors(x)), u, active=active, first_step=1 / 256)
    fitted = {n: _from_unit(n, x) for n, x in zip(names, u)}
    try:
        return start.replace(**fitted)
    except InvalidArgumentError as exc:  # pragma: no cover - BOUNDS keep values valid
        raise ConfigError(f"calibration produced invalid constants: {exc}") from None
