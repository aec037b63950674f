"""A plain-Python restatement of rules.md §1–3 and of the README's rules table for the
default releases (MoRIIO and NIXL of vLLM 0.33.0, nixl-legacy = NIXL of 0.13.0), written
from the documents (not from pdtp's code), so the Rust core can be compared against it branch
by branch. The golden tests (src/connector/golden.rs) compare it with vLLM itself."""

from __future__ import annotations


class SpecValueError(Exception):
    pass


class SpecNotImplementedError(Exception):
    pass


def remote_tp_rank(rank: int, local: int, remote: int) -> int:
    if local <= 0 or remote <= 0:
        raise SpecValueError("TP sizes must be positive")
    if rank < 0 or rank >= local:
        raise SpecValueError(f"local_tp_rank {rank} must be in [0, {local})")
    if local == remote:
        return rank
    if remote > local:
        if remote % local:
            raise SpecValueError(
                f"remote tp_size {remote} must be a multiple of local tp_size {local} "
                "for heterogeneous-TP P/D"
            )
        return rank * (remote // local)
    if local % remote:
        raise SpecValueError(
            f"local tp_size {local} must be a multiple of remote tp_size {remote} "
            "for heterogeneous-TP P/D"
        )
    return rank // (local // remote)


def validate_kv_heads(local: int, remote: int, heads: int, is_mla: bool) -> None:
    if is_mla or local == remote:
        return
    if local <= 0 or remote <= 0 or heads <= 0:
        raise SpecValueError("TP sizes and total_num_kv_heads must be positive")
    if min(local, remote) >= heads:
        return
    raise SpecNotImplementedError(
        "MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. "
        f"Got total_num_kv_heads={heads}, local_tp_size={local}, remote_tp_size={remote}."
    )


def expected_ack_count(producer: int, consumer: int) -> int:
    if producer <= 0 or consumer <= 0:
        raise SpecValueError("TP sizes must be positive")
    if consumer <= producer:
        return 1
    if consumer % producer:
        raise SpecValueError(
            f"consumer tp_size {consumer} must be a multiple of producer tp_size {producer} "
            "for heterogeneous-TP P/D"
        )
    return consumer // producer


def loads(heads: int, kv_heads: int, is_mla: bool, tp: int) -> bool:
    """rules.md §4 for one TP size."""
    if heads % tp:
        return False
    if is_mla:
        return True
    return tp % kv_heads == 0 if tp >= kv_heads else kv_heads % tp == 0


def pair_valid(
    heads: int,
    kv_heads: int,
    is_mla: bool,
    p: int,
    d: int,
    connector: str,
    max_acks: int | None = None,
) -> bool:
    """product.md §2 rules 1–4 for one pair, per the README's rules table."""
    if not (loads(heads, kv_heads, is_mla, p) and loads(heads, kv_heads, is_mla, d)):
        return False
    if connector == "nixl-legacy":
        # 0.13.0: D a multiple of P; a head-split prefill (P < H) cannot feed a decode side
        # that replicates heads unless D == H.
        if d < p or d % p:
            return False
        if (
            not is_mla
            and p < kv_heads
            and d > p
            and max(1, kv_heads // d) * (d // p) != (kv_heads // p)
        ):
            return False
    elif max(p, d) % min(p, d):
        return False
    if connector == "moriio" and not (is_mla or p == d or min(p, d) >= kv_heads):
        return False
    if connector == "nixl" and not is_mla and p > d and p > kv_heads:
        return False
    if connector == "moriio-write" and not is_mla and p != d:
        # validate_write_tp_topology: both sizes shard the heads (true for loadable sizes).
        for tp in (p, d):
            if (tp <= kv_heads and kv_heads % tp) or (tp > kv_heads and tp % kv_heads):
                return False
    # Release acks a prefill rank waits for: D/P under NIXL and MoRIIO READ; one under MoRIIO
    # WRITE (the decode scheduler releases every prefill rank itself).
    acks = 1 if connector == "moriio-write" or d <= p else d // p
    return not (max_acks is not None and acks > max_acks)
