"""What a served configuration reports, defined once: :class:`pdtp.Plan` (a planner's
answer) and :class:`pdtp.Estimate` (``pdtp.evaluate`` of a configuration given whole) both
carry these fields, with these meanings; code that reads either takes a :class:`Served`.
``mypy --strict`` checks that both classes provide every field (the assignments at the end),
and ``tests/test_scenario_facts.py`` that the field lists agree.

``gpus`` is not one of them: a Plan's is the pool it was planned on (``Plan.gpus_used`` is
what it occupies), an Estimate's the configuration's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .perf import Estimate
    from .planning.plan import Plan


class Served(Protocol):
    """One served configuration's identity and predicted numbers."""

    #: The model's catalog name.
    @property
    def model(self) -> str: ...
    #: The GPU type (``"mi355x+mi300x"`` for a pool of several).
    @property
    def gpu(self) -> str: ...
    #: The connector's name (no connector: aggregated instances).
    @property
    def connector(self) -> str: ...
    #: Requests/s both sides sustain: min(prefill capacity, decode capacity).
    @property
    def requests_per_s(self) -> float: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    #: Mean time to first token and per output token (ms).
    @property
    def ttft_ms(self) -> float: ...
    @property
    def tpot_ms(self) -> float: ...
    #: Sequences per decode step.
    @property
    def decode_batch(self) -> int: ...
    #: What each side alone sustains (req/s); an aggregated configuration's both.
    @property
    def prefill_capacity_rps(self) -> float: ...
    @property
    def decode_capacity_rps(self) -> float: ...
    #: ``"disagg"`` (a P/D split) or ``"agg"`` (instances doing both phases).
    @property
    def serving(self) -> str: ...


#: The fields every :class:`Served` has, in order.
SERVED_FIELDS: tuple[str, ...] = (
    "model",
    "gpu",
    "connector",
    "requests_per_s",
    "output_tokens_per_s",
    "ttft_ms",
    "tpot_ms",
    "decode_batch",
    "prefill_capacity_rps",
    "decode_capacity_rps",
    "serving",
)

if TYPE_CHECKING:

    def _a_plan_is_served(plan: Plan) -> Served:
        return plan

    def _an_estimate_is_served(estimate: Estimate) -> Served:
        return estimate
