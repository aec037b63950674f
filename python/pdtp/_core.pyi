"""Type stubs for pdtp's Rust core (``src/bindings.rs``). Kept honest by mypy.stubtest."""

from typing import Any

__all__ = [
    "MAX_MAP_TP",
    "alternatives",
    "check_pair",
    "connectors",
    "expected_ack_count",
    "loadable_sizes",
    "remote_tp_rank",
    "transfer_map",
    "validate_kv_heads",
]

MAX_MAP_TP: int

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
