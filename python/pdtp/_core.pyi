"""Type stubs for pdtp's Rust core (``src/bindings.rs``). Kept honest by mypy.stubtest."""

from typing import Any, final

__all__ = [
    "CAPACITY_SCALE",
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
    "check_pair",
    "candidate_table",
    "connectors",
    "enumerate_best",
    "expected_ack_count",
    "loadable_sizes",
    "predict_decode",
    "predict_prefill",
    "remote_tp_rank",
    "side_option",
    "sweep_budgets",
    "transfer_map",
    "validate_kv_heads",
]

MAX_MAP_TP: int
CAPACITY_SCALE: float
SIM_MAX_REQUESTS: int
SIM_MAX_OUTPUT_TOKENS: int
SIM_MAX_TRACE_BYTES: int

# Inputs of the performance model: dicts of plain numbers built once per model / GPU.
_Nums = dict[str, float]
_Work = dict[str, float | None]
# (tp, loads, fits_weights, fits_kv, latency_s, meets_slo, batch, max_batch, rps, units)
_SideRow = tuple[int, bool, bool, bool, float, bool, int, int, float, int]
# (prefill_tp, prefill_instances, decode_tp, decode_instances, value_units, gpus_used)
_CandRow = tuple[int, int, int, int, int, int]

def remote_tp_rank(local_tp_rank: int, local_tp_size: int, remote_tp_size: int) -> int:
    """vLLM's ``get_moriio_remote_tp_rank``: the remote rank a local rank reads from."""

def validate_kv_heads(
    local_tp_size: int, remote_tp_size: int, total_num_kv_heads: int, is_mla: bool
) -> None:
    """vLLM's ``validate_moriio_heterogeneous_tp_kv_heads``."""

def expected_ack_count(producer_tp_size: int, consumer_tp_size: int) -> int:
    """vLLM's ``get_moriio_expected_ack_count``."""

def check_pair(
    num_attention_heads: int,
    num_kv_heads: int,
    is_mla: bool,
    prefill_tp: int,
    decode_tp: int,
    connector: str,
    max_acks: int | None = None,
) -> tuple[list[tuple[str, str, str, str, str]], list[tuple[str, str]]]: ...
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
) -> list[tuple[int, int]]: ...
def loadable_sizes(
    num_attention_heads: int, num_kv_heads: int, is_mla: bool, bound: int
) -> list[int]: ...
def transfer_map(
    prefill_tp: int, decode_tp: int, kv_heads: int, is_mla: bool, connector: str
) -> tuple[
    list[tuple[int, list[int], list[tuple[int, list[int]]]]],
    list[tuple[int, list[int], list[int], int]],
]: ...
def connectors() -> list[dict[str, Any]]: ...
def predict_prefill(
    model: _Nums, gpu: _Nums, consts: _Nums, tp: int, isl: float, util: float
) -> tuple[float, float, float, bool, float, bool]: ...
def predict_decode(
    model: _Nums,
    gpu: _Nums,
    consts: _Nums,
    tp: int,
    isl: float,
    osl: float,
    batch: float,
    util: float,
) -> tuple[float, int, float, bool]: ...
def side_option(
    model: _Nums, gpu: _Nums, consts: _Nums, work: _Work, tp: int, prefill: bool, util: float
) -> _SideRow: ...
def candidate_table(
    model: _Nums,
    gpu: _Nums,
    consts: _Nums,
    work: _Work,
    connector: str,
    gpus: int,
    max_tp: int,
    max_acks: int | None,
    util: float,
) -> tuple[list[_SideRow], list[_SideRow], list[_CandRow], int, _CandRow | None]: ...
def enumerate_best(
    model: _Nums,
    gpu: _Nums,
    consts: _Nums,
    work: _Work,
    connector: str,
    gpus: int,
    max_tp: int,
    max_acks: int | None,
    util: float,
    time_limit_s: float,
) -> tuple[_CandRow | None, bool]: ...
def sweep_budgets(
    model: _Nums,
    gpu: _Nums,
    consts: _Nums,
    work: _Work,
    connector: str,
    budgets: list[int],
    max_tp: int,
    max_acks: int | None,
    util: float,
) -> tuple[list[_SideRow], list[_SideRow], list[tuple[_CandRow | None, _CandRow | None, bool]]]: ...

# ---- simulator (src/sim) -------------------------------------------------------------------

# (role, tp, instances, gpu_memory_utilization, max_num_seqs, max_num_batched_tokens)
_PoolSpec = tuple[str, int, int, float, int, int]

@final
class SimPool:
    """One kind of instance of a simulated deployment."""

    @property
    def role(self) -> str: ...
    @property
    def tp(self) -> int: ...
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
        model: _Nums,
        gpu: _Nums,
        consts: _Nums,
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
