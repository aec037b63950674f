"""Where each instance runs and the ``vllm serve`` line that starts it (product.md §5)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._shell import command_line
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from .plan import Plan

# MoRIIO's proxy ping port in vLLM's examples; one proxy serves every instance.
MORIIO_PROXY_PING_PORT = 36367
NIXL_SIDE_CHANNEL_BASE = 5600


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


def commands(plan: Plan, *, base_port: int = 8100, proxy_ip: str = "127.0.0.1") -> list[str]:
    """Ports only need to differ between instances that share a node, so each instance
    uses ``base_port + its slot on the node``: any fleet size stays in the port range.
    Each line is built as an environment and an argv list and quoted word by word
    (:func:`pdtp._shell.command_line`): the model id and the JSON config are one literal
    argument each, whatever the input spelled."""
    lines = []
    slots: dict[int, int] = {}
    for role, index, node, devices in plan.placement():
        ordinal = slots.get(node, 0)
        slots[node] = ordinal + 1
        port = base_port + ordinal
        env = {plan.visible_devices_env: ",".join(map(str, devices))}
        if plan.kv_connector == "NixlConnector":
            # Instances sharing a node need distinct NIXL side channels.
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(NIXL_SIDE_CHANNEL_BASE + ordinal)
        config, mode_env = kv_transfer(plan, role, port, proxy_ip)
        env.update(mode_env)
        tp = plan.prefill.tp if role == "prefill" else plan.decode.tp
        argv = [
            "vllm",
            "serve",
            plan.model_id,
            "--tensor-parallel-size",
            str(tp),
            "--port",
            str(port),
            "--gpu-memory-utilization",
            f"{plan.gpu_memory_utilization:g}",
        ]
        if plan.kv_dtype == "fp8":
            argv += ["--kv-cache-dtype", "fp8"]
        argv += ["--kv-transfer-config", config]
        # The comment holds only pdtp's own numbers and role names.
        lines.append(f"{command_line(argv, env)}  # node {node}, {role} {index}")
    return lines
