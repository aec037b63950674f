"""``pdtp.transfer_map``: which prefill ranks each decode rank reads, which KV heads move,
and the release acks each prefill rank waits for."""

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
    reads: tuple[Read, ...]

    @property
    def prefill_ranks(self) -> tuple[int, ...]:
        return tuple(r.prefill_rank for r in self.reads)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "heads": list(self.heads),
            "reads": [r.to_dict() for r in self.reads],
        }


@dataclass(frozen=True)
class PrefillRank:
    rank: int
    heads: tuple[int, ...]
    readers: tuple[int, ...]
    expected_acks: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "heads": list(self.heads),
            "readers": list(self.readers),
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill_tp": self.prefill_tp,
            "decode_tp": self.decode_tp,
            "kv_heads": self.kv_heads,
            "is_mla": self.is_mla,
            "connector": self.connector,
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
) -> TransferMap:
    """The transfer map of a valid pair. An invalid pair raises the error vLLM would raise
    (``RuleValueError``/``RuleNotImplementedError``/``RuleAssertionError``, all ``PdtpError``).

    >>> import pdtp
    >>> m = pdtp.transfer_map(4, 8, kv_heads=4)
    >>> [d.prefill_ranks[0] for d in m.decode]
    [0, 0, 1, 1, 2, 2, 3, 3]
    """
    p = positive_int("prefill_tp", prefill_tp, maximum=MAX_MAP_TP)
    d = positive_int("decode_tp", decode_tp, maximum=MAX_MAP_TP)
    h = positive_int("kv_heads", kv_heads, maximum=MAX_HEADS)
    mla = flag("is_mla", is_mla)
    conn = resolve_connector(connector)
    decode_rows, prefill_rows = _core.transfer_map(p, d, h, mla, conn.name)
    # Warnings come from the same pair check `pdtp.check` runs (attention heads play no part
    # in the map, so any count both sizes divide will do).
    warnings = check(
        ModelShape(math.lcm(p, d), h, mla), p, d, connector=conn.name, alternatives=0
    ).warnings
    return TransferMap(
        prefill_tp=p,
        decode_tp=d,
        kv_heads=h,
        is_mla=mla,
        connector=conn.name,
        decode=tuple(
            DecodeRank(rank, tuple(heads), tuple(Read(src, tuple(hs)) for src, hs in sources))
            for rank, heads, sources in decode_rows
        ),
        prefill=tuple(
            PrefillRank(rank, tuple(heads), tuple(readers), acks)
            for rank, heads, readers, acks in prefill_rows
        ),
        warnings=warnings,
    )
