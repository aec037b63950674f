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
import numbers
import os
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..._validate import short_repr
from ...errors import ArgumentTypeError, InvalidArgumentError
from .base import KvConnector
from .sglang import launch_command

#: SGLang's ``--kv-cache-dtype`` for a plan's ``kv_dtype`` (absent: SGLang's own, the model's
#: 16-bit dtype, as the plan's bf16).
SGLANG_KV_DTYPE = {"fp8": "fp8_e4m3"}
#: An aggregated plan's instances (deploy.adapter's role name; not imported: no cycle).
AGGREGATED = "aggregated"

#: Ports per device slot: SGLang's HTTP port and the prefill's bootstrap server.
HTTP_BASE = 30000
BOOTSTRAP_BASE = 8998
ROUTER_PORT = 8000
#: The Rust router's Prometheus exporter (sglang-router's default 29000), written out so the
#: port is one deploy knows: the router panics at start when it is taken.
PROMETHEUS_PORT = 29000
#: ``--dist-init-addr LEADER:PORT`` of an instance spanning nodes (torch.distributed's
#: rendezvous on node rank 0). SGLang derives its own ZMQ ports just above it on the leader
#: (``server_args.py``: ``port_base = dist_init_port + 1``, then up to ``+ 6 + DP rank``), so
#: ``DIST_SPAN`` ports from here are reserved; a multi-node instance has its nodes to itself.
DIST_INIT_BASE = 20000
DIST_SPAN = 7
#: The sglang-router release whose argument definitions the router line was checked against.
ROUTER_CHECKED = "0.3.2"
FORMATS = ("scripts", "k8s", "json")


@dataclass(frozen=True)
class SglangPorts:
    """The ports of an SGLang deployment: each instance's HTTP port and a prefill's bootstrap
    port are ``base + its first device number on its node`` (instances sharing a node never
    meet), the router's HTTP and Prometheus ports, and a multi-node instance's
    ``--dist-init-addr`` port."""

    http: int = HTTP_BASE
    bootstrap: int = BOOTSTRAP_BASE
    router: int = ROUTER_PORT
    prometheus: int = PROMETHEUS_PORT
    dist_init: int = DIST_INIT_BASE

    @classmethod
    def of(cls, value: Any) -> SglangPorts:
        """``value``: None (the defaults), an :class:`SglangPorts`, or a dict of some of its
        fields (``pdtp deploy --ports http=31000,router=9000``)."""
        from ..ports import PortBases

        if value is None:
            return cls()
        if isinstance(value, SglangPorts):
            return value
        if isinstance(value, PortBases):  # vLLM's bases: the two families SGLang shares
            value = {"http": value.http, "router": value.proxy_http}
        if not isinstance(value, dict):
            raise ArgumentTypeError(
                f"ports must be a dict of {', '.join(f.name for f in fields(cls))} for an "
                f"SGLang plan, got {type(value).__name__}"
            )
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(map(str, value)) - set(allowed))
        if unknown:
            raise InvalidArgumentError(
                f"ports has unknown field(s) {unknown} for an SGLang plan; allowed: "
                f"{', '.join(allowed)}"
            )
        for k, v in value.items():
            if (
                isinstance(v, bool)
                or not isinstance(v, numbers.Integral)
                or not 1024 <= int(v) <= 65535
            ):
                raise InvalidArgumentError(
                    f"ports.{k} must be an integer in [1024, 65535], got {short_repr(v)}"
                )
        return replace(cls(), **{k: int(v) for k, v in value.items()})


class SglangKvConnector(KvConnector):
    """An SGLang backend in deploy's connector registry (names, display); its plans are
    launched by :func:`deploy_sglang`."""

    def __init__(self, name: str) -> None:
        self.names = (name,)
        self.display = name
        self.proxy_kind = "sglang_router"


def is_sglang_plan(view: Any) -> bool:
    """A plan of an SGLang connector: P/D, or aggregated (planned with SGLang's rules and
    constants, so SGLang runs it too)."""
    return bool(view.engine == "sglang")


def deploy_plan(view: Any, options: Any) -> SglangDeployment:
    """SGLang's deployment of ``view`` (``pdtp.deploy``'s options, ``DeployOptions``): its
    launch lines and router."""
    return build_plan(view, view.instances, options)


def build_plan(
    view: Any, placed: Any, options: Any, *, require_both: bool = True
) -> SglangDeployment:
    """SGLang's deployment of ``view`` with its instances placed as ``placed`` (the new plan's
    placement in a diff keeps running instances where they run)."""
    from ..build import _hosts

    version = options.version_for(view)
    if version is not None:
        if not isinstance(version, str):
            raise InvalidArgumentError(
                f"sglang_version must be a string like '0.5.9', got {short_repr(version)}"
            )
        if view.engine_version is not None and version.strip() != view.engine_version:
            raise InvalidArgumentError(
                f"sglang_version {version} differs from the plan's SGLang "
                f"{view.engine_version}, whose rules it was checked with; solve again for "
                f"SGLang {version}"
            )
        view = replace(view, engine_version=version.strip())
    if options.backend is not None:
        raise InvalidArgumentError(
            f"backend applies to vLLM plans; this plan runs SGLang ({view.connector}, its "
            "release is the plan's)"
        )
    roles = {i.role for i in placed}
    if require_both and roles != {"prefill", "decode"} and roles != {AGGREGATED}:
        raise InvalidArgumentError(
            "the plan must have at least one prefill and one decode instance to deploy, or "
            "aggregated instances only"
        )
    view = replace(view, instances=tuple(placed))
    k8s = options.k8s
    nodes = max((i.node for i in placed), default=0) + 1
    if not options.hosts_given() and nodes > 1 and not options.need_hosts:
        # Kubernetes only: pods are addressed by DNS.
        stand_in = [f"node{n}" for n in range(nodes)]
        return deploy_sglang(view, stand_in, [], options.proxy_host, options.ports, k8s,
                             hosts_known=False)  # fmt: skip
    hosts, notes = _hosts(placed, options.node_hosts, options.hosts_file)
    return deploy_sglang(view, hosts, notes, options.proxy_host, options.ports, k8s)


@dataclass(frozen=True)
class SglangInstance:
    """One SGLang launch: an instance, or one node's part of an instance spanning ``nnodes``
    nodes (node rank ``part``; rank 0 serves the API and is the router's backend)."""

    role: str
    index: int
    node: int
    host: str
    devices: tuple[int, ...]
    #: pdtp's layout: TP per DP-attention rank (SGLang's attention TP), DP-attention ranks.
    tp: int
    dp: int
    http_port: int
    bootstrap_port: int | None
    argv: tuple[str, ...]
    #: ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or ``HIP_VISIBLE_DEVICES`` (AMD).
    devices_env: str = "CUDA_VISIBLE_DEVICES"
    pp: int = 1
    part: int = 0
    nnodes: int = 1
    #: ``--dist-init-addr`` of an instance spanning nodes (node rank 0's address), else None.
    dist_init_addr: str | None = None
    #: The plan's instance (``deployment.adapter.PlannedInstance``) this launches.
    planned: Any = None

    @property
    def name(self) -> str:
        base = f"{self.role}-{self.index}"
        return base if self.nnodes == 1 else f"{base}-node{self.part}"

    @property
    def command(self) -> str:
        """The shell line that launches it."""
        return self.line()

    @property
    def launch_key(self) -> Any:
        """What launching it again the same way means (``deploy_diff`` keeps it then)."""
        return (self.argv, self.devices_env, self.devices)

    @property
    def serves_api(self) -> bool:
        return self.part == 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def line(self) -> str:
        env = f"{self.devices_env}={','.join(map(str, self.devices))}"
        return f"{env} {shlex.join(self.argv)}"

    def bound_ports(self, ports: SglangPorts) -> list[tuple[int, str]]:
        """``(port, purpose)`` this launch binds on its host."""
        out = []
        if self.serves_api:
            out.append((self.http_port, f"{self.name} HTTP"))
            if self.bootstrap_port is not None:
                out.append((self.bootstrap_port, f"{self.name} bootstrap server"))
            if self.nnodes > 1:
                base = ports.dist_init + min(self.devices)
                span = DIST_SPAN + self.dp
                out += [(base + k, f"{self.name} --dist-init-addr and SGLang's ports above it")
                        for k in range(span)]  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "index": self.index,
            "node": self.node,
            "host": self.host,
            "devices": list(self.devices),
            "tp": self.tp,
            "dp": self.dp,
            "pp": self.pp,
            "node_rank": self.part,
            "nnodes": self.nnodes,
            "dist_init_addr": self.dist_init_addr,
            "serves_api": self.serves_api,
            "http_port": self.http_port,
            "bootstrap_port": self.bootstrap_port,
            "launch": list(self.argv),
            "command": self.line(),
        }


@dataclass(frozen=True)
class SglangDeployment:
    """An SGLang P/D deployment: instances with their launch lines, and the router.
    ``hosts_known`` is False for a multi-node plan deployed without addresses: only its
    Kubernetes manifests (pods addressed by DNS) can be made then."""

    connector: str
    sglang_version: str
    model: str
    nodes: tuple[str, ...]
    instances: tuple[SglangInstance, ...]
    router_host: str
    router_port: int
    notes: tuple[str, ...] = field(default=())
    view: Any = None
    ports: SglangPorts = field(default_factory=SglangPorts)
    k8s_options: Any = None
    hosts_known: bool = True

    #: SGLang picks its own transport settings: no backend is stated.
    backend = None
    # What fronts the instances (SGLang's router), as ``deploy_diff`` reports it.
    front_name = "router"
    front_script = "router.sh"

    @property
    def release(self) -> str:
        """The engine release every instance runs (what ``deploy_diff`` compares)."""
        return self.sglang_version

    @property
    def engine_label(self) -> str:
        return "SGLang"

    @property
    def front_host(self) -> str:
        return self.router_host

    def front_changes(self, old: Any) -> bool:
        before = (getattr(old, "router_host", None), list(getattr(old, "router_argv", [])))
        return before != (self.router_host, self.router_argv)

    def restart_front(self, stops: bool, changes: bool) -> str:
        """The router takes its backends on its command line (``--prefill URL BOOTSTRAP``,
        ``--decode URL``, ``--worker-urls``): it restarts whenever they change."""
        return "its --prefill/--decode backends change" if changes else ""

    def front_dict(self) -> dict[str, Any]:
        return {"host": self.router_host, "port": self.router_port, "launch": self.router_argv}

    def launch_lines(self) -> list[str]:
        """Every launch line with its node and instance, then the router's (``Plan.commands``)."""
        if not self.hosts_known:  # the router's line names every instance's address
            from ..hosts import HostsNeededError

            raise HostsNeededError(
                f"the plan spans {len(self.nodes)} nodes: SGLang's router line names each "
                "instance's address; give node_hosts"
            )
        lines = [f"{i.line()}  # node {i.node}, {i.name}" for i in self.instances]
        return [*lines, f"{shlex.join(self.router_argv)}  # SGLang's {self.serving} router"]

    def start_scripts(self, names: set[str]) -> dict[str, str]:
        """``start-node-N.sh`` for each node with instances ``names`` (like ``node-N.sh``,
        those launches only)."""
        only = replace(self, instances=tuple(i for i in self.instances if i.name in names))
        out = {}
        for n in sorted({i.node for i in only.instances}):
            text = only._node_script(n).replace(
                "set -euo pipefail\n",
                "# Starts only the instances this change adds to the node.\nset -euo pipefail\n",
                1,
            )
            out[f"start-node-{n}.sh"] = text
        return out

    def _need_hosts(self, what: str) -> None:
        if not self.hosts_known:
            from ..hosts import HostsNeededError

            raise HostsNeededError(
                f"{what} need the nodes' addresses: the plan spans {len(self.nodes)} nodes; give "
                "node_hosts (--node-hosts h0,h1,...) or a hosts_file"
            )

    @property
    def api_instances(self) -> list[SglangInstance]:
        """The router's backends: each instance's node rank 0."""
        return [i for i in self.instances if i.serves_api]

    @property
    def aggregated(self) -> bool:
        """Instances serving both phases behind the router (no KV transfer)."""
        return any(i.role == AGGREGATED for i in self.instances)

    @property
    def serving(self) -> str:
        return "aggregated" if self.aggregated else "P/D"

    def launch_argv(self, inst: Any, *, leader_host: str, slot: int = 0) -> list[str]:
        """The launch argv of planned instance ``inst`` with this deployment's ports at device
        ``slot``, meeting at ``leader_host`` (Kubernetes: every pod is its own slot 0)."""
        conn_key = f"{self.connector}@{self.sglang_version}"
        return instance_argv(self.view, inst, conn_key, self.ports, slot=slot,
                             leader_host=leader_host)  # fmt: skip

    def router_line(
        self, prefills: list[tuple[str, int | None]], decodes: list[str], workers: list[str]
    ) -> list[str]:
        """The router's argv over these backends (``workers``: aggregated instances)."""
        if workers:
            return worker_router_argv(workers, self.router_port, self.ports.prometheus)
        return router_argv(prefills, decodes, self.router_port, self.ports.prometheus)

    @property
    def router_argv(self) -> list[str]:
        if self.aggregated:
            return worker_router_argv(
                [i.url for i in self.api_instances], self.router_port, self.ports.prometheus
            )
        return router_argv(
            [(i.url, i.bootstrap_port) for i in self.api_instances if i.role == "prefill"],
            [i.url for i in self.api_instances if i.role == "decode"],
            self.router_port,
            self.ports.prometheus,
        )

    def scripts(self) -> dict[str, str]:
        self._need_hosts("the scripts")
        out = {f"node-{n}.sh": self._node_script(n) for n in range(len(self.nodes))}
        out["router.sh"] = "\n".join(
            [
                "#!/usr/bin/env bash",
                f"# SGLang's {self.serving} router on {self.router_host} (pip install "
                f"sglang-router=={ROUTER_CHECKED}; flags checked against sglang-router "
                f"{ROUTER_CHECKED})",
                "set -euo pipefail",
                "exec " + shlex.join(self.router_argv),
                "",
            ]
        )
        out["README.md"] = self.readme()
        return out

    def _node_script(self, n: int) -> str:
        lines = [
            "#!/usr/bin/env bash",
            f"# node {n} ({self.nodes[n]}): SGLang {self.sglang_version} {self.serving} "
            f"instances, {self.connector}",
            "set -euo pipefail",
        ]
        for i in self.instances:
            if i.node == n:
                what = f"TP {i.tp}, DP attention {i.dp}" + (f", PP {i.pp}" if i.pp > 1 else "")
                if i.nnodes > 1:
                    what += f"; node rank {i.part} of {i.nnodes} (at {i.dist_init_addr})"
                lines += [f"# {i.name}: {what}", i.line() + " &"]
        return "\n".join([*lines, "wait", ""])

    def readme(self) -> str:
        rows = [
            f"| {i.name} | {i.host} | {','.join(map(str, i.devices))} | {i.tp} | {i.dp} | "
            f"{i.http_port if i.serves_api else '-'} | {i.bootstrap_port or '-'} |"
            for i in self.instances
        ]
        lines = [
            f"# SGLang {self.sglang_version} {self.serving} deployment of {self.model} "
            f"({self.connector})",
            "",
            "| launch | host | devices | TP | DP attention | HTTP | bootstrap |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Start `node-N.sh` on node N and `router.sh` on "
            f"{self.router_host}; an instance is up when `GET /health` answers 200 on its HTTP "
            "port. Then send requests to the router:",
            "",
            f"    curl http://{self.router_host}:{self.router_port}/generate "
            "-H 'Content-Type: application/json' "
            """-d '{"text": "Hello", "sampling_params": {"max_new_tokens": 16}}'""",
            "",
            (
                "The router spreads requests over the instances, each serving both phases "
                "(no KV transfer)."
                if self.aggregated
                else "The router sends each request to a prefill and a decode instance with the "
                "same `bootstrap_room`; the decode pulls the KV cache from the prefill's "
                "bootstrap address."
            ),
        ]
        if self.notes:
            lines += ["", "Notes:", "", *[f"- {n}" for n in self.notes]]
        return "\n".join([*lines, ""])

    def manifests(self) -> list[dict[str, Any]]:
        """Kubernetes objects: per single-node instance a Deployment and its Service, per
        role of multi-node instances a LeaderWorkerSet, and the router's Deployment and
        Service (:func:`pdtp.deployment.k8s.render_sglang`)."""
        from ..k8s import render_sglang

        return render_sglang(self)

    def manifests_yaml(self) -> str:
        from .._yaml import dump_all

        return dump_all(self.manifests())

    def to_dict(self) -> dict[str, Any]:
        self._need_hosts("the JSON form (it holds the scripts)")
        return {
            "engine": "sglang",
            "serving": "agg" if self.aggregated else "disagg",
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
            "ports": self.ports.__dict__,
            "notes": list(self.notes),
            "scripts": self.scripts(),
            "k8s": self.manifests(),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def files(self, format: str = "scripts") -> dict[str, str]:
        if format == "scripts":
            return self.scripts()
        if format == "k8s":
            name = self.k8s_options.name if self.k8s_options is not None else "pdtp"
            return {f"{name}.yaml": self.manifests_yaml()}
        if format == "json":
            return {"deployment.json": self.to_json(indent=2) + "\n"}
        raise InvalidArgumentError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")

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


def router_argv(
    prefills: list[tuple[str, int | None]], decodes: list[str], port: int, prometheus: int
) -> list[str]:
    """``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP …
    --decode URL … --host 0.0.0.0 --port PORT --prometheus-port P`` (flags of sglang-router
    0.3.2's ``router_args.py``)."""
    argv = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for url, boot in prefills:
        argv += ["--prefill", url, str(boot)]
    for url in decodes:
        argv += ["--decode", url]
    return [*argv, "--host", "0.0.0.0", "--port", str(port), "--prometheus-port", str(prometheus)]


def worker_router_argv(urls: list[str], port: int, prometheus: int) -> list[str]:
    """SGLang's router over aggregated instances: ``python -m sglang_router.launch_router
    --worker-urls URL … --host 0.0.0.0 --port PORT --prometheus-port P``."""
    argv = ["python", "-m", "sglang_router.launch_router", "--worker-urls", *urls]
    return [*argv, "--host", "0.0.0.0", "--port", str(port), "--prometheus-port", str(prometheus)]


def instance_argv(
    view: Any,
    inst: Any,
    conn_key: str,
    ports: SglangPorts,
    *,
    slot: int,
    leader_host: str,
) -> list[str]:
    """One launch's argv: ports from ``slot`` (the instance's first device on its node);
    ``leader_host`` the node rank 0's address."""
    # pdtp's layout counts TP per DP rank (tp2dp4: 8 GPUs); SGLang's --tp-size counts the
    # GPUs of a pipeline stage, DP attention splitting it (attention TP = tp_size / dp), and
    # its experts spread over all of them.
    gpus = inst.tp * inst.dp
    argv = launch_command(
        inst.role,
        conn_key,
        view.model_ref,
        tp=gpus,
        dp=inst.dp,
        pp=inst.pp,
        ep=gpus if inst.ep else 1,
        port=ports.http + slot,
        bootstrap_port=ports.bootstrap + slot,
        nnodes=inst.parts,
        node_rank=inst.part,
        dist_init_addr=f"{leader_host}:{ports.dist_init + slot}" if inst.parts > 1 else None,
        # What the plan sized the memory with: SGLang's defaults are a 16-bit KV cache and
        # the checkpoint's own weights.
        kv_cache_dtype=SGLANG_KV_DTYPE.get(view.kv_dtype),
        quantization=view.quantization,
        served_model_name=view.served_model_name,
        mem_fraction_static=stated_fraction(view, inst, conn_key),
    )
    return argv


def stated_fraction(view: Any, inst: Any, conn_key: str) -> float | None:
    """The ``--mem-fraction-static`` the line must state: the fraction the plan sized this
    instance at, unless that is what the release picks by itself for its GPU and layout
    (a plan sized at SGLang's own defaults states none)."""
    from ...catalog import gpu as catalog_gpu
    from .sglang_memory import mem_fraction_static

    sized = view.memory_fraction(inst.role)
    try:
        g = catalog_gpu(view.gpu)
    except Exception:  # a GPU the catalog lacks: state what was sized
        return float(sized)
    release = conn_key.partition("@")[2] or None
    own = mem_fraction_static(g, release, tp=inst.tp * inst.dp, pp=inst.pp,
                              dp_attention=inst.dp > 1, mla=view.mla, role=inst.role)  # fmt: skip
    return None if abs(own - sized) < 5e-4 else float(sized)


def deploy_sglang(
    view: Any,
    hosts: list[str],
    notes: list[str],
    proxy_host: str | None,
    ports: Any = None,
    k8s_options: Any = None,
    hosts_known: bool = True,
) -> SglangDeployment:
    """The deployment of an SGLang ``view`` (P/D or aggregated) on ``hosts`` (node N's
    address); ``hosts_known`` False: stand-in names, for the Kubernetes manifests alone."""
    from ...connectors import resolve_connector
    from ..hosts import check_host

    conn = resolve_connector(view.connector, view.engine_version)
    bases = SglangPorts.of(ports)
    # Each family spans one port per GPU of a node (dist_init: SGLang's ports above it):
    # families that overlap would meet on some plan, so they are refused whatever this one.
    spans = {"http": (bases.http, view.gpus_per_node), "bootstrap": (bases.bootstrap,
             view.gpus_per_node)}  # fmt: skip
    if any(i.parts > 1 for i in view.instances):
        dp = max(i.dp for i in view.instances)
        spans["dist_init"] = (bases.dist_init, view.gpus_per_node + DIST_SPAN + dp)
    names = list(spans)
    for a in names:
        start, count = spans[a]
        if start + count - 1 > 65535:
            raise InvalidArgumentError(
                f"ports: {a}={start} spans {count} ports on nodes of {view.gpus_per_node} GPUs, "
                "past 65535; give a lower base"
            )
    for a_i, a in enumerate(names):
        for b in names[a_i + 1 :]:
            (sa, na), (sb, nb) = spans[a], spans[b]
            if sa < sb + nb and sb < sa + na:
                raise InvalidArgumentError(
                    f"ports: {a}={sa} (ports {sa}-{sa + na - 1}) and {b}={sb} (ports "
                    f"{sb}-{sb + nb - 1}) overlap on nodes of {view.gpus_per_node} GPUs; give "
                    "bases further apart"
                )
    # A multi-node instance's nodes are its own: its first part's first device is its slot.
    slot_of = {(i.role, i.index): min(i.devices) for i in view.instances if i.part == 0}
    instances = []
    for inst in view.instances:
        slot = slot_of.get((inst.role, inst.index), min(inst.devices))
        leader = hosts[inst.leader if inst.leader is not None else inst.node]
        argv = instance_argv(view, inst, conn.key, bases, slot=slot, leader_host=leader)
        instances.append(
            SglangInstance(
                role=inst.role,
                index=inst.index,
                node=inst.node,
                host=hosts[inst.node],
                devices=tuple(inst.devices),
                tp=inst.tp,
                dp=inst.dp,
                http_port=bases.http + slot,
                bootstrap_port=bases.bootstrap + slot if inst.role == "prefill" else None,
                argv=tuple(argv),
                devices_env=view.visible_devices_env,
                pp=inst.pp,
                part=inst.part,
                nnodes=inst.parts,
                dist_init_addr=f"{leader}:{bases.dist_init + slot}" if inst.parts > 1 else None,
                planned=inst,
            )
        )
    router_at = check_host("proxy_host", proxy_host) if proxy_host is not None else hosts[0]
    dep = SglangDeployment(
        connector=conn.name,
        sglang_version=conn.vllm_version,
        model=view.model_ref,
        nodes=tuple(hosts),
        instances=tuple(instances),
        router_host=router_at,
        router_port=bases.router,
        notes=tuple(notes),
        view=view,
        ports=bases,
        k8s_options=k8s_options,
        hosts_known=hosts_known,
    )
    _check_ports(dep)
    return dep


def _check_ports(dep: SglangDeployment) -> None:
    """No two things on one host bind one port (instances, the router on its host)."""
    by_host: dict[str, dict[int, str]] = {}
    bound = [(i.host, p) for i in dep.instances for p in i.bound_ports(dep.ports)]
    bound.append((dep.router_host, (dep.router_port, "the router")))
    bound.append((dep.router_host, (dep.ports.prometheus, "the router's Prometheus exporter")))
    for host, (port, what) in bound:
        seen = by_host.setdefault(host, {})
        if port in seen:
            raise InvalidArgumentError(
                f"ports: on host {host} {what} and {seen[port]} both bind port {port}; give "
                "other bases (--ports http=…,bootstrap=…,router=…,prometheus=…,dist_init=…)"
            )
        seen[port] = what
