"""Efficiency constants of the performance model: one table per GPU type, overridable per
call, and fitted to measurements by :func:`pdtp.calibrate`.

The field defaults of :class:`Constants` are product.md §3's starting points (mfu 0.5, mbu 0.8,
t_fix ≈ 1 ms, α 10–40 µs, 4 GB reserve) and serve GPU types without measurements. The rows of
:data:`DEFAULTS` for measured GPU types were fitted to ``reference/perf-points.csv`` with
:func:`pdtp.calibrate` and its row predictions (``benchmarks/accuracy.py`` reports the errors),
then rounded and kept inside physical limits (mbu ≤ 0.95, mfu ≤ 0.7):

- Hopper (h100, h200): the TPOT and throughput rows — 94 vLLM 0.12 aggregated-serving rows of
  Qwen3-32B on H100 (TP 1-8, isl 1k-4k, osl 128-1k, concurrency 1-144) and three TensorRT-LLM
  max-throughput rows. They fit mbu 0.9 (the fit runs to the 0.95 cap; 0.9 is what H100 copy
  kernels reach, and the un-read input embedding makes the apparent share higher),
  mfu_prefill 0.55 (through the chunked-prefill share of aggregated decode steps), α 30 µs
  and t_fix 1.5 ms.
  ``ttft_queue_factor`` stays at 1.8: the aggregated rows' TTFT holds queueing behind other
  prompts at concurrency up to 144 (their fit is q ≈ 3.5), which is no estimate of a
  disaggregated prefill instance's queue.
- CDNA 3 (mi300x; mi325x by analogy, unmeasured): four vLLM 0.8.3 max-throughput rows of
  Llama-3.1-70B fp8 on MI300X TP8 (batches capped at that vLLM's max_num_seqs of 256) fit
  α 50 µs and t_fix 2 ms at mbu 0.7, every row within 17%. (mbu 0.6 fits them as well but
  changes the default 24-GPU plan the README shows; four rows do not justify that.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ._validate import positive_number
from .errors import InvalidArgumentError


@dataclass(frozen=True)
class Constants:
    """Efficiency constants. Fractions are of the GPU's peak; times in seconds."""

    mfu_prefill: float = 0.5
    mfu_decode: float = 0.5
    mbu: float = 0.8
    allreduce_latency_s: float = 30e-6
    step_overhead_s: float = 1.5e-3
    reserve_bytes: float = 4e9
    ttft_queue_factor: float = 1.8
    # Per-rank KV transfer between instances: a 400 Gb/s RDMA NIC per GPU.
    kv_transfer_bandwidth: float = 50e9
    kv_transfer_latency_s: float = 1e-3
    # vLLM's max_num_seqs: the largest decode batch an instance runs.
    max_num_seqs: int = 1024

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = positive_number(f.name, getattr(self, f.name))
            if f.name in _FRACTIONS and v > 1.0:
                raise InvalidArgumentError(f"{f.name} must be in (0, 1], got {v}")

    def replace(self, **overrides: Any) -> Constants:
        """A copy with some constants changed (unknown names are an error)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise InvalidArgumentError(
                f"unknown constant(s) {sorted(unknown)}; allowed: {', '.join(sorted(names))}"
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_FRACTIONS = {"mfu_prefill", "mfu_decode", "mbu"}

# One row per GPU type (fitted where the module docstring says). AMD's RCCL all-reduce has a
# higher fixed latency than NCCL over NVSwitch, and vLLM on MI300X reaches a smaller share of
# its HBM peak (its paged-attention kernels read the KV cache well below the peak).
_HOPPER = Constants(mbu=0.9, mfu_prefill=0.55)
_CDNA3 = Constants(mbu=0.7, allreduce_latency_s=50e-6, step_overhead_s=2e-3)
DEFAULTS: dict[str, Constants] = {
    "a100": Constants(),
    "h100": _HOPPER,
    "h200": _HOPPER,
    "b200": Constants(),
    "mi300x": _CDNA3,
    "mi325x": _CDNA3,
    "mi355x": Constants(mbu=0.7, allreduce_latency_s=40e-6),
}
GENERIC = Constants()


def constants_for(gpu_name: str, override: Any = None) -> Constants:
    """The constants for a GPU type, with ``override`` applied: ``None``, a
    :class:`Constants` (used as is), or a dict of the fields to change."""
    if isinstance(override, Constants):
        return override
    base = DEFAULTS.get(gpu_name, GENERIC)
    if override is None:
        return base
    if isinstance(override, dict):
        return base.replace(**override)
    raise TypeError(
        f"constants must be a pdtp.Constants or a dict of overrides, got {type(override).__name__}"
    )
