"""The workload every prediction and solve takes: prompt and output lengths and the SLOs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ._validate import positive_int, positive_number
from .errors import ArgumentTypeError

# Sequence lengths beyond this are not real requests (and would overflow KV arithmetic).
MAX_TOKENS = 1 << 24

#: The TTFT statistics an SLO may bound. Only the mean: the request constants are fitted on
#: the measured mean TTFT, and the median is not predicted honestly (out of sample its error
#: is far above the mean's, README "accuracy"; fitting it apart made every figure worse). A
#: bound on a quantile is planned by simulation instead: ``solve(..., slo_percentile=0.5)``.
TTFT_STATISTICS: tuple[str, ...] = ("mean",)


@dataclass(frozen=True)
class Workload:
    """Input/output sequence lengths (tokens) and latency SLOs (ms; ``None`` = no bound).

    ``ttft_statistic`` names the TTFT ``ttft_ms`` bounds: ``"mean"``, a steady stream of
    requests' mean TTFT, what the performance model predicts and :func:`pdtp.simulate`'s
    ``ttft_ms.mean`` measures (:data:`TTFT_STATISTICS` says why there is no median).

    >>> Workload()
    Workload(isl=2048, osl=512, ttft_ms=2000, tpot_ms=50, ttft_statistic='mean')
    """

    isl: int = 2048
    osl: int = 512
    ttft_ms: float | None = 2000
    tpot_ms: float | None = 50
    ttft_statistic: str = "mean"

    def __post_init__(self) -> None:
        positive_int("isl", self.isl, maximum=MAX_TOKENS)
        positive_int("osl", self.osl, maximum=MAX_TOKENS)
        if self.ttft_ms is not None:
            positive_number("ttft_ms", self.ttft_ms)
        if self.tpot_ms is not None:
            positive_number("tpot_ms", self.tpot_ms)
        if not isinstance(self.ttft_statistic, str) or self.ttft_statistic not in TTFT_STATISTICS:
            from ._validate import short_repr
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"ttft_statistic must be one of {', '.join(TTFT_STATISTICS)}, got "
                f"{short_repr(self.ttft_statistic)}: the request constants are fitted on the "
                "mean TTFT and a median is not predicted honestly; to bound a TTFT quantile, "
                "plan on simulation: solve(..., slo_percentile=0.5)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _core_dict(self) -> dict[str, float | None]:
        """The Rust core's view: seconds, not milliseconds."""
        return {
            "isl": float(self.isl),
            "osl": float(self.osl),
            "ttft_s": None if self.ttft_ms is None else self.ttft_ms / 1e3,
            "tpot_s": None if self.tpot_ms is None else self.tpot_ms / 1e3,
        }


def resolve_workload(workload: Any) -> Workload:
    """``None`` → defaults; a ``Workload``; or a mapping of its fields."""
    if workload is None:
        return Workload()
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, dict):
        unknown = set(workload) - {"isl", "osl", "ttft_ms", "tpot_ms", "ttft_statistic"}
        if unknown:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"workload has unknown field(s) {sorted(unknown)}; allowed: isl, osl, "
                "ttft_ms, tpot_ms, ttft_statistic"
            )
        return Workload(**workload)
    raise ArgumentTypeError(
        f"workload must be a pdtp.Workload or a dict, got {type(workload).__name__}"
    )
