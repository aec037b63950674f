"""SGLang's ``--mem-fraction-static`` default per release: the share of GPU memory its weights
and KV pool get when the launch line names none, as each release computes it from GPU
memory, TP × PP, DP attention, the instance's role and MLA (read from each release's
``server_args.py`` / ``arg_groups/memory_hook.py``; ``tests/data/sglang_mem_fraction.json.gz``
holds what each release's own code answers, from ``tools/sglang_memory_golden.py``).

The eras (first release of each):

- 0.4.6: a table by TP size (0.88 at TP 1 down to 0.79 at 16) up to 80 GiB, above it
  13 GiB held back; 0.4.6.post2 counts TP × PP and tops up GPUs over 96 GiB; 0.4.7 gives
  GPUs over ~176 GiB 0.79.
- 0.4.7.post1: GiB held back by memory bracket plus TP × PP (``reserved_mem``), DP attention
  4 GiB more.
- 0.5.3: an estimate of activations (1.5 × the chunked-prefill size, by memory) and CUDA
  graphs (2 × their batch cap, by memory and TP; DP attention much more), TP × PP / 8 GiB,
  at least 10 GiB on GPUs over 60 GiB; 0.5.4.post1 raises the small GPUs' graph cap;
  0.5.10 reserves prefill (piecewise) graphs of aggregated instances on NVIDIA without DP
  attention or PP (8 MiB per captured size, 1.5 GiB for MLA; never for P/D instances).
- 0.5.15: the role counts: a prefill instance holds no decode graphs, a decode instance's
  activations scale with its running requests (its graph cap), not the chunk; prefill
  graphs are off by default in 0.5.15-0.5.16 and from 0.5.22, on for aggregated instances
  in 0.5.17-0.5.21 (AMD's too from 0.5.19); 0.5.20 gives 24-32 GiB GPUs 4k chunks and
  larger decode graphs.

Not modelled (SGLang changes the fraction further for them): speculative decoding,
multimodal models, LoRA, DeepEP, CPU offload, AMD's aiter attention backend past 8k context
(× 0.85), and GPUs other than NVIDIA's and AMD's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

#: The roles a fraction is asked for (``null``: SGLang's aggregated serving).
ROLES = ("aggregated", "prefill", "decode")


def _v(text: str) -> tuple[int, ...]:
    """``"0.5.10.post1"`` -> ``(0, 5, 10, 1)``: SGLang's releases in order."""
    base, _, post = text.strip().partition(".post")
    return (*(int(x) for x in base.split(".")), int(post or 0))


@cache
def _era(release: str) -> dict[str, Any]:
    """What the release's code does, as flags (release: SGLang's version text)."""
    v = _v(release)

    def since(x: str) -> bool:
        return v >= _v(x)

    return {
        "table": not since("0.4.7.post1"),
        "table_pp": since("0.4.6.post2"),
        "table_big_b200": since("0.4.7"),
        "brackets": since("0.4.7.post1") and not since("0.5.3"),
        "small_graph": 48 if since("0.5.20") else 24 if since("0.5.4.post1") else 16,
        "small_chunk": 4096 if since("0.5.20") else 2048,
        "small_graph_big_tp": 160 if since("0.5.20") else 80,
        "roles": since("0.5.15"),
        # Which instances capture prefill (piecewise) graphs by default: aggregated ones
        # from 0.5.10 (none from 0.5.15, again from 0.5.17, AMD's too from 0.5.19, none
        # from 0.5.22), never a P/D instance.
        "prefill_graphs": (since("0.5.10") and not since("0.5.15"))
        or (since("0.5.17") and not since("0.5.22")),
        "prefill_graphs_amd": since("0.5.19"),
    }


def mem_fraction_static(
    gpu: Any,
    release: str | None = None,
    *,
    tp: int = 1,
    pp: int = 1,
    dp_attention: bool = False,
    mla: bool = False,
    role: str = "aggregated",
) -> float:
    """SGLang ``release``'s default fraction on ``gpu`` (a :class:`pdtp.GPU`: its memory and
    vendor) for an instance of ``tp`` GPUs per pipeline stage (SGLang's ``--tp-size``: DP
    attention splits it into ``tp`` attention ranks), ``pp`` stages, in ``role``
    (``aggregated``, ``prefill``, ``decode``); ``mla``: the model's attention is MLA.
    ``release`` None: the newest SGLang release pdtp knows.

    >>> from pdtp.catalog import gpu
    >>> mem_fraction_static(gpu("h100"), "0.5.23", tp=8, role="prefill")
    0.831
    """
    if release is None:
        from .sglang import DEFAULT_SGLANG_VERSION

        release = DEFAULT_SGLANG_VERSION
    return _fraction(
        float(gpu.memory_bytes) / 2**20, str(gpu.vendor), release, int(tp), int(pp),
        bool(dp_attention), bool(mla), role,
    )  # fmt: skip


@cache
def _fraction(
    mem: float, vendor: str, release: str, tp: int, pp: int, dp_att: bool, mla: bool, role: str
) -> float:
    e = _era(release)
    amd = vendor == "AMD"
    dp = tp if dp_att else 1
    if e["table"]:
        par = tp * pp if e["table_pp"] else tp
        if mem <= 81920:
            frac = 0.79 if par >= 16 else 0.81 if par >= 8 else 0.85 if par >= 4 else (
                0.87 if par >= 2 else 0.88)  # fmt: skip
        elif not e["table_pp"]:
            return (mem - 1024 * 13) / mem
        else:
            frac = 0.88
        if e["table_big_b200"] and mem > 180 * 1000 and not amd:
            return 0.79
        if mem > 96 * 1024:
            frac = min(frac + 48 * 1024 * (1 - frac) / mem, (mem - 1024 * 18) / mem)
        return frac
    if e["brackets"]:
        par = tp * pp
        if mem < 35 * 1024:
            reserved = (2.8 + par / 10) * 1024
        elif mem < 90 * 1024:
            reserved = (9.5 + par / 2) * 1024
        elif mem < 160 * 1024:
            reserved = (12 + par / 2) * 1024
        else:
            reserved = 32 * 1024
        if dp_att:
            reserved += 4 * 1024
        return round((mem - reserved) / mem, 3)
    # 0.5.3 on: chunked-prefill size and decode graph cap by memory.
    if mem < 20 * 1024:
        chunk, graph = 2048, 8
    elif mem < 35 * 1024:
        chunk = e["small_chunk"]
        graph = e["small_graph"] if tp < 4 else e["small_graph_big_tp"]
    elif mem < 60 * 1024:
        chunk, graph = 4096, 32 if tp < 4 else 160
    elif mem < 160 * 1024:
        chunk, graph = 8192, 256 if tp < 4 else 512
    else:
        chunk, graph = 16384, 512
    decode_side = not e["roles"] or role != "prefill"
    # From 0.5.15 a decode instance's activations scale with its running requests.
    activation = max(graph, 2048) if e["roles"] and role == "decode" else max(chunk, 2048)
    reserved = 512 + activation * 1.5 + tp * pp / 8 * 1024
    if decode_side:
        reserved += graph * 2
        if dp_att:
            reserved += graph * dp * 3
            if graph > 300:
                reserved += graph * dp * 1.5
    if (
        e["prefill_graphs"]
        and role == "aggregated"
        and not dp_att
        and pp == 1
        and (not amd or e["prefill_graphs_amd"])
    ):
        reserved += 1.5 * 1024 if mla else 8 * _prefill_sizes(chunk)
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


def _prefill_sizes(top: int) -> int:
    """How many prefill graph sizes SGLang captures up to ``top`` tokens."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, top + 1, 512),
    ]
    return sum(1 for s in sizes if s <= top)
