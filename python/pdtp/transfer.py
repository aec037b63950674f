"""``pdtp.transfer_map``: which prefill ranks each decode rank takes KV from, which KV heads
move, which prefill ranks each decode rank releases and the release acks each prefill rank
waits for, as the chosen vLLM release does it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from . import _core
from ._validate import flag, positive_int, public_api
from .check import MAX_HEADS, ModelShape, check
from .connectors import NO_GPU_CONNECTOR, engine_connector, resolve_connector
from .layout import Layout
from .violations import CheckWarning

# One row per rank is returned, so the sizes are bounded to keep the output printable.
MAX_MAP_TP: int = _core.MAX_MAP_TP


@dataclass(frozen=True)
class Read:
    """Heads one decode rank receives from one prefill rank (empty: a hybrid model's read of
    that rank's Mamba state only, its KV heads having come from another rank: NIXL 0.20.0 on)."""

    prefill_rank: int
    heads: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"prefill_rank": self.prefill_rank, "heads": list(self.heads)}


@dataclass(frozen=True)
class DecodeRank:
    rank: int
    heads: tuple[int, ...]
    #: Where its KV comes from (read, or written into it in MoRIIO WRITE mode).
    reads: tuple[Read, ...]
    #: Prefill ranks this rank releases once it has its KV (empty in MoRIIO WRITE mode,
    #: where the decode scheduler releases every prefill rank).
    releases: tuple[int, ...] = ()
    #: Where vLLM varies the source per request (MoRIIO READ 0.27.0 on, a one-rank MLA
    #: decode): the prefill ranks it reads in turn, round-robin from its DP rank; ``reads``
    #: and ``releases`` are then the first request's. Empty: every request reads ``reads``.
    round_robin: tuple[int, ...] = ()

    @property
    def prefill_ranks(self) -> tuple[int, ...]:
        return tuple(r.prefill_rank for r in self.reads)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "heads": list(self.heads),
            "reads": [r.to_dict() for r in self.reads],
            "releases": list(self.releases),
            "round_robin": list(self.round_robin),
        }


@dataclass(frozen=True)
class PrefillRank:
    rank: int
    heads: tuple[int, ...]
    #: Decode ranks that take KV from this rank.
    readers: tuple[int, ...]
    expected_acks: int
    #: Decode ranks that release this rank.
    released_by: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "heads": list(self.heads),
            "readers": list(self.readers),
            "released_by": list(self.released_by),
            "expected_acks": self.expected_acks,
        }


@dataclass(frozen=True)
class DataParallelPairing:
    """How the data-parallel ranks of the two sides pair (each DP rank is its own engine,
    with its own scheduler and KV cache): any decode DP rank reads from any prefill DP rank
    — the router pins the prefill DP rank of each request and passes it to decode (MoRIIO
    ``kv_transfer_params["remote_dp_rank"]``, NIXL the prefill engine's id) — and within
    each (prefill DP rank, decode DP rank) pair the TP map applies. ``handshakes`` is how
    many prefill engines each decode TP rank connects to: MoRIIO all of them at startup (an
    all-to-all handshake), NIXL lazily, one per prefill engine a request names (at most
    all)."""

    prefill_dp: int
    decode_dp: int
    pinned_by: str
    handshakes: int
    eager: bool

    @property
    def pairs(self) -> int:
        """(prefill DP rank, decode DP rank) pairs that may move KV."""
        return self.prefill_dp * self.decode_dp

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pairs": self.pairs}


@dataclass(frozen=True)
class TransferMap:
    """The transfer plan of one valid pair. KV-head indices follow vLLM's QKV layout; for
    MLA models index 0 stands for the whole latent, which every rank holds.

    ``decode``/``prefill`` are the TP map: within one (prefill DP rank, decode DP rank) pair
    and, under pipeline parallel, one stage (``prefill_stages``/``decode_stages``: each
    stage's layers; a decode rank reads each layer from the prefill stage holding it).
    ``data_parallel`` says how DP ranks pair (None for one DP rank a side)."""

    prefill_tp: int
    decode_tp: int
    kv_heads: int
    is_mla: bool
    connector: str
    decode: tuple[DecodeRank, ...]
    prefill: tuple[PrefillRank, ...]
    warnings: tuple[CheckWarning, ...]
    prefill_layout: Layout | None = None
    decode_layout: Layout | None = None
    data_parallel: DataParallelPairing | None = None
    prefill_stages: tuple[tuple[int, int], ...] = ()
    decode_stages: tuple[tuple[int, int], ...] = ()
    #: The engine release the map is of (a vLLM or an SGLang release), and MoRIIO's mode
    #: ("read"/"write"; None for NIXL).
    engine_version: str | None = None
    mode: str | None = None
    #: The serving engine, as output names it (``"vLLM"``, ``"SGLang"``).
    engine: str = "vLLM"
    #: A model with sliding-window layers: which of a request's blocks the transfer moves
    #: for them, as the release's schedulers decide it: ``"every"`` (MoRIIO before vLLM
    #: 0.30.0 unifies the windows to full attention), ``"last_window"`` (0.30.0 on: the last
    #: ``ceil(window / block_size) + 1``); None without such layers or where pdtp's flow data
    #: does not compare it. :meth:`window_blocks` counts them.
    sliding_window_blocks: str | None = None

    def window_blocks(self, window_tokens: int, block_size: int, request_blocks: int) -> int | None:
        """The blocks of a ``request_blocks``-block request the transfer moves for a
        sliding-window layer of ``window_tokens`` tokens (``block_size``-token blocks), or
        None (:attr:`sliding_window_blocks`).

        >>> import pdtp
        >>> m = pdtp.transfer_map(2, 2, kv_heads=8, sliding_window=True, vllm_version="0.33.0")
        >>> m.sliding_window_blocks, m.window_blocks(4096, 16, 300), m.window_blocks(4096, 16, 9)
        ('last_window', 257, 9)
        """
        w = positive_int("window_tokens", window_tokens, maximum=1 << 40)
        b = positive_int("block_size", block_size, maximum=1 << 20)
        n = positive_int("request_blocks", request_blocks, maximum=1 << 40)
        if self.sliding_window_blocks is None:
            return None
        return _core.sliding_window_blocks(self.sliding_window_blocks, w, b, n)

    @property
    def vllm_version(self) -> str | None:
        """Deprecated alias of :attr:`engine_version`."""
        return self.engine_version

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill_tp": self.prefill_tp,
            "decode_tp": self.decode_tp,
            "prefill_layout": str(self.prefill_layout or Layout(self.prefill_tp)),
            "decode_layout": str(self.decode_layout or Layout(self.decode_tp)),
            "kv_heads": self.kv_heads,
            "is_mla": self.is_mla,
            "connector": self.connector,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "vllm_version": self.engine_version,  # deprecated: engine_version
            "mode": self.mode,
            "decode": [r.to_dict() for r in self.decode],
            "prefill": [r.to_dict() for r in self.prefill],
            "data_parallel": None if self.data_parallel is None else self.data_parallel.to_dict(),
            "prefill_stages": [list(s) for s in self.prefill_stages],
            "decode_stages": [list(s) for s in self.decode_stages],
            "warnings": [w.to_dict() for w in self.warnings],
            "sliding_window_blocks": self.sliding_window_blocks,
        }


@public_api
def transfer_map(
    prefill_tp: Any,
    decode_tp: Any,
    *,
    kv_heads: int,
    is_mla: bool = False,
    connector: str | None = NO_GPU_CONNECTOR,
    num_layers: int | None = None,
    vllm_version: str | None = None,
    sglang_version: str | None = None,
    hybrid: bool = False,
    sliding_window: bool = False,
) -> TransferMap:
    """The transfer map of a valid pair under ``connector`` as vLLM ``vllm_version``
    (default: the newest release pdtp knows) runs it. An invalid pair raises the error vLLM
    would raise (``RuleValueError``, ``RuleNotImplementedError``, ``RuleAssertionError``,
    ``RuleZeroDivisionError``, ``RuleConnectorError``; all ``PdtpError``), or
    ``InvalidArgumentError`` where vLLM raises nothing but the pair cannot work.

    Each side is a TP size or a layout (``"tp2dp4ep"``, ``"tp8pp2"``, :class:`pdtp.Layout`):
    the TP map holds between the TP sizes, per (prefill DP rank, decode DP rank) pair
    (``data_parallel``) and per pipeline stage (``num_layers`` gives each stage's layers;
    MoRIIO has no pipeline handling and refuses such layouts). ``hybrid`` and
    ``sliding_window``: the model has Mamba-type or sliding-window layers
    (:class:`pdtp.ModelShape`), which some releases' connectors refuse or move apart.

    >>> import pdtp
    >>> m = pdtp.transfer_map(4, 8, kv_heads=4)
    >>> [d.prefill_ranks[0] for d in m.decode]
    [0, 0, 1, 1, 2, 2, 3, 3]
    >>> m = pdtp.transfer_map("tp1dp4ep", "tp1dp8ep", kv_heads=1, is_mla=True)
    >>> m.data_parallel.pairs, m.data_parallel.handshakes
    (32, 4)
    """
    pl = Layout.of(prefill_tp, "prefill_tp")
    dl = Layout.of(decode_tp, "decode_tp")
    p = positive_int("prefill_tp", pl.tp, maximum=MAX_MAP_TP)
    d = positive_int("decode_tp", dl.tp, maximum=MAX_MAP_TP)
    h = positive_int("kv_heads", kv_heads, maximum=MAX_HEADS)
    mla = flag("is_mla", is_mla)
    facts = flag("hybrid", hybrid), flag("sliding_window", sliding_window)
    connector, vllm_version = engine_connector(
        connector, vllm_version=vllm_version, sglang_version=sglang_version
    )
    # None: the default without a GPU to go by (as ``check``): MoRIIO READ.
    conn = resolve_connector(NO_GPU_CONNECTOR if connector is None else connector, vllm_version)
    layers = None if num_layers is None else positive_int("num_layers", num_layers, maximum=1 << 20)
    if not (pl.is_tp_only and dl.is_tp_only):
        from .violations import layout_rules

        shape = _LayoutShape(math.lcm(p, d), h, mla, layers or max(pl.pp, dl.pp), *facts)
        broken, _ = layout_rules(shape, pl, dl, conn.key, None)
        broken = [v for v in broken if v.code not in _NOT_MAP_RULES]
        if broken:
            raise broken[0].exception()
    decode_rows, prefill_rows = _core.transfer_map(
        p, d, h, mla, conn.key, hybrid=facts[0], sliding_window=facts[1]
    )
    # Warnings come from the same pair check `pdtp.check` runs (attention heads play no part
    # in the map, so any count both sizes divide will do).
    warnings = check(
        ModelShape(math.lcm(p, d), h, mla, hybrid=facts[0], sliding_window=facts[1]),
        p,
        d,
        connector=conn,
        alternatives=0,
    ).warnings
    return TransferMap(
        prefill_tp=p,
        decode_tp=d,
        kv_heads=h,
        is_mla=mla,
        connector=conn.name,
        decode=tuple(
            DecodeRank(
                rank,
                tuple(heads),
                tuple(Read(src, tuple(hs)) for src, hs in sources),
                tuple(releases),
                tuple(rotates),
            )
            for rank, heads, sources, releases, rotates in decode_rows
        ),
        prefill=tuple(
            PrefillRank(rank, tuple(heads), tuple(readers), acks, tuple(released_by))
            for rank, heads, readers, released_by, acks in prefill_rows
        ),
        warnings=warnings,
        prefill_layout=pl,
        decode_layout=dl,
        data_parallel=_pairing(pl, dl, conn.kv_connector),
        prefill_stages=_stages(pl, layers),
        decode_stages=_stages(dl, layers),
        engine_version=conn.engine_version,
        mode=conn.mode,
        sliding_window_blocks=_core.sliding_window_rule(conn.key) if facts[1] else None,
        engine=conn.engine_label,
    )


@dataclass(frozen=True)
class _LayoutShape:
    """A shape for the layout rules: every layout loads (the map needs only KV heads), so
    the model is taken to support pipeline parallel and to have experts."""

    num_attention_heads: int
    num_kv_heads: int
    is_mla: bool
    num_layers: int
    hybrid: bool = False
    sliding_window: bool = False
    num_experts: int = 1
    architectures: tuple[str, ...] = ("LlamaForCausalLM",)


# Load rules the map takes for granted (it checks the connector's rules, not the model's).
_NOT_MAP_RULES = {
    "attention_heads_not_divisible",
    "pipeline_unsupported",
    "pipeline_exceeds_layers",
    "expert_parallel_needs_experts",
}


def _pairing(pl: Layout, dl: Layout, kv_connector: str) -> DataParallelPairing | None:
    if pl.dp == 1 and dl.dp == 1:
        return None
    from .deployment.connectors import connector_of  # the connector's module says how

    how = connector_of(kv_connector).pairing(pl.dp)
    return DataParallelPairing(pl.dp, dl.dp, how.pinned_by, how.handshakes, how.eager)


def _stages(layout: Layout, layers: int | None) -> tuple[tuple[int, int], ...]:
    if layout.pp == 1 or layers is None:
        return ()
    return tuple((a, b) for a, b in _core.stage_layers(layout.pp, layers))
