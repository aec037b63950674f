"""``pdtp deploy`` of an SGLang P/D plan (``connector="sglang-mooncake"|"sglang-nixl"|
"sglang-mori"``): per node a script of ``python -m sglang.launch_server …`` lines (from
:func:`pdtp.deployment.connectors.sglang.launch_command`, every flag one the release
defines), and SGLang's P/D router in front:

    python -m sglang_router.launch_router --pd-disaggregation
        --prefill http://HOST:PORT BOOTSTRAP_PORT … --decode http://HOST:PORT … --host … --port …

The router's flags are checked against sglang-router's own argument definitions
(``tests/data/sglang_router_flags.json``, from ``tools/sglang_router_golden.py``).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from .base import KvConnector
from .sglang import launch_command

#: Ports per device slot: SGLang's HTTP port and the prefill's bootstrap server.
HTTP_BASE = 30000
BOOTSTRAP_BASE = 8998
ROUTER_PORT = 8000
#: The sglang-router release whose argument definitions the router line was checked against.
ROUTER_CHECKED = "0.3.2"
FORMATS = ("scripts", "json")


class SglangKvConnector(KvConnector):
    """An SGLang backend in deploy's connector registry (names, display); its plans are
    launched by :func:`deploy_sglang`."""

    def __init__(self, name: str) -> None:
        self.names = (name,)
        self.display = name
        self.proxy_kind = "sglang_router"


def is_sglang_plan(view: Any) -> bool:
    from . import connector_of

    return not view.aggregated and isinstance(connector_of(view.kv_connector), SglangKvConnector)


@dataclass(frozen=True)
class SglangInstance:
    role: str
    index: int
    node: int
    host: str
    devices: tuple[int, ...]
    tp: int
    dp: int
    http_port: int
    bootstrap_port: int | None
    argv: tuple[str, ...]
    #: ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or ``HIP_VISIBLE_DEVICES`` (AMD).
    devices_env: str = "CUDA_VISIBLE_DEVICES"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def line(self) -> str:
        env = f"{self.devices_env}={','.join(map(str, self.devices))}"
        return f"{env} {shlex.join(self.argv)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "node": self.node,
            "host": self.host,
            "devices": list(self.devices),
            "tp": self.tp,
            "dp": self.dp,
            "http_port": self.http_port,
            "bootstrap_port": self.bootstrap_port,
            "launch": list(self.argv),
        }


@dataclass(frozen=True)
class SglangDeployment:
    """An SGLang P/D deployment: instances with their launch lines, and the router."""

    connector: str
    sglang_version: str
    model: str
    nodes: tuple[str, ...]
    instances: tuple[SglangInstance, ...]
    router_host: str
    router_port: int
    notes: tuple[str, ...] = field(default=())

    @property
    def router_argv(self) -> list[str]:
        argv = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for i in self.instances:
            if i.role == "prefill":
                argv += ["--prefill", i.url, str(i.bootstrap_port)]
        for i in self.instances:
            if i.role == "decode":
                argv += ["--decode", i.url]
        return [*argv, "--host", "0.0.0.0", "--port", str(self.router_port)]

    def scripts(self) -> dict[str, str]:
        out = {}
        for n, host in enumerate(self.nodes):
            lines = [
                "#!/usr/bin/env bash",
                f"# node {n} ({host}): SGLang {self.sglang_version} P/D instances, "
                f"{self.connector}",
                "set -euo pipefail",
            ]
            for i in self.instances:
                if i.node == n:
                    lines += [f"# {i.name}: TP {i.tp}, DP attention {i.dp}", i.line() + " &"]
            out[f"node-{n}.sh"] = "\n".join([*lines, "wait", ""])
        out["router.sh"] = "\n".join(
            [
                "#!/usr/bin/env bash",
                f"# SGLang's P/D router on {self.router_host} (pip install sglang-router; "
                f"flags checked against sglang-router {ROUTER_CHECKED})",
                "set -euo pipefail",
                "exec " + shlex.join(self.router_argv),
                "",
            ]
        )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": "sglang",
            "connector": self.connector,
            "sglang_version": self.sglang_version,
            "model": self.model,
            "nodes": list(self.nodes),
            "instances": [i.to_dict() for i in self.instances],
            "router": {
                "host": self.router_host,
                "port": self.router_port,
                "launch": self.router_argv,
            },
            "notes": list(self.notes),
            "scripts": self.scripts(),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def files(self, format: str = "scripts") -> dict[str, str]:
        if format == "scripts":
            return self.scripts()
        if format == "json":
            return {"deployment.json": self.to_json(indent=2) + "\n"}
        raise InvalidArgumentError(
            f"format must be one of {', '.join(FORMATS)} for an SGLang plan, got {format!r}"
        )

    def write(self, directory: str | os.PathLike[str], format: str = "scripts") -> list[Path]:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in self.files(format).items():
            path = out / name
            path.write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                path.chmod(0o755)
            written.append(path)
        return written


def deploy_sglang(
    view: Any, hosts: list[str], notes: list[str], proxy_host: str | None
) -> SglangDeployment:
    """The deployment of an SGLang P/D ``view`` on ``hosts`` (node N's address)."""
    from ...connectors import resolve_connector

    conn = resolve_connector(view.connector, view.sglang_version)
    model = view.model_ref
    instances = []
    for inst in view.instances:
        if inst.parts > 1:
            raise InvalidArgumentError(
                f"{inst.name} spans {inst.parts} nodes: pdtp deploy writes single-node SGLang "
                "instances only (multi-node needs --nnodes/--dist-init-addr)"
            )
        slot = min(inst.devices)
        http, boot = HTTP_BASE + slot, BOOTSTRAP_BASE + slot
        argv = launch_command(
            inst.role,
            conn.key,
            model,
            tp=inst.tp,
            dp=inst.dp,
            ep=inst.tp if inst.ep else 1,
            port=http,
            bootstrap_port=boot,
        )
        instances.append(
            SglangInstance(
                role=inst.role,
                index=inst.index,
                node=inst.node,
                host=hosts[inst.node],
                devices=tuple(inst.devices),
                tp=inst.tp,
                dp=inst.dp,
                http_port=http,
                bootstrap_port=boot if inst.role == "prefill" else None,
                argv=tuple(argv),
                devices_env=view.visible_devices_env,
            )
        )
    return SglangDeployment(
        connector=conn.name,
        sglang_version=conn.vllm_version,
        model=model,
        nodes=tuple(hosts),
        instances=tuple(instances),
        router_host=proxy_host or hosts[0],
        router_port=ROUTER_PORT,
        notes=tuple(notes),
    )
