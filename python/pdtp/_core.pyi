"""Type stubs for pdtp's Rust core (``src/bindings.rs``). Kept honest by mypy.stubtest."""

from typing import final

__all__ = [
    "CAPACITY_SCALE",
    "ConnectorInfo",
    "MAX_MAP_TP",
    "alternatives",
    "check_pair",
    "candidate_table",
    "connector_names",
    "enumerate_best",
    "expected_ack_count",
    "loadable_sizes",
    "predict_decode",
    "predict_prefill",
    "remote_tp_rank",
    "resolve_connector",
    "side_option",
    "sweep_budgets",
    "transfer_map",
    "vllm_releases",
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
    list[tuple[int, list[int], list[tuple[int, list[int]]], list[int]]],
    list[tuple[int, list[int], list[int], list[int], int]],
]: ...

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

def resolve_connector(key: str) -> ConnectorInfo:
    """``"name"`` or ``"name@X.Y.Z"`` resolved; unknown names/versions raise pdtp errors."""

def connector_names() -> list[str]: ...
def vllm_releases() -> list[str]:
    """Every vLLM release the golden data covers, oldest first."""

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
