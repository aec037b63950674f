"""GPU types: the hardware numbers the roofline performance model and the memory check use."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from .errors import InvalidArgumentError

__all__ = ["GPU"]

_VENDOR_ENV: Final[Mapping[str, str]] = {
    "AMD": "HIP_VISIBLE_DEVICES",
    "NVIDIA": "CUDA_VISIBLE_DEVICES",
}
# Weight dtypes and the tensor-core peak their GEMMs run at, best first. 16/32-bit weights run
# at the bf16 peak (vLLM serves fp32 checkpoints in bf16). Weight-only int8/fp8 kernels on a
# GPU without the narrow peak fall back to bf16 math, hence the bf16 fallback everywhere.
_PEAK_ORDER: Final[Mapping[str, tuple[str, ...]]] = {
    "bf16": ("bf16",),
    "fp16": ("bf16",),
    "fp32": ("bf16",),
    "fp8": ("fp8", "bf16"),
    "int8": ("int8", "bf16"),
    "fp4": ("fp4", "fp8", "bf16"),
    "int4": ("fp4", "fp8", "bf16"),
}


#: The GPU type a pool that names none is planned on.
DEFAULT_GPU = "mi300x"


@dataclass(frozen=True, slots=True, kw_only=True)
class GPU:
    """One GPU type. Bytes and FLOP/s are plain SI units (bytes, bytes/s, FLOP/s)."""

    #: Short catalog key, e.g. "mi300x".
    name: str
    display_name: str
    vendor: str  # "AMD" | "NVIDIA"
    #: HBM capacity in bytes (GiB/MiB figures converted with powers of two).
    memory_bytes: int
    #: Peak HBM bandwidth, bytes/s.
    hbm_bandwidth: float
    #: Dense tensor-core peaks, FLOP/s (None where the GPU has no such datapath).
    bf16_flops: float
    fp8_flops: float | None = None
    fp4_flops: float | None = None
    int8_flops: float | None = None
    #: Intra-node GPU-to-GPU bandwidth per GPU, one direction, bytes/s (NVLink / xGMI / PCIe).
    link_bandwidth: float
    gpus_per_node: int
    #: GPUs one NVLink/xGMI domain joins at ``link_bandwidth`` (GB200 NVL72: 72, a rack);
    #: None: one node (``gpus_per_node``).
    scaleup_gpus: int | None = None
    #: The scale-out network (InfiniBand/RoCE) per GPU, one direction, bytes/s, and its
    #: latency in seconds: what collectives over more GPUs than one domain cross. None:
    #: one 400 Gb/s NIC per GPU (50e9 B/s, 10 µs), the commonest build.
    scaleout_bandwidth: float | None = None
    scaleout_latency: float | None = None
    scaleout_source: str = ""
    aliases: tuple[str, ...] = field(default=())
    #: Where the numbers come from.
    source: str = ""
    arch: str = ""
    verified: bool = True
    #: On-demand cloud price of one GPU-hour in USD (None: unknown), dated and sourced in
    #: ``price_source``; planners with a cost objective take ``prices={...}`` overrides.
    price_per_hour: float | None = None
    price_source: str = ""

    def __post_init__(self) -> None:
        who = f"GPU {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidArgumentError(
                f"GPU: field 'name' must be a non-empty string, got {self.name!r}"
            )
        if self.vendor not in _VENDOR_ENV:
            raise InvalidArgumentError(
                f"{who}: field 'vendor' must be 'AMD' or 'NVIDIA', got {self.vendor!r}"
            )
        if (
            isinstance(self.memory_bytes, bool)
            or not isinstance(self.memory_bytes, int)
            or self.memory_bytes <= 0
        ):
            raise InvalidArgumentError(
                f"{who}: field 'memory_bytes' must be a positive integer, got {self.memory_bytes!r}"
            )
        if (
            isinstance(self.gpus_per_node, bool)
            or not isinstance(self.gpus_per_node, int)
            or self.gpus_per_node <= 0
        ):
            raise InvalidArgumentError(
                f"{who}: field 'gpus_per_node' must be a positive integer, "
                f"got {self.gpus_per_node!r}"
            )
        if self.scaleup_gpus is not None and (
            isinstance(self.scaleup_gpus, bool)
            or not isinstance(self.scaleup_gpus, int)
            or self.scaleup_gpus < self.gpus_per_node
        ):
            raise InvalidArgumentError(
                f"{who}: field 'scaleup_gpus' must be None or an integer ≥ gpus_per_node "
                f"({self.gpus_per_node}), got {self.scaleup_gpus!r}"
            )
        for fname in ("hbm_bandwidth", "bf16_flops", "link_bandwidth"):
            _check_rate(who, fname, getattr(self, fname), optional=False)
        for fname in (
            "fp8_flops",
            "fp4_flops",
            "int8_flops",
            "price_per_hour",
            "scaleout_bandwidth",
            "scaleout_latency",
        ):
            _check_rate(who, fname, getattr(self, fname), optional=True)
        if isinstance(self.aliases, str) or not all(isinstance(a, str) for a in self.aliases):
            raise InvalidArgumentError(f"{who}: field 'aliases' must be a sequence of strings")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if not isinstance(self.display_name, str) or not self.display_name:
            object.__setattr__(self, "display_name", self.name)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for GEMMs on weights of ``dtype``: fp8 uses the fp8 peak when the
        GPU has one, 4-bit formats the fp4 peak, else the next wider one; bf16 otherwise."""
        key = dtype.strip().lower() if isinstance(dtype, str) else dtype
        order = _PEAK_ORDER.get(key) if isinstance(key, str) else None
        if order is None:
            raise InvalidArgumentError(f"dtype must be one of {sorted(_PEAK_ORDER)}, got {dtype!r}")
        for candidate in order:
            value = self._peak(candidate)
            if value is not None:
                return value
        return self.bf16_flops

    def _peak(self, kind: str) -> float | None:
        if kind == "bf16":
            return self.bf16_flops
        if kind == "fp8":
            return self.fp8_flops
        if kind == "fp4":
            return self.fp4_flops
        return self.int8_flops

    @property
    def visible_devices_env(self) -> str:
        """The environment variable that selects devices for a vLLM process on this GPU."""
        return _VENDOR_ENV[self.vendor]

    @property
    def scaleup_domain(self) -> int:
        """GPUs one NVLink/xGMI domain joins (a node unless ``scaleup_gpus`` says more)."""
        return self.scaleup_gpus or self.gpus_per_node

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def generation(self) -> str | None:
        """The architecture generation, read from ``arch`` (``"Hopper (sm_90)"`` → ``hopper``,
        ``"CDNA 3 (gfx942)"`` → ``cdna3``, ``"Ada Lovelace (sm_89)"`` → ``ada``): the family's
        first word and its number. Types of one generation share fitted constants when one has
        no measurements (GB200 takes B200's). None when ``arch`` is empty."""
        words = self.arch.split("(")[0].split()
        if not words:
            return None
        number = words[1] if len(words) > 1 and words[1].isdigit() else ""
        return words[0].lower() + number

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        out["visible_devices_env"] = self.visible_devices_env
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPU:
        """Inverse of :meth:`to_dict`; lets users describe a GPU the catalog lacks."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(
                f"GPU.from_dict expects a mapping, got {type(data).__name__}"
            )
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in data if k not in names and k != "visible_devices_env")
        if unknown:
            raise InvalidArgumentError(f"GPU.from_dict: unknown field(s) {unknown}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:  # a required field is missing
            raise InvalidArgumentError(f"GPU.from_dict: {exc}") from None


def _check_rate(who: str, fname: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        kind = "a positive number or None" if optional else "a positive number"
        raise InvalidArgumentError(f"{who}: field {fname!r} must be {kind}, got {value!r}")
