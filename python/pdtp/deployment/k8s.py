"""Kubernetes manifests for a :class:`pdtp.Deployment`.

Per role a StatefulSet (``replicas`` = the plan's instances; each pod one instance with its TP
group's GPUs as ``amd.com/gpu`` / ``nvidia.com/gpu``) behind a headless Service, so every pod
has a stable DNS name (``NAME-prefill-0.NAME-prefill``) — NIXL's proxy lists them; the proxy
Deployment and its Service (``NAME-proxy``), which MoRIIO instances register with. Each pod
has its own IP, so every replica uses the same ports; the address peers reach a pod at is its
IP (the downward API's ``status.podIP``, as ``$(POD_IP)``). Pods land where the scheduler puts
them: the plan's node placement is not pinned, so MoRIIO uses RDMA. The manifests validate
against the Kubernetes schemas (tests/test_deploy.py, ``kubernetes-validate``).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from .adapter import MORIIO, PlannedInstance
from .launch import MORIIO_BACKEND_KEY_SINCE, launch
from .ports import instance_ports
from .proxy import Backend, proxy

if TYPE_CHECKING:
    from .build import Deployment

GPU_RESOURCE = {"AMD": "amd.com/gpu", "NVIDIA": "nvidia.com/gpu"}
POD_IP = "$(POD_IP)"
# Loading weights can take many minutes: the startup probe allows an hour.
STARTUP_PERIOD_S, STARTUP_FAILURES = 10, 360


def default_image(vendor: str, version: str) -> str:
    """vLLM's published images: ``vllm/vllm-openai:v<version>`` (NVIDIA); ROCm builds are
    published as ``vllm/vllm-openai-rocm:latest`` (pin a tag of your release with --image)."""
    return f"vllm/vllm-openai:v{version}" if vendor == "NVIDIA" else "vllm/vllm-openai-rocm:latest"


def render(dep: Deployment) -> list[dict[str, Any]]:
    v = dep.view
    opts = dep.k8s_options
    name = opts.name
    image = opts.image or default_image(v.vendor, str(dep.vllm_version))
    proxy_service = f"{name}-proxy"
    backend = (
        "rdma"
        if v.kv_connector == MORIIO and dep.vllm_version >= MORIIO_BACKEND_KEY_SINCE
        else None
    )
    if any(i.planned.parts > 1 for i in dep.instances):
        raise InvalidArgumentError(
            "Kubernetes manifests are one pod per instance; instances spanning nodes (DP ranks "
            "or pipeline stages over several nodes) need a multi-node workload such as "
            "LeaderWorkerSet, which pdtp does not write: use --format scripts"
        )
    counts = {r: sum(i.role == r for i in dep.instances) for r in ("prefill", "decode")}
    objects: list[dict[str, Any]] = []
    backends = []
    for role in ("prefill", "decode"):
        tp = v.tp_of(role)
        sample = next(i for i in dep.instances if i.role == role)
        lay = sample.planned.layout
        # Every pod is alone in its network namespace: ports as for the first slot of a node.
        inst = PlannedInstance(role, 0, 0, tuple(range(lay.gpus)), tp, lay.dp, lay.pp, lay.ep)
        ports = instance_ports(v.kv_connector, inst, dep.port_bases)
        ln = launch(
            v,
            inst,
            ports,
            version=dep.vllm_version,
            host=POD_IP,
            proxy_host=proxy_service,
            bases=dep.port_bases,
            backend=backend,
            visible_devices=False,
        )
        sts = f"{name}-{role}"
        labels = _labels(name, role)
        env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        env += [{"name": k, "value": val} for k, val in ln.env]
        container: dict[str, Any] = {
            "name": "vllm",
            "image": image,
            "command": list(ln.argv[:2]),
            "args": list(ln.argv[2:]),
            "env": env,
            "ports": [{"name": "http", "containerPort": ports.http}],
            "resources": {"limits": {GPU_RESOURCE[v.vendor]: lay.gpus}},
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            "startupProbe": {
                "httpGet": {"path": "/health", "port": "http"},
                "periodSeconds": STARTUP_PERIOD_S,
                "failureThreshold": STARTUP_FAILURES,
            },
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
        }
        objects.append(_headless_service(sts, labels, ports.http, opts.namespace))
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": _meta(sts, labels, opts.namespace),
                "spec": {
                    "serviceName": sts,
                    "replicas": counts[role],
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [container],
                            # vLLM's TP workers share tensors through /dev/shm.
                            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                        },
                    },
                },
            }
        )
        backends += [Backend(role, f"{sts}-{i}.{sts}", ports.http) for i in range(counts[role])]
    px = proxy(dep.vllm_version, v.kv_connector, proxy_service, dep.port_bases, backends)
    objects += _proxy_objects(dep, name, image, px)
    return objects


def _proxy_objects(dep: Deployment, name: str, image: str, px: Any) -> list[dict[str, Any]]:
    opts = dep.k8s_options
    labels = _labels(name, "proxy")
    # The proxy's file is not in vLLM's image: fetched from the release's tag at start.
    fetch = (
        "python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], "
        f"sys.argv[2])' {shlex.quote(px.source_url)} /tmp/{px.file_name}"
    )
    script = " && ".join(
        [
            f"(python3 -c {shlex.quote(px.import_check)} || pip install "
            f"{shlex.join(px.pip_packages)})",
            fetch,
            f"exec python3 /tmp/{px.file_name} {shlex.join(px.args)}",
        ]
    )
    ports = [{"name": "http", "containerPort": px.http_port}]
    svc_ports = [{"name": "http", "port": px.http_port, "targetPort": "http"}]
    if dep.view.kv_connector == MORIIO:
        ports.append({"name": "registration", "containerPort": px.discovery_port})
        svc_ports.append(
            {"name": "registration", "port": px.discovery_port, "targetPort": "registration"}
        )
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(f"{name}-proxy", labels, opts.namespace),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "proxy",
                                "image": image,
                                "command": ["bash", "-c", script],
                                "ports": ports,
                            }
                        ]
                    },
                },
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
