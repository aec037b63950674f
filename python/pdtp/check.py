"""``pdtp.check``: is a (prefill TP, decode TP) pair valid for a model and connector?

Never raises for an invalid pair: it reports every violated rule (vLLM's exact message where
vLLM has one, in the order vLLM would hit them, so the first is the one vLLM raises), the
warnings worth knowing, and the nearest valid pairs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import _core
from ._validate import MAX_TP, flag, optional_positive_int, positive_int
from .connectors import Connector, resolve_connector
from .errors import (
    InvalidArgumentError,
)
from .violations import CheckWarning, Violation, pair_rules

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

    def __post_init__(self) -> None:
        positive_int("num_attention_heads", self.num_attention_heads, maximum=MAX_HEADS)
        positive_int("num_kv_heads", self.num_kv_heads, maximum=MAX_HEADS)
        flag("is_mla", self.is_mla)
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {type(self.name).__name__}")

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
        )
    from .catalog import resolve_model  # lazy: the catalog loads data files

    m = resolve_model(model)
    return ModelShape(m.num_attention_heads, m.num_kv_heads, m.is_mla, m.name)


@dataclass(frozen=True)
class CheckResult:
    model: str
    prefill_tp: int
    decode_tp: int
    connector: str
    violations: tuple[Violation, ...]
    warnings: tuple[CheckWarning, ...]
    alternatives: tuple[tuple[int, int], ...] = field(default=())
    # With gpu=: whether each side's weights and KV cache fit in memory (None: not asked).
    gpu: str | None = None
    prefill_fits: bool | None = None
    decode_fits: bool | None = None
    #: The vLLM version the rules are of, and MoRIIO's mode ("read"/"write"; None for NIXL).
    vllm_version: str | None = None
    mode: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

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
            "prefill_tp": self.prefill_tp,
            "decode_tp": self.decode_tp,
            "connector": self.connector,
            "vllm_version": self.vllm_version,
            "mode": self.mode,
            "violations": [v.to_dict() for v in self.violations],
            "warnings": [w.to_dict() for w in self.warnings],
            "alternatives": [list(a) for a in self.alternatives],
            "gpu": self.gpu,
            "prefill_fits": self.prefill_fits,
            "decode_fits": self.decode_fits,
        }


def check(
    model: Any,
    prefill_tp: int,
    decode_tp: int,
    *,
    connector: str | Connector = "moriio",
    max_acks: int | None = None,
    max_tp: int | None = None,
    alternatives: int = DEFAULT_ALTERNATIVES,
    gpu: Any = None,
    workload: Any = None,
    gpu_memory_utilization: float = 0.9,
    constants: Any = None,
    vllm_version: str | None = None,
) -> CheckResult:
    """Check one P/D pair for ``model`` under ``connector`` (``"moriio"``: MoRIIO READ mode,
    ``"moriio-write"``: MoRIIO WRITE mode, ``"nixl"``, ``"nixl-legacy"``) as vLLM
    ``vllm_version`` (default: the newest release pdtp knows) would run it.

    ``max_acks`` caps the release acks a prefill rank may wait for (D/P when D > P);
    ``max_tp`` bounds the TP sizes proposed as alternatives (default: 16 or twice the larger
    given size). With ``gpu=`` (a GPU name), also checks that each side's weights and the
    KV cache of one sequence of ``workload`` fit in ``gpu_memory_utilization`` of a GPU, and
    proposes only alternatives that fit. Returns a :class:`CheckResult`; never raises for an
    invalid pair.

    >>> import pdtp
    >>> r = pdtp.check(pdtp.ModelShape(64, 8), prefill_tp=4, decode_tp=8)
    >>> r.ok, r.violations[0].code, r.alternatives[:2]
    (False, 'kv_heads_not_replicated', ((4, 4), (8, 8)))
    """
    ctx = None
    if gpu is not None:
        if isinstance(model, ModelShape):
            raise InvalidArgumentError(
                "gpu= needs a full model (a pdtp.Model, catalog name, HF id or config), "
                "not a ModelShape: memory depends on the weights"
            )
        from .perf import resolve_context

        ctx = resolve_context(model, gpu, constants, gpu_memory_utilization)
        model = ctx.model
    shape = model_shape(model)
    p = positive_int("prefill_tp", prefill_tp, maximum=MAX_TP)
    d = positive_int("decode_tp", decode_tp, maximum=MAX_TP)
    conn = resolve_connector(connector, vllm_version)
    acks = optional_positive_int("max_acks", max_acks, maximum=MAX_TP)
    bound = optional_positive_int("max_tp", max_tp, maximum=MAX_TP) or max(16, 2 * max(p, d))
    n_alt = (
        positive_int("alternatives", alternatives, maximum=MAX_ALTERNATIVES) if alternatives else 0
    )

    violations, raw_warnings = pair_rules(shape, p, d, conn.key, acks)
    sizes = None
    fits: dict[str, bool] = {}
    if ctx is not None:
        from .perf import memory_fits, side_violations
        from .workload import resolve_workload

        w = resolve_workload(workload)
        for side, tp in (("prefill", p), ("decode", d)):
            point, fit = memory_fits(ctx, w, tp, side)
            fits[side] = fit
            violations.extend(
                v for v in side_violations(ctx, w, point, side) if "slo" not in v.code
            )
        if n_alt:
            loadable = _core.loadable_sizes(
                shape.num_attention_heads, shape.num_kv_heads, shape.is_mla, bound
            )
            sizes = {
                side: [t for t in loadable if memory_fits(ctx, w, t, side)[1]]
                for side in ("prefill", "decode")
            }
    alts: tuple[tuple[int, int], ...] = ()
    if violations and n_alt:
        if sizes is None:
            both = _core.loadable_sizes(
                shape.num_attention_heads, shape.num_kv_heads, shape.is_mla, bound
            )
            sizes = {"prefill": both, "decode": both}
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
            )
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
        vllm_version=conn.vllm_version,
        mode=conn.mode,
    )
