"""``pdtp.Layout``: how one vLLM instance spreads a model over its GPUs — tensor parallel
(``tp``), pipeline stages (``pp``), data-parallel attention ranks (``dp``, vLLM's
``--data-parallel-size``) and expert parallel (``ep``, ``--enable-expert-parallel``; the
expert-parallel size is then tp × dp). The string form (``"tp2dp4ep"``, ``"tp8pp2"``) is
parsed by the Rust core, the one place that reads it.

Also the facts the layout rules need from a model (:func:`layout_model`), including whether
vLLM's model class supports pipeline parallel (``data/vllm_pipeline.json``, read from vLLM's
registry by ``tools/vllm_pipeline_support.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from . import _core
from ._validate import MAX_TP, flag, positive_int
from .errors import ArgumentTypeError, InvalidArgumentError


@dataclass(frozen=True, order=True)
class Layout:
    """One instance's parallel layout; ``str(layout)`` is its compact name (``tp2dp4ep``),
    which :meth:`parse` reads back.

    >>> import pdtp
    >>> l = pdtp.Layout.parse("tp2dp4ep")
    >>> (l.tp, l.pp, l.dp, l.ep, l.gpus, l.ep_size, str(l))
    (2, 1, 4, True, 8, 8, 'tp2dp4ep')
    """

    tp: int
    pp: int = 1
    dp: int = 1
    ep: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            positive_int(name, getattr(self, name), maximum=MAX_TP)
        flag("ep", self.ep)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """A layout from ``"tp4"``, ``"tp2dp4ep"``, ``"tp8pp2"``, ``"dp8ep"`` (tp 1) or the
        display form ``"tp2·dp4·ep"``; ``epN`` must be tp × dp."""
        if not isinstance(text, str):
            raise ArgumentTypeError(f"a layout must be a string, got {type(text).__name__}")
        if len(text) > 100:
            raise InvalidArgumentError(f"a layout is a short string, got {len(text)} characters")
        tp, pp, dp, ep = _core.parse_layout(text)
        return cls(tp, pp, dp, ep)

    @classmethod
    def of(cls, value: Any, field: str = "layout") -> Layout:
        """A layout from a :class:`Layout`, a string, or an int (a TP size)."""
        if isinstance(value, Layout):
            return value
        if isinstance(value, str):
            try:
                return cls.parse(value)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{field}: {e}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(
                f"{field} must be a TP size (int), a layout string such as 'tp2dp4ep' or a "
                f"pdtp.Layout, got {type(value).__name__} {value!r}"
            )
        return cls(positive_int(field, value, maximum=MAX_TP))

    @property
    def gpus(self) -> int:
        """GPUs one instance occupies: tp × pp × dp."""
        return self.tp * self.pp * self.dp

    @property
    def ep_size(self) -> int:
        """Ranks the routed experts are spread over (1 without expert parallel)."""
        return self.tp * self.dp if self.ep else 1

    @property
    def is_tp_only(self) -> bool:
        return self.pp == 1 and self.dp == 1 and not self.ep

    @property
    def core(self) -> tuple[int, int, int, bool]:
        """``(tp, pp, dp, ep)``: the Rust core's form."""
        return (self.tp, self.pp, self.dp, self.ep)

    def __str__(self) -> str:
        return (
            f"tp{self.tp}"
            + (f"pp{self.pp}" if self.pp > 1 else "")
            + (f"dp{self.dp}" if self.dp > 1 else "")
            + ("ep" if self.ep else "")
        )

    def describe(self) -> str:
        """In words: ``2 GPUs TP × 4 DP attention ranks, experts over 8 (EP)``."""
        parts = [f"TP {self.tp}"]
        if self.pp > 1:
            parts.append(f"{self.pp} pipeline stages")
        if self.dp > 1:
            parts.append(f"{self.dp} DP attention ranks")
        if self.ep:
            parts.append(f"experts over {self.ep_size} GPUs (EP)")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "name": str(self)}


@cache
def _pipeline_table() -> tuple[frozenset[str], frozenset[str], str]:
    # Imported here: importlib.resources (pathlib, tempfile …) costs ~15 ms of `import pdtp`.
    import json
    from importlib import resources

    data = json.loads(resources.files("pdtp").joinpath("data/vllm_pipeline.json").read_text())
    return frozenset(data["pipeline"]), frozenset(data["no_pipeline"]), data["vllm"]


def supports_pp(model: Any) -> bool:
    """Whether vLLM's class for ``model`` implements ``SupportsPP``: the first of the
    config's ``architectures`` that vLLM knows decides (as vLLM picks it). A model without a
    known architecture (built by hand, or an architecture newer than the table) is treated
    as not supporting pipeline parallel: pdtp never proposes a layout vLLM may refuse."""
    with_pp, without, _ = _pipeline_table()
    for arch in getattr(model, "architectures", ()) or ():
        if arch in with_pp:
            return True
        if arch in without:
            return False
    return False


def layout_model(model: Any) -> tuple[int, int, bool, int, int, bool, bool, bool, int, int]:
    """What the layout rules read of a model: ``(attention heads, KV heads, MLA, layers,
    routed experts, supports pipeline parallel, hybrid, sliding window, output-projection
    groups, Mamba-2 B/C groups)`` (the last 0 where unknown). ``model``: a ``pdtp.Model`` or
    anything with the attention numbers (a ``ModelShape`` has no layer or expert counts: 1 and
    0; output groups 0 = none, only DeepSeek-V4 has them: TP above them is refused as vLLM
    0.33 fails)."""
    return (
        model.num_attention_heads,
        model.num_kv_heads,
        bool(model.is_mla),
        int(getattr(model, "num_layers", 1) or 1),
        int(getattr(model, "num_experts", 0) or 0),
        supports_pp(model),
        is_hybrid(model),
        is_sliding(model),
        int(getattr(model, "output_groups", 0) or 0),
        int(getattr(model, "mamba_groups", 0) or 0),
    )


def loadable_tp_sizes(model: Any, bound: int) -> list[int]:
    """TP sizes 1..``bound`` one instance of ``model`` loads with (the TP-only layouts
    ``tpN`` whose load rules pass: heads and KV heads by TP)."""
    sizes = range(1, max(0, bound) + 1)
    loads = _core.layouts_load(layout_model(model), [(t, 1, 1, False) for t in sizes])
    return [t for t, ok in zip(sizes, loads) if ok]


def is_hybrid(model: Any) -> bool:
    """The model has Mamba-type layers (layers without a KV cache: Mamba, Mamba-2, Gated
    DeltaNet, …), as vLLM's NIXL worker reads it (``_has_mamba``). A ``ModelShape`` says so
    with ``hybrid=True``."""
    if getattr(model, "hybrid", False):
        return True
    layers = getattr(model, "num_layers", None)
    attention = getattr(model, "num_attention_layers", None)
    return isinstance(layers, int) and isinstance(attention, int) and attention < layers


def is_sliding(model: Any) -> bool:
    """The model has sliding-window attention layers (an attention group of kind
    ``"sliding"``, or DeepSeek-V4's sliding-window latents and compressor states, cache
    ``"swa"``/``"state"``: ``SlidingWindowMLASpec``, a ``SlidingWindowSpec``), a KV-cache
    group of their own under vLLM's hybrid KV-cache manager. Chunked local attention
    (Llama 4) does not count: vLLM turns the manager off for it by default
    (vllm/config/vllm.py). A ``ModelShape`` says so with ``sliding_window=True``."""
    if getattr(model, "sliding_window", False) is True:
        return True
    groups = getattr(model, "attention_groups", ()) or ()
    return any(
        getattr(g, "kind", "") == "sliding" or getattr(g, "cache", "") in ("swa", "state")
        for g in groups
    )
