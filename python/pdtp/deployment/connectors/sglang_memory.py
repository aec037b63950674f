"""SGLang's ``--mem-fraction-static`` default per release (the share of GPU memory its
weights and KV pool get), as :class:`pdtp.engine.Engine` asks it."""

from __future__ import annotations

from typing import Any


def mem_fraction_static(
    gpu: Any,
    release: str | None = None,
    *,
    tp: int = 1,
    pp: int = 1,
    dp_attention: bool = False,
    mla: bool = False,
) -> float:
    """SGLang's default fraction on ``gpu`` for a ``tp`` × ``pp`` instance."""
    from ...engine import sglang_mem_fraction_static

    return sglang_mem_fraction_static(gpu, tp=tp, pp=pp, dp_attention=dp_attention, mla=mla)
