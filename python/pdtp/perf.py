"""The performance model's Python face: per-side predictions and whole-configuration
estimates. The arithmetic runs in Rust (``src/perf.rs``); this module resolves names,
validates arguments and shapes results."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import _core
from ._validate import MAX_TP, optional_positive_int, positive_int, positive_number, public_api
from .connectors import NO_GPU_CONNECTOR, resolve_connector
from .constants import Constants, constants_for, constants_note
from .engine import engine_defaults
from .errors import InvalidArgumentError
from .layout import Layout
from .scenario import SEARCH_FIELDS, takes_scenario
from .violations import Violation, layout_rules, load_rules, pair_rules
from .workload import MAX_TOKENS, Workload, resolve_workload

if TYPE_CHECKING:
    from ._gpu import GPU
    from ._model import Model

from ._gpu import DEFAULT_GPU as DEFAULT_GPU  # re-exported: the planners' default GPU type
from .engine import DEFAULT_UTILIZATION as DEFAULT_UTILIZATION

# ---- inputs for the Rust core (built once per model / GPU, then cached) -------------------
# Each is a typed core value (`_core.ModelInputs`, `_core.GpuInputs`, `_core.ConstantInputs`):
# the binding layer converts the fields to the core's plain structs once, when it is built,
# and every core call takes the value as it is. The caches are keyed by the frozen Model /
# GPU / Constants value (equal values share one): a slot on the object itself would have to
# be skipped by pickling, `dataclasses.replace` and `asdict` alike.


_FORMAT_CODES = {"bf16": 0, "fp16": 0, "fp32": 0, "fp8": 1, "int8": 1, "fp4": 2, "int4": 3}


def weight_formats(model: Model) -> tuple[int, int]:
    """(dense, expert) weight-format codes of the Rust core: 0 16/32-bit, 1 8-bit, 2 fp4,
    3 int4. Checkpoints that quantize only the experts (gpt-oss MXFP4) keep the rest 16-bit;
    DeepSeek-V4's keep it FP8."""
    code = _FORMAT_CODES[model.weight_dtype]
    if model.quantized_scope == "experts" and model.num_experts:
        return 0, code
    if model.quantized_scope == "experts+fp8" and model.num_experts:
        return _FORMAT_CODES["fp8"], code  # DeepSeek-V4: FP8 block-scaled non-expert GEMMs
    return code, code


def dsa_inputs(model: Model) -> dict[str, float]:
    """The DSA sparse-attention inputs of the Rust core's step (``dsa_attention``): every MLA
    layer of a DSA model attends the ``index_topk`` latents its indexer picks; the groups with
    indexer keys are the layers that run an indexer (GLM-5.2's other layers reuse the last
    top-k). {} for models without DSA."""
    if not model.index_topk:
        return {}
    mla = [g for g in model.attention_groups if g.kind == "mla"]
    indexed = [g for g in mla if g.index_bytes]
    return {
        "sparse_topk": float(model.index_topk),
        "sparse_index_key_bytes": float(indexed[0].index_bytes),
        "sparse_index_flops_per_key": float(2 * model.index_heads * model.index_head_dim),
        "sparse_dsa_layers": float(sum(g.num_layers for g in mla)),
        "sparse_dsa_indexer_layers": float(sum(g.num_layers for g in indexed)),
    }


@lru_cache(maxsize=512)
def model_inputs(model: Model) -> _core.ModelInputs:
    dense_format, expert_format = weight_formats(model)
    # The input embedding is gathered row by row, never streamed (tied: it is the lm_head).
    input_embedding = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size
    unread = input_embedding * (
        2.0 if model.weight_bytes_per_param < 2 else model.weight_bytes_per_param
    )
    # Sliding-window and chunked layers as one windowed group (their layer-weighted window:
    # the models vLLM serves have one window size).
    windowed = [g for g in model.attention_groups if g.window and g.counts_layers]
    num_windowed = sum(g.num_layers for g in windowed)
    window = sum(g.window * g.num_layers for g in windowed) / num_windowed if windowed else 0.0
    kv_token_bytes = kv_sequence_bytes = 0.0
    sparse: dict[str, float] = {}
    if model.model_type == "deepseek_v4":
        from ._model_dsv4 import attention_reads, perf_kv, sparse_attention

        # Its decode attention: bytes and FLOPs of what the sparse kernels read.
        sparse = sparse_attention(model)

        # Page-sized caches (pdtp._model_dsv4): memory from vLLM's pages; a decode step's
        # attention reads the sliding window plus the top-k compressed latents per layer.
        kv_token_bytes, kv_sequence_bytes = perf_kv(model.attention_groups, model.kv_dtype_bytes)
        num_windowed, window = model.num_attention_layers, attention_reads(model)
    else:
        sparse = dsa_inputs(model)
    fields: dict[str, float] = {
        "num_layers": model.num_layers,
        "num_attention_layers": model.num_attention_layers,
        "num_moe_layers": model.num_moe_layers,
        "num_sliding_layers": float(num_windowed),
        "sliding_window": float(window),
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "is_mla": float(model.is_mla),
        "kv_lora_rank": model.kv_lora_rank,
        "qk_rope_head_dim": model.qk_rope_head_dim,
        "weight_bytes": float(model.weight_bytes),
        "expert_weight_bytes": float(model.weight_bytes) - float(model.dense_weight_bytes),
        "unread_weight_bytes": float(unread),
        "num_experts": model.num_experts,
        "experts_per_token": model.experts_per_token,
        "active_params": float(model.active_params - input_embedding),
        "kv_dtype_bytes": model.kv_dtype_bytes,
        "dense_format": float(dense_format),
        "expert_format": float(expert_format),
        "kv_token_bytes": kv_token_bytes,
        "kv_sequence_bytes": kv_sequence_bytes,
        **sparse,
    }
    return _core.ModelInputs(**fields)


def gemm_peak(gpu: GPU, weight_dtype: str) -> float:
    """The dense peak the linear layers' GEMMs run at: the weight dtype's own datapath where
    the GPU has one (fp8 on Hopper/CDNA3, fp4 on Blackwell/CDNA4); weight-only formats
    without one (int4 AWQ/GPTQ everywhere, fp4 on Hopper/CDNA3) dequantize to 16-bit."""
    if weight_dtype == "int4" or (weight_dtype == "fp4" and gpu.fp4_flops is None):
        return float(gpu.bf16_flops)
    return float(gpu.peak_flops(weight_dtype))


#: A GPU that does not say its scale-out network: one 400 Gb/s NIC per GPU (the HGX/DGX H100
#: and AMD Instinct reference builds, see gpus.json).
DEFAULT_SCALEOUT_BANDWIDTH = 50e9
DEFAULT_SCALEOUT_LATENCY = 10e-6


@lru_cache(maxsize=512)
def gpu_inputs(gpu: GPU, weight_dtype: str) -> _core.GpuInputs:
    fields: dict[str, float] = {
        "memory_bytes": float(gpu.memory_bytes),
        "hbm_bandwidth": float(gpu.hbm_bandwidth),
        "peak_flops": gemm_peak(gpu, weight_dtype),
        "bf16_flops": float(gpu.bf16_flops),
        "link_bandwidth": float(gpu.link_bandwidth),
        "scaleup_gpus": float(gpu.scaleup_domain),
        "scaleout_bandwidth": float(gpu.scaleout_bandwidth or DEFAULT_SCALEOUT_BANDWIDTH),
        "scaleout_latency": float(gpu.scaleout_latency or DEFAULT_SCALEOUT_LATENCY),
    }
    return _core.GpuInputs(**fields)


@lru_cache(maxsize=512)
def constant_inputs(c: Constants) -> _core.ConstantInputs:
    return _core.ConstantInputs(**{k: float(v) for k, v in c.to_dict().items()})


@dataclass(frozen=True)
class Context:
    """Resolved inputs of one prediction: the model, GPU, constants and memory share."""

    model: Model
    gpu: GPU
    constants: Constants
    gpu_memory_utilization: float

    @property
    def inputs(self) -> tuple[_core.ModelInputs, _core.GpuInputs, _core.ConstantInputs]:
        return (
            model_inputs(self.model),
            gpu_inputs(self.gpu, self.model.weight_dtype),
            constant_inputs(self.constants),
        )


def resolve_context(
    model: Any,
    gpu: Any,
    constants: Any = None,
    gpu_memory_utilization: Any = DEFAULT_UTILIZATION,
    release: str = "",
    engine: str = "vllm",
) -> Context:
    """``release`` (a vLLM version or engine image) picks the defaults of its measured
    release range (:func:`pdtp.constants.release_note`); ``engine`` whose constants
    (``"sglang"`` for an SGLang connector's instances: its scheduling as fitted)."""
    from ._model import Model
    from .catalog import gpu as find_gpu
    from .catalog import resolve_model

    m = model if isinstance(model, Model) else resolve_model(model)  # resolved once, above
    g = find_gpu(gpu)
    util = positive_number("gpu_memory_utilization", gpu_memory_utilization)
    if util > 1.0:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    return Context(m, g, constants_for(g.name, constants, engine, release), util)


# ---- per-side predictions -------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillPrediction:
    tp: int
    isl: int
    prefill_ms: float
    ttft_ms: float
    requests_per_s: float
    weights_fit: bool
    fits: bool
    kv_capacity_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecodePrediction:
    tp: int
    isl: int
    osl: int
    batch: int
    tpot_ms: float
    output_tokens_per_s: float
    max_batch: int
    weights_fit: bool
    kv_capacity_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@public_api
def predict_prefill(
    model: Any,
    *,
    gpu: Any = DEFAULT_GPU,
    tp: int,
    isl: int,
    constants: Any = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
) -> PrefillPrediction:
    """Prefill of one ``isl``-token request on one instance of ``tp`` GPUs (shorthand for
    the TP-only layout: ``tp=8`` is the layout ``tp8``, predicted as every layout is).

    >>> import pdtp
    >>> p = pdtp.predict_prefill("llama-3.1-70b", gpu="h100", tp=8, isl=2048)
    >>> 0 < p.ttft_ms < 2000 and p.requests_per_s > 1
    True
    """
    ctx = resolve_context(model, gpu, constants, gpu_memory_utilization)
    tp = positive_int("tp", tp, maximum=MAX_TP)
    isl = positive_int("isl", isl, maximum=MAX_TOKENS)
    m, g, c = ctx.inputs
    work = {"isl": float(isl), "osl": 1.0, "ttft_s": None, "tpot_s": None}
    sides = _core.layout_sides(m, g, c, (tp, 1, 1, False), work, ctx.gpu_memory_utilization)
    weights_ok, _, t, ttft, rps, *_, kv_tokens, fits = sides
    return PrefillPrediction(
        tp, isl, t * 1e3, ttft * 1e3, rps, weights_ok, fits and weights_ok, int(kv_tokens)
    )


@public_api
def predict_decode(
    model: Any,
    *,
    gpu: Any = DEFAULT_GPU,
    tp: int,
    isl: int,
    osl: int,
    batch: int,
    constants: Any = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
) -> DecodePrediction:
    """One decode step at ``batch`` sequences of mean context ``isl + osl/2`` tokens.
    ``max_batch`` is the largest batch whose full sequences (isl + osl) fit in KV memory.
    ``tp=8`` is shorthand for the TP-only layout ``tp8``.

    >>> import pdtp
    >>> d = pdtp.predict_decode("llama-3.1-70b", gpu="h100", tp=8, isl=2048, osl=512, batch=32)
    >>> d.tpot_ms > 0 and d.max_batch > 32
    True
    """
    ctx = resolve_context(model, gpu, constants, gpu_memory_utilization)
    tp = positive_int("tp", tp, maximum=MAX_TP)
    isl = positive_int("isl", isl, maximum=MAX_TOKENS)
    osl = positive_int("osl", osl, maximum=MAX_TOKENS)
    batch = positive_int("batch", batch, maximum=1 << 24)
    m, g, c = ctx.inputs
    layout = (tp, 1, 1, False)
    work = {"isl": float(isl), "osl": float(osl), "ttft_s": None, "tpot_s": None}
    sides = _core.layout_sides(m, g, c, layout, work, ctx.gpu_memory_utilization)
    weights_ok, max_batch, kv_tokens = sides[0], sides[6], sides[9]
    context = float(isl) + float(osl) / 2.0
    step = _core.step_time(m, g, c, layout, float(batch), float(batch) * context, 0.0, 0.0)
    return DecodePrediction(
        tp, isl, osl, batch, step * 1e3, batch / step, max_batch, weights_ok, int(kv_tokens)
    )


# ---- whole configurations -------------------------------------------------------------------


@dataclass(frozen=True)
class SidePoint:
    """One side's operating point as the core computes it (also the solver's table row).
    ``latency_ms`` is TTFT for prefill, TPOT for decode and aggregated instances; layout
    points also carry the layout, an aggregated instance's TTFT and concurrency, and the
    weight bytes one GPU holds."""

    tp: int
    loads: bool
    fits_weights: bool
    fits_kv: bool
    latency_ms: float
    meets_slo: bool
    batch: int
    max_batch: int
    requests_per_s: float
    units: int
    layout: Layout | None = None
    ttft_ms: float | None = None
    concurrency: int = 0
    weight_bytes_per_gpu: float | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> SidePoint:
        tp, loads, fw, fk, lat, slo, batch, max_batch, rps, units = row
        return cls(tp, loads, fw, fk, lat * 1e3, slo, batch, max_batch, rps, units)

    @property
    def name(self) -> str:
        """``tp=4`` (TP-only points, today's wording) or the layout (``tp2dp4ep``)."""
        if self.layout is None or self.layout.is_tp_only:
            return f"tp={self.tp}"
        return str(self.layout)


def side_point(ctx: Context, workload: Workload, tp: int, *, prefill: bool) -> SidePoint:
    m, g, c = ctx.inputs
    row = _core.side_option(m, g, c, workload._core_dict(), tp, prefill, ctx.gpu_memory_utilization)
    return SidePoint.from_row(row)


def layout_point(ctx: Context, workload: Workload, layout: Layout, role: str) -> SidePoint:
    """One instance kind's point for any layout and role (``prefill``, ``decode`` or
    ``aggregated``: vLLM serving both phases at the highest concurrency meeting the SLOs)."""
    from .layout import layout_model

    m, g, c = ctx.inputs
    row, ttft, concurrency, weight_bytes = _core.layout_option(
        m,
        layout_model(ctx.model),
        g,
        c,
        workload._core_dict(),
        layout.core,
        role,
        ctx.gpu_memory_utilization,
        float(engine_defaults("vllm", ctx.gpu)["max_num_batched_tokens"]),
    )
    base = SidePoint.from_row(row)
    return replace(
        base,
        layout=layout,
        ttft_ms=ttft * 1e3,
        concurrency=concurrency,
        weight_bytes_per_gpu=weight_bytes,
    )


def memory_fits(
    ctx: Context, workload: Workload, tp: int | Layout, side: str
) -> tuple[SidePoint, bool]:
    """One side's point and whether its weights and one sequence's KV cache fit."""
    if isinstance(tp, Layout):
        point = layout_point(ctx, workload, tp, side)
    else:
        point = side_point(ctx, workload, tp, prefill=side == "prefill")
    return point, point.fits_weights and point.fits_kv


def side_violations(
    ctx: Context, workload: Workload, point: SidePoint, side: str
) -> list[Violation]:
    """Memory and SLO violations of one side (pdtp's own limits: vLLM has no message)."""
    out: list[Violation] = []
    gpu, model, tp = ctx.gpu, ctx.model, point.tp
    gib = float(1 << 30)  # GPU memory is sold in GiB ("80 GB" H100 = 80 GiB)
    per_gpu_gib = (
        model.weight_bytes / tp
        if point.weight_bytes_per_gpu is None
        else point.weight_bytes_per_gpu
    ) / gib
    usable_gib = ctx.gpu_memory_utilization * gpu.memory_bytes / gib
    what = f"{side}_tp={tp}" if point.name.startswith("tp=") else f"{side} {point.name}"
    if not point.fits_weights:
        out.append(
            Violation(
                "weights_do_not_fit",
                side,
                f"{what}: {per_gpu_gib:.1f} GiB of {model.weight_dtype} weights per GPU "
                f"plus the {ctx.constants.reserve_bytes / gib:.1f} GiB runtime reserve exceed "
                f"{usable_gib:.1f} GiB ({ctx.gpu_memory_utilization:g} of {gpu.name}'s "
                f"{gpu.memory_bytes / gib:.0f} GiB)",
                f"raise {side}_tp, use fp8 weights, or a GPU with more memory",
            )
        )
    elif not point.fits_kv:
        need = workload.isl if side == "prefill" else workload.isl + workload.osl
        out.append(
            Violation(
                "kv_cache_does_not_fit",
                side,
                f"{what}: the weights fit but no room is left for the KV cache of one "
                f"{need}-token sequence",
                f"raise {side}_tp or gpu_memory_utilization, or use kv_dtype='fp8'",
            )
        )
    elif not point.meets_slo:
        if side == "prefill":
            out.append(
                Violation(
                    "ttft_slo",
                    side,
                    f"{what}: predicted TTFT {point.latency_ms:.0f} ms exceeds "
                    f"ttft_ms={workload.ttft_ms:g}",
                    "raise prefill_tp, relax ttft_ms, or shorten the prompts",
                )
            )
        elif side == "aggregated":
            out.append(
                Violation(
                    "slo",
                    side,
                    f"{what}: even one client at a time misses the SLOs (TTFT "
                    f"{point.ttft_ms or 0:.0f} ms vs ttft_ms={workload.ttft_ms}, TPOT "
                    f"{point.latency_ms:.1f} ms vs tpot_ms={workload.tpot_ms})",
                    "use more GPUs per instance, relax the SLOs, or disaggregate",
                )
            )
        else:
            out.append(
                Violation(
                    "tpot_slo",
                    side,
                    f"{what}: predicted TPOT {point.latency_ms:.1f} ms at batch 1 exceeds "
                    f"tpot_ms={workload.tpot_ms:g}",
                    "raise decode_tp or relax tpot_ms",
                )
            )
    return out


@dataclass(frozen=True)
class Estimate:
    """Predicted performance of one whole configuration. ``requests_per_s`` is
    ``min(prefill_capacity_rps, decode_capacity_rps)`` — the rate both sides sustain; for an
    aggregated configuration (``serving="agg"``) both capacities are the aggregated instances'.
    ``prefill_tp``/``decode_tp`` are the TP sizes of the layouts (``prefill_layout``,
    ``decode_layout``; an aggregated configuration's layout on both). ``constants_note``
    says which engine release's constants predicted it, or that the release has no measured
    data and the baseline did."""

    model: str
    gpu: str
    connector: str
    prefill_tp: int
    prefill_instances: int
    decode_tp: int
    decode_instances: int
    gpus: int
    requests_per_s: float
    output_tokens_per_s: float
    ttft_ms: float
    tpot_ms: float
    decode_batch: int
    prefill_capacity_rps: float
    decode_capacity_rps: float
    valid: bool
    violations: tuple[Violation, ...]
    serving: str = "disagg"
    prefill_layout: str = ""
    decode_layout: str = ""
    constants_note: str = ""
    #: The network each collective crosses, as the model prices it: ``(side, collective,
    #: network)`` with side ``prefill``/``decode``/``aggregated`` (or ``pd`` for the KV
    #: transfer between instances), collective ``tp_allreduce``, ``ep_alltoall``,
    #: ``dp_allgather``, ``pp_send`` or ``kv_transfer``, and network ``nvlink``/``xgmi``
    #: (inside one scale-up domain) or ``scale-out`` (the GPU type's RDMA network).
    networks: tuple[tuple[str, str, str], ...] = ()

    @property
    def bottleneck(self) -> str:
        if self.serving == "agg":
            return "aggregated"
        return bottleneck(self.prefill_capacity_rps, self.decode_capacity_rps)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "violations"}
        d["violations"] = [v.to_dict() for v in self.violations]
        d["bottleneck"] = self.bottleneck
        return d


def collective_networks(ctx: Context, side: str, layout: Layout) -> list[tuple[str, str, str]]:
    """``(side, collective, network)`` for each collective one step of ``layout`` runs, on the
    link the performance model prices it at (``src/perf``' ``collective_links``)."""
    m, g, _ = ctx.inputs
    scaleup = "xgmi" if ctx.gpu.vendor == "AMD" else "nvlink"
    return [
        (side, name, "scale-out" if out else scaleup)
        for name, out in _core.collective_links(m, g, layout.core)
    ]


def bottleneck(prefill_rps: float, decode_rps: float, tolerance: float = 0.02) -> str:
    """Which side limits throughput; within ``tolerance`` of each other is ``balanced``."""
    hi = max(prefill_rps, decode_rps)
    if hi <= 0 or abs(prefill_rps - decode_rps) <= tolerance * hi:
        return "balanced"
    return "prefill" if prefill_rps < decode_rps else "decode"


@takes_scenario(ignores=SEARCH_FIELDS)
@public_api
def evaluate(
    model: Any,
    *,
    gpu: Any = DEFAULT_GPU,
    workload: Any = None,
    prefill_tp: Any = None,
    prefill_instances: int | None = None,
    decode_tp: Any = None,
    decode_instances: int | None = None,
    connector: str = NO_GPU_CONNECTOR,
    max_acks: int | None = None,
    constants: Any = None,
    gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    vllm_version: str | None = None,
    aggregated: Any = None,
    aggregated_instances: int | None = None,
) -> Estimate:
    """Predict a whole configuration: ``prefill_instances`` × ``prefill_tp`` +
    ``decode_instances`` × ``decode_tp`` (each a TP size or a layout such as ``"tp2dp4ep"``
    / :class:`pdtp.Layout`), or ``aggregated_instances`` × ``aggregated`` (instances doing
    both phases: capacity at the highest concurrency meeting the SLOs, no KV connector).
    Invalid configurations are reported in ``Estimate.valid`` / ``violations`` (rules,
    memory, SLOs), not raised; the rules are those of vLLM ``vllm_version`` (default: the
    newest release pdtp knows), and so are the performance constants where that release has
    measured data (``Estimate.constants_note`` says which).

    >>> import pdtp
    >>> e = pdtp.evaluate("llama-3.1-70b", gpu="h100", prefill_tp=4, prefill_instances=2,
    ...                   decode_tp=8, decode_instances=2, connector="nixl")
    >>> e.valid, e.gpus
    (True, 24)
    """
    conn = resolve_connector(connector, vllm_version)
    # The connector's engine and release pick the constants (SGLang's for sglang-*).
    ctx = resolve_context(
        model, gpu, constants, gpu_memory_utilization, conn.vllm_version, conn.engine
    )
    note = constants_note(constants, conn.engine, conn.vllm_version)
    w = resolve_workload(workload)
    acks = optional_positive_int("max_acks", max_acks)
    if aggregated is not None:
        if any(x is not None for x in (prefill_tp, prefill_instances, decode_tp, decode_instances)):
            raise InvalidArgumentError(
                "give aggregated= and aggregated_instances= (instances doing both phases) or "
                "the prefill_*/decode_* arguments (a P/D split), not both"
            )
        layout = Layout.of(aggregated, "aggregated")
        n = positive_int("aggregated_instances", aggregated_instances, maximum=1 << 24)
        point = layout_point(ctx, w, layout, "aggregated")
        violations = [
            *load_rules(ctx.model, layout, "aggregated", conn.key),
            *side_violations(ctx, w, point, "aggregated"),
        ]
        cap = n * point.requests_per_s
        return Estimate(
            model=ctx.model.name,
            gpu=ctx.gpu.name,
            connector=conn.name,
            prefill_tp=layout.tp,
            prefill_instances=n,
            decode_tp=layout.tp,
            decode_instances=n,
            gpus=layout.gpus * n,
            requests_per_s=cap,
            output_tokens_per_s=cap * w.osl,
            ttft_ms=point.ttft_ms or 0.0,
            tpot_ms=point.latency_ms,
            decode_batch=point.batch,
            prefill_capacity_rps=cap,
            decode_capacity_rps=cap,
            valid=not violations,
            violations=tuple(violations),
            serving="agg",
            prefill_layout=str(layout),
            decode_layout=str(layout),
            constants_note=note,
            networks=tuple(collective_networks(ctx, "aggregated", layout)),
        )
    missing = [
        name
        for name, v in (
            ("prefill_tp", prefill_tp),
            ("prefill_instances", prefill_instances),
            ("decode_tp", decode_tp),
            ("decode_instances", decode_instances),
        )
        if v is None
    ]
    if missing:
        raise InvalidArgumentError(
            f"evaluate needs {', '.join(missing)} (a P/D split), or aggregated= and "
            "aggregated_instances="
        )
    pl, dl = Layout.of(prefill_tp, "prefill_tp"), Layout.of(decode_tp, "decode_tp")
    np_ = positive_int("prefill_instances", prefill_instances, maximum=1 << 24)
    nd = positive_int("decode_instances", decode_instances, maximum=1 << 24)
    if pl.is_tp_only and dl.is_tp_only:
        rule_violations, _ = pair_rules(ctx.model, pl.tp, dl.tp, conn.key, acks)
        pp = side_point(ctx, w, pl.tp, prefill=True)
        dp = side_point(ctx, w, dl.tp, prefill=False)
    else:
        rule_violations, _ = layout_rules(ctx.model, pl, dl, conn.key, acks)
        pp = layout_point(ctx, w, pl, "prefill")
        dp = layout_point(ctx, w, dl, "decode")
    violations = [
        *rule_violations,
        *side_violations(ctx, w, pp, "prefill"),
        *side_violations(ctx, w, dp, "decode"),
    ]
    prefill_cap = np_ * pp.requests_per_s if pp.fits_weights and pp.fits_kv else 0.0
    decode_cap = nd * dp.requests_per_s
    rps = min(prefill_cap, decode_cap)
    return Estimate(
        model=ctx.model.name,
        gpu=ctx.gpu.name,
        connector=conn.name,
        prefill_tp=pl.tp,
        prefill_instances=np_,
        decode_tp=dl.tp,
        decode_instances=nd,
        gpus=pl.gpus * np_ + dl.gpus * nd,
        requests_per_s=rps,
        output_tokens_per_s=rps * w.osl,
        ttft_ms=pp.latency_ms,
        tpot_ms=dp.latency_ms,
        decode_batch=dp.batch,
        prefill_capacity_rps=prefill_cap,
        decode_capacity_rps=decode_cap,
        valid=not violations,
        violations=tuple(violations),
        prefill_layout=str(pl),
        decode_layout=str(dl),
        constants_note=note,
        networks=(
            *collective_networks(ctx, "prefill", pl),
            *collective_networks(ctx, "decode", dl),
            # Priced at the constants' kv_transfer_bandwidth: one RDMA NIC per prefill rank.
            ("pd", "kv_transfer", "scale-out"),
        ),
    )


# ---- aggregated serving -----------------------------------------------------------------------


@dataclass(frozen=True)
class ServingEstimate:
    """Predicted aggregated serving of one instance under a closed loop of ``concurrency``
    clients (each sends its next request when the last finishes, as ``vllm bench serve
    --max-concurrency`` does).

    ``ttft_ms`` is the mean over the run's ``num_prompts`` requests, including the first
    wave, which arrives all at once; ``ttft_median_ms`` is a steady-state request's.
    ``batch`` is the mean number of sequences decoding at once; ``kv_limited`` says the KV
    cache (or ``max_num_seqs``) capped it below the clients, who then queue.
    ``constants_note`` says which engine release's constants predicted it, or that the
    release has no measured data and the baseline did."""

    model: str
    gpu: str
    engine: str
    tp: int
    pp: int
    dp: int
    ep: int
    gpus: int
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    ttft_median_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    requests_per_s: float
    batch: float
    max_batch: float
    kv_limited: bool
    constants_note: str = ""

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus

    @property
    def tokens_per_s_per_user(self) -> float:
        """Interactivity: output tokens per second one client sees while decoding."""
        return 1e3 / self.tpot_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def serving_layout(
    tp: int, pp: int, dp: int, ep: int, dp_attention: bool
) -> tuple[int, int, int, bool]:
    """``(tp, pp, dp, ep)`` for the core from the public arguments, validated: ``ep`` is 1 or
    the expert-parallel size, which vLLM and SGLang make all tp × dp ranks; SGLang-style
    ``dp_attention`` runs one attention rank per GPU of the ``tp`` group."""
    if dp_attention:
        if dp != 1:
            raise InvalidArgumentError(
                "dp_attention=True spreads attention over the tp GPUs (SGLang's "
                "--enable-dp-attention); use it with dp=1, or give dp without it"
            )
        tp, dp = 1, tp
    ranks = tp * dp
    if ep not in (1, ranks):
        raise InvalidArgumentError(
            f"ep must be 1 or the expert-parallel size tp × dp = {ranks} (vLLM's "
            f"--enable-expert-parallel spans every rank), got {ep}"
        )
    return (tp, pp, dp, ep > 1)


@public_api
def predict_serving(
    model: Any,
    *,
    gpu: Any = DEFAULT_GPU,
    tp: int,
    isl: int,
    osl: int,
    concurrency: int,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    ep: int = 1,
    dp_attention: bool = False,
    engine: str = "vllm",
    pp: int = 1,
    dp: int = 1,
    num_prompts: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float | None = None,
    constants: Any = None,
    release: str = "",
    scheduler_recv_interval: int = 1,
) -> ServingEstimate:
    """Aggregated serving (prefill and decode on the same GPUs) of one instance at a fixed
    concurrency: TTFT, TPOT and throughput as a benchmark such as ``vllm bench serve
    --max-concurrency`` measures them.

    ``isl``/``osl`` are mean prompt and output lengths. The engine decides how prompts share
    the GPUs with decoding: vLLM mixes chunks of up to ``max_num_batched_tokens`` into decode
    steps, SGLang pauses decoding for separate prefill batches. ``num_prompts`` is the run's
    request count (default 10 × concurrency, as InferenceMAX runs): its first ``concurrency``
    prompts arrive at once. Engine settings default to the engine's own defaults on this GPU.
    Layouts: ``tp`` GPUs per data-parallel rank, ``dp`` ranks (``dp_attention=True``: SGLang's
    DP attention over the tp GPUs), ``ep`` = 1 or tp × dp, ``pp`` stages. ``release`` (the
    engine's version or image, ``"lmsysorg/sglang:v0.5.9-cu130"``) picks the constants of
    its measured release range; ``ServingEstimate.constants_note`` says which, or that it has
    no measured data (the baseline; also when no release is given).
    ``scheduler_recv_interval`` is SGLang's ``--scheduler-recv-interval`` (decode steps between
    the scheduler's polls for new requests; 1, every step, is both engines' default): a steady
    prompt waits ``(interval − 1) / 2`` decode steps more for its poll, in the median TTFT and
    the mean; the first wave, reaching an idle engine, does not.

    >>> import pdtp
    >>> s = pdtp.predict_serving("llama-3.3-70b", gpu="h200", tp=8, isl=1024, osl=1024,
    ...                          concurrency=32, weight_dtype="fp8", kv_dtype="fp8")
    >>> 5 < s.tpot_ms < 30 and s.ttft_ms > 0 and s.output_tokens_per_s > 1000
    True
    """
    from ._validate import flag
    from .catalog import gpu as find_gpu
    from .catalog import resolve_model
    from .constants import check_engine

    eng = check_engine(engine)
    m = resolve_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    g = find_gpu(gpu)
    tp = positive_int("tp", tp, maximum=MAX_TP)
    pp = positive_int("pp", pp, maximum=MAX_TP)
    dp = positive_int("dp", dp, maximum=MAX_TP)
    ep = positive_int("ep", ep, maximum=MAX_TP * MAX_TP)
    isl = positive_int("isl", isl, maximum=MAX_TOKENS)
    osl = positive_int("osl", osl, maximum=MAX_TOKENS)
    concurrency = positive_int("concurrency", concurrency, maximum=1 << 24)
    attention_dp = flag("dp_attention", dp_attention)
    layout = serving_layout(tp, pp, dp, ep, attention_dp)
    defaults = engine_defaults(eng, g, tp=tp, pp=pp, dp_attention=attention_dp, mla=m.is_mla)
    util = defaults["util"] if gpu_memory_utilization is None else gpu_memory_utilization
    util = positive_number("gpu_memory_utilization", util)
    if util > 1.0:
        raise InvalidArgumentError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    work: dict[str, float | str | None] = {
        "isl": float(isl),
        "osl": float(osl),
        "concurrency": float(concurrency),
        "num_prompts": float(
            10 * concurrency
            if num_prompts is None
            else positive_int("num_prompts", num_prompts, maximum=1 << 30)
        ),
        "max_num_seqs": float(
            defaults["max_num_seqs"]
            if max_num_seqs is None
            else positive_int("max_num_seqs", max_num_seqs, maximum=1 << 24)
        ),
        "max_num_batched_tokens": float(
            defaults["max_num_batched_tokens"]
            if max_num_batched_tokens is None
            else positive_int("max_num_batched_tokens", max_num_batched_tokens, maximum=1 << 30)
        ),
        "gpu_memory_utilization": util,
        "engine": eng,
        "scheduler_recv_interval": float(
            positive_int("scheduler_recv_interval", scheduler_recv_interval, maximum=1 << 20)
        ),
    }
    c = constants_for(g.name, constants, eng, release)
    point = _core.predict_serving(
        model_inputs(m), gpu_inputs(g, m.weight_dtype), constant_inputs(c), layout, work
    )
    gpus = layout[0] * layout[1] * layout[2]
    if point is None:
        # Suggest only what would change the answer: not fp8 to weights already fp8 or
        # smaller, not a higher fraction past what an engine allows.
        fixes = ["raise tp/pp"]
        if m.weight_dtype not in ("fp8", "int8", "fp4", "int4"):
            fixes.append("use fp8 weights")
        if util < 0.95:
            fixes.append("a higher gpu_memory_utilization")
        basis = ""
        if gpu_memory_utilization is None:  # say whose default the fraction is
            basis = (
                f" (SGLang's default mem_fraction_static on {g.name} at tp {tp})"
                if eng == "sglang"
                else " (vLLM's default gpu_memory_utilization)"
            )
        raise InvalidArgumentError(
            f"{m.name} ({m.weight_dtype}) on {gpus} {g.name} GPUs (tp={layout[0]}, pp={pp}, "
            f"dp={layout[2]}, ep={ep}): the weights and one {isl + osl}-token sequence's KV "
            f"cache do not fit in {util:g} of each GPU's memory{basis}; {', or '.join(fixes)}"
        )
    return ServingEstimate(
        model=m.name,
        gpu=g.name,
        engine=eng,
        tp=layout[0],
        pp=pp,
        dp=layout[2],
        ep=ep,
        gpus=gpus,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        ttft_ms=point.ttft * 1e3,
        ttft_median_ms=point.ttft_steady * 1e3,
        tpot_ms=point.tpot * 1e3,
        output_tokens_per_s=point.output_tokens_per_s,
        requests_per_s=point.requests_per_s,
        batch=point.batch,
        max_batch=point.max_batch,
        kv_limited=point.batch_limited,
        constants_note=constants_note(constants, eng, release),
    )
