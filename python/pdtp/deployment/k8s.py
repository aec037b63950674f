"""Kubernetes manifests for a :class:`pdtp.Deployment`.

Per role a StatefulSet (``replicas`` = the plan's instances; each pod one instance with its
GPUs as ``amd.com/gpu`` / ``nvidia.com/gpu``) behind a headless Service, so every pod has a
stable DNS name (``NAME-prefill-0.NAME-prefill``) — NIXL's proxy lists them; instances that
span nodes are a LeaderWorkerSet (one group of one pod per node per instance; the leader serves
the API, the workers run headless), validated offline against LeaderWorkerSet's CRD schema. P/D
plans get the proxy Deployment and its Service (``NAME-proxy``), which MoRIIO instances
register with; aggregated plans a Service (``NAME-router``) spreading requests over the
instances. Each pod
has its own IP, so every replica uses the same ports; the address peers reach a pod at is its
IP (the downward API's ``status.podIP``, as ``$(POD_IP)``). Pods land where the scheduler puts
them: the plan's node placement is not pinned, so MoRIIO uses RDMA. The manifests validate
against the Kubernetes schemas (tests/test_deploy.py, ``kubernetes-validate``).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..layout import Layout
from .adapter import AGGREGATED, ROLES, PlannedInstance
from .connectors import connector_of
from .launch import launch
from .ports import instance_ports
from .proxy import Backend, proxy

if TYPE_CHECKING:
    from .build import Deployment

GPU_RESOURCE = {"AMD": "amd.com/gpu", "NVIDIA": "nvidia.com/gpu"}
POD_IP = "$(POD_IP)"
# LeaderWorkerSet's environment in every pod of a group (its leader's DNS name, the pod's
# index in the group: 0 for the leader); Kubernetes expands $(NAME) in command and args.
LWS_LEADER = "$(LWS_LEADER_ADDRESS)"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# Loading weights can take many minutes: the startup probe allows an hour.
STARTUP_PERIOD_S, STARTUP_FAILURES = 10, 360


def default_image(vendor: str, version: str) -> str:
    """vLLM's published images for the release: ``vllm/vllm-openai:v<version>`` (NVIDIA),
    ``vllm/vllm-openai-rocm:v<version>`` (ROCm). Never a moving tag: the image runs the
    release whose rules the plan was checked with."""
    repo = "vllm/vllm-openai" if vendor == "NVIDIA" else "vllm/vllm-openai-rocm"
    return f"{repo}:v{version}"


def render(dep: Deployment) -> list[dict[str, Any]]:
    """Per role a StatefulSet behind a headless Service (instances on one node), or a
    LeaderWorkerSet (instances spanning nodes: one group per instance, the leader serving the
    API); then the P/D proxy (a Deployment and Service) or, for aggregated instances, the
    Service that spreads requests over them."""
    v = dep.view
    opts = dep.k8s_options
    name = opts.name
    image = opts.image or default_image(v.vendor, str(dep.vllm_version))
    proxy_service = f"{name}-proxy"
    backend = connector_of(v.kv_connector).k8s_backend(dep.vllm_version)
    roles = [r for r in (*ROLES, AGGREGATED) if any(i.role == r for i in dep.instances)]
    objects: list[dict[str, Any]] = []
    backends = []
    http_port = 0
    for role in roles:
        sample = next(i for i in dep.instances if i.role == role and i.serves_api)
        lay, parts = sample.planned.layout, sample.planned.parts
        count = sum(i.role == role and i.serves_api for i in dep.instances)
        # Every pod is alone in its network namespace: ports as for the first slot of a node.
        per_pod = lay.gpus // parts
        inst = PlannedInstance(
            role, 0, 0, tuple(range(per_pod)), lay.tp, lay.dp, lay.pp, lay.ep, 0, parts, 0
        )
        ports = instance_ports(v.kv_connector, inst, dep.port_bases)
        http_port = ports.http
        workload = f"{name}-{role}"
        labels = _labels(name, role)

        def make(part: int, inst: PlannedInstance = inst, ports: Any = ports) -> Any:
            return launch(
                v,
                replace(inst, part=part),
                ports,
                version=dep.vllm_version,
                host=POD_IP,
                proxy_host=proxy_service,
                bases=dep.port_bases,
                backend=backend,
                visible_devices=False,
                leader_host=LWS_LEADER,
            )

        leader = _container(make(0), image, ports.http, v.vendor, per_pod, api=True)
        if parts == 1:
            objects.append(_headless_service(workload, labels, ports.http, opts.namespace))
            objects.append(_statefulset(workload, labels, count, leader, opts.namespace))
        else:
            worker = _container(
                make(1), image, ports.http, v.vendor, per_pod, api=False, worker_of=lay
            )
            objects.append(_lws(workload, labels, count, parts, leader, worker, opts.namespace))
        # LeaderWorkerSet names group leaders like StatefulSet pods, under a headless
        # Service of its own name: NAME-ROLE-<i>.NAME-ROLE either way.
        backends += [Backend(role, f"{workload}-{i}.{workload}", ports.http) for i in range(count)]
    if AGGREGATED in roles:
        objects.append(_router_service(dep, name, http_port))
        return objects
    px = proxy(dep.vllm_version, v.kv_connector, proxy_service, dep.port_bases, backends)
    objects += _proxy_objects(dep, name, image, px)
    return objects


def _container(
    ln: Any,
    image: str,
    http_port: int,
    vendor: str,
    gpus: int,
    *,
    api: bool,
    worker_of: Layout | None = None,
) -> dict[str, Any]:
    """The vLLM container of one pod. A LeaderWorkerSet worker (``worker_of`` its layout)
    runs through bash: its DP start rank or node rank is its index in the group."""
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env += [{"name": k, "value": val} for k, val in ln.env]
    c: dict[str, Any] = {"name": "vllm", "image": image}
    if worker_of is None:
        c["command"], c["args"] = list(ln.argv[:2]), list(ln.argv[2:])
    else:
        argv = list(ln.argv)
        flag = "--data-parallel-start-rank" if worker_of.dp > 1 else "--node-rank"
        at = argv.index(flag) + 1
        nodes_local = (
            int(argv[argv.index("--data-parallel-size-local") + 1]) if (worker_of.dp > 1) else 1
        )
        words = [shlex.quote(w) for w in argv]
        words[at] = (
            f'"$((LWS_WORKER_INDEX * {nodes_local}))"'
            if worker_of.dp > 1
            else '"$LWS_WORKER_INDEX"'
        )
        c["command"], c["args"] = ["bash", "-c"], ["exec " + " ".join(words)]
    c["env"] = env
    c["resources"] = {"limits": {GPU_RESOURCE[vendor]: gpus}}
    c["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    if api:
        c["ports"] = [{"name": "http", "containerPort": http_port}]
        c["startupProbe"] = {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        }
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    return c


def _pod_spec(container: dict[str, Any]) -> dict[str, Any]:
    # vLLM's TP workers share tensors through /dev/shm.
    return {
        "containers": [container],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    }


def _statefulset(
    name: str, labels: dict[str, str], replicas: int, container: dict[str, Any], ns: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, labels, ns),
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(container)},
        },
    }


def _lws(
    name: str,
    labels: dict[str, str],
    replicas: int,
    size: int,
    leader: dict[str, Any],
    worker: dict[str, Any],
    ns: str | None,
) -> dict[str, Any]:
    """One LeaderWorkerSet group per instance: ``size`` pods (one per node), the leader
    first; a pod that restarts recreates its group (DP ranks and pipeline stages restart
    together in vLLM)."""
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, labels, ns),
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(leader)},
                "workerTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(worker)},
            },
        },
    }


def _router_service(dep: Deployment, name: str, http_port: int) -> dict[str, Any]:
    """Aggregated instances' router: a Service over every instance's API pod (a
    LeaderWorkerSet's leaders only), on the proxy port the scripts use."""
    labels = _labels(name, AGGREGATED)
    selector = dict(labels)
    if any(i.planned.parts > 1 for i in dep.instances):
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    port = dep.port_bases.proxy_http
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(f"{name}-router", _labels(name, "router"), dep.k8s_options.namespace),
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": http_port}],
        },
    }


def _proxy_objects(dep: Deployment, name: str, image: str, px: Any) -> list[dict[str, Any]]:
    opts = dep.k8s_options
    labels = _labels(name, "proxy")
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    if px.bundled is not None:
        # The release's proxy as pdtp carries it, mounted from a ConfigMap: no download.
        cm = f"{name}-proxy-source"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(cm, labels, opts.namespace),
                "data": {px.file_name: px.bundled},
            }
        )
        volumes.append({"name": "proxy-source", "configMap": {"name": cm}})
        mounts.append({"name": "proxy-source", "mountPath": "/pdtp", "readOnly": True})
        path = f"/pdtp/{px.file_name}"
        steps = []
    else:
        # Not carried for this release: fetched from the release's tag at start.
        path = f"/tmp/{px.file_name}"
        fail = f"cannot download {px.source_url}; use vLLM 0.33.0 or pre-load the file"
        steps = [
            "python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], "
            f"sys.argv[2])' {shlex.quote(px.source_url)} {path} || "
            f"{{ echo {shlex.quote(fail)} >&2; exit 1; }}"
        ]
    # Packages the image lacks are pip-installed (a download, said at generation); offline
    # that fails in one line naming what the image needs.
    need = (
        f"the proxy needs the Python packages {' '.join(px.pip_packages)}: pip could not "
        "install them (offline?); use an image that has them (--image)"
    )
    steps.insert(
        0,
        f"python3 -c {shlex.quote(px.import_check)} 2>/dev/null || pip install -q "
        f"{shlex.join(px.pip_packages)} || {{ echo {shlex.quote(need)} >&2; exit 1; }}",
    )
    script = " && ".join([*steps, f"exec python3 {path} {shlex.join(px.args)}"])
    ports = [{"name": "http", "containerPort": px.http_port}]
    svc_ports = [{"name": "http", "port": px.http_port, "targetPort": "http"}]
    if connector_of(dep.view.kv_connector).registers_with_proxy:
        ports.append({"name": "registration", "containerPort": px.discovery_port})
        svc_ports.append(
            {"name": "registration", "port": px.discovery_port, "targetPort": "registration"}
        )
    container: dict[str, Any] = {
        "name": "proxy",
        "image": image,
        "command": ["bash", "-c", script],
        "ports": ports,
    }
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    return [
        *objects,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(f"{name}-proxy", labels, opts.namespace),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(f"{name}-proxy", labels, opts.namespace),
            "spec": {"selector": labels, "ports": svc_ports},
        },
    ]


def _headless_service(
    name: str, labels: dict[str, str], port: int, ns: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, labels, ns),
        "spec": {
            "clusterIP": "None",
            # DNS names exist before the pods are ready: the proxy can resolve them early.
            "publishNotReadyAddresses": True,
            "selector": labels,
            "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        },
    }


def _labels(name: str, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "pdtp",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": role,
    }


def _meta(name: str, labels: dict[str, str], ns: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if ns is not None:
        meta["namespace"] = ns
    return meta


# ---- SGLang P/D plans ------------------------------------------------------------------------
#
# SGLang's router sends each request to one prefill and one decode with the prefill's own
# bootstrap address (taken from its URL), so every prefill must be reachable by a name of its
# own: per single-node instance a Deployment of one pod and a Service of its name
# (NAME-prefill-0), per role of multi-node instances a LeaderWorkerSet, whose group leaders
# have stable names under its headless Service (NAME-prefill-0.NAME-prefill). The router runs
# as a Deployment behind the Service NAME-router.

#: SGLang's published images (NVIDIA): ``lmsysorg/sglang:v<version>``.
SGLANG_IMAGE = "lmsysorg/sglang"


def sglang_default_image(vendor: str, version: str) -> str:
    """SGLang's image of the release (it carries sglang-router too). AMD's images are tagged
    per ROCm and GPU generation, so they are given with ``--image``."""
    from ..errors import InvalidArgumentError

    if vendor != "NVIDIA":
        raise InvalidArgumentError(
            f"image: SGLang's {vendor} images are tagged per ROCm release and GPU (e.g. "
            f"{SGLANG_IMAGE}:v{version}-rocm700-mi30x); give the one to run with --image"
        )
    return f"{SGLANG_IMAGE}:v{version}"


def render_sglang(dep: Any) -> list[dict[str, Any]]:
    """The Kubernetes objects of an SGLang P/D deployment (``SglangDeployment``)."""
    v = dep.view
    opts = dep.k8s_options
    name, ns = opts.name, opts.namespace
    image = opts.image or sglang_default_image(v.vendor, dep.sglang_version)
    ports = dep.ports
    objects: list[dict[str, Any]] = []
    prefills: list[tuple[str, int | None]] = []
    decodes: list[str] = []
    workers: list[str] = []  # aggregated instances
    for role in (*ROLES, AGGREGATED):
        heads = [i for i in v.instances if i.role == role and i.part == 0]
        if not heads:
            continue
        parts = heads[0].parts
        per_pod = len(heads[0].devices)
        # Every pod has its own IP: ports as for a node's first slot.
        http, boot = ports.http, ports.bootstrap
        workload = f"{name}-{role}"
        svc_ports = [{"name": "http", "port": http, "targetPort": "http"}]
        extra_ports = []
        if role == "prefill":
            svc_ports.append({"name": "bootstrap", "port": boot, "targetPort": "bootstrap"})
            extra_ports = [{"name": "bootstrap", "containerPort": boot}]
        if parts == 1:
            for inst in heads:
                one = f"{workload}-{inst.index}"
                labels = {**_labels(name, role), "pdtp.dev/instance": one}
                argv = dep.launch_argv(inst, leader_host="")
                c = _sglang_container(argv, image, http, v.vendor, per_pod, extra_ports)
                objects.append(_sglang_deployment(one, labels, c, ns))
                objects.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": _meta(one, labels, ns),
                        "spec": {"selector": labels, "ports": svc_ports},
                    }
                )
                _sglang_backend(role, f"http://{one}:{http}", boot, prefills, decodes, workers)
            continue
        labels = _labels(name, role)
        head = replace(heads[0], node=0, leader=0)
        leader_argv = dep.launch_argv(head, leader_host=LWS_LEADER)
        worker_argv = dep.launch_argv(replace(head, part=1), leader_host=LWS_LEADER)
        leader = _sglang_container(leader_argv, image, http, v.vendor, per_pod, extra_ports)
        worker = _sglang_container(worker_argv, image, http, v.vendor, per_pod, [], worker=True)
        objects.append(_lws(workload, labels, len(heads), parts, leader, worker, ns))
        for i in range(len(heads)):
            url = f"http://{workload}-{i}.{workload}:{http}"
            _sglang_backend(role, url, boot, prefills, decodes, workers)
    labels = _labels(name, "router")
    argv = dep.router_line(prefills, decodes, workers)
    router = {
        "name": "router",
        "image": image,
        "command": ["python3", *argv[1:3]],
        "args": argv[3:],
        "ports": [
            {"name": "http", "containerPort": dep.router_port},
            {"name": "metrics", "containerPort": ports.prometheus},
        ],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
    }
    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(f"{name}-router", labels, ns),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [router]}},
            },
        }
    )
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(f"{name}-router", labels, ns),
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": dep.router_port, "targetPort": "http"}],
            },
        }
    )
    return objects


def _sglang_backend(
    role: str,
    url: str,
    boot: int,
    prefills: list[tuple[str, int | None]],
    decodes: list[str],
    workers: list[str],
) -> None:
    """Add an instance's URL to the router's list for its role."""
    if role == "prefill":
        prefills.append((url, boot))
    elif role == "decode":
        decodes.append(url)
    else:
        workers.append(url)


def _sglang_container(
    argv: list[str],
    image: str,
    http_port: int,
    vendor: str,
    gpus: int,
    extra_ports: list[dict[str, Any]],
    *,
    worker: bool = False,
) -> dict[str, Any]:
    """One SGLang pod's container. A LeaderWorkerSet worker runs through bash: its
    ``--node-rank`` is its index in the group (``$LWS_WORKER_INDEX``)."""
    argv = ["python3", *argv[1:]]
    c: dict[str, Any] = {"name": "sglang", "image": image}
    if worker:
        words = [shlex.quote(w) for w in argv]
        words[argv.index("--node-rank") + 1] = '"$LWS_WORKER_INDEX"'
        c["command"], c["args"] = ["bash", "-c"], ["exec " + " ".join(words)]
    else:
        c["command"], c["args"] = argv[:3], argv[3:]
    c["resources"] = {"limits": {GPU_RESOURCE[vendor]: gpus}}
    c["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    if not worker:
        c["ports"] = [{"name": "http", "containerPort": http_port}, *extra_ports]
        c["startupProbe"] = {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        }
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    return c


def _sglang_deployment(
    name: str, labels: dict[str, str], container: dict[str, Any], ns: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, labels, ns),
        "spec": {
            "replicas": 1,
            # One pod of an instance at a time: two would both claim its bootstrap room table.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(container)},
        },
    }
