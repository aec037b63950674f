"""Type stubs for pdtp's Rust core (``src/bindings.rs``). Kept honest by mypy.stubtest."""

from collections.abc import Sequence
from typing import Any, final

__all__ = [
    "CAPACITY_SCALE",
    "CONSTANT_FIELDS",
    "ServingPoint",
    "fit_constants",
    "layout_sides",
    "predict_points",
    "predict_serving",
    "step_time",
    "MAX_MAP_TP",
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

# ---- performance model v2 ------------------------------------------------------------------
_Layout = tuple[int, int, int, bool]
_ServingWork = dict[str, float | str | None]
_PointTuple = tuple[
    _Nums, _Nums, _Nums, _Layout, _ServingWork, list[tuple[str, int]], tuple[float, float, float]
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

def step_time(
    model: _Nums,
    gpu: _Nums,
    consts: _Nums,
    layout: _Layout,
    decode_seqs: float,
    decode_context_tokens: float,
    prefill_tokens: float,
    prefill_attention_work: float,
) -> float: ...
def predict_serving(
    model: _Nums, gpu: _Nums, consts: _Nums, layout: _Layout, work: _ServingWork
) -> ServingPoint | None: ...
def layout_sides(
    model: _Nums, gpu: _Nums, consts: _Nums, layout: _Layout, work: _Work, util: float
) -> tuple[bool, float, float, float, float, int, int, float, float]: ...
def fit_constants(
    points: Sequence[_PointTuple],
    priors: Sequence[tuple[int, int | None, float]],
    x0: Sequence[float],
    lo: Sequence[float],
    hi: Sequence[float],
    weights: tuple[float, float, float],
    scale: float,
    max_iterations: int,
    time_limit_s: float,
) -> tuple[list[float], float, int, bool]: ...
def predict_points(
    points: Sequence[_PointTuple], x: Sequence[float]
) -> list[tuple[float, float, float]]: ...
