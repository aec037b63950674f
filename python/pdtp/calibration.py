"""Fit the performance model's efficiency constants to measured serving points.

A *point* is one measured benchmark run of aggregated serving. Two row formats are read:

- pdtp's own (the columns of ``reference/perf-points.csv``)::

      source, model, gpu, engine, weight_dtype, tp, isl, osl, concurrency,
      ttft_ms, tpot_ms, output_tokens_per_s, note

  with optional ``kv_dtype``, ``ep``, ``dp_attention``, ``max_num_seqs``,
  ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``num_prompts``,
  ``random_range_ratio`` and ``scheduler_recv_interval`` columns. ``isl``/``osl`` are the
  lengths the benchmark asked for.
- InferenceMAX result rows as in ``reference/measured-serving.csv`` (``hw``, ``framework``,
  ``precision``, ``ttft_mean_ms``, ``tpot_mean_ms``, ``output_tps``, ``implied_mean_osl``
  ...). What those files do not record is taken from the launch scripts of those runs
  (:func:`inferencemax_launch`).

Each measurement is compared with :func:`pdtp.predict_serving`'s prediction for the same run
(the Rust core's aggregated-serving model): ``tpot_ms`` with its mean TPOT, ``ttft_ms`` with
its mean TTFT (the first wave's burst and queueing included), ``output_tokens_per_s`` with its
throughput. A row without ``concurrency`` is an offline max-throughput run (the engine always
full).

:func:`calibrate` fits chosen constants by a bounded Levenberg–Marquardt search on a robust
(soft-L1) loss of log-ratio errors, in Rust; :func:`fit_table` fits constants per GPU type
and engine at once (the shipped defaults, and the accuracy benchmark's cross-validation).
Inputs are bounded: a file is read up to :data:`MAX_FILE_BYTES`, at most :data:`MAX_POINTS`
rows, and the whole call ends within ``time_limit_s`` (the search keeps its best so far).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import numbers
import os
import re
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import _core
from ._validate import public_api, short_repr
from .constants import (
    GENERIC,
    RELEASE_CONSTANTS,
    Constants,
    check_engine,
    constants_for,
    engine_release,
    release_key,
    release_range,
)
from .engine import engine_defaults, vllm_max_num_seqs_of_run
from .engine import sglang_mem_fraction_static as sglang_mem_fraction_static  # re-exported
from .errors import ArgumentTypeError, ConfigError, InvalidArgumentError, PdtpError
from .perf import constant_inputs, gpu_inputs, model_inputs

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model

__all__ = [
    "BOUNDS",
    "DEFAULT_FIT",
    "DEFAULT_TIME_LIMIT_S",
    "KINDS",
    "MAX_FILE_BYTES",
    "MAX_POINTS",
    "CalibrationTimeLimit",
    "PerfPoint",
    "SpeculativeDecodingWarning",
    "PointError",
    "calibrate",
    "fit_table",
    "inferencemax_launch",
    "load_points",
    "point_errors",
    "predict_point",
    "predict_points",
    "summarize",
]

#: Measurement kinds, by the column that holds them.
KINDS: tuple[str, ...] = ("tpot_ms", "ttft_ms", "output_tokens_per_s")

#: A points file is read up to this many bytes; larger is an error (``/dev/zero`` too).
MAX_FILE_BYTES = 64 << 20
#: At most this many rows per calibration.
MAX_POINTS = 200_000
#: :func:`calibrate`'s default time limit (seconds, reading and fitting together).
DEFAULT_TIME_LIMIT_S = 30.0

#: Fittable constants and their physical ranges: a GPU reaches at most its peak; fixed costs
#: stay below tens of microseconds per kernel and a second per request. The per-step cost is
#: the engine's host work that does not grow with the model (scheduling, input preparation,
#: sampling): at most 0.2 ms. A fit on models of 61 and 80 layers cannot tell a per-step cost
#: from a per-layer one. Unbounded it put 3-5 ms per step there, which a model of other depth
#: then pays in full; bounded at 1 ms the shipped fit still sat on the bound on H200/B200
#: (0.55-0.86 ms elsewhere) while a fit without DeepSeek-R1 put 0 there and everything on the
#: kernels, so a 36-layer model was charged an 80-layer model's millisecond. At 0.2 ms the
#: per-layer kernels carry it: Qwen3-32B (64 layers) held out 7.6% -> 7.3% TPOT median,
#: Llama-3.3-70B held out unchanged (with the per-vendor engine factor of `_engine_group`).
#: Prompt attention runs FlashAttention-class kernels, which reach 35-75% of the bf16 peak on
#: long prompts: at least a quarter. Unbounded, the fit put it at 5-13% to absorb the stalls
#: of aggregated SGLang runs' mean TTFT, and a lone 7k-token prompt of the measured P/D runs
#: (no queue to stall in) then took twice its measured time.
#: Routed experts' grouped GEMMs on prompt tokens reach at least 0.3 of the dense GEMMs' rate:
#: left free (to 0.05), the fit on aggregated DeepSeek-R1 runs (single prompts of 1-8k tokens,
#: 29-230 rows per expert) put it at 0.07 on B200, and the measured P/D prefill workers
#: (batches of 16-32k tokens) then cleared half the prompts they were measured to (P/D TTFT
#: 56% -> 91%); at 0.3 P/D TTFT is 43%.
#: An all-reduce's latency α inside a node is a few to 30 µs (NCCL/RCCL and the engines' custom
#: one-shot all-reduces on NVLink/xGMI): at most 50 µs. Where a GPU type's only rows are one
#: model at one TP size (DeepSeek-R1 on MI300X/MI325X: TP 8), α and the per-kernel cost are
#: both fixed per step and the fit cannot tell them apart; up to 200 µs it put 130 µs there,
#: and Llama-70B held out (160 all-reduces a step, not 122) was predicted at TPOT +56-91%.
BOUNDS: dict[str, tuple[float, float]] = {
    "mfu_prefill": (0.1, 1.0),
    "moe_prefill_efficiency": (0.3, 2.0),
    "mfu_decode": (0.02, 1.0),
    "mfu_attention": (0.25, 1.0),
    "mfu_decode_attention": (0.05, 1.0),
    "mbu": (0.3, 1.0),
    "kv_read_efficiency": (0.1, 1.0),
    "moe_weight_efficiency": (0.1, 2.0),
    "ep_weight_efficiency": (0.2, 2.0),
    "fp8_weight_efficiency": (0.2, 2.0),
    "fp4_weight_efficiency": (0.2, 2.0),
    "int4_weight_efficiency": (0.2, 2.0),
    "fp4_grouped_weight_efficiency": (0.2, 2.0),
    "allreduce_latency_s": (1e-6, 50e-6),
    "alltoall_latency_s": (1e-6, 1e-3),
    "kernel_overhead_s": (1e-8, 50e-6),
    "seq_overhead_s": (1e-8, 500e-6),
    "step_overhead_s": (1e-6, 2e-4),
    "api_overhead_s": (1e-3, 1.0),
    "schedule_wait_steps": (0.05, 30.0),
    "first_wave_stall_s": (1e-3, 300.0),
    "ttft_queue_factor": (1.0, 10.0),
    "reserve_bytes": (1e9, 32e9),
}

#: What :func:`calibrate` fits unless told otherwise: the constants a new model or GPU moves
#: most (weight streaming, prompt and decode GEMMs, per-kernel and per-request fixed costs,
#: and for MoE models the experts' kernels). Five measured points of a model on a GPU pin
#: them down (``benchmarks/accuracy.py``, "calibrate on 5").
DEFAULT_FIT: tuple[str, ...] = (
    "mbu",
    "mfu_prefill",
    "mfu_decode",
    "kernel_overhead_s",
    "api_overhead_s",
    "moe_weight_efficiency",
)

# Residual weights of TPOT, mean TTFT, throughput and median TTFT. A TTFT counts half: it
# holds queueing the model sees only on average (scheduler polling) and its errors would
# otherwise pull the decode constants. Which TTFT a fit takes is its own choice (`_core_point`).
_WEIGHTS = (1.0, 0.5, 1.0, 0.5)
_SCALE = 0.1


class CalibrationTimeLimit(UserWarning):
    """The fit stopped at ``time_limit_s`` with the best constants found so far."""


# ---- points -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PerfPoint:
    """One measured run, resolved: model (at the run's dtypes), GPU, engine configuration and
    the measured numbers. ``isl``/``osl`` are the mean lengths the run saw."""

    row: int
    where: str
    model: Model
    gpu: GPU
    tp: int
    isl: float
    osl: float
    concurrency: int | None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens_per_s: float | None
    engine: str = "vllm"
    ep: int = 1
    dp_attention: bool = False
    #: Engine caps: running sequences, tokens per step; and its memory share.
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9
    #: Requests the benchmark sent (None: steady state).
    num_prompts: int | None = None
    #: Decode steps between the scheduler's polls for new requests (SGLang's
    #: ``--scheduler-recv-interval``; 1 = every step, the engines' default).
    scheduler_recv_interval: int = 1
    source: str = ""
    note: str = ""
    #: The engine release the run used (``"0.5.9"``, from ``engine_image`` or
    #: ``engine_release``); ``""`` when the row does not record it.
    engine_release: str = ""
    #: The measured median TTFT, where the row has it: a steady request's, which the table's
    #: fit takes for the steady terms (the mean holds the first wave's burst and stall).
    ttft_median_ms: float | None = None
    #: Free-form labels for grouping (the accuracy benchmark's folds).
    labels: tuple[tuple[str, str], ...] = field(default=())

    @property
    def kinds(self) -> tuple[str, ...]:
        """The measurement kinds this row holds (columns of :data:`KINDS`)."""
        return tuple(k for k in KINDS if getattr(self, k) is not None)

    def measured(self, kind: str) -> float:
        value = getattr(self, kind)
        if value is None:
            raise InvalidArgumentError(f"{self.where}: has no {kind} measurement")
        return float(value)

    @property
    def layout(self) -> tuple[int, int, int, bool]:
        """``(tp, pp, dp, ep)`` for the core. Data-parallel attention runs one attention rank
        per GPU (tp 1, dp = the row's GPUs), as SGLang's ``--enable-dp-attention`` does."""
        if self.dp_attention:
            return (1, 1, self.tp, self.ep > 1)
        return (self.tp, 1, 1, self.ep > 1)

    def workload(self) -> dict[str, Any]:
        return {
            "isl": float(self.isl),
            "osl": float(self.osl),
            "concurrency": None if self.concurrency is None else float(self.concurrency),
            "num_prompts": None if self.num_prompts is None else float(self.num_prompts),
            "max_num_seqs": float(self.max_num_seqs),
            "max_num_batched_tokens": float(self.max_num_batched_tokens),
            "gpu_memory_utilization": float(self.gpu_memory_utilization),
            "engine": self.engine,
            "scheduler_recv_interval": float(self.scheduler_recv_interval),
        }

    def label(self, key: str) -> str:
        return dict(self.labels).get(key, "")


@dataclass(frozen=True)
class PointError:
    """One measurement compared with its prediction."""

    point: PerfPoint
    kind: str
    measured: float
    predicted: float

    @property
    def rel_error(self) -> float:
        """Absolute relative error ``|predicted / measured − 1|`` (inf when nothing fits)."""
        if not math.isfinite(self.predicted):
            return math.inf
        return abs(self.predicted / self.measured - 1.0)


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    # pandas writes empty cells as NaN.
    return isinstance(value, float) and math.isnan(value)


def _number(where: str, field: str, value: Any, *, allow_zero: bool = False) -> float:
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
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
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


def _flag(where: str, field: str, value: Any) -> bool:
    if _missing(value):
        return False
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"{where}: field {field!r} must be true or false, got {value!r}")


@lru_cache(maxsize=256)
def _resolve(name: str, weight_dtype: str | None, kv_dtype: str | None) -> Model:
    from .catalog import resolve_model

    return resolve_model(name, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


_QUANT_SUFFIX = re.compile(r"(-(fp8|fp4|mxfp4|nvfp4|kv|preview|v\d+|awq|gptq|int4|int8))+$", re.I)


@lru_cache(maxsize=256)
def _catalog_name(candidates: tuple[str, ...]) -> str | None:
    """The catalog model behind a run's model names, offline: as given, without the quantized
    checkpoint's suffix (``-FP8-KV``, ``-MXFP4-Preview``), or by the part after the org,
    matched against catalog names, HF ids and aliases."""
    from .catalog import models

    tried: list[str] = []
    for c in candidates:
        base = c.strip()
        tried += [base, _QUANT_SUFFIX.sub("", base)]
    wanted = [t.lower() for t in tried]
    tails = {t.rsplit("/", 1)[-1] for t in wanted}
    catalog = models()
    for exact in (True, False):
        for m in catalog:
            for alias in (m.name, m.hf_id or "", *m.aliases):
                a = alias.lower()
                if a and (a in wanted if exact else a.rsplit("/", 1)[-1] in tails):
                    return m.name
    return None


@lru_cache(maxsize=64)
def _find_gpu(name: str) -> GPU:
    from .catalog import gpu

    return gpu(name)


# Engines a measured row may name (any version text after the name): SGLang schedules as
# itself; TensorRT-LLM and NIM run in-flight batching with chunked context, which mixes
# prompts into decode steps as vLLM does. Any other engine is refused, not read as vLLM.
_VLLM_FAMILY = re.compile(r"\b(vllm|tensorrt[-_ ]?llm|trt[-_ ]?llm|nim)\b", re.IGNORECASE)
_SPECULATIVE = re.compile(
    r"speculative|spec[-_ ]?dec|\bmtp\b|eagle|medusa|draft[-_ ]model|n-?gram", re.IGNORECASE
)


class SpeculativeDecodingWarning(UserWarning):
    """A measured row ran with speculative decoding (MTP, EAGLE, a draft model …), which pdtp
    does not model: its TPOT is lower than plain decoding's, and fitting it as plain decoding
    biases the constants."""


def engine_of(text: Any, where: str = "engine") -> str:
    """The scheduling family of an engine string: ``sglang`` or ``vllm`` (vLLM, TensorRT-LLM,
    NIM); an empty one is vLLM. Any other engine is an :class:`InvalidArgumentError` naming
    ``where``: pdtp has no model of its scheduling."""
    if not isinstance(text, str) or not text.strip():
        return "vllm"
    if "sglang" in text.lower():
        return "sglang"
    if _VLLM_FAMILY.search(text):
        return "vllm"
    raise InvalidArgumentError(
        f"{where}: engine {short_repr(text)} is not one pdtp models; expected vLLM, SGLang, "
        f"TensorRT-LLM or NIM (a version may follow, e.g. 'vllm 0.12.0')"
    )


def inferencemax_launch(
    engine: str,
    gpu: GPU,
    model: str,
    precision: str,
    tp: int = 0,
    concurrency: int | None = None,
    dp_attention: bool = False,
) -> dict[str, Any]:
    """Engine settings of the InferenceMAX runs (launch scripts of Oct–Nov 2025 in
    ``benchmarks/*.sh`` of the InferenceMAX repository), which their result files do not record:

    - vLLM: ``--kv-cache-dtype fp8``, ``--max-num-seqs $CONC``; NVIDIA
      ``--max-num-batched-tokens 8192 --gpu-memory-utilization 0.9``, AMD
      ``--max-num-batched-tokens 131072 --gpu-memory-utilization 0.94``;
    - SGLang: KV cache in the model's dtype (fp8 for B200 FP4 DeepSeek), NVIDIA
      ``--chunked-prefill-size 16384–32768 --mem-fraction-static 0.82–0.85``, AMD
      ``--chunked-prefill-size 196608 --mem-fraction-static 0.8``;
    - the client: ``--num-prompts 10×CONC --max-concurrency CONC --random-range-ratio 0.8``
      (lengths uniform in [0.8, 1] × nominal, so the prompt mean is 0.9 × isl);
    - SGLang on B200 (``dsr1_fp4_b200*.sh``, ``dsr1_fp8_b200*.sh`` from Sep 2025 on):
      ``--scheduler-recv-interval`` 10 below 16 clients and 30 from 16 (10 at fp8 TP 4; 1 with
      DP attention), so a new prompt waits for the scheduler's next poll; fp4
      ``--chunked-prefill-size 16384 --mem-fraction-static 0.85 --max-running-requests 256``."""
    amd = gpu.vendor == "AMD"
    # The B200 SGLang scripts poll for new requests every 10 decode steps, every 30 from 16
    # clients on (SemiAnalysisAI/InferenceX benchmarks/dsr1_fp{4,8}_b200*.sh, commit 6be2c699
    # of 2025-09-23 to today's single_node/fixed_seq_len/; DP attention polls every step).
    b200_sglang = engine == "sglang" and gpu.name == "b200" and not dp_attention
    recv = 30 if b200_sglang and (concurrency or 0) >= 16 else 10 if b200_sglang else 1
    if engine == "sglang" and gpu.name == "b200" and precision == "fp8" and tp == 4:
        # InferenceX benchmarks/dsr1_fp8_b200.sh (SemiAnalysisAI/InferenceX@1fc5d73c), its
        # TP=4 branch: --mem-fraction-static 0.95 --kv-cache-dtype fp8_e4m3
        # --chunked-prefill-size 8192 --max-running-requests 32. The weights alone take
        # 0.87 of a B200 at tp 4, more than SGLang's default fraction leaves (0.847).
        return {
            "kv_dtype": "fp8",
            "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": 0.95,
            "max_num_seqs": 32,
            "random_range_ratio": 0.8,
            "scheduler_recv_interval": 10,
        }
    if engine == "sglang":
        b200_fp4 = gpu.name == "b200" and precision == "fp4"
        return {
            "kv_dtype": "fp8" if b200_fp4 else None,
            "max_num_batched_tokens": 196608 if amd else 16384 if b200_fp4 else 32768,
            "gpu_memory_utilization": 0.8 if amd else 0.85 if b200_fp4 else 0.82,
            "max_num_seqs": 256 if b200_fp4 else 512,
            "random_range_ratio": 0.8,
            "scheduler_recv_interval": recv,
        }
    return {
        "kv_dtype": "fp8",
        "max_num_batched_tokens": 131072 if amd else 8192,
        "gpu_memory_utilization": 0.94 if amd else 0.9,
        "max_num_seqs": None,  # = concurrency
        "random_range_ratio": 0.8,
        "scheduler_recv_interval": 1,
    }


def _is_inferencemax(raw: Mapping[str, Any]) -> bool:
    return "hw" in raw and "framework" in raw and "gpu" not in raw


def _parse_row(raw: Mapping[str, Any], row: int, where: str) -> PerfPoint:
    if not isinstance(raw, Mapping):
        raise InvalidArgumentError(
            f"{where}: a point must be a mapping of column to value, got {type(raw).__name__}"
        )
    imax = _is_inferencemax(raw)
    col = {
        "gpu": "hw" if imax else "gpu",
        "engine": "framework" if imax else "engine",
        "weight_dtype": "precision" if imax else "weight_dtype",
        "ttft_ms": "ttft_mean_ms" if imax else "ttft_ms",
        "tpot_ms": "tpot_mean_ms" if imax else "tpot_ms",
        "output_tokens_per_s": "output_tps" if imax else "output_tokens_per_s",
    }
    for f in ("model", col["gpu"], "tp", "isl", "osl"):
        if _missing(raw.get(f)):
            raise InvalidArgumentError(f"{where}: field {f!r} is required and empty")
    names: dict[str, str] = {}
    for key in ("model", "model_id", col["gpu"], col["weight_dtype"], "kv_dtype", col["engine"]):
        value = raw.get(key)
        if _missing(value):
            continue
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"{where}: field {key!r} must be a string, got {type(value).__name__} {value!r}"
            )
        names[key] = value.strip()
    try:
        gpu = _find_gpu(names[col["gpu"]])
    except PdtpError as exc:
        raise ConfigError(f"{where}: field {col['gpu']!r}: {exc}") from None
    engine_text = names.get(col["engine"], "")
    engine = engine_of(engine_text, f"{where}: field {col['engine']!r}")
    note = "" if _missing(raw.get("note")) else str(raw.get("note"))
    speculative = [
        str(raw[k])
        for k in ("note", "notes", col["engine"], "speculative", "speculative_config")
        if not _missing(raw.get(k)) and _SPECULATIVE.search(str(raw[k]))
    ]
    if speculative:
        warnings.warn(
            f"{where}: ran with speculative decoding ({short_repr(speculative[0], 60)}), which "
            f"pdtp does not model: fitted as plain decoding, its TPOT biases the constants low; "
            f"leave such rows out",
            SpeculativeDecodingWarning,
            stacklevel=2,
        )
    weight_dtype = names.get(col["weight_dtype"])
    kv_dtype = names.get("kv_dtype")
    tp, isl, osl = (_integer(where, f, raw[f]) for f in ("tp", "isl", "osl"))
    conc = raw.get("concurrency")
    concurrency = None if _missing(conc) else _integer(where, "concurrency", conc)
    defaults = engine_defaults(engine, gpu)
    dp_attention = _flag(where, "dp_attention", raw.get("dp_attention"))
    recv_interval = 1
    if imax:
        launch = inferencemax_launch(
            engine, gpu, names["model"], weight_dtype or "", tp, concurrency, dp_attention
        )
        recv_interval = int(launch["scheduler_recv_interval"])
        kv_dtype = kv_dtype or launch["kv_dtype"]
        max_num_batched = int(launch["max_num_batched_tokens"])
        util = float(launch["gpu_memory_utilization"])
        max_seqs = launch["max_num_seqs"] or concurrency or int(defaults["max_num_seqs"])
        ratio = float(launch["random_range_ratio"])
        num_prompts = None if concurrency is None else 10 * concurrency
    else:
        max_num_batched = int(defaults["max_num_batched_tokens"])
        util = float(defaults["util"])
        max_seqs = vllm_max_num_seqs_of_run(engine_text) or int(defaults["max_num_seqs"])
        ratio = 1.0
        num_prompts = None if concurrency is None else 10 * concurrency
        if kv_dtype is None and "fp8 kv" in note.lower():
            kv_dtype = "fp8"
    for key in ("max_num_seqs", "max_num_batched_tokens", "num_prompts"):
        if not _missing(raw.get(key)):
            value = _integer(where, key, raw[key])
            if key == "max_num_seqs":
                max_seqs = value
            elif key == "max_num_batched_tokens":
                max_num_batched = value
            else:
                num_prompts = value
    if not _missing(raw.get("gpu_memory_utilization")):
        util = _number(where, "gpu_memory_utilization", raw["gpu_memory_utilization"])
        if util > 1:
            raise InvalidArgumentError(f"{where}: field 'gpu_memory_utilization' must be ≤ 1")
    if not _missing(raw.get("random_range_ratio")):
        ratio = _number(where, "random_range_ratio", raw["random_range_ratio"])
        if ratio > 1:
            raise InvalidArgumentError(f"{where}: field 'random_range_ratio' must be ≤ 1")
    candidates = tuple(names[k] for k in ("model", "model_id") if k in names)
    resolved = _catalog_name(candidates) if imax else None
    try:
        model = _resolve(resolved or names["model"], weight_dtype, kv_dtype)
    except InvalidArgumentError as exc:  # a bad dtype spelling
        bad = "kv_dtype" if "kv_dtype" in str(exc) else col["weight_dtype"]
        raise InvalidArgumentError(f"{where}: field {bad!r}: {exc}") from None
    except PdtpError as exc:  # unknown model, unreadable config
        raise ConfigError(f"{where}: field 'model': {exc}") from None
    values = {}
    for kind in KINDS:
        value = raw.get(col[kind])
        values[kind] = None if _missing(value) else _number(where, col[kind], value)
    if all(v is None for v in values.values()):
        raise InvalidArgumentError(
            f"{where}: no measurement: give at least one of {', '.join(col[k] for k in KINDS)}"
        )
    median_ttft = (
        None
        if _missing(raw.get("ttft_median_ms"))
        else _number(where, "ttft_median_ms", raw["ttft_median_ms"])
    )
    release = ""
    for key in ("engine_release", "engine_image"):
        if not _missing(raw.get(key)):
            release = engine_release(str(raw[key]))
            break
    if values["tpot_ms"] is not None and concurrency is None:
        raise InvalidArgumentError(
            f"{where}: field 'concurrency' is required with {col['tpot_ms']} (the decode batch)"
        )
    ep = 1 if _missing(raw.get("ep")) else _integer(where, "ep", raw["ep"])
    if not _missing(raw.get("scheduler_recv_interval")):
        recv_interval = _integer(where, "scheduler_recv_interval", raw["scheduler_recv_interval"])
    mean_isl = isl * (1.0 + ratio) / 2.0
    mean_osl = osl * (1.0 + ratio) / 2.0
    if imax and not _missing(raw.get("implied_mean_osl")):
        mean_osl = _number(where, "implied_mean_osl", raw["implied_mean_osl"])
    point = PerfPoint(
        row=row,
        where=where,
        model=model,
        gpu=gpu,
        tp=tp,
        isl=mean_isl,
        osl=mean_osl,
        concurrency=concurrency,
        ttft_ms=values["ttft_ms"],
        tpot_ms=values["tpot_ms"],
        output_tokens_per_s=values["output_tokens_per_s"],
        engine=engine,
        ep=ep,
        dp_attention=dp_attention,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=max_num_batched,
        gpu_memory_utilization=util,
        num_prompts=num_prompts,
        scheduler_recv_interval=recv_interval,
        source="" if _missing(raw.get("source")) else str(raw.get("source")),
        note=note,
        engine_release=release,
        ttft_median_ms=median_ttft,
        labels=(("model", model.name), ("gpu", gpu.name), ("engine", engine)),
    )
    if not _weights_fit(point):
        raise InvalidArgumentError(
            f"{where}: fields 'model'/'tp': {model.name} ({model.weight_dtype}) does not fit "
            f"on tp={tp} {gpu.name} GPUs"
        )
    return point


def _weights_fit(p: PerfPoint) -> bool:
    work = {"isl": 1.0, "osl": 1.0, "ttft_s": None, "tpot_s": None}
    c = constant_inputs(constants_for(p.gpu.name, engine=p.engine))
    fits: bool = _core.layout_sides(
        model_inputs(p.model),
        gpu_inputs(p.gpu, p.model.weight_dtype),
        c,
        p.layout,
        work,
        p.gpu_memory_utilization,
    )[0]
    return fits


def _read_text(path: str) -> str:
    """A points file's text, read to at most :data:`MAX_FILE_BYTES` (so a device or a huge
    file fails fast) and checked to be text. Errors name the path as given."""
    from ._io import read_capped

    name = path
    data = read_capped(path, limit=MAX_FILE_BYTES, what="points file")
    if b"\0" in data:
        raise InvalidArgumentError(f"points file {name!r} is not a CSV text file (NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"points file {name!r} is not UTF-8 text: {exc}") from None


def _raw_rows(points: Any) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(row, where) pairs from a CSV path, a pandas DataFrame or an iterable of mappings,
    at most :data:`MAX_POINTS`: yielded one by one, so that the caller's time limit also
    bounds building them (150,000 row tuples alone took 0.6 s)."""
    too_many = InvalidArgumentError(
        f"more than {MAX_POINTS} points (pdtp.calibration.MAX_POINTS); pass fewer rows"
    )
    if isinstance(points, str | os.PathLike):
        path = os.fspath(points)
        name = os.path.basename(path)
        text = _read_text(path)
        out: list[tuple[Mapping[str, Any], str]] = []
        try:
            reader = csv.DictReader(io.StringIO(text, newline=""))
            for i, r in enumerate(reader, 1):
                if i > MAX_POINTS:
                    raise too_many
                # line_num is the file line the row ended on (quoted newlines included).
                out.append((r, f"row {i} (line {reader.line_num} of {name})"))
        except csv.Error as exc:
            raise InvalidArgumentError(f"cannot read points file {path!r}: {exc}") from None
        yield from out
        return
    # A DataFrame, recognised without importing pandas.
    if type(points).__module__.startswith("pandas") and hasattr(points, "to_dict"):
        if len(points) > MAX_POINTS:
            raise too_many
        records = points.to_dict("records")
        yield from ((r, f"row {i}") for i, r in enumerate(records, 1))
        return
    if isinstance(points, Mapping) or not isinstance(points, Iterable):
        raise InvalidArgumentError(
            "points must be a path to a CSV file, an iterable of row dicts or a pandas "
            f"DataFrame, got {type(points).__name__}"
        )
    for i, r in enumerate(points, 1):
        if i > MAX_POINTS:
            raise too_many
        yield r, f"row {i}"


def load_points(points: Any, *, gpu: Any = None, deadline: float | None = None) -> list[PerfPoint]:
    """Parse measured rows (a CSV path, row dicts or a DataFrame) into :class:`PerfPoint`,
    optionally keeping one GPU type's rows. Malformed rows raise :class:`InvalidArgumentError`
    (or :class:`ConfigError` for an unknown model/GPU) naming the row and field; a row is
    counted from 1 (the CSV's header is line 1). ``deadline`` (a ``time.monotonic()`` value)
    bounds the parse."""
    if isinstance(points, Sequence) and points and all(isinstance(p, PerfPoint) for p in points):
        parsed: list[PerfPoint] = list(points)
    else:
        parsed = []
        for i, (raw, where) in enumerate(_raw_rows(points), 1):
            # Every 16 rows (a few ms): the limit holds to well within 50 ms.
            if deadline is not None and i % 16 == 0 and time.monotonic() > deadline:
                raise InvalidArgumentError(
                    f"calibration ran out of its time limit while reading row {i}; pass fewer "
                    f"rows or a larger time_limit_s"
                )
            parsed.append(_parse_row(raw, i, where))
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


def _core_point(
    p: PerfPoint,
    consts: Constants,
    params: Sequence[tuple[str, int]] = (),
    ttft: str = "mean",
) -> tuple[Any, ...]:
    """The core's tuple for one point. ``ttft`` says which TTFT it is fitted on: ``"mean"``;
    ``"steady"``, the median where the row has one (the mean elsewhere); ``"both"``."""
    measured = [
        math.nan if getattr(p, k) is None else float(getattr(p, k)) * scale
        for k, scale in zip((*KINDS, "ttft_median_ms"), (1e-3, 1e-3, 1.0, 1e-3))
    ]
    if ttft == "mean":
        measured[3] = math.nan
    elif ttft == "steady" and math.isfinite(measured[3]):
        measured[1] = math.nan
    return (
        model_inputs(p.model),
        gpu_inputs(p.gpu, p.model.weight_dtype),
        constant_inputs(consts),
        p.layout,
        p.workload(),
        list(params),
        tuple(measured),
    )


def _as_ms(values: tuple[float, float, float, float]) -> dict[str, float]:
    tpot, ttft, tps, ttft_median = values
    return {
        "tpot_ms": tpot * 1e3,
        "ttft_ms": ttft * 1e3,
        "output_tokens_per_s": tps,
        "ttft_median_ms": ttft_median * 1e3,
    }


def predict_points(points: Sequence[PerfPoint], constants: Any = None) -> list[dict[str, float]]:
    """Predictions (``tpot_ms``, ``ttft_ms``, ``output_tokens_per_s``; NaN where nothing
    fits) for each point. ``constants``: ``None`` (each point's GPU and engine defaults), a
    :class:`Constants` or dict of overrides for all, or a callable ``point -> Constants``."""
    rows = []
    for p in points:
        c = constants(p) if callable(constants) else constants_for(p.gpu.name, constants, p.engine)
        rows.append(_core_point(p, c))
    return [_as_ms(v) for v in _core.predict_points(rows, [])]


def predict_point(row: PerfPoint | Mapping[str, Any], constants: Any = None) -> dict[str, float]:
    """Predicted values for each measurement a row holds: ``tpot_ms``, ``ttft_ms`` and/or
    ``output_tokens_per_s``. ``constants`` is a :class:`Constants`, a dict of overrides, or
    ``None`` for the row's GPU and engine defaults.

    >>> from pdtp.calibration import predict_point
    >>> row = {"model": "Qwen/Qwen3-32B", "gpu": "h100", "tp": 4, "isl": 1024, "osl": 128,
    ...        "concurrency": 8, "tpot_ms": 11.8}
    >>> 5 < predict_point(row)["tpot_ms"] < 25
    True
    """
    point = row if isinstance(row, PerfPoint) else load_points([row])[0]
    predicted = predict_points([point], constants)[0]
    return {k: predicted[k] for k in point.kinds}


def point_errors(points: Any, constants: Any = None) -> list[PointError]:
    """Every measurement of ``points`` with its prediction, in row order. ``constants`` as in
    :func:`predict_points`."""
    parsed = load_points(points)
    out: list[PointError] = []
    for point, predicted in zip(parsed, predict_points(parsed, constants)):
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
    if math.isinf(sorted_xs[hi]):
        return sorted_xs[hi]
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


# ---- fitting ----------------------------------------------------------------------------------


@dataclass
class _Space:
    """Parameters of one fit: ``keys[i]`` = (constant, group) of parameter i."""

    keys: list[tuple[str, str]] = field(default_factory=list)
    index: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, name: str, group: str) -> int:
        key = (name, group)
        if key not in self.index:
            self.index[key] = len(self.keys)
            self.keys.append(key)
        return self.index[key]


_Key = tuple[str, str]


def _run_fit(
    points: Sequence[PerfPoint],
    base: Any,
    assignments: Sequence[Sequence[_Key]],
    start: Mapping[_Key, float],
    deadline: float | None,
    max_iterations: int = 100,
    priors: Sequence[tuple[_Key, _Key | None, float]] = (),
    ttft: str = "mean",
) -> tuple[dict[_Key, float], bool]:
    """Fit: point i's constant ``name`` takes the parameter of group ``g`` for each
    ``(name, g)`` in ``assignments[i]`` (several groups on one constant multiply). ``base``
    maps a point to its constants before the parameters apply. ``priors`` tie a parameter to
    a parent parameter (or to 1) with a weight."""
    space = _Space()
    rows = []
    for p, assigned in zip(points, assignments):
        params = [(name, space.add(name, g)) for name, g in assigned]
        rows.append(_core_point(p, base(p), params, ttft))
    core_priors = [
        (space.add(*child), None if parent is None else space.add(*parent), weight)
        for child, parent, weight in priors
    ]
    x0, lo, hi = [], [], []
    for name, group in space.keys:
        low, high = BOUNDS[name]
        if group.startswith(("×", "@")):  # a multiplier on another group's value
            low, high = 0.2, 5.0
        elif group.startswith("="):  # a physical anchor: fixed, the parent of a prior
            low = high = start[(name, group)]
        x0.append(min(max(start.get((name, group), 1.0), low), high))
        lo.append(low)
        hi.append(high)
    limit = math.inf if deadline is None else max(deadline - time.monotonic(), 0.0)
    x, _cost, _iters, complete = _core.fit_constants(
        rows, core_priors, x0, lo, hi, _WEIGHTS, _SCALE, max_iterations, min(limit, 1e9)
    )
    return dict(zip(space.keys, x)), complete


@public_api
def calibrate(
    points: Any,
    *,
    gpu: Any = None,
    engine: str | None = None,
    base: Any = None,
    fit: Iterable[str] = DEFAULT_FIT,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> Constants:
    """Fit efficiency constants to measured points and return them as a :class:`Constants`.

    ``points``: a path to a CSV (pdtp's columns or an InferenceMAX result table such as
    ``reference/measured-serving.csv``), an iterable of row dicts (numeric strings are fine)
    or a pandas DataFrame. ``gpu``: use only that GPU type's rows. ``engine``: whose defaults
    start the search (default: the rows' engine). ``base``: where the search starts and what
    the fit leaves alone — a :class:`Constants`, a dict of overrides on the GPU's defaults, or
    ``None``. ``fit``: the constants to fit, each within :data:`BOUNDS`.

    Reading and fitting together end within ``time_limit_s`` seconds: the search keeps its
    best constants so far and warns (:class:`CalibrationTimeLimit`) if it had to stop early.

    >>> import pdtp
    >>> rows = [{"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "isl": 1000, "osl": 200,
    ...          "concurrency": b, "tpot_ms": t} for b, t in ((1, 7.4), (32, 9.5), (128, 14.0))]
    >>> c = pdtp.calibrate(rows, fit=("mbu", "step_overhead_s"))
    >>> 0.3 <= c.mbu <= 1.0
    True
    """
    limit = _number("calibrate", "time_limit_s", time_limit_s)
    deadline = time.monotonic() + limit
    if isinstance(fit, str):
        fit = (fit,)
    if not isinstance(fit, Iterable) or isinstance(fit, bytes | Mapping):
        raise ArgumentTypeError(
            f"fit must be constant names (a list of str, e.g. ['mbu']), got {type(fit).__name__}"
        )
    listed = list(itertools.islice(fit, 1001))  # an endless iterable must not hang
    if len(listed) > 1000:
        raise InvalidArgumentError(f"fit lists more than 1000 names; fittable: {', '.join(BOUNDS)}")
    names = list(dict.fromkeys(listed))
    if not all(isinstance(n, str) for n in names):
        raise ArgumentTypeError(f"fit must list constant names (str), got {short_repr(names)}")
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise InvalidArgumentError(
            f"cannot fit {unknown}: fittable constants are {', '.join(BOUNDS)}"
        )
    parsed = load_points(points, gpu=gpu, deadline=deadline)
    gpu_names = {p.gpu.name for p in parsed}
    engines = {p.engine for p in parsed}
    eng = (
        check_engine(engine)
        if engine is not None
        else (engines.pop() if len(engines) == 1 else "vllm")
    )
    start = constants_for(next(iter(gpu_names)) if len(gpu_names) == 1 else "", base, eng)
    # A constant no point depends on keeps its start (e.g. fp4 efficiency without fp4 rows).
    names = [n for n in names if _informed(n, parsed)]
    if not names:
        return start
    values, complete = _run_fit(
        parsed,
        lambda p: start,
        [[(n, "*") for n in names] for _ in parsed],
        {(n, "*"): float(getattr(start, n)) for n in names},
        deadline,
    )
    if not complete:
        warnings.warn(
            f"calibrate stopped at time_limit_s={limit:g} with the best constants found so far",
            CalibrationTimeLimit,
            stacklevel=2,
        )
    try:
        return start.replace(**{n: values[(n, "*")] for n in names})
    except InvalidArgumentError as exc:  # pragma: no cover - BOUNDS keep values valid
        raise ConfigError(f"calibration produced invalid constants: {exc}") from None


def _informed(name: str, points: Sequence[PerfPoint]) -> bool:
    """Whether any point's prediction depends on constant ``name``."""
    if name == "fp4_weight_efficiency":
        # Dense FP4 GEMMs, pinned by dense models: an MoE's dense share (DeepSeek-R1's 3% of
        # its bytes) cannot tell it from the experts' grouped kernels, and a fit that lets it
        # try runs it to its bound.
        return any(p.model.weight_dtype == "fp4" and not p.model.num_experts for p in points)
    if name == "fp4_grouped_weight_efficiency":  # FP4 experts' grouped GEMMs
        return any(p.model.weight_dtype == "fp4" and p.model.num_experts for p in points)
    if name == "int4_weight_efficiency":
        return any(p.model.weight_dtype == "int4" for p in points)
    if name == "fp8_weight_efficiency":
        return any(p.model.weight_dtype in ("fp8", "int8") for p in points)
    if name == "moe_weight_efficiency":
        return any(p.model.num_experts for p in points)
    if name == "moe_prefill_efficiency":  # the experts' GEMMs on prompt tokens: in the TTFT
        return any(
            p.model.num_experts and (p.ttft_ms is not None or p.ttft_median_ms is not None)
            for p in points
        )
    if name == "ep_weight_efficiency":
        return any(p.model.num_experts and p.ep > 1 for p in points)
    if name == "alltoall_latency_s":
        return any(p.ep > 1 and p.dp_attention for p in points)
    if name == "allreduce_latency_s":
        return any(p.tp > 1 for p in points)
    if name == "ttft_queue_factor":
        return False  # aggregated runs do not use the disaggregated queueing factor
    if name in ("api_overhead_s", "schedule_wait_steps"):
        return any(p.ttft_ms is not None for p in points)
    if name == "first_wave_stall_s":  # the mean TTFT of a run that starts its clients at once
        return any(
            p.ttft_ms is not None and p.concurrency is not None and p.num_prompts is not None
            for p in points
        )
    return True


# ---- per-GPU-type tables (the defaults' fit and the accuracy benchmark) -----------------------

#: How the defaults' fit shares each constant: ``gpu`` one value per GPU type (of the same
#: generation's value when a type has no rows), ``engine`` one per engine, ``global`` one for
#: all; ``gpu+engine`` one per GPU type times a multiplier per engine other than vLLM and
#: GPU vendor (:func:`_engine_group`).
TABLE_LEVELS: dict[str, str] = {
    "mbu": "gpu",
    "kv_read_efficiency": "gpu",
    "mfu_prefill": "gpu",
    "moe_prefill_efficiency": "gpu",
    "mfu_decode": "gpu",
    "mfu_attention": "gpu",
    "allreduce_latency_s": "gpu",
    "kernel_overhead_s": "gpu+engine",
    "seq_overhead_s": "gpu",
    "step_overhead_s": "gpu",
    "api_overhead_s": "engine",
    "schedule_wait_steps": "engine",
    "first_wave_stall_s": "engine",
    "fp4_weight_efficiency": "gpu",
    "fp4_grouped_weight_efficiency": "gpu",
    "moe_weight_efficiency": "gpu",
    "ep_weight_efficiency": "global",
}


#: Fitted after the others, on their fitted values: the first wave's warm-up stall enters the
#: mean TTFT only. Fitted jointly, it freed the decode constants the mean TTFT had held and
#: they chased DeepSeek-R1's AMD TPOT: held out, Llama's AMD TPOT error went 16% → 49%
#: (MI300X all-reduce latency 12 → 83 µs).
SECOND_STAGE = frozenset({"first_wave_stall_s"})


def _generation(name: str) -> str | None:
    """A GPU type's generation (``GPU.generation``, read from the catalog's ``arch``): a type
    without rows takes its generation's fitted constants, else its vendor's (geometric mean)."""
    from .catalog import gpu as find_gpu

    try:
        return find_gpu(name).generation
    except PdtpError:  # a GPU the catalog lacks has no generation to share
        return None


_FORMAT_CONSTANTS = {
    "fp8_weight_efficiency",
    "fp4_weight_efficiency",
    "int4_weight_efficiency",
    "fp4_grouped_weight_efficiency",
}
#: Fitted per GPU type without a prior: a relative rate that only MoE rows inform, which would
#: otherwise trade against a dense constant it multiplies. DeepSeek-R1's prompt GEMMs run
#: 3-4x slower per FLOP than Llama-70B's on the same GPU; tied to a vendor value (as
#: mfu_prefill is), the fit split that slowdown between the two and a dense model held out
#: inherited half of it. A type without MoE rows takes its generation's value, else the
#: geometric mean of its vendor's measured types, else every measured type's, else 1.
_UNTIED = {"moe_prefill_efficiency"}
_VENDOR_GROUP = {"AMD": "amd", "NVIDIA": "nvidia"}
#: Prior weights: how strongly a GPU type's constant is tied to its vendor's, and a vendor's
#: to the shared one (residual weight per unit of log ratio); engine factors are tied to 1.
PRIOR_GPU = 0.5
PRIOR_VENDOR = 0.5
PRIOR_ENGINE = 0.2
#: Physical anchors of constants that a fit can trade for another term where the rows do
#: not tell them apart: each vendor's value is tied to its anchor (weight
#: :data:`PRIOR_ANCHOR`), not to a value shared with the other vendor, so a held-out split
#: without identifying rows falls back to the anchor and not to another model's fit.
#:
#: ``allreduce_latency_s``: the latency α of a small (decode-sized, tens to hundreds of KB)
#: all-reduce inside one node, which only rows of one model at TP 1 and TP > 1 tell from
#: the per-kernel cost (both are paid per layer): NVLink/NVSwitch, NCCL NVLS and vLLM's
#: one-shot custom all-reduce under CUDA graphs, about 6 µs (NVIDIA/nccl#1259: 6 µs on
#: 2 × H100 at 128 B–64 KB); xGMI on MI300X-class nodes (fully connected, 64 GB/s per link
#: pair), vLLM's custom all-reduce / quick all-reduce on ROCm, about 10 µs. Tied to a value
#: shared by both vendors, a fit without Llama-3.3-70B (the one model measured at TP 1 and
#: TP 8 on the same GPUs) put 23-36 µs there from DeepSeek-R1's TP 8 rows and Qwen3-32B's
#: TP 2-8 rows, and Llama held out on NVIDIA was predicted at TPOT +25%.
ANCHORS: dict[str, dict[str, float]] = {
    "allreduce_latency_s": {"NVIDIA": 6e-6, "AMD": 10e-6},
    "mbu": {"NVIDIA": 0.9, "AMD": 0.8},
}
PRIOR_ANCHOR = 2.0
#: Anchored constants whose GPU types are tied to their vendor's value as strongly as the
#: vendor's to its anchor (a property of the vendor's link and collective library, not of
#: one GPU type's rows); the others keep :data:`PRIOR_GPU`.
ANCHOR_TIES_GPUS = frozenset({"allreduce_latency_s"})


def _gpu_prior_weight(name: str) -> float:
    return PRIOR_ANCHOR if name in ANCHOR_TIES_GPUS else PRIOR_GPU


@dataclass
class Table:
    """Fitted constants per GPU type and engine, and where each came from."""

    values: dict[tuple[str, str], float]
    measured_gpus: tuple[str, ...]
    complete: bool

    def constants(self, gpu: GPU, engine: str, release: str = "") -> Constants:
        """The constants of a GPU type and engine: its own fitted values, else its
        generation's, else its vendor's (geometric means), else the generic ones; an engine
        ``release`` (``"0.5.9"``) applies its measured release range's factors
        (:data:`pdtp.constants.RELEASE_CONSTANTS`), none when it has no measured data
        (:meth:`release_note` says which)."""
        out: dict[str, float] = {}
        for name, level in TABLE_LEVELS.items():
            value = self._value(name, level, gpu, engine)
            if value is not None:
                if name in RELEASE_CONSTANTS:
                    value *= self._release_factor(name, engine, release)
                out[name] = value
        return GENERIC.replace(**out)

    def releases(self, engine: str) -> list[str]:
        """The engine releases this table has measured rows of, oldest first."""
        prefix = f"@{engine}/"
        found = {g[len(prefix) :] for (_, g) in self.values if g.startswith(prefix)}
        return sorted(found, key=release_key)

    def release_note(self, engine: str, release: str) -> str:
        """Which measured release range ``release`` takes its constants from, or that it has
        none."""
        measured = self.releases(engine)
        chosen = release_range(release, measured)
        if not release:
            return f"{engine}: release not given: the unrecorded releases of the baseline rows"
        if not chosen:
            return (
                f"{engine} {release}: no measured data for this release or an older measured "
                f"one (measured: {', '.join(measured) or 'none'}): the baseline rows' constants"
            )
        if chosen == release:
            return f"{engine} {release}: fitted on its own rows"
        return f"{engine} {release}: no rows of its own: the range from {chosen} (measured)"

    def _release_factor(self, name: str, engine: str, release: str) -> float:
        chosen = release_range(release, self.releases(engine))
        return self.values.get((name, _release_group(engine, chosen)), 1.0) if chosen else 1.0

    def source(self, gpu: GPU) -> str:
        if gpu.name in self.measured_gpus:
            return "fitted on its own rows"
        gen = gpu.generation
        same = [g for g in self.measured_gpus if gen is not None and _generation(g) == gen]
        if same:
            return f"no rows: the {gen} generation's fit ({', '.join(same)})"
        return (
            f"no rows: the {gpu.vendor} types' shared values (the prior each measured type "
            f"is shrunk towards)"
        )

    def _per_gpu(self, name: str, gpu: GPU) -> float | None:
        if (name, gpu.name) in self.values:
            return self.values[(name, gpu.name)]
        gen = gpu.generation
        same = [
            self.values[(name, g)]
            for g in self.measured_gpus
            if gen is not None and _generation(g) == gen and (name, g) in self.values
        ]
        if same:
            return math.exp(sum(math.log(v) for v in same) / len(same))
        if name in _FORMAT_CONSTANTS:
            return None  # a weight format's kernels on other hardware say nothing here
        if name in _UNTIED:
            from .catalog import gpu as find_gpu

            measured = [g for g in self.measured_gpus if (name, g) in self.values]
            own = [g for g in measured if find_gpu(g).vendor == gpu.vendor]
            pool = own or measured
            if not pool:
                return None
            return math.exp(sum(math.log(self.values[(name, g)]) for g in pool) / len(pool))
        vendor = _VENDOR_GROUP[gpu.vendor]
        if name in ANCHORS:
            return self.values.get((name, vendor), _anchor_value(name, vendor))
        return self.values.get((name, vendor), self.values.get((name, "*")))

    def _value(self, name: str, level: str, gpu: GPU, engine: str) -> float | None:
        if level == "global":
            return self.values.get((name, "*"))
        if level == "engine":
            return self.values.get((name, engine), self.values.get((name, "vllm")))
        v = self._per_gpu(name, gpu)
        if v is not None and level == "gpu+engine" and engine != "vllm":
            v *= self.values.get((name, _engine_group(engine, gpu.vendor)), 1.0)
        return v


#: Rows an engine release needs to start a release range of its own; a release with fewer
#: takes the range of the newest better-measured release before it (a factor fitted on two
#: rows fits their noise).
MIN_RELEASE_ROWS = 10


def _release_ranges(points: Sequence[PerfPoint]) -> dict[str, list[str]]:
    """Per engine, the releases with at least :data:`MIN_RELEASE_ROWS` rows."""
    counts = Counter((p.engine, p.engine_release) for p in points if p.engine_release)
    out: dict[str, list[str]] = {}
    for (engine, release), n in counts.items():
        if n >= MIN_RELEASE_ROWS:
            out.setdefault(engine, []).append(release)
    return out


def _table_assignments(
    p: PerfPoint, levels: Mapping[str, str], ranges: Mapping[str, Sequence[str]] | None = None
) -> list[tuple[str, str]]:
    release = release_range(p.engine_release, (ranges or {}).get(p.engine, ()))
    out: list[tuple[str, str]] = []
    for name, level in levels.items():
        if not _informed(name, [p]):
            continue
        if level == "global":
            out.append((name, "*"))
        elif level == "engine":
            out.append((name, p.engine))
            if name in RELEASE_CONSTANTS and release:
                out.append((name, _release_group(p.engine, release)))
        else:
            out.append((name, p.gpu.name))
            if level == "gpu+engine" and p.engine != "vllm":
                out.append((name, _engine_group(p.engine, p.gpu.vendor)))
            if name in RELEASE_CONSTANTS and release:
                out.append((name, _release_group(p.engine, release)))
    return out


def _engine_group(engine: str, vendor: str) -> str:
    """The group of an engine's multiplier on a ``gpu+engine`` constant, one per GPU vendor
    (``×sglang/amd``): an engine runs other kernels on each vendor's stack (SGLang: AITER and
    Triton on ROCm, FlashInfer and DeepGEMM on CUDA). One factor for both had to split
    DeepSeek-R1's fixed step cost, which per layer is 3.4-3.9x Llama-3.3-70B's on
    MI300X/MI325X and 1.8-1.9x on H200/B200 (TPOT at 4 clients less the weights streamed),
    and held out it carried AMD's excess to Llama's vLLM kernels."""
    return f"×{engine}/{_VENDOR_GROUP[vendor]}"


def _anchor_group(vendor_group: str) -> str:
    """The group of a vendor's physical anchor (``=nvidia``): fixed in the fit."""
    return f"={vendor_group}"


def _anchor_value(name: str, vendor_group: str) -> float:
    by_group = {_VENDOR_GROUP[v]: x for v, x in ANCHORS[name].items()}
    return by_group[vendor_group]


def _release_group(engine: str, release: str) -> str:
    """The group of a per-release multiplier: ``@sglang/0.5.9``."""
    return f"@{engine}/{release}"


def fit_table(
    points: Sequence[PerfPoint],
    *,
    levels: Mapping[str, str] | None = None,
    time_limit_s: float | None = None,
    max_iterations: int = 100,
) -> Table:
    """Fit constants per GPU type and engine at once (:data:`TABLE_LEVELS` says how each is
    shared), starting from the generic constants. Per-GPU constants are shrunk towards their
    vendor's shared value and those towards one shared by all (priors of weight
    :data:`PRIOR_GPU`, :data:`PRIOR_VENDOR`), so a type with few rows keeps a typical value
    and a type with none takes its vendor's. Two stages: everything but :data:`SECOND_STAGE`
    on the steady request's TTFT (the median where a row has one), then the first wave's
    stall on the mean TTFT with the rest held."""
    lv = dict(TABLE_LEVELS if levels is None else levels)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    ranges = _release_ranges(points)
    first = {name: level for name, level in lv.items() if name not in SECOND_STAGE}
    assignments = [_table_assignments(p, first, ranges) for p in points]
    used = {key for assigned in assignments for key in assigned}
    priors: list[tuple[_Key, _Key | None, float]] = []
    start: dict[_Key, float] = {}
    vendors = {p.gpu.name: _VENDOR_GROUP[p.gpu.vendor] for p in points}
    for name, group in sorted(used):
        if group.startswith(("×", "@")):
            priors.append(((name, group), None, PRIOR_ENGINE))
            start[(name, group)] = 1.0
            continue
        start[(name, group)] = float(getattr(GENERIC, name))
        if name in _UNTIED:
            continue
        if group in vendors:
            vendor = (name, vendors[group])
            priors.append(((name, group), vendor, _gpu_prior_weight(name)))
            if vendor not in start:
                start[vendor] = float(getattr(GENERIC, name))
                if name in ANCHORS:
                    anchor = (name, _anchor_group(vendors[group]))
                    start[anchor] = _anchor_value(name, vendors[group])
                    priors.append((vendor, anchor, PRIOR_ANCHOR))
                    continue
                start[(name, "*")] = float(getattr(GENERIC, name))
                if name not in _FORMAT_CONSTANTS:
                    priors.append((vendor, (name, "*"), PRIOR_VENDOR))
    # Everything but the first wave's stall on the steady request's TTFT: the median where a
    # row has one (the mean elsewhere). The mean's first wave is the stall's, fitted next; on
    # the mean these constants took the stall in (SGLang api_overhead_s 0.22 s and 8 steps'
    # wait), and every steady request paid it.
    values, complete = _run_fit(
        points, lambda p: GENERIC, assignments, start, deadline, max_iterations, priors, "steady"
    )
    measured = tuple(sorted({p.gpu.name for p in points}))
    table = Table(values, measured, complete)
    second = [(name, level) for name, level in lv.items() if name in SECOND_STAGE]
    if not second:
        return table
    # The first wave's stall, on the constants fitted without it: what the mean TTFT holds
    # beyond the steady request and the modelled first wave.
    late = [_table_assignments(p, dict(second), ranges) for p in points]
    used2 = {key for assigned in late for key in assigned}
    start2 = {key: 1.0 if key[1].startswith("@") else 0.0 for key in used2}
    priors2 = [(key, None, PRIOR_ENGINE) for key in sorted(used2) if key[1].startswith("@")]
    stall, complete2 = _run_fit(
        points,
        lambda p: table.constants(p.gpu, p.engine, p.engine_release),
        late,
        start2,
        deadline,
        max_iterations,
        priors2,
    )
    return Table({**values, **stall}, measured, complete and complete2)
