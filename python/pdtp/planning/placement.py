"""Where each instance runs (product.md §5). The ``vllm serve`` lines come from the one
launch-line maker, ``pdtp.deployment.launch`` (``Plan.vllm_commands()`` delegates to it)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidArgumentError


def place(
    instances: Sequence[tuple[str, int]], gpus_per_node: int
) -> list[tuple[str, int, int, list[int]]]:
    """First fit, in order: each instance's TP group on one node (TP never crosses nodes).
    Returns ``(role, index within role, node, devices)``."""
    free: list[int] = []  # next free device per node
    counters: dict[str, int] = {}
    out = []
    for role, tp in instances:
        if tp > gpus_per_node:
            raise InvalidArgumentError(
                f"an instance of tp={tp} cannot fit one node of {gpus_per_node} GPUs"
            )
        node = next((n for n, used in enumerate(free) if gpus_per_node - used >= tp), None)
        if node is None:
            free.append(0)
            node = len(free) - 1
        devices = list(range(free[node], free[node] + tp))
        free[node] += tp
        index = counters.get(role, 0)
        counters[role] = index + 1
        out.append((role, index, node, devices))
    return out
