"""Where each instance runs and the ``vllm serve`` line that starts it (product.md §5)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._shell import command_line
from ..errors import InvalidArgumentError
from ..layout import Layout

if TYPE_CHECKING:
    from .plan import Placement, Plan, Side

# MoRIIO's proxy ping port in vLLM's examples; one proxy serves every instance.
MORIIO_PROXY_PING_PORT = 36367
NIXL_SIDE_CHANNEL_BASE = 5600


def _placement(*args: object) -> Placement:
    from .plan import Placement

    return Placement(*args)  # type: ignore[arg-type]


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


def kv_transfer(plan: Plan, role: str, port: int, proxy_ip: str) -> tuple[str, dict[str, str]]:
    """The ``--kv-transfer-config`` JSON of one instance and the environment it needs.

    MoRIIO's mode is stated, never left to vLLM's default (WRITE in every release): the rules
    pdtp checked are the rules of the mode that runs. The plan's vLLM release decides where
    the mode goes (``deployment.launch`` holds that fact): the ``read_mode`` key of
    ``kv_connector_extra_config`` from 0.23.0, the environment variable before."""
    kv_role = plan.prefill_role if role == "prefill" else plan.decode_role
    config: dict[str, object] = {"kv_connector": plan.kv_connector, "kv_role": kv_role}
    env: dict[str, str] = {}
    if plan.kv_connector == "MoRIIOConnector":
        from ..deployment.launch import MORIIO_READ_MODE_ENV, MORIIO_READ_MODE_KEY_SINCE

        extra: dict[str, object] = {
            "proxy_ip": proxy_ip,
            "proxy_ping_port": MORIIO_PROXY_PING_PORT,
            "http_port": port,
            "handshake_port": port + 100,
            "notify_port": port + 200,
        }
        flag = "true" if _moriio_mode(plan) == "read" else "false"
        if _release(plan) >= MORIIO_READ_MODE_KEY_SINCE:
            extra["read_mode"] = flag
        else:
            env[MORIIO_READ_MODE_ENV] = flag
        config["kv_connector_extra_config"] = extra
    return json.dumps(config, separators=(",", ":")), env


def _moriio_mode(plan: Plan) -> str | None:
    mode = getattr(plan, "mode", None)
    if mode is None:
        from ..connectors import resolve_connector

        mode = resolve_connector(plan.connector).mode
    return mode


def _release(plan: Plan) -> Any:
    """The plan's vLLM release as ``deployment.versions.Version`` (the newest when unnamed)."""
    from ..connectors import DEFAULT_VLLM_VERSION
    from ..deployment.versions import Version

    text = getattr(plan, "vllm_version", None) or DEFAULT_VLLM_VERSION
    parts = [int(x) for x in text.split(".")[:3]]
    return Version(*(parts + [0] * (3 - len(parts))))


# vLLM's DP coordinator and torch.distributed rendezvous ports of a multi-node instance
# (vLLM's defaults 29550 and 29501, moved per instance on its first node).
DP_RPC_PORT_BASE = 29550
MASTER_PORT_BASE = 29600


def _side(plan: Plan, role: str) -> Side:
    side = {"prefill": plan.prefill, "decode": plan.decode, "aggregated": plan.aggregated}[role]
    assert side is not None, role
    return side


def layout_args(layout: Layout) -> list[str]:
    """The ``vllm serve`` arguments of one instance's layout (one node)."""
    argv = ["--tensor-parallel-size", str(layout.tp)]
    if layout.pp > 1:
        argv += ["--pipeline-parallel-size", str(layout.pp)]
    if layout.dp > 1:
        argv += ["--data-parallel-size", str(layout.dp)]
    if layout.ep:
        argv.append("--enable-expert-parallel")
    return argv


def multinode_args(layout: Layout, nodes: int, rank: int, address: str, ordinal: int) -> list[str]:
    """What one node of an instance spanning ``nodes`` whole nodes adds: data-parallel ranks
    split evenly over the nodes (``--data-parallel-size-local``; the first node runs the API
    server and the DP coordinator, the others ``--headless`` from their start rank), or
    pipeline stages over the nodes (vLLM's multiprocessing multi-node launch: ``--nnodes``,
    ``--node-rank``, ``--master-addr``; vLLM >= 0.11.1)."""
    if nodes <= 1:
        return []
    if layout.dp > 1:
        local = layout.dp // nodes
        argv = [
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            address,
            "--data-parallel-rpc-port",
            str(DP_RPC_PORT_BASE + ordinal),
        ]
        if rank > 0:
            argv = ["--headless", "--data-parallel-start-rank", str(rank * local), *argv]
        return argv
    argv = [
        "--nnodes",
        str(nodes),
        "--node-rank",
        str(rank),
        "--master-addr",
        address,
        "--master-port",
        str(MASTER_PORT_BASE + ordinal),
    ]
    return ["--headless", *argv] if rank > 0 else argv


def commands(
    plan: Plan,
    *,
    base_port: int = 8100,
    proxy_ip: str = "127.0.0.1",
    node_hosts: Sequence[str] | None = None,
) -> list[str]:
    """Ports only need to differ between instances that share a node, so each instance
    offsets its ports by its first GPU number on the node (as ``pdtp deploy`` does): the
    ports its DP and TP ranks derive (MoRIIO ``handshake_port + dp_rank + tp_rank``, NIXL's
    side channel ``+ dp_rank``) stay inside its own GPU span, and any fleet size stays in
    the port range.
    Each line is built as an environment and an argv list and quoted word by word
    (:func:`pdtp._shell.command_line`): the model id and the JSON config are one literal
    argument each, whatever the input spelled.

    An instance spanning whole nodes (DP ranks or pipeline stages over several nodes) gets
    one line per node: its first node serves the API, the others run ``--headless``; they
    meet at the first node's address (``node_hosts[n]``, default the name ``node<n>``).
    Aggregated instances have no ``--kv-transfer-config``."""
    lines = []
    assignment = plan.assignment or tuple(
        _placement(role, index, node, tuple(devices), plan.gpu, (node,))
        for role, index, node, devices in plan.placement()
    )
    for p in assignment:
        role, index = p.role, p.instance
        side = _side(plan, role)
        layout = side.layout
        nodes = p.nodes or (p.node,)
        first = nodes[0]
        ordinal = min(p.devices, default=0)
        port = base_port + ordinal
        address = node_hosts[first] if node_hosts is not None else f"node{first}"
        for rank, node in enumerate(nodes):
            env = {plan.visible_devices_env: ",".join(map(str, p.devices))}
            if plan.kv_connector == "NixlConnector" and role != "aggregated":
                # Instances sharing a node need distinct NIXL side channels.
                env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(NIXL_SIDE_CHANNEL_BASE + ordinal)
            argv = ["vllm", "serve", plan.model_id, *layout_args(layout)]
            argv += multinode_args(layout, len(nodes), rank, address, ordinal)
            argv += ["--port", str(port), "--gpu-memory-utilization"]
            argv.append(f"{plan.gpu_memory_utilization:g}")
            if plan.kv_dtype == "fp8":
                argv += ["--kv-cache-dtype", "fp8"]
            if role != "aggregated":
                config, mode_env = kv_transfer(plan, role, port, proxy_ip)
                env.update(mode_env)
                argv += ["--kv-transfer-config", config]
            where = (
                f"node {node}" if len(nodes) == 1 else f"node {node} ({rank + 1} of {len(nodes)})"
            )
            # The comment holds only pdtp's own numbers and role names.
            lines.append(f"{command_line(argv, env)}  # {where}, {role} {index}")
    return lines
