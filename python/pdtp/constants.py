"""Efficiency constants of the performance model: one table per GPU type and serving engine,
overridable per call, and fitted to measurements by :func:`pdtp.calibrate`.

The defaults live in ``pdtp/data/perf_constants.json`` with their provenance: which measured
rows each GPU type's constants were fitted on, when, and by which command
(``python benchmarks/fit_defaults.py``). GPU types without measurements take the constants of
their generation (GB200 those of B200) or, failing that, the geometric mean of their vendor's
measured types, and say so in the file. An engine release (:func:`engine_release` reads it
from an image name) applies the factors of its measured release range to
:data:`RELEASE_CONSTANTS`; :func:`release_note` says which range, or that it has none.
:data:`GENERIC` (the field defaults below) serves a GPU that is not in the catalog.

What each constant means (the step model is in ``src/perf/mod.rs``):

- ``mfu_prefill`` / ``mfu_decode``: linear-layer GEMM efficiency on prompt tokens and on
  decode tokens (small M), a share of the weight dtype's dense peak;
  ``moe_prefill_efficiency``: routed experts' grouped GEMMs on prompt tokens relative to
  ``mfu_prefill`` (a kernel of their own);
  ``mfu_attention``: prompt attention FLOP efficiency, a share of the bf16 peak;
  ``mfu_decode_attention``: decode attention's (MLA's absorbed form binds on its FLOPs);
- ``mbu``: the share of the HBM peak weights stream at; ``kv_read_efficiency``: the share
  decode attention reads the KV cache at; ``moe_weight_efficiency``: routed experts' rate
  relative to dense weights, ``ep_weight_efficiency`` whole experts under expert parallel
  relative to tensor-parallel slices; ``fp8/fp4/int4_weight_efficiency``: a weight format's kernels
  relative to 16-bit ones (dense GEMMs); ``fp4_grouped_weight_efficiency``: FP4 routed experts'
  grouped MoE GEMMs relative to 16-bit grouped ones (a kernel of its own);
- ``allreduce_latency_s`` / ``alltoall_latency_s``: collective latency;
  ``kernel_overhead_s`` per kernel launched, ``seq_overhead_s`` per running sequence and
  ``step_overhead_s`` per engine step;
- ``api_overhead_s``: per request, HTTP to first streamed token outside the GPU;
  ``schedule_wait_steps``: steps a new prompt waits before the scheduler runs its prefill;
  ``first_wave_stall_s``: the engine's one-off warm-up (kernels compiled just in time for the
  first batch shapes, SGLang's) that a benchmark's first wave of requests waits out: in the
  mean TTFT, not the median;
- ``reserve_bytes``: memory kept from the KV cache per GPU (0 for SGLang, whose
  ``mem_fraction_static`` already leaves out activations and CUDA graphs);
  ``ttft_queue_factor``: the disaggregated TTFT's queueing factor; ``kv_transfer_*``: the P/D link;
  ``max_num_seqs``: vLLM's cap on a decode batch.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ._validate import positive_number
from ._version import parse_version
from .errors import ArgumentTypeError, InvalidArgumentError

#: Serving engines the aggregated model knows (how they schedule prompts among decode steps).
ENGINES: tuple[str, ...] = ("vllm", "sglang")


@dataclass(frozen=True)
class Constants:
    """Efficiency constants. Fractions are of the GPU's peak; times in seconds."""

    mfu_prefill: float = 0.55
    mfu_decode: float = 0.3
    mfu_attention: float = 0.3
    # Not fitted: the aggregated rows cannot pin it (their MLA runs are TP 4-8, 16-32 heads per
    # rank, where decode attention's FLOPs hide under its KV reads; a fit runs to its bound).
    # DeepSeek's FlashMLA reaches 660 TFLOPS compute-bound on an H800 (989 dense bf16): 0.67.
    mfu_decode_attention: float = 0.67
    mbu: float = 0.8
    kv_read_efficiency: float = 0.6
    moe_weight_efficiency: float = 0.8
    ep_weight_efficiency: float = 1.0
    fp8_weight_efficiency: float = 1.0
    fp4_weight_efficiency: float = 0.8
    int4_weight_efficiency: float = 0.8
    # FP4 routed experts in grouped MoE GEMMs (a kernel of its own, not the dense FP4 GEMM).
    fp4_grouped_weight_efficiency: float = 0.8
    allreduce_latency_s: float = 15e-6
    alltoall_latency_s: float = 30e-6
    kernel_overhead_s: float = 5e-6
    seq_overhead_s: float = 50e-6
    # Host work per step only (calibration.BOUNDS: at most 0.2 ms); the per-layer kernels
    # carry the rest of a step's fixed cost.
    step_overhead_s: float = 2e-4
    api_overhead_s: float = 40e-3
    schedule_wait_steps: float = 2.0
    # vLLM compiles its kernels and captures its graphs before it serves: no first-wave stall.
    first_wave_stall_s: float = 0.0
    reserve_bytes: float = 4e9
    ttft_queue_factor: float = 1.8
    # Per-rank KV transfer between instances: a 400 Gb/s RDMA NIC per GPU.
    kv_transfer_bandwidth: float = 50e9
    kv_transfer_latency_s: float = 1e-3
    # vLLM's max_num_seqs: the largest decode batch an instance runs.
    max_num_seqs: int = 1024
    # Routed experts' grouped GEMMs on prompt tokens relative to the dense ones (fitted per
    # GPU type on MoE rows; 1 where none were measured: no evidence they differ).
    moe_prefill_efficiency: float = 1.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _MAY_BE_ZERO and value == 0 and not isinstance(value, bool):
                continue  # no reserve at all: SGLang's fraction already excludes it
            v = positive_number(f.name, value)
            if f.name in _FRACTIONS and v > 1.0:
                raise InvalidArgumentError(f"{f.name} must be in (0, 1], got {v}")
            if f.name in _RELATIVE and v > 2.0:
                raise InvalidArgumentError(f"{f.name} must be in (0, 2], got {v}")

    def replace(self, **overrides: Any) -> Constants:
        """A copy with some constants changed (unknown names are an error)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise InvalidArgumentError(
                f"unknown constant(s) {sorted(unknown)}; allowed: {', '.join(sorted(names))}"
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_MAY_BE_ZERO = {"reserve_bytes", "first_wave_stall_s"}
_FRACTIONS = {
    "mfu_prefill",
    "mfu_decode",
    "mfu_attention",
    "mfu_decode_attention",
    "mbu",
    "kv_read_efficiency",
}
_RELATIVE = {
    "moe_prefill_efficiency",
    "moe_weight_efficiency",
    "ep_weight_efficiency",
    "fp8_weight_efficiency",
    "fp4_weight_efficiency",
    "int4_weight_efficiency",
    "fp4_grouped_weight_efficiency",
}

GENERIC = Constants()


#: A release in an engine's container image: ``lmsysorg/sglang:v0.5.9-cu130``,
#: ``rocm/sgl-dev:sglang-0.5.9-rocm720-…``, ``vllm/vllm-openai:v0.11.0``.
_RELEASE = re.compile(r"(?:sglang|vllm)[\w./-]*?[:\s-]v?(\d+)\.(\d+)(?:\.(\d+))?", re.IGNORECASE)

#: Constants an engine release moves: its kernels (fusion, graphs, attention backends), its
#: per-sequence host work and its warm-up (which kernels it compiles just in time: the same
#: SGLang runs on B200 stalled their first wave 10-90 s in the Oct-Nov 2025 InferenceMAX runs
#: and about 1 s under 0.5.9). A release changes neither the GPU nor the model, so weight
#: streaming and GEMM efficiencies stay per GPU type.
RELEASE_CONSTANTS: tuple[str, ...] = ("kernel_overhead_s", "seq_overhead_s", "first_wave_stall_s")


def engine_release(image: Any) -> str:
    """The release (``"0.5.9"``) an engine image or version string names; ``""`` when it names
    none (``vllm/vllm-openai:nightly``, an empty field)."""
    if not isinstance(image, str):
        return ""
    m = _RELEASE.search(image)
    if m is None:
        m = re.fullmatch(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?[\w.+-]*\s*", image)
    if m is None:
        return ""
    return ".".join(str(int(x)) for x in (m.group(1), m.group(2), m.group(3) or "0"))


def release_key(release: str) -> tuple[int, ...]:
    """A release as a comparable tuple (``""`` sorts first), parsed as every release is
    (:func:`pdtp._version.parse_version`)."""
    return tuple(parse_version(release, "release")) if release else ()


def release_range(release: str, measured: Iterable[str]) -> str:
    """The measured release range ``release`` falls in: the newest measured release not after
    it (ranges run from one measured release to the next); ``""`` (the unrecorded releases of
    the InferenceMAX runs, Oct–Nov 2025) when it is older than all or not given."""
    if not release:
        return ""
    mine = release_key(release)
    older = [r for r in measured if r and release_key(r) <= mine]
    return max(older, key=release_key) if older else ""


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    text = resources.files("pdtp").joinpath("data/perf_constants.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@lru_cache(maxsize=64)
def _defaults(gpu_name: str, engine: str, release: str = "") -> Constants:
    entry = _table()["gpus"].get(gpu_name)
    values = {} if entry is None else dict(entry["vllm"])
    if engine != "vllm" and entry is not None:
        values.update(entry.get(engine, {}))
    chosen = release_range(release, measured_releases(engine))
    if chosen:
        factors = _table()["releases"][engine][chosen]
        for name in RELEASE_CONSTANTS:
            if name in factors and name in values:
                values[name] *= factors[name]
    if engine == "sglang":
        # SGLang's mem_fraction_static covers weights + KV pool only: the activations and
        # CUDA graphs are what its rule already holds back (calibration.
        # sglang_mem_fraction_static), so a runtime reserve on top would count them twice.
        values.setdefault("reserve_bytes", 0.0)
    return GENERIC.replace(**values)


def measured_releases(engine: str) -> list[str]:
    """The releases of ``engine`` the defaults have a release range of (oldest first)."""
    ranges = _table().get("releases", {}).get(engine, {})
    return sorted(ranges, key=release_key)


def release_note(engine: str, release: str = "") -> str:
    """Which measured release range an engine release takes its default constants from, or
    that it has no measured data.

    >>> release_note("vllm", "0.11.0").startswith("vllm 0.11.0: no measured data")
    True
    """
    engine = check_engine(engine)
    if not isinstance(release, str):
        raise ArgumentTypeError(f"release must be a string, got {type(release).__name__}")
    release = engine_release(release)
    measured = measured_releases(engine)
    chosen = release_range(release, measured)
    listed = ", ".join(measured) or "none recorded"
    if not release:
        return f"{engine}: no release given: the baseline constants (measured releases: {listed})"
    if not chosen:
        return (
            f"{engine} {release}: no measured data for this release or an older measured one "
            f"(measured releases: {listed}): the baseline constants, fitted on runs that do "
            f"not record their release"
        )
    if chosen == release:
        return f"{engine} {release}: constants fitted on its own measured runs"
    return f"{engine} {release}: no runs of its own: the measured range from {chosen}"


def constants_note(override: Any = None, engine: str = "vllm", release: str = "") -> str:
    """What a prediction's constants are: the caller's (``override`` a :class:`Constants`,
    used as is), or the defaults of ``engine``'s ``release`` as :func:`release_note` says
    (a dict ``override`` changes some of them, and the note says so)."""
    if isinstance(override, Constants):
        return "constants given by the caller (no engine release applied)"
    note = release_note(engine, release)
    if isinstance(override, dict) and override:
        note += f"; overridden: {', '.join(sorted(override))}"
    return note


def provenance(gpu_name: str) -> str:
    """Where a GPU type's default constants come from (rows, date, method)."""
    entry = _table()["gpus"].get(gpu_name)
    if entry is None:
        return "generic starting points (product.md §3): no measurements, not in the catalog"
    return str(entry["source"])


def check_engine(engine: Any) -> str:
    if not isinstance(engine, str) or engine.strip().lower() not in ENGINES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine.strip().lower()


def constants_for(
    gpu_name: str, override: Any = None, engine: str = "vllm", release: str = ""
) -> Constants:
    """The constants for a GPU type and serving engine, with ``override`` applied: ``None``,
    a :class:`Constants` (used as is), or a dict of the fields to change. ``release`` (an
    engine image or version, ``"lmsysorg/sglang:v0.5.9-cu130"``, ``"0.5.9"``) applies its
    measured release range's factors; :func:`release_note` says which range, or that the
    release has no measured data."""
    if not isinstance(release, str):
        raise ArgumentTypeError(
            f"release must be an engine image or version string such as '0.5.9', got "
            f"{type(release).__name__}"
        )
    if isinstance(override, Constants):
        return override
    base = _defaults(gpu_name, check_engine(engine), engine_release(release))
    if override is None:
        return base
    if isinstance(override, dict):
        return base.replace(**override)
    raise ArgumentTypeError(
        f"constants must be a pdtp.Constants or a dict of overrides, got {type(override).__name__}"
    )


def __getattr__(name: str) -> Any:
    # DEFAULTS is built on first use so `import pdtp` does not read the table.
    if name == "DEFAULTS":
        return {g: _defaults(g, "vllm") for g in _table()["gpus"]}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
