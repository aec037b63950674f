"""Efficiency constants of the performance model: one table per GPU type, overridable per
call, and fitted to measurements by :func:`pdtp.calibrate`.

The defaults start from product.md §3 (mfu 0.5, mbu 0.8, t_fix ≈ 1 ms, α 10–40 µs, 4 GB
reserve) and were adjusted against ``reference/perf-points.csv`` (see
``benchmarks/accuracy.py``): the NVIDIA rows fit α = 30 µs and t_fix = 1.5 ms.
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

# One row per GPU type. AMD's RCCL all-reduce has a higher fixed latency than NCCL over
# NVSwitch, and MI300X's achievable HBM bandwidth is a smaller share of its peak.
DEFAULTS: dict[str, Constants] = {
    "a100": Constants(),
    "h100": Constants(),
    "h200": Constants(),
    "b200": Constants(),
    "mi300x": Constants(mbu=0.7, allreduce_latency_s=40e-6),
    "mi325x": Constants(mbu=0.7, allreduce_latency_s=40e-6),
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
