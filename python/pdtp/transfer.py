"""``pdtp.transfer_map``: which prefill ranks each decode rank takes KV from, which KV heads
move, which prefill ranks each decode rank releases and the release acks each prefill rank
waits for, as the chosen vLLM release does it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import _core
from ._validate import flag, positive_int
from .check import MAX_HEADS, CheckWarning, ModelShape, check
from .connectors import resolve_connector

# One row per rank is returned, so the sizes are bounded to keep the output printable.
MAX_MAP_TP: int = _core.MAX_MAP_TP


@dataclass(frozen=True)
class Read:
    """Heads one decode rank receives from one prefill rank."""

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

    @property
    def prefill_ranks(self) -> tuple[int, ...]:
        return tuple(r.prefill_rank for r in self.reads)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "heads": list(self.heads),
            "reads": [r.to_dict() for r in self.reads],
            "releases": list(self.releases),
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
class TransferMap:
    """The transfer plan of one valid pair. KV-head indices follow vLLM's QKV layout; for
    MLA models index 0 stands for the whole latent, which every rank holds."""

    prefill_tp: int
    decode_tp: int
    kv_heads: int
    is_mla: bool
    connector: str
    decode: tuple[DecodeRank, ...]
    prefill: tuple[PrefillRank, ...]
    warnings: tuple[CheckWarning, ...]
    #: The vLLM version the map is of, and MoRIIO's mode ("read"/"write"; None for NIXL).
    vllm_version: str | None = None
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill_tp": self.prefill_tp,
            "decode_tp": self.decode_tp,
            "kv_heads": self.kv_heads,
            "is_mla": self.is_mla,
            "connector": self.connector,
            "vllm_version": self.vllm_version,
            "mode": self.mode,
            "decode": [r.to_dict() for r in self.decode],
            "prefill": [r.to_dict() for r in self.prefill],
            "warnings": [w.to_dict() for w in self.warnings],
        }


def transfer_map(
    prefill_tp: int,
    decode_tp: int,
    *,
    kv_heads: int,
    is_mla: bool = False,
    connector: str = "moriio",
    vllm_version: str | None = None,
) -> TransferMap:
    """The transfer map of a valid pair under ``connector`` as vLLM ``vllm_version``
    (default: the newest release pdtp knows) runs it. An invalid pair raises the error vLLM
    would raise (``RuleValueError``, ``RuleNotImplementedError``, ``RuleAssertionError``,
    ``RuleZeroDivisionError``, ``RuleConnectorError``; all ``PdtpError``), or
    ``InvalidArgumentError`` where vLLM raises nothing but the pair cannot work.

    >>> import pdtp
    >>> m = pdtp.transfer_map(4, 8, kv_heads=4)
    >>> [d.prefill_ranks[0] for d in m.decode]
    [0, 0, 1, 1, 2, 2, 3, 3]
    """
    p = positive_int("prefill_tp", prefill_tp, maximum=MAX_MAP_TP)
    d = positive_int("decode_tp", decode_tp, maximum=MAX_MAP_TP)
    h = positive_int("kv_heads", kv_heads, maximum=MAX_HEADS)
    mla = flag("is_mla", is_mla)
    conn = resolve_connector(connector, vllm_version)
    decode_rows, prefill_rows = _core.transfer_map(p, d, h, mla, conn.key)
    # Warnings come from the same pair check `pdtp.check` runs (attention heads play no part
    # in the map, so any count both sizes divide will do).
    warnings = check(
        ModelShape(math.lcm(p, d), h, mla), p, d, connector=conn, alternatives=0
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
            )
            for rank, heads, sources, releases in decode_rows
        ),
        prefill=tuple(
            PrefillRank(rank, tuple(heads), tuple(readers), acks, tuple(released_by))
            for rank, heads, readers, released_by, acks in prefill_rows
        ),
        warnings=warnings,
        vllm_version=conn.vllm_version,
        mode=conn.mode,
    )
