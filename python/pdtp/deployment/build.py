"""A plan made concrete: which instance runs on which host with which ports and launch line,
and the proxy in front of them (:class:`Deployment`). Renderers turn it into shell scripts
(``scripts.py``), Kubernetes manifests (``k8s.py``) or JSON (:meth:`Deployment.to_dict`)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .._validate import public_api
from ..errors import InvalidArgumentError
from .adapter import AGGREGATED, PlannedInstance, PlanView, view_of
from .connectors import connector_of
from .hosts import (
    LOCALHOST,
    HostsNeededError,
    check_host,
    is_ip,
    node_hosts,
    read_hosts_file,
)
from .launch import Launch, launch
from .ports import (
    BoundPort,
    InstancePorts,
    PortBases,
    check_disjoint,
    instance_bound_ports,
    instance_ports,
    proxy_bound_ports,
)
from .proxy import Backend, Proxy, proxy
from .versions import Version, resolve_version

# The formats pdtp ships (deployment/formats/ holds one module each, and any added one).
FORMATS = ("scripts", "k8s", "json")
BACKENDS = ("rdma", "xgmi")
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# The distribution reference grammar (docker/distribution reference.go): an optional
# registry host[:port], lowercase path components joined by '/', a tag, a digest.
_IMAGE_REF = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)


def _short(value: Any) -> str:
    """``value`` as an error quotes it: at most 80 characters of its repr."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class DeployedInstance:
    """One instance placed on a host: its ports, every port its ranks bind, its launch."""

    role: str
    index: int
    node: int
    host: str
    devices: tuple[int, ...]
    tp: int
    dp: int
    ports: InstancePorts
    bound: tuple[BoundPort, ...]
    launch: Launch
    planned: PlannedInstance

    @property
    def name(self) -> str:
        return self.planned.name

    @property
    def serves_api(self) -> bool:
        return self.planned.serves_api

    @property
    def aggregated(self) -> bool:
        return self.planned.aggregated

    @property
    def http_port(self) -> int:
        return self.ports.http

    @property
    def command(self) -> str:
        """The shell line that launches it."""
        return self.launch.command

    @property
    def launch_key(self) -> Any:
        """What launching it again the same way means (``deploy_diff`` keeps it then)."""
        return self.launch

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
            "layout": str(self.planned.layout),
            "part": self.planned.part,
            "parts": self.planned.parts,
            "ports": self.ports.to_dict(),
            "bound_ports": [b.to_dict() for b in self.bound],
            **self.launch.to_dict(),
        }


@dataclass(frozen=True)
class K8sOptions:
    """Kubernetes object names (``name``-prefill, …), namespace and container image."""

    name: str = "pdtp"
    namespace: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        # Services need an RFC 1035 label (starting with a letter); LeaderWorkerSet pods add
        # "-<group>-<worker>" and a hash label, so the prefix stays short.
        if (
            not isinstance(self.name, str)
            or len(self.name) > 40
            or not _K8S_NAME.fullmatch(self.name)
            or not self.name[0].isalpha()
        ):
            raise InvalidArgumentError(
                f"name must be a lowercase DNS label starting with a letter (a-z, 0-9, '-'; at "
                f"most 40 characters), got {_short(self.name)}"
            )
        if self.namespace is not None and (
            not isinstance(self.namespace, str)
            or len(self.namespace) > 63
            or not _K8S_NAME.fullmatch(self.namespace)
        ):
            raise InvalidArgumentError(
                f"namespace must be a lowercase DNS label, got {self.namespace!r}"
            )
        if self.image is not None and (
            not isinstance(self.image, str)
            or len(self.image) > 255
            or not _IMAGE_REF.fullmatch(self.image)
        ):
            raise InvalidArgumentError(
                f"image must be a container image reference (e.g. vllm/vllm-openai:v0.33.0: "
                f"[registry/]name[:tag][@sha256:digest], lowercase name), got "
                f"{_short(self.image)}"
            )


@dataclass(frozen=True)
class Deployment:
    """A deployment of a plan. ``nodes`` are the hosts by node number; ``backend`` MoRIIO's
    transport (None for NIXL, or a release with RDMA only); ``notes`` what to know."""

    view: PlanView
    vllm_version: Version
    backend: str | None
    nodes: tuple[str, ...]
    proxy: Proxy
    instances: tuple[DeployedInstance, ...]
    port_bases: PortBases
    k8s_options: K8sOptions
    notes: tuple[str, ...] = field(default=())
    # False when a multi-node plan was deployed without host addresses (need_hosts=False):
    # only the Kubernetes manifests, which address pods by DNS, can be made then.
    hosts_known: bool = True

    def _need_hosts(self, what: str) -> None:
        if not self.hosts_known:
            raise HostsNeededError(
                f"{what} need the nodes' addresses: the plan spans {len(self.nodes)} nodes; give "
                "node_hosts (--node-hosts h0,h1,...) or a hosts_file"
            )

    @property
    def model(self) -> str:
        return self.view.model_ref

    @property
    def request_model(self) -> str:
        """The ``model`` a client names in requests (vLLM serves the model tag by default)."""
        return self.view.served_model_name or self.view.model_ref

    @property
    def read_mode(self) -> bool | None:
        return self.view.read_mode

    @property
    def aggregated(self) -> bool:
        """Aggregated instances behind pdtp's router (no KV connector, no P/D proxy)."""
        return self.view.aggregated

    @property
    def release(self) -> str:
        """The engine release every instance runs (what ``deploy_diff`` compares)."""
        return str(self.vllm_version)

    @property
    def engine_label(self) -> str:
        return "vLLM"

    # What fronts the instances (the connector's proxy), as ``deploy_diff`` reports it.
    front_name = "proxy"
    front_script = "proxy.sh"

    @property
    def front_host(self) -> str:
        return self.proxy.host

    def front_changes(self, old: Any) -> bool:
        return bool(getattr(old, "proxy", None) != self.proxy)

    def restart_front(self, stops: bool, changes: bool) -> str:
        """Why the proxy restarts ('' when it need not): the connector's (NIXL's proxy
        takes a fixed instance list; MoRIIO's never forgets a registration)."""
        return connector_of(self.view.kv_connector).restart_proxy(stops, changes)

    def front_dict(self) -> dict[str, Any]:
        return self.proxy.to_dict()

    def launch_lines(self) -> list[str]:
        """Every instance's launch line, each with its node and instance (``Plan.commands``)."""
        out = []
        for inst in self.instances:
            p = inst.planned
            where = f"node {inst.node}"
            if p.parts > 1:
                where += f" ({p.part + 1} of {p.parts})"
            out.append(f"{inst.launch.command}  # {where}, {p.role} {p.index}")
        return out

    def start_scripts(self, names: set[str]) -> dict[str, str]:
        """``start-node-N.sh`` for each node with instances ``names`` (like ``node-N.sh``,
        those instances only)."""
        from .scripts import _comment, node_script

        out = {}
        for node in sorted({i.node for i in self.instances if i.name in names}):
            only = replace(self, instances=tuple(i for i in self.instances if i.name in names))
            text = node_script(only, node).replace(
                "#!/usr/bin/env bash\n",
                "#!/usr/bin/env bash\n"
                + _comment("Starts only the instances this change adds to the node.")
                + "\n",
                1,
            )
            out[f"start-node-{node}.sh"] = text
        return out

    @property
    def connector_label(self) -> str:
        if self.aggregated:
            return "aggregated (no KV transfer)"
        return connector_of(self.view.kv_connector).label(self.read_mode)

    @cached_property
    def _by_node(self) -> dict[int, list[DeployedInstance]]:
        out: dict[int, list[DeployedInstance]] = {}
        for i in self.instances:
            out.setdefault(i.node, []).append(i)
        return out

    def on_node(self, node: int) -> list[DeployedInstance]:
        """The instances (parts) on node ``node``, in plan order (one pass, then a lookup)."""
        return list(self._by_node.get(node, ()))

    def bound_ports_by_host(self) -> dict[str, list[BoundPort]]:
        """Every port bound on each host: instances' ranks and, on its host, the proxy's."""
        out: dict[str, list[BoundPort]] = {}
        for inst in self.instances:
            out.setdefault(inst.host, []).extend(inst.bound)
        out.setdefault(self.proxy.host, []).extend(
            proxy_bound_ports(None if self.aggregated else self.view.kv_connector, self.port_bases)
        )
        return out

    def scripts(self) -> dict[str, str]:
        """``node-N.sh`` per node, ``proxy.sh`` and ``README.md``: file name -> text."""
        from .scripts import render

        self._need_hosts("scripts")
        return render(self)

    def manifests(self) -> list[dict[str, Any]]:
        """Kubernetes objects: per role a headless Service and a StatefulSet, the proxy's
        Deployment and Service."""
        from .k8s import render

        return render(self)

    def manifests_yaml(self) -> str:
        from ._yaml import dump_all

        return dump_all(self.manifests())

    def to_dict(self) -> dict[str, Any]:
        self._need_hosts("the JSON form (it holds the scripts)")
        v = self.view
        return {
            "model": v.model_ref,
            "served_model_name": v.served_model_name,
            "vllm_version": str(self.vllm_version),
            "serving": "agg" if self.aggregated else "disagg",
            "connector": v.connector,
            "kv_connector": None if self.aggregated else v.kv_connector,
            "read_mode": v.read_mode,
            "backend": self.backend,
            "gpu": v.gpu,
            "gpus_per_node": v.gpus_per_node,
            "nodes": [
                {"node": n, "host": h, "instances": [i.name for i in self.on_node(n)]}
                for n, h in enumerate(self.nodes)
            ],
            "proxy": self.proxy.to_dict(),
            "instances": [i.to_dict() for i in self.instances],
            "port_bases": asdict(self.port_bases),
            "notes": list(self.notes),
            "scripts": self.scripts(),
            "k8s": self.manifests(),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def files(self, format: str = "scripts") -> dict[str, str]:
        """The files of one ``format`` (``pdtp.deployment.formats``: ``scripts``
        (node-N.sh, proxy.sh, README.md), ``k8s`` (pdtp.yaml), ``json`` (deployment.json),
        and any other format module there)."""
        from .formats import format_of

        return format_of(format).render(self)

    def write(self, directory: str | os.PathLike[str], format: str = "scripts") -> list[Path]:
        """Write :meth:`files` into ``directory`` (created); scripts are made executable."""
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


@public_api
def deploy(
    plan: Any,
    *,
    node_hosts: Any = None,
    hosts_file: str | os.PathLike[str] | None = None,
    proxy_host: str | None = None,
    vllm_version: str | None = None,
    ports: Any = None,
    backend: str | None = None,
    name: str = "pdtp",
    namespace: str | None = None,
    image: str | None = None,
    need_hosts: bool = True,
    model_path: str | os.PathLike[str] | None = None,
    sglang_version: str | None = None,
) -> Any:
    """Make ``plan`` (a :class:`pdtp.Plan` or its JSON dict) concrete: per node its
    instances' devices, ports and ``vllm serve`` lines, and the proxy/router they all
    register with / are reached through.

    ``node_hosts`` (``["10.0.0.1", ...]`` or ``"h0,h1"``, or ``hosts_file``: one per line)
    gives node N's address; a one-node plan defaults to 127.0.0.1. ``proxy_host`` defaults to
    node 0's. ``vllm_version`` is the release to launch when the plan names none (default:
    the newest supported); ``ports`` a :class:`PortBases` or dict of its fields; ``backend``
    forces MoRIIO's transport (default: ``xgmi`` when every instance shares one node and the
    decode TP is not larger than the prefill TP, else ``rdma``). ``name``, ``namespace`` and
    ``image`` shape the Kubernetes manifests; ``need_hosts=False`` lets a multi-node plan
    without addresses through for them alone (``hosts_known`` is then False).
    ``model_path`` (an HF id or a model folder) is what ``vllm serve`` loads instead of the
    plan's model reference: a plan of a model given as a config dict names none.
    ``sglang_version`` is an SGLang plan's release (it must be the plan's when the plan names
    one); an SGLang plan's ``ports`` are :class:`~pdtp.deployment.connectors.sglang_deploy.
    SglangPorts` fields (``http``, ``bootstrap``, ``router``, ``prometheus``, ``dist_init``).

    >>> import pdtp
    >>> plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg")
    >>> d = pdtp.deploy(plan)
    >>> d.nodes, d.proxy.http_port, d.proxy.bundled is not None
    (('127.0.0.1',), 10001, True)
    >>> sorted(d.scripts())  # the release's proxy travels with the scripts, with its licence
    ['LICENSE-vllm.txt', 'README.md', 'moriio_toy_proxy_server.py', 'node-0.sh', 'proxy.sh']
    """
    from ..engine import engine

    view = view_of(plan, model_path)
    options = DeployOptions(
        node_hosts=node_hosts,
        hosts_file=hosts_file,
        proxy_host=proxy_host,
        versions={"vllm_version": vllm_version, "sglang_version": sglang_version},
        ports=ports,
        backend=backend,
        k8s=K8sOptions(name=name, namespace=namespace, image=image),
        need_hosts=need_hosts,
    )
    # The plan's engine writes its launch lines and what fronts them.
    return engine(view.engine).deploy(view, options)


@dataclass(frozen=True)
class DeployOptions:
    """What :func:`deploy` and :func:`pdtp.deploy_diff` take besides the plan, as every
    engine's deploy receives it: ``versions`` holds each engine's release keyword
    (``vllm_version``, ``sglang_version``) as given."""

    node_hosts: Any = None
    hosts_file: Any = None
    proxy_host: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    ports: Any = None
    backend: str | None = None
    k8s: K8sOptions = field(default_factory=lambda: K8sOptions())
    need_hosts: bool = True

    def hosts_given(self) -> bool:
        return self.node_hosts is not None or self.hosts_file is not None

    def version_for(self, view: PlanView) -> Any:
        """The release keyword of the plan's engine as given; another engine's given is an
        :class:`~pdtp.errors.InvalidArgumentError` naming the keyword this plan takes."""
        from ..engine import ENGINES, engine

        own = engine(view.engine)
        for e in ENGINES.values():
            value = self.versions.get(e.version_option)
            if e is not own and value is not None:
                raise InvalidArgumentError(
                    f"{e.version_option} applies to {e.label} plans; this plan runs "
                    f"{own.label} ({view.connector}): give {own.version_option}"
                )
        return self.versions.get(own.version_option)


def deploy_vllm(view: PlanView, options: DeployOptions) -> Deployment:
    """vLLM's deployment of ``view``: ``vllm serve`` lines and the connector's proxy."""
    opts = _build_options(view, options)
    if options.need_hosts or options.hosts_given() or view.nodes == 1:
        return build(view, view.instances, **opts)
    opts["node_hosts"] = [f"node{n}" for n in range(view.nodes)]  # stand-ins, never shown
    return replace(build(view, view.instances, **opts), hosts_known=False, notes=())


def build_vllm(
    view: PlanView,
    placed: tuple[PlannedInstance, ...],
    options: DeployOptions,
    *,
    require_both: bool = True,
) -> Deployment:
    """vLLM's deployment of ``view`` with its instances placed as ``placed``."""
    return build(view, placed, require_both=require_both, **_build_options(view, options))


def _build_options(view: PlanView, options: DeployOptions) -> dict[str, Any]:
    return dict(
        node_hosts=options.node_hosts,
        hosts_file=options.hosts_file,
        proxy_host=options.proxy_host,
        vllm_version=options.version_for(view),
        ports=options.ports,
        backend=options.backend,
        k8s=options.k8s,
    )


def build(
    view: PlanView,
    placed: tuple[PlannedInstance, ...],
    *,
    node_hosts: Any,
    hosts_file: Any,
    proxy_host: Any,
    vllm_version: Any,
    ports: Any,
    backend: Any,
    k8s: K8sOptions,
    require_both: bool = True,
) -> Deployment:
    """The deployment of ``view`` with its instances placed as ``placed`` (``require_both``:
    at least one prefill and one decode instance, as serving needs)."""
    roles = {i.role for i in placed}
    if require_both and roles != {"prefill", "decode"} and roles != {AGGREGATED}:
        raise InvalidArgumentError(
            "the plan must have at least one prefill and one decode instance to deploy, or "
            "aggregated instances only"
        )
    aggregated = AGGREGATED in roles or view.aggregated
    version = _version(view, vllm_version)
    bases = PortBases.of(ports, view.gpus_per_node)
    hosts, notes = _hosts(placed, node_hosts, hosts_file)
    proxy_at = check_host("proxy_host", proxy_host) if proxy_host is not None else hosts[0]
    if aggregated:
        if backend is not None:
            raise InvalidArgumentError("backend applies to P/D plans (aggregated moves no KV)")
        chosen, why = None, ""
    else:
        chosen, why = _backend(view, placed, version, backend)
    if why:
        notes.append(why)
    if not aggregated:
        not_ip = sorted({hosts[i.node] for i in placed if not is_ip(hosts[i.node])})
        notes += connector_of(view.kv_connector).host_notes(not_ip)
    instances = []
    for inst in placed:
        inst_ports = instance_ports(view.kv_connector, inst, bases)
        host = hosts[inst.node]
        instances.append(
            DeployedInstance(
                role=inst.role,
                index=inst.index,
                node=inst.node,
                host=host,
                devices=inst.devices,
                tp=inst.tp,
                dp=inst.dp,
                ports=inst_ports,
                bound=tuple(instance_bound_ports(version, view.kv_connector, inst, inst_ports)),
                launch=launch(
                    view,
                    inst,
                    inst_ports,
                    version=version,
                    host=host,
                    proxy_host=proxy_at,
                    bases=bases,
                    backend=chosen,
                    leader_host=hosts[inst.leader if inst.leader is not None else inst.node],
                ),
                planned=inst,
            )
        )
    # Only each instance's first node serves the API: the proxy's backends.
    backends = [Backend(i.role, i.host, i.ports.http) for i in instances if i.serves_api]
    px = proxy(version, None if aggregated else view.kv_connector, proxy_at, bases, backends)
    notes += _fetch_notes(px, version)
    dep = Deployment(
        view=view,
        vllm_version=version,
        backend=chosen,
        nodes=tuple(hosts),
        proxy=px,
        instances=tuple(instances),
        port_bases=bases,
        k8s_options=k8s,
        notes=tuple(notes),
    )
    for host, bound in dep.bound_ports_by_host().items():
        check_disjoint(f"host {host}", bound)
    return dep


def _fetch_notes(px: Proxy, version: Version) -> list[str]:
    """What starting the deployment fetches, said at generation (air-gapped clusters)."""
    out = []
    if px.kind == "router":
        out.append(
            "the router is pdtp's router.py (Python's standard library only): nothing is "
            "downloaded at run time"
        )
    elif px.bundled is not None:
        out.append(
            f"the proxy is vLLM {version}'s {px.file_name}, carried by pdtp (Apache-2.0, "
            f"{px.source_path}): nothing is downloaded for it; it needs the Python packages "
            f"{', '.join(px.pip_packages)}" + (" and vLLM" if px.needs_vllm else "")
        )
    else:
        out.append(
            f"at run time the proxy script downloads {px.source_url} unless $PDTP_PROXY_PY "
            f"names a local copy of {px.file_name} (vLLM {version}; pdtp carries only "
            "vLLM 0.33.0's); it needs the Python packages "
            f"{', '.join(px.pip_packages)}" + (" and vLLM" if px.needs_vllm else "")
        )
    if px.pip_packages:
        out.append(
            f"Kubernetes: the proxy pod pip-installs {', '.join(px.pip_packages)} when the "
            "image lacks them (a download at start; air-gapped, give --image one that has them)"
        )
    out.append(
        "each node needs the model's weights: in its Hugging Face cache ($HF_HOME, e.g. "
        "pre-filled with `huggingface-cli download`; HF_HUB_OFFLINE=1 when air-gapped) or "
        "from the Hub with HF_TOKEN set for gated models"
    )
    return out


def _version(view: PlanView, requested: Any) -> Version:
    """The release to launch: the one asked for, which must be the plan's when the plan
    names one (and ship the plan's connector: that is said first)."""
    wanted = resolve_version(requested) if requested is not None else None
    for v in (wanted, view.vllm_version):
        if v is not None:
            connector_of(view.kv_connector).check_version(v)
    if wanted is None:
        return view.vllm_version or resolve_version(None)
    if view.vllm_version is not None and wanted != view.vllm_version:
        raise InvalidArgumentError(
            f"vllm_version {wanted} differs from the plan's vLLM {view.vllm_version}, whose "
            f"rules it was checked with; solve again for vLLM {wanted}"
        )
    return wanted


def _hosts(
    placed: tuple[PlannedInstance, ...], given: Any, hosts_file: Any
) -> tuple[list[str], list[str]]:
    if given is not None and hosts_file is not None:
        raise InvalidArgumentError("give node_hosts or hosts_file, not both")
    hosts = read_hosts_file(hosts_file) if hosts_file is not None else node_hosts(given)
    nodes = 1 + max((i.node for i in placed), default=0)
    notes: list[str] = []
    if hosts is None:
        if nodes > 1:
            raise HostsNeededError(
                f"the plan spans {nodes} nodes: give node_hosts (--node-hosts h0,h1,...) or a "
                f"hosts_file with at least {nodes} hosts"
            )
        return [LOCALHOST], notes
    if len(hosts) < nodes:
        raise InvalidArgumentError(
            f"node_hosts names {len(hosts)} host(s) but the plan spans {nodes} nodes; give {nodes}"
        )
    if len(hosts) > nodes:
        notes.append(f"hosts after the first {nodes} are not used: {', '.join(hosts[nodes:])}")
    return hosts[:nodes], notes


def _backend(
    view: PlanView, placed: tuple[PlannedInstance, ...], version: Version, requested: Any
) -> tuple[str | None, str]:
    """The connector's transport and why (MoRIIO: RDMA across nodes; xGMI when one node
    suffices)."""
    if requested is not None and requested not in BACKENDS:
        raise InvalidArgumentError(
            f"backend must be one of {', '.join(BACKENDS)}, got {requested!r}"
        )
    return connector_of(view.kv_connector).backend(placed, version, requested)


def launch_lines(
    plan: Any,
    *,
    base_port: int = 8100,
    proxy_ip: str | None = None,
    node_hosts: Any = None,
) -> list[str]:
    """``Plan.vllm_commands()``: each instance's launch line as :func:`deploy` writes it,
    ``  # node N, ROLE I`` after it (``(k of n)`` for a part of an instance spanning nodes).

    A line that would hold an address only a deployment knows — a node's own address that
    peers dial (MoRIIO ``host_ip``, NIXL's side channel), the proxy's, a multi-node instance's
    ``--data-parallel-address`` / ``--master-addr`` — is never guessed: a plan over several
    nodes needs ``node_hosts`` then, and :class:`HostsNeededError` says which command writes
    the deployment. Aggregated instances within one node each need no address at all."""
    view = view_of(plan)
    needs_addresses = view.nodes > 1 and (
        not view.aggregated or any(i.parts > 1 for i in view.instances)
    )
    if needs_addresses and node_hosts is None:
        raise HostsNeededError(
            f"the plan spans {view.nodes} nodes: its launch lines need the nodes' addresses "
            "(each instance's own, which its peers dial, and the proxy's), known only at "
            "deploy time; give node_hosts, or run `pdtp solve ... --json > plan.json` and "
            "`pdtp deploy --plan plan.json --node-hosts H0,H1,...`"
        )
    dep = deploy(
        view,
        node_hosts=node_hosts,
        proxy_host=proxy_ip,
        ports={"http": base_port},
        need_hosts=False,
    )
    return list(dep.launch_lines())
