"""Type stubs for pdtp's Rust core (``src/py/``). Kept honest by mypy.stubtest."""

from collections.abc import Sequence
from typing import Any, final

__all__ = [
    "resolve_sglang_connector",
    "sglang_check_pair",
    "sglang_connector_names",
    "sglang_releases",
    "CAPACITY_SCALE",
    "ConnectorInfo",
    "CONSTANT_FIELDS",
    "ConstantInputs",
    "GpuInputs",
    "ModelInputs",
    "ServingPoint",
    "DisaggregatedPoint",
    "predict_disaggregated",
    "collective_links",
    "fit_constants",
    "layout_sides",
    "predict_points",
    "predict_serving",
    "step_time",
    "MAX_MAP_TP",
    "SIM_MAX_OUTPUT_TOKENS",
    "SIM_MAX_REQUESTS",
    "SIM_MAX_TRACE_BYTES",
    "Percentiles",
    "RateSearch",
    "SideStats",
    "SimConfig",
    "SimPool",
    "SimResult",
    "SimTrace",
    "max_rate_within_slo",
    "parse_trace",
    "simulate",
    "alternatives",
    "Candidates",
    "Choice",
    "GpuType",
    "ModelSpec",
    "Moves",
    "Pair",
    "Pattern",
    "Placed",
    "Row",
    "Scenario",
    "Stage",
    "candidates",
    "check_layouts",
    "connector_gpu_violation",
    "connector_kv_settings_violation",
    "connector_names",
    "expected_ack_count",
    "layout_load_violations",
    "layout_option",
    "layouts_load",
    "moriio_port_offsets",
    "pack",
    "parse_layout",
    "remote_tp_rank",
    "register_connector",
    "resolve_connector",
    "side_option",
    "stage_layers",
    "sweep_space",
    "transfer_map",
    "sliding_window_blocks",
    "sliding_window_rule",
    "vllm_releases",
    "validate_kv_heads",
]

MAX_MAP_TP: int
CAPACITY_SCALE: float
SIM_MAX_REQUESTS: int
SIM_MAX_OUTPUT_TOKENS: int
SIM_MAX_TRACE_BYTES: int

# Inputs of the performance model: typed values built once per model / GPU / constants
# (pdtp.perf.model_inputs, gpu_inputs, constant_inputs), converted to the core's structs once.

@final
class ModelInputs:
    """A model's performance inputs (the fields of ``pdtp.perf.model_inputs``)."""

    def __new__(cls, **fields: float) -> ModelInputs: ...

@final
class GpuInputs:
    """One GPU type's performance inputs at one weight dtype (``pdtp.perf.gpu_inputs``)."""

    def __new__(cls, **fields: float) -> GpuInputs: ...

@final
class ConstantInputs:
    """The performance constants, every name of ``CONSTANT_FIELDS`` and no other."""

    def __new__(cls, **values: float) -> ConstantInputs: ...

_Work = dict[str, float | None]
# (tp, loads, fits_weights, fits_kv, latency_s, meets_slo, batch, max_batch, rps, units)
_SideRow = tuple[int, bool, bool, bool, float, bool, int, int, float, int]

def remote_tp_rank(local_tp_rank: int, local_tp_size: int, remote_tp_size: int) -> int:
    """vLLM's ``get_moriio_remote_tp_rank``: the remote rank a local rank reads from."""

def validate_kv_heads(
    local_tp_size: int, remote_tp_size: int, total_num_kv_heads: int, is_mla: bool
) -> None:
    """vLLM's ``validate_moriio_heterogeneous_tp_kv_heads``."""

def expected_ack_count(producer_tp_size: int, consumer_tp_size: int) -> int:
    """vLLM's ``get_moriio_expected_ack_count``."""

# (code, side, message, hint, vllm_error, when, user_error, user_message, consequence)
_Violation = tuple[str, str, str, str, str, str, str, str, str]
# (code, message, consequence)
_Warning = tuple[str, str, str]

def connector_gpu_violation(connector: str, vendor: str) -> _Violation | None: ...
def connector_kv_settings_violation(
    connector: str,
    page: tuple[int | None, int | None],
    dtype: tuple[str | None, str | None],
) -> _Violation | None: ...
def alternatives(
    num_attention_heads: int,
    num_kv_heads: int,
    is_mla: bool,
    prefill_tp: int,
    decode_tp: int,
    connector: str,
    max_acks: int | None,
    prefill_sizes: list[int],
    decode_sizes: list[int],
    limit: int,
    hybrid: bool = False,
    sliding_window: bool = False,
) -> list[tuple[int, int]]: ...
def transfer_map(
    prefill_tp: int,
    decode_tp: int,
    kv_heads: int,
    is_mla: bool,
    connector: str,
    hybrid: bool = False,
    sliding_window: bool = False,
) -> tuple[
    list[tuple[int, list[int], list[tuple[int, list[int]]], list[int], list[int]]],
    list[tuple[int, list[int], list[int], list[int], int]],
]: ...
def sliding_window_rule(connector: str) -> str | None: ...
def sliding_window_blocks(
    rule: str, window_tokens: int, block_size: int, request_blocks: int
) -> int: ...

# ---- layouts -------------------------------------------------------------------------------
_LayoutModel = tuple[int, int, bool, int, int, bool, bool, bool, int, int]

def parse_layout(text: str) -> tuple[int, int, int, bool]: ...
def stage_layers(pp: int, num_layers: int) -> list[tuple[int, int]]: ...
def check_layouts(
    model: _LayoutModel,
    prefill: tuple[int, int, int, bool],
    decode: tuple[int, int, int, bool],
    connector: str,
    max_acks: int | None = None,
) -> tuple[list[_Violation], list[_Warning]]: ...
def moriio_port_offsets(
    connector: str, dp_rank: int, tp_rank: int, tp: int
) -> tuple[int, int] | None: ...
def layout_load_violations(
    model: _LayoutModel, layout_: tuple[int, int, int, bool], side: str, connector: str
) -> list[_Violation]: ...
def layouts_load(model: _LayoutModel, layouts: list[tuple[int, int, int, bool]]) -> list[bool]: ...

@final
class ConnectorInfo:
    """A connector resolved at one vLLM version."""

    @property
    def name(self) -> str: ...
    @property
    def vllm_version(self) -> str: ...
    @property
    def rules_version(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def kv_connector(self) -> str: ...
    @property
    def prefill_role(self) -> str: ...
    @property
    def decode_role(self) -> str: ...
    @property
    def mode(self) -> str | None: ...
    @property
    def requires_replicated_heads(self) -> bool: ...
    @property
    def summary(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def engine_label(self) -> str: ...
    @property
    def aliases(self) -> list[str]: ...
    @property
    def gpu_vendor(self) -> str | None: ...
    @property
    def mixes_vendor(self) -> str | None: ...
    @property
    def default_for(self) -> list[str]: ...
    @property
    def tp_only(self) -> str | None: ...

def resolve_connector(key: str) -> ConnectorInfo:
    """``"name"`` or ``"name@X.Y.Z"`` resolved; unknown names/versions raise pdtp errors."""

def connector_names() -> list[str]: ...
def register_connector(
    name: str,
    kv_connector: str,
    prefill_role: str,
    decode_role: str,
    rules_of: str,
    summary: str,
    gpu_vendor: str | None = None,
    mixes_vendor: str | None = None,
    mode: str | None = None,
    aliases: Sequence[str] = ...,
) -> None:
    """Add a connector with the rules of ``rules_of`` for the rest of the process."""

def vllm_releases() -> list[str]:
    """Every vLLM release the golden data covers, oldest first."""

def side_option(
    model: ModelInputs,
    gpu: GpuInputs,
    consts: ConstantInputs,
    work: _Work,
    tp: int,
    prefill: bool,
    util: float,
) -> _SideRow: ...
def layout_option(
    model: ModelInputs,
    rules_model: _LayoutModel,
    gpu: GpuInputs,
    consts: ConstantInputs,
    work: _Work,
    layout_: tuple[int, int, int, bool],
    role: str,
    util: float,
    max_num_batched_tokens: float,
) -> tuple[_SideRow, float, int, float]: ...

_SpaceRow = tuple[str, tuple[int, int, int, bool], int, float, float, float, int, int]
_SpacePlan = tuple[int, int, int, int, int]

def sweep_space(
    scenario: Scenario, budgets: list[int]
) -> tuple[list[_SpaceRow], list[tuple[_SpacePlan | None, _SpacePlan | None]]]: ...

# ---- the planning core ---------------------------------------------------------------------

@final
class ModelSpec:
    """One model of a scenario: performance inputs, workload, GPU numbers per pool type."""

    def __new__(
        cls,
        *,
        name: str,
        model: ModelInputs,
        workload: _Work,
        gpus: list[GpuInputs],
        demand_rps: float = 0.0,
        weight: float = 1.0,
        supports_pp: bool = False,
        memory_fractions: list[list[tuple[tuple[int, int, int, str], float]]] | None = None,
        sliding_window: bool = False,
        output_groups: int = 0,
    ) -> ModelSpec: ...
    @property
    def name(self) -> str: ...

@final
class GpuType:
    """One GPU type of a pool: vendor, constants, node size, price (PRICE_SCALE units)."""

    def __new__(
        cls,
        *,
        name: str,
        vendor: str,
        constants: ConstantInputs,
        node_size: int,
        price: int = 0,
        max_num_batched_tokens: float = ...,
    ) -> GpuType: ...
    @property
    def name(self) -> str: ...

_Running = tuple[int | None, str, tuple[int, int, int, bool], int]
_LayoutSpace = tuple[list[str] | None, list[tuple[int, int, int, bool]]] | None

@final
class Scenario:
    """The planning question as one typed value."""

    def __new__(
        cls,
        *,
        models: list[ModelSpec],
        gpu_types: list[GpuType],
        nodes: list[tuple[int, int, int]],
        connector: str,
        objective: str,
        max_tp: int | None = None,
        max_acks: int | None = None,
        gpu_memory_utilization: float = 0.9,
        move_cost: tuple[float, float, float, float] | None = None,
        running: tuple[_Running, _Running] | None = None,
        mode: str = "disagg",
        layouts: _LayoutSpace = None,
    ) -> Scenario: ...
    @property
    def connector(self) -> str: ...
    @property
    def total_gpus(self) -> int: ...

@final
class Row:
    """One candidate row: a model's instance kind (role, GPU type, layout)."""

    @property
    def model(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def gpu_type(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def layout(self) -> tuple[int, int, int, bool]: ...
    @property
    def gpus(self) -> int: ...
    @property
    def loads(self) -> bool: ...
    @property
    def fits_weights(self) -> bool: ...
    @property
    def fits_kv(self) -> bool: ...
    @property
    def latency_s(self) -> float: ...
    @property
    def ttft_s(self) -> float: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def meets_slo(self) -> bool: ...
    @property
    def batch(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def requests_per_s(self) -> float: ...
    @property
    def units(self) -> int: ...
    @property
    def placeable(self) -> bool: ...
    @property
    def piece(self) -> int: ...
    @property
    def pieces(self) -> int: ...
    @property
    def most(self) -> int: ...
    @property
    def need(self) -> int | None: ...
    @property
    def usable(self) -> bool: ...

@final
class Pair:
    """A (prefill row, decode row) pair of one model."""

    @property
    def model(self) -> int: ...
    @property
    def prefill(self) -> int: ...
    @property
    def decode(self) -> int: ...

@final
class Choice:
    """One model's choice in a plan: rows and instance counts."""

    def __new__(
        cls, prefill: int, decode: int, prefill_instances: int, decode_instances: int
    ) -> Choice: ...
    @property
    def prefill(self) -> int: ...
    @property
    def decode(self) -> int: ...
    @property
    def prefill_instances(self) -> int: ...
    @property
    def decode_instances(self) -> int: ...

@final
class Stage:
    """One CP-SAT stage: optimise Σ coef × term."""

    @property
    def sense(self) -> str: ...
    @property
    def terms(self) -> list[tuple[str, int]]: ...

@final
class Pattern:
    """A node fill pattern of one node class."""

    @property
    def class_index(self) -> int: ...
    @property
    def items(self) -> list[tuple[int, int]]: ...

@final
class Placed:
    """One instance's place on the nodes."""

    @property
    def node(self) -> int: ...
    @property
    def nodes(self) -> list[int]: ...
    @property
    def gpu_type(self) -> int: ...
    @property
    def model(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def devices(self) -> list[int]: ...

def pack(instances: list[tuple[str, int]], gpus_per_node: int) -> list[Placed]:
    """A plan's instances ``(role, GPUs)`` in plan order on nodes of ``gpus_per_node`` GPUs
    when it lists no placement: the planners' placement on the fewest whole nodes."""

@final
class Moves:
    """Re-plan data: integer weights and each running side's (row, instances, size)."""

    @property
    def start(self) -> int: ...
    @property
    def stop(self) -> int: ...
    @property
    def restart(self) -> int: ...
    @property
    def gpu(self) -> int: ...
    @property
    def prefill(self) -> tuple[int | None, int, int]: ...
    @property
    def decode(self) -> tuple[int | None, int, int]: ...

_Solution = list[Choice | None]

@final
class Candidates:
    """Everything a planner decides over for one scenario."""

    @property
    def rows(self) -> list[Row]: ...
    @property
    def pairs(self) -> list[Pair]: ...
    @property
    def pair_count(self) -> int: ...
    @property
    def rejected(self) -> list[Pair]: ...
    @property
    def classes(self) -> list[tuple[int, int, int]]: ...
    @property
    def sizes(self) -> list[list[int]]: ...
    def patterns(self) -> list[Pattern]: ...
    @property
    def stages(self) -> list[Stage]: ...
    @property
    def row_cost(self) -> list[int]: ...
    @property
    def ratio_coefficients(self) -> tuple[list[int], list[int]]: ...
    @property
    def fleet_terms(self) -> tuple[list[int], list[bool], list[int], list[int]]: ...
    @property
    def moves(self) -> Moves | None: ...
    @property
    def models(self) -> int: ...
    @property
    def is_fleet(self) -> bool: ...
    @property
    def serves_demand(self) -> bool: ...
    @property
    def fraction_scale(self) -> int: ...
    def usage(self, solution: _Solution) -> list[tuple[int, int]]: ...
    def bound(self, stage: int, fixed: list[int]) -> int | None: ...
    def hint(self) -> _Solution | None: ...
    @property
    def out_of_time(self) -> bool: ...
    def pair_bounds(self) -> list[int | None] | None: ...
    def competitive(self, incumbent: _Solution) -> tuple[list[int], int | None] | None: ...
    def values(self, solution: _Solution) -> list[Any]: ...
    def compare(self, a: _Solution, b: _Solution) -> int: ...
    def feasible(self, solution: _Solution) -> bool | None: ...
    def oracle(
        self, time_limit_s: float | None = None, reduced: bool = True
    ) -> tuple[_Solution | None, bool]: ...
    def best_of_mode(self, mode: str) -> _Solution | None: ...
    def rule_blind(self) -> _Solution | None: ...
    def place(
        self, solution: _Solution, usage: list[tuple[int, int]] | None = None
    ) -> list[Placed]: ...
    def prove(
        self,
        incumbent: _Solution,
        pairs: list[int],
        time_limit_s: float | None = None,
        budget: int | None = None,
    ) -> _Solution | None: ...

def candidates(scenario: Scenario, time_limit_s: float | None = None) -> Candidates: ...

# ---- performance model v2 ------------------------------------------------------------------
_Layout = tuple[int, int, int, bool]
_ServingWork = dict[str, float | str | None]
_PointTuple = tuple[
    ModelInputs,
    GpuInputs,
    ConstantInputs,
    _Layout,
    _ServingWork,
    list[tuple[str, int]],
    tuple[float, float, float, float],
]

CONSTANT_FIELDS: list[str]

@final
class ServingPoint:
    @property
    def ttft(self) -> float: ...
    @property
    def ttft_steady(self) -> float: ...
    @property
    def tpot(self) -> float: ...
    @property
    def requests_per_s(self) -> float: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    @property
    def batch(self) -> float: ...
    @property
    def max_batch(self) -> float: ...
    @property
    def batch_limited(self) -> bool: ...

@final
class DisaggregatedPoint:
    @property
    def ttft(self) -> float: ...
    @property
    def ttft_steady(self) -> float: ...
    @property
    def tpot(self) -> float: ...
    @property
    def requests_per_s(self) -> float: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    @property
    def prefill_capacity_rps(self) -> float: ...
    @property
    def decode_capacity_rps(self) -> float: ...
    @property
    def batch(self) -> float: ...
    @property
    def max_batch(self) -> float: ...
    @property
    def prefill_time(self) -> float: ...
    @property
    def kv_transfer(self) -> float: ...

def step_time(
    model: ModelInputs,
    gpu: GpuInputs,
    consts: ConstantInputs,
    layout: _Layout,
    decode_seqs: float,
    decode_context_tokens: float,
    prefill_tokens: float,
    prefill_attention_work: float,
) -> float: ...
def predict_serving(
    model: ModelInputs, gpu: GpuInputs, consts: ConstantInputs, layout: _Layout, work: _ServingWork
) -> ServingPoint | None: ...
def predict_disaggregated(
    model: ModelInputs,
    gpu: GpuInputs,
    consts: ConstantInputs,
    prefill_layout: _Layout,
    prefill_workers: float,
    decode_layout: _Layout,
    decode_workers: float,
    work: _ServingWork,
) -> DisaggregatedPoint | None: ...
def collective_links(
    model: ModelInputs, gpu: GpuInputs, layout: _Layout
) -> list[tuple[str, bool]]: ...
def layout_sides(
    model: ModelInputs,
    gpu: GpuInputs,
    consts: ConstantInputs,
    layout: _Layout,
    work: _Work,
    util: float,
) -> tuple[bool, float, float, float, float, int, int, float, float, float, bool]: ...
def fit_constants(
    points: Sequence[_PointTuple],
    priors: Sequence[tuple[int, int | None, float]],
    x0: Sequence[float],
    lo: Sequence[float],
    hi: Sequence[float],
    weights: tuple[float, float, float, float],
    scale: float,
    max_iterations: int,
    time_limit_s: float,
) -> tuple[list[float], float, int, bool]: ...
def predict_points(
    points: Sequence[_PointTuple], x: Sequence[float]
) -> list[tuple[float, float, float, float]]: ...

# ---- simulator (src/sim) -------------------------------------------------------------------

# (role, tp, instances, gpu_memory_utilization, max_num_seqs, max_num_batched_tokens)
_PoolSpec = tuple[str, str, int, float, int, int]

@final
class SimPool:
    """One kind of instance of a simulated deployment."""

    @property
    def role(self) -> str: ...
    @property
    def tp(self) -> int: ...
    @property
    def layout(self) -> str: ...
    @property
    def pp(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def ep(self) -> bool: ...
    @property
    def instances(self) -> int: ...
    @property
    def gpu_memory_utilization(self) -> float: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def kv_blocks(self) -> int: ...

@final
class SimConfig:
    """What a simulation deploys (``pdtp.sim_config``)."""

    def __new__(
        cls,
        model: ModelInputs,
        gpu: GpuInputs,
        consts: ConstantInputs,
        *,
        model_name: str,
        gpu_name: str,
        pools: list[_PoolSpec],
        router: str,
    ) -> SimConfig: ...
    @property
    def mode(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def router(self) -> str: ...
    @property
    def pools(self) -> tuple[SimPool, ...]: ...
    @property
    def gpus(self) -> int: ...

@final
class SimTrace:
    """A parsed request trace."""

    @property
    def name(self) -> str: ...
    @property
    def requests(self) -> int: ...
    @property
    def span_s(self) -> float: ...

@final
class Percentiles:
    """Mean, p50, p90, p99 and max of one latency, in milliseconds."""

    @property
    def mean(self) -> float: ...
    @property
    def p50(self) -> float: ...
    @property
    def p90(self) -> float: ...
    @property
    def p99(self) -> float: ...
    @property
    def max(self) -> float: ...
    def to_dict(self) -> dict[str, float]: ...

@final
class SideStats:
    """One side of a simulated deployment over the run."""

    @property
    def role(self) -> str: ...
    @property
    def instances(self) -> int: ...
    @property
    def kv_blocks(self) -> int: ...
    @property
    def utilization(self) -> float: ...
    @property
    def steps(self) -> int: ...
    @property
    def mean_step_tokens(self) -> float: ...
    @property
    def mean_decode_batch(self) -> float: ...
    @property
    def queue_mean(self) -> float: ...
    @property
    def queue_max(self) -> int: ...
    @property
    def preemptions(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class SimResult:
    """The outcome of ``pdtp.simulate``; latencies in milliseconds."""

    @property
    def requests(self) -> int: ...
    @property
    def rate_rps(self) -> float | None: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def throughput_rps(self) -> float: ...
    @property
    def output_tokens_per_s(self) -> float: ...
    @property
    def goodput_rps(self) -> float: ...
    @property
    def slo_attainment(self) -> float: ...
    @property
    def mean_in_system(self) -> float: ...
    @property
    def ttft_slo_ms(self) -> float | None: ...
    @property
    def tpot_slo_ms(self) -> float | None: ...
    @property
    def ttft_ms(self) -> Percentiles: ...
    @property
    def tpot_ms(self) -> Percentiles: ...
    @property
    def e2e_ms(self) -> Percentiles: ...
    @property
    def sides(self) -> tuple[SideStats, ...]: ...
    def quantile(self, metric: str, q: float) -> float: ...
    def meets_slo(self, percentile: float = 0.9, *, steady_state: bool = False) -> bool: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class RateSearch:
    """The highest rate meeting the SLOs at a percentile (``pdtp.max_rate_within_slo``)."""

    @property
    def rate_rps(self) -> float: ...
    @property
    def failing_rps(self) -> float: ...
    @property
    def percentile(self) -> float: ...
    @property
    def simulations(self) -> int: ...
    @property
    def result(self) -> SimResult | None: ...

def parse_trace(text: str, name: str) -> SimTrace: ...
def simulate(
    config: SimConfig,
    *,
    isl: int,
    osl: int,
    length_range: tuple[float, float] | None,
    requests: int | None,
    seed: int,
    rate_rps: float | None,
    concurrency: int | None,
    arrival: str,
    burstiness: float,
    trace: SimTrace | None,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
) -> SimResult: ...
def max_rate_within_slo(
    config: SimConfig,
    *,
    isl: int,
    osl: int,
    length_range: tuple[float, float] | None,
    requests: int,
    seed: int,
    arrival: str,
    burstiness: float,
    percentile: float,
    tolerance: float,
    hint_rps: float | None,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
) -> RateSearch: ...
def sglang_releases() -> list[str]:
    """Every SGLang release the golden data covers, oldest first."""

def sglang_connector_names() -> list[str]: ...
def resolve_sglang_connector(
    key: str,
) -> tuple[str, str, str, str, str, str | None, str, str]: ...
def sglang_check_pair(
    key: str,
    num_kv_heads: int,
    is_mla: bool,
    prefill: int,
    decode: int,
    prefill_pp: int = 1,
    decode_pp: int = 1,
    state: list[str] = ...,
) -> dict[str, Any]: ...
