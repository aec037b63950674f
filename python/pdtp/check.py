"""``pdtp.check``: is a (prefill TP, decode TP) pair valid for a model and connector?

Never raises for an invalid pair: it reports every violated rule (vLLM's exact message where
vLLM has one, in the order vLLM would hit them, so the first is the one vLLM raises), the
warnings worth knowing, and the nearest valid pairs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from . import _core
from ._validate import MAX_TP, flag, optional_positive_int, positive_int, public_api
from .connectors import (
    NO_GPU_VENDOR,
    Connector,
    default_connector,
    engine_connector,
    gpu_violation,
    resolve_connector,
)
from .engine import DEFAULT_UTILIZATION
from .errors import (
    ArgumentTypeError,
    InvalidArgumentError,
)
from .layout import Layout, is_hybrid, is_sliding, loadable_tp_sizes
from .violations import CheckWarning, Violation, layout_rules, load_rules, pair_rules

# Largest KV/attention head count accepted (far above any real model; keeps arithmetic small).
MAX_HEADS = 1 << 20
# How many alternatives `check` proposes by default, and at most (more than every pair of
# sizes up to MAX_TP would be a number the core cannot even hold).
DEFAULT_ALTERNATIVES = 5
MAX_ALTERNATIVES = 1 << 20


@dataclass(frozen=True)
class ModelShape:
    """The three numbers the connector rules need: attention heads, KV heads, and whether
    the model uses MLA (one latent per token that every rank holds whole)."""

    num_attention_heads: int
    num_kv_heads: int
    is_mla: bool = False
    name: str = "model"
    #: The model has Mamba-type layers (Mamba, Mamba-2, Gated DeltaNet, …) beside attention.
    hybrid: bool = False
    #: The model has sliding-window attention layers (Gemma 2/3, gpt-oss): a KV-cache group
    #: of their own under vLLM's hybrid KV-cache manager (chunked local attention, Llama 4,
    #: is not: vLLM turns the manager off for it).
    sliding_window: bool = False
    #: A Mamba-2 model's B/C groups (``n_groups``), where known: vLLM replicates one group
    #: over TP ranks, which NIXL's conv-state reads do not expect (None: unknown).
    mamba_groups: int | None = None

    def __post_init__(self) -> None:
        positive_int("num_attention_heads", self.num_attention_heads, maximum=MAX_HEADS)
        if self.mamba_groups is not None:
            positive_int("mamba_groups", self.mamba_groups, maximum=MAX_HEADS)
        positive_int("num_kv_heads", self.num_kv_heads, maximum=MAX_HEADS)
        flag("is_mla", self.is_mla)
        flag("hybrid", self.hybrid)
        flag("sliding_window", self.sliding_window)
        if not isinstance(self.name, str):
            raise ArgumentTypeError(f"name must be a string, got {type(self.name).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_shape(model: Any) -> ModelShape:
    """A :class:`ModelShape` from anything ``check`` accepts: a ``ModelShape``, a
    ``pdtp.Model`` (or any object with the three attributes), a catalog name or HF id, a HF
    config dict, JSON text, or a path to ``config.json`` or a model folder."""
    if isinstance(model, ModelShape):
        return model
    if all(hasattr(model, a) for a in ("num_attention_heads", "num_kv_heads", "is_mla")):
        return ModelShape(
            model.num_attention_heads,
            model.num_kv_heads,
            model.is_mla,
            str(getattr(model, "name", "model")),
            is_hybrid(model),
            is_sliding(model),
            getattr(model, "mamba_groups", None) or None,
        )
    from .catalog import resolve_model  # lazy: the catalog loads data files

    m = resolve_model(model)
    return ModelShape(
        m.num_attention_heads,
        m.num_kv_heads,
        m.is_mla,
        m.name,
        is_hybrid(m),
        is_sliding(m),
        m.mamba_groups or None,
    )


#: What :attr:`CheckResult.verdict` says happens, most benign first.
VERDICTS = ("valid", "valid_with_consequence", "invalid", "broken", "over_limit")


@dataclass(frozen=True)
class Verdict:
    """What happens when vLLM runs the pair. ``kind``:

    - ``valid``: it runs, nothing left over;
    - ``valid_with_consequence``: it runs; ``consequences`` name what to expect
      (``blocks_held_until_timeout``, ``round_robin_source``, ``ranks_idle``,
      ``needs_setting``) and the result's warnings say it in words;
    - ``invalid``: vLLM raises ``error`` with ``message``, reaching the user at ``when``
      (``model_load``, ``engine_start``, ``handshake``, ``first_transfer``); where vLLM
      only logs it (NIXL's background handshake), ``consequences`` say what becomes of the
      request (``request_failed``, ``recomputed_on_decode``);
    - ``broken``: vLLM raises nothing but it cannot work (``consequences``: ``hang``,
      ``leak``, ``wrong_bytes``); pdtp refuses it;
    - ``over_limit``: outside a limit pdtp was given (``max_acks``, memory).

    Taken from the first violation (the one vLLM meets first), else the warnings."""

    kind: str
    error: str | None = None
    message: str = ""
    when: str | None = None
    consequences: tuple[str, ...] = ()
    #: The engine that raises ``error``, as output names it (``"vLLM"``, ``"SGLang"``).
    engine: str = "vLLM"

    @property
    def ok(self) -> bool:
        """vLLM runs it (``valid`` or ``valid_with_consequence``)."""
        return self.kind in ("valid", "valid_with_consequence")

    def __str__(self) -> str:
        if self.kind == "invalid":
            return f"invalid: {self.engine} raises {self.error} at {self.when}: {self.message}"
        if self.consequences:
            return f"{self.kind}: {', '.join(self.consequences)}"
        return self.kind

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["consequences"] = list(self.consequences)
        return out


def verdict_of(violations: Any, warnings: Any, engine: str = "vLLM") -> Verdict:
    """The :class:`Verdict` of a rule report (violations in the engine's order, warnings) for
    ``engine`` (how output names it: ``"vLLM"``, ``"SGLang"``)."""
    if not violations:
        found = tuple(dict.fromkeys(w.consequence for w in warnings if w.consequence))
        return Verdict(
            "valid_with_consequence" if found else "valid", consequences=found, engine=engine
        )
    v = violations[0]
    if v.when == "planning" or (v.vllm_error is None and not v.consequence):
        return Verdict("over_limit", message=v.message or v.hint, when="planning", engine=engine)
    if v.vllm_error is None and not v.user_error:
        return Verdict(
            "broken",
            message=v.message or v.hint,
            when=v.when,
            consequences=(v.consequence,),
            engine=engine,
        )
    fate = (v.consequence,) if v.consequence else ()
    if v.user_error:
        return Verdict("invalid", v.user_error, v.user_message, v.when, fate, engine=engine)
    return Verdict("invalid", v.vllm_error, v.message or v.hint, v.when, fate, engine=engine)


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one P/D pair (or one aggregated instance, ``serving="agg"``).
    ``prefill_tp``/``decode_tp`` are the TP sizes of ``prefill_layout``/``decode_layout``
    (an aggregated instance's layout on both). ``alternatives`` are the nearest valid pairs:
    ``(prefill TP, decode TP)`` for TP-only pairs, ``(prefill layout, decode layout)`` names
    for other layouts (each side's pp/dp/ep kept, its TP size varied)."""

    model: str
    prefill_tp: int
    decode_tp: int
    connector: str
    violations: tuple[Violation, ...]
    warnings: tuple[CheckWarning, ...]
    alternatives: tuple[tuple[int, int] | tuple[str, str], ...] = field(default=())
    # With gpu=: whether each side's weights and KV cache fit in memory (None: not asked).
    gpu: str | None = None
    prefill_fits: bool | None = None
    decode_fits: bool | None = None
    #: "disagg" (a P/D pair) or "agg" (one aggregated instance's layout on both sides).
    serving: str = "disagg"
    prefill_layout: Layout | None = None
    decode_layout: Layout | None = None
    #: The engine release the rules are of (a vLLM or an SGLang release), and MoRIIO's mode
    #: ("read"/"write"; None for NIXL).
    engine_version: str | None = None
    mode: str | None = None
    #: Why pdtp picked the connector when none was named (``"the default on NVIDIA GPUs"``).
    connector_default: str | None = None
    #: The serving engine that runs the pair, as output names it (``"vLLM"``, ``"SGLang"``).
    engine: str = "vLLM"

    @property
    def vllm_version(self) -> str | None:
        """Deprecated alias of :attr:`engine_version` (an SGLang release for an SGLang
        connector)."""
        return self.engine_version

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def verdict(self) -> Verdict:
        """What happens when the engine runs it (:class:`Verdict`)."""
        return verdict_of(self.violations, self.warnings, self.engine)

    def __bool__(self) -> bool:
        return self.ok

    def raise_for_violations(self) -> None:
        """Raise the first violation's exception, as vLLM would at deploy time."""
        if self.violations:
            raise self.violations[0].exception()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "model": self.model,
            "serving": self.serving,
            "prefill_tp": self.prefill_tp,
            "decode_tp": self.decode_tp,
            "prefill_layout": str(self.prefill_layout or Layout(self.prefill_tp)),
            "decode_layout": str(self.decode_layout or Layout(self.decode_tp)),
            "connector": self.connector,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "vllm_version": self.engine_version,  # deprecated: engine_version
            "mode": self.mode,
            "connector_default": self.connector_default,
            "verdict": self.verdict.to_dict(),
            "violations": [v.to_dict() for v in self.violations],
            "warnings": [w.to_dict() for w in self.warnings],
            "alternatives": [list(a) for a in self.alternatives],
            "gpu": self.gpu,
            "prefill_fits": self.prefill_fits,
            "decode_fits": self.decode_fits,
        }


@public_api
def check(
    model: Any,
    prefill_tp: Any = None,
    decode_tp: Any = None,
    *,
    connector: str | Connector | None = None,
    max_acks: int | None = None,
    max_tp: int | None = None,
    alternatives: int = DEFAULT_ALTERNATIVES,
    gpu: Any = None,
    workload: Any = None,
    gpu_memory_utilization: float | None = None,
    constants: Any = None,
    vllm_version: str | None = None,
    aggregated: Any = None,
    sglang_version: str | None = None,
    page_size: Any = None,
    kv_cache_dtype: Any = None,
) -> CheckResult:
    """Check one P/D pair for ``model`` under ``connector`` (``"moriio"``: MoRIIO READ mode,
    ``"moriio-write"``: MoRIIO WRITE mode, ``"nixl"``, ``"nixl-legacy"``) as vLLM
    ``vllm_version`` (default: the newest release pdtp knows) would run it. Each side is a
    TP size or a layout (``"tp2dp4ep"``, ``"tp8pp2"``, :class:`pdtp.Layout`): data-parallel
    ranks, expert parallel and pipeline stages are checked with vLLM's layout rules.
    ``aggregated=`` checks one aggregated instance's layout instead (no KV connector: the
    load rules alone). SGLang's backends (``"sglang-mooncake"``, ``"sglang-nixl"``,
    ``"sglang-mori"``) are checked as SGLang ``sglang_version`` runs them (TP sizes only).
    ``page_size=`` / ``kv_cache_dtype=`` are the instances' ``--page-size`` and
    ``--kv-cache-dtype``: one value for both, or ``(prefill, decode)``; a side not given takes
    the engine's default (SGLang: 1 and ``"auto"``). SGLang requires them equal (refused at the
    first request from 0.5.8 / 0.5.10, wrong KV before); for vLLM's connectors only equal
    settings are accepted (pdtp does not model vLLM's rules for unequal ones).

    ``connector=None`` picks the GPU vendor's default (``moriio`` on AMD GPUs and without
    ``gpu=``, ``nixl`` on NVIDIA; the result's ``connector_default`` says so). With ``gpu=``
    a connector that cannot start there (MoRIIO off AMD) is a violation naming vLLM's error.
    ``verdict`` on the result says what happens (valid, with a consequence, invalid with
    vLLM's exception and when it reaches the user, or broken).

    ``max_acks`` caps the release acks a prefill rank may wait for (as the connector and mode
    count them: D/P for NIXL and MoRIIO READ when D > P, one for MoRIIO WRITE);
    ``max_tp`` bounds the TP sizes proposed as alternatives (default: 16 or twice the larger
    given size). With ``gpu=`` (a GPU name), also checks that each side's weights and the
    KV cache of one sequence of ``workload`` fit in ``gpu_memory_utilization`` of a GPU
    (default: the engine's own: vLLM's 0.9, SGLang's ``mem_fraction_static`` for each side's
    layout and role in its release), and proposes only alternatives that fit. Returns a
    :class:`CheckResult`; never raises for an invalid pair.

    >>> import pdtp
    >>> r = pdtp.check(pdtp.ModelShape(64, 8), prefill_tp=4, decode_tp=8)
    >>> r.ok, r.violations[0].code, r.alternatives[:2]
    (False, 'kv_heads_not_replicated', ((4, 4), (8, 8)))
    """
    connector, vllm_version = engine_connector(
        connector, vllm_version=vllm_version, sglang_version=sglang_version
    )
    ctx = None
    if gpu is not None:
        if isinstance(model, ModelShape):
            raise InvalidArgumentError(
                "gpu= needs a full model (a pdtp.Model, catalog name, HF id or config), "
                "not a ModelShape: memory depends on the weights"
            )
        from .perf import resolve_context

        util = DEFAULT_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
        ctx = resolve_context(model, gpu, constants, util)
        model = ctx.model
    rules_model = model if ctx is not None or not _is_name(model) else _resolved(model)
    shape = model_shape(rules_model)
    note = None
    if connector is None:
        connector, note = default_connector(ctx.gpu.vendor if ctx is not None else NO_GPU_VENDOR)
        note = note if ctx is not None else None
    conn = resolve_connector(connector, vllm_version)
    acks = optional_positive_int("max_acks", max_acks, maximum=MAX_TP)
    n_alt = (
        positive_int("alternatives", alternatives, maximum=MAX_ALTERNATIVES) if alternatives else 0
    )
    if aggregated is not None:
        if prefill_tp is not None or decode_tp is not None:
            raise InvalidArgumentError(
                "give prefill_tp and decode_tp (a P/D pair) or aggregated= (one aggregated "
                "instance's layout), not both"
            )
        return _check_aggregated(
            rules_model,
            shape,
            Layout.of(aggregated, "aggregated"),
            conn,
            ctx,
            workload,
            gpu_memory_utilization,
        )
    if prefill_tp is None or decode_tp is None:
        raise InvalidArgumentError(
            "check needs prefill_tp and decode_tp (TP sizes or layouts such as 'tp2dp4ep'), "
            "or aggregated= for an aggregated instance"
        )
    pl, dl = Layout.of(prefill_tp, "prefill_tp"), Layout.of(decode_tp, "decode_tp")
    p, d = pl.tp, dl.tp
    tp_only = pl.is_tp_only and dl.is_tp_only
    bound = optional_positive_int("max_tp", max_tp, maximum=MAX_TP) or max(16, 2 * max(p, d))

    if not tp_only and conn.tp_only is not None:
        raise InvalidArgumentError(
            f"check with {conn.name} takes TP sizes ({conn.tp_only}), got layouts "
            f"{str(pl)!r} and {str(dl)!r}"
        )
    # DeepSeek-V4's TP limit (its output groups) is a fact of the model, not of its shape.
    limited = rules_model if getattr(rules_model, "output_groups", 0) else shape
    if tp_only:
        violations, raw_warnings = pair_rules(limited, p, d, conn.key, acks)
    else:
        violations, raw_warnings = layout_rules(rules_model, pl, dl, conn.key, acks)
    raw_warnings = (*raw_warnings, *_flow_not_derived(rules_model, conn))
    settings = _kv_settings_violation(conn, page_size, kv_cache_dtype)
    if settings is not None:
        # The decode side checks them at the first request, before the rank mapping: after
        # model load, before every connector step.
        loads = [v for v in violations if v.when == "model_load"]
        violations = [*loads, settings, *(v for v in violations if v.when != "model_load")]
        n_alt = 0  # no other TP pair helps: the hint says which setting to align
    refused = gpu_violation(conn, ctx.gpu.vendor) if ctx is not None else None
    if refused is not None:
        # vLLM creates the connector's worker before it loads the model: this comes first,
        # and no other TP pair would help (the hint names the connector that would).
        violations = [refused, *violations]
        n_alt = 0
    sizes = None
    fits: dict[str, bool] = {}
    w = None
    if ctx is not None:
        from .perf import memory_fits, side_violations
        from .workload import resolve_workload

        w = resolve_workload(workload)
        for side, lay in (("prefill", pl), ("decode", dl)):
            sized = _sized(ctx, conn, lay, side, gpu_memory_utilization)
            point, fit = memory_fits(sized, w, lay.tp if tp_only else lay, side)
            fits[side] = fit
            violations.extend(
                v for v in side_violations(ctx, w, point, side) if "slo" not in v.code
            )
    alts: tuple[tuple[int, int] | tuple[str, str], ...] = ()
    if violations and n_alt:
        loadable = loadable_tp_sizes(limited, bound)
        memo: dict[tuple[str, Layout], bool] = {}

        def fits_memory(side: str, lay: Layout) -> bool:
            if ctx is None or w is None:
                return True
            if (side, lay) not in memo:
                from .perf import memory_fits

                sized = _sized(ctx, conn, lay, side, gpu_memory_utilization)
                size = lay.tp if lay.is_tp_only else lay
                memo[side, lay] = memory_fits(sized, w, size, side)[1]
            return memo[side, lay]

        if tp_only:
            sizes = {
                side: [t for t in loadable if fits_memory(side, Layout(t))]
                for side in ("prefill", "decode")
            }
            alts = tuple(
                _core.alternatives(
                    shape.num_attention_heads,
                    shape.num_kv_heads,
                    shape.is_mla,
                    p,
                    d,
                    conn.key,
                    acks,
                    sizes["prefill"],
                    sizes["decode"],
                    n_alt,
                    hybrid=shape.hybrid,
                    sliding_window=shape.sliding_window,
                )
            )
        else:
            alts = _layout_alternatives(
                rules_model, pl, dl, conn.key, acks, loadable, fits_memory, n_alt
            )
    return CheckResult(
        model=shape.name,
        prefill_tp=p,
        decode_tp=d,
        connector=conn.name,
        violations=tuple(violations),
        warnings=raw_warnings if not violations else (),
        alternatives=alts,
        gpu=ctx.gpu.name if ctx is not None else None,
        prefill_fits=fits.get("prefill"),
        decode_fits=fits.get("decode"),
        prefill_layout=pl,
        decode_layout=dl,
        engine_version=conn.engine_version,
        mode=conn.mode,
        connector_default=note,
        engine=conn.engine_label,
    )


#: The longest KV-cache dtype name pdtp takes (SGLang's are like ``fp8_e4m3``).
MAX_KV_DTYPE_LEN = 32


def _sides(field_name: str, value: Any) -> tuple[Any, Any]:
    """One value for both sides, or ``(prefill, decode)``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidArgumentError(
                f"{field_name} must be one value or (prefill, decode), got {len(value)} values"
            )
        return value[0], value[1]
    return value, value


def _kv_settings_violation(conn: Connector, page_size: Any, kv_cache_dtype: Any) -> Any:
    """The connector's rule on the two instances' page size and KV-cache dtype (``None``: not
    given, or nothing to say)."""
    if page_size is None and kv_cache_dtype is None:
        return None
    pages = tuple(
        optional_positive_int(f"page_size ({side})", v, maximum=1 << 16)
        for side, v in zip(("prefill", "decode"), _sides("page_size", page_size))
    )
    dtypes = []
    for side, v in zip(("prefill", "decode"), _sides("kv_cache_dtype", kv_cache_dtype)):
        if v is not None and (
            not isinstance(v, str)
            or not 0 < len(v) <= MAX_KV_DTYPE_LEN
            or not all(c.isascii() and (c.isalnum() or c in "_-") for c in v)
        ):
            raise InvalidArgumentError(
                f"kv_cache_dtype ({side}) must be a dtype name like 'auto' or 'fp8_e4m3' "
                f"(letters, digits, '_', '-', at most {MAX_KV_DTYPE_LEN}), got {v!r}"
            )
        dtypes.append(v)
    from .violations import core_violation

    raw = _core.connector_kv_settings_violation(
        conn.key, (pages[0], pages[1]), (dtypes[0], dtypes[1])
    )
    return None if raw is None else core_violation(raw)


def _sized(ctx: Any, conn: Connector, layout: Layout, role: str, given: float | None) -> Any:
    """The memory context one side is checked in: ``given`` when the caller named a
    fraction, else the connector's engine's own for this layout and role (SGLang's
    ``mem_fraction_static`` of its release; vLLM's 0.9 whatever the layout)."""
    from .engine import engine

    eng = engine(conn.engine)
    if given is not None or not eng.memory_by_layout:
        return ctx
    util = eng.layout_fraction(ctx.gpu, conn.engine_version, layout, role, ctx.model.is_mla)
    return replace(ctx, gpu_memory_utilization=util)


def _is_name(model: Any) -> bool:
    """A model given by reference (name, id, config) rather than as an object."""
    return not all(hasattr(model, a) for a in ("num_attention_heads", "num_kv_heads", "is_mla"))


def _resolved(model: Any) -> Any:
    from .catalog import resolve_model  # lazy: the catalog loads data files

    return resolve_model(model)


def _layout_alternatives(
    model: Any,
    pl: Layout,
    dl: Layout,
    connector: str,
    acks: int | None,
    sizes: list[int],
    fits: Any,
    limit: int,
) -> tuple[tuple[str, str], ...]:
    """The nearest valid layout pairs: each side's TP size varied over ``sizes`` with its
    dp kept, and its pipeline stages or expert parallel dropped where that is what breaks a
    rule. Distance: |log TP ratio| per side plus 1 per dropped part; ``fits(side, layout)``
    filters by memory."""
    from math import log

    def variants(lay: Layout) -> list[tuple[Layout, int]]:
        out = [(lay, 0)]
        if lay.pp > 1:
            out.append((replace(lay, pp=1), 1))
        if lay.ep:
            out.append((replace(lay, ep=False), 1))
        if lay.pp > 1 and lay.ep:
            out.append((replace(lay, pp=1, ep=False), 2))
        return out

    found: list[tuple[float, int, str, str]] = []
    for a0, ca in variants(pl):
        for b0, cb in variants(dl):
            for p in sizes:
                for d in sizes:
                    a, b = replace(a0, tp=p), replace(b0, tp=d)
                    if (a, b) == (pl, dl) or layout_rules(model, a, b, connector, acks)[0]:
                        continue
                    if not (fits("prefill", a) and fits("decode", b)):
                        continue
                    dist = abs(log(p / pl.tp)) + abs(log(d / dl.tp)) + ca + cb
                    found.append((dist, a.gpus + b.gpus, str(a), str(b)))
    found.sort()
    out: list[tuple[str, str]] = []
    for _, _, a_s, b_s in found:
        if (a_s, b_s) not in out:
            out.append((a_s, b_s))
        if len(out) == limit:
            break
    return tuple(out)


def _check_aggregated(
    model: Any,
    shape: ModelShape,
    layout: Layout,
    conn: Connector,
    ctx: Any,
    workload: Any,
    given_util: float | None = None,
) -> CheckResult:
    """One aggregated instance: its layout's load rules (no KV connector) and, with a GPU,
    its memory fit."""
    violations = load_rules(model, layout, "aggregated", conn.key)
    fits = None
    if ctx is not None:
        from .perf import memory_fits, side_violations
        from .workload import resolve_workload

        w = resolve_workload(workload)
        ctx = _sized(ctx, conn, layout, "aggregated", given_util)
        point, fits = memory_fits(ctx, w, layout, "aggregated")
        violations.extend(
            v for v in side_violations(ctx, w, point, "aggregated") if "slo" not in v.code
        )
    return CheckResult(
        model=shape.name,
        prefill_tp=layout.tp,
        decode_tp=layout.tp,
        connector=conn.name,
        violations=tuple(violations),
        warnings=(),
        gpu=ctx.gpu.name if ctx is not None else None,
        prefill_fits=fits,
        decode_fits=fits,
        serving="agg",
        prefill_layout=layout,
        decode_layout=layout,
        engine_version=conn.engine_version,
        mode=conn.mode,
        engine=conn.engine_label,
    )


def _flow_not_derived(model: Any, conn: Connector) -> tuple[CheckWarning, ...]:
    """A warning where pdtp checks a DeepSeek-V4 pair whose connector release it has not
    derived the transfer of its caches for (seven caches, four page sizes, packed into one
    pool): vLLM 0.33.0's NIXL and MoRIIO are derived (``pdtp._model_dsv4.connector_gap``)."""
    if getattr(model, "model_type", None) != "deepseek_v4":
        return ()
    from ._model_dsv4 import connector_gap

    gap = connector_gap(conn.engine, conn.name, conn.rules_version)
    if gap is None:
        return ()
    return (
        CheckWarning(
            code="flow_not_derived",
            message=(
                "DeepSeek-V4 keeps seven KV caches with four page sizes (sliding-window and "
                "compressed latents, indexer keys, compressor states) in one packed pool; "
                f"pdtp checks this pair as MLA (one latent replicated on every rank), but {gap}"
            ),
        ),
    )
