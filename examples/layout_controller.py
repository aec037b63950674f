"""A layout-changing controller: watch the demand, call `pdtp serve`'s replan, and apply the
diff to a Kubernetes cluster as stop/start with the manifests pdtp generates.

    pdtp serve &                       # the planning service (http://127.0.0.1:8750)
    python examples/layout_controller.py --cluster https://k8s-api:6443 --namespace llm \\
        --cluster-token-file /var/run/secrets/kubernetes.io/serviceaccount/token \\
        --model qwen3-30b-a3b --gpu h100 --max-gpus 32 \\
        --prometheus-url http://prometheus:9090 \\
        --demand-query 'sum(rate(vllm:request_success_total[2m]))' --interval 60
    python examples/layout_controller.py ... --trace examples/demand_trace.csv   # replay

An autoscaler (KEDA, HPA, Dynamo's planner) changes replica counts; none changes a layout
(TP, DP, EP), because a layout change is not a count: the instances of the old layout must
stop and instances of the new one start, with new launch arguments, and the pair must still
pass the connector's rules. This loop does that. Each tick:

1. the demand (req/s) from Prometheus or the next line of a trace;
2. ``POST /v1/size_for`` (first tick) or ``POST /v1/replan`` with the plan applied last:
   the new plan and its diff (instances to stop and start, per role);
3. ``POST /v1/deploy`` with the new plan (``format: k8s``): the Kubernetes objects
   (a StatefulSet and a headless Service per role, the proxy);
4. applied: a role whose layout changed is stopped and started (its StatefulSet deleted and
   created anew: the pods must not roll one by one into a layout their peers do not share);
   a role that only gains or loses instances is replaced with the new replica count; objects
   the plan no longer has are deleted; unchanged objects are left alone.

The plan applied last is the next tick's ``current`` only once the cluster took it all, so a
failed apply is retried at the next tick. Needs only the standard library and PyYAML.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ROLES = ("prefill", "decode", "aggregated")
# Kubernetes REST paths of the kinds `pdtp deploy --format k8s` writes.
RESOURCES = {
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "LeaderWorkerSet": ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
}


class HttpError(Exception):
    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {body[:300]}")
        self.status, self.body = status, body


def http_json(
    method: str, url: str, body: Any = None, token: str | None = None, timeout_s: float = 120
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("accept", "application/json")
    if data is not None:
        req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, _json_or_text(e.read().decode(errors="replace"))


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class Planner:
    """`pdtp serve`'s API."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self.token = url.rstrip("/"), token

    def call(self, op: str, body: dict[str, Any]) -> Any:
        status, answer = http_json("POST", f"{self.url}/v1/{op}", body, self.token)
        if status != 200:
            raise HttpError("POST", f"{self.url}/v1/{op}", status, json.dumps(answer))
        return answer


class Cluster:
    """The few Kubernetes API calls the loop needs, on one namespace."""

    def __init__(self, url: str, namespace: str, token: str | None = None) -> None:
        self.url, self.namespace, self.token = url.rstrip("/"), namespace, token

    def _path(self, kind: str, name: str | None = None) -> str:
        if kind not in RESOURCES:
            raise ValueError(f"no REST path for kind {kind!r}")
        group, plural = RESOURCES[kind]
        ns = urllib.parse.quote(self.namespace, safe="")
        path = f"{self.url}{group}/namespaces/{ns}/{plural}"
        return path if name is None else f"{path}/{urllib.parse.quote(name, safe='')}"

    def _ok(self, method: str, url: str, body: Any = None, allow: tuple[int, ...] = ()) -> Any:
        status, answer = http_json(method, url, body, self.token)
        if status >= 300 and status not in allow:
            raise HttpError(method, url, status, json.dumps(answer))
        return status, answer

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        status, answer = self._ok("GET", self._path(kind, name), allow=(404,))
        return None if status == 404 else answer

    def create(self, obj: dict[str, Any]) -> None:
        self._ok("POST", self._path(obj["kind"]), obj)

    def replace(self, obj: dict[str, Any]) -> None:
        self._ok("PUT", self._path(obj["kind"], obj["metadata"]["name"]), obj)

    def delete(self, kind: str, name: str) -> None:
        self._ok("DELETE", self._path(kind, name), allow=(404,))

    def list_names(self, kind: str, selector: str) -> list[str]:
        url = self._path(kind) + "?" + urllib.parse.urlencode({"labelSelector": selector})
        _, answer = self._ok("GET", url)
        return [item["metadata"]["name"] for item in (answer or {}).get("items", [])]


def layouts(plan: dict[str, Any] | None) -> dict[str, str]:
    """``{role: layout}`` of a plan."""
    return {r: str(plan[r]["layout"]) for r in ROLES if plan and plan.get(r)}


def role_of(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")


@dataclass
class Tick:
    demand: float
    plan: dict[str, Any]
    stopped: int = 0  # instances the diff stops and starts
    started: int = 0
    actions: list[str] = field(default_factory=list)  # "delete StatefulSet/pdtp-decode", ...


@dataclass
class Controller:
    planner: Planner
    cluster: Cluster
    target: dict[str, Any]  # size_for's fields but demand: model, max_gpus, gpu, SLOs, ...
    name: str = "pdtp"  # the objects' name prefix (pdtp deploy's --name)
    current: dict[str, Any] | None = None  # the plan the cluster runs
    applied: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    log: Callable[[str], None] = print

    def tick(self, demand: float) -> Tick:
        if self.current is None:
            plan = self.planner.call("size_for", {**self.target, "demand": demand})
            moves = {"changed": True, "start": plan_instances(plan), "stop": []}
        else:
            pool = {k: v for k, v in self.target.items() if k in ("max_gpus", "nodes", "gpu")}
            answer = self.planner.call(
                "replan", {"current": self.current, "demand": demand, **pool}
            )
            plan, moves = answer["plan"], answer["deploy"]
        tick = Tick(demand, plan, len(moves["stop"]), len(moves["start"]))
        if self.current is not None and not moves["changed"]:
            return tick
        objects = manifests(
            self.planner.call("deploy", {"plan": plan, "format": "k8s", "name": self.name})
        )
        self.apply(objects, layouts(self.current), layouts(plan), tick)
        self.current = plan  # only now: a failed apply is retried next tick
        return tick

    def apply(
        self, objects: list[dict[str, Any]], old: dict[str, str], new: dict[str, str], tick: Tick
    ) -> None:
        changed_layout = {r for r in new if r in old and old[r] != new[r]}
        wanted = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        # Stop first: the GPUs of a replaced layout are what the new one starts on.
        for (kind, name), obj in wanted.items():
            if kind == "StatefulSet" and role_of(obj) in changed_layout:
                self.cluster.delete(kind, name)
                self.applied.pop((kind, name), None)
                tick.actions.append(f"delete {kind}/{name} ({old[role_of(obj) or '']})")
        for key in [k for k in self.applied if k not in wanted]:
            self.cluster.delete(*key)
            del self.applied[key]
            tick.actions.append(f"delete {key[0]}/{key[1]}")
        for key, obj in wanted.items():
            live = self.cluster.get(*key)
            if live is None:
                self.cluster.create(obj)
                tick.actions.append(f"create {key[0]}/{key[1]}")
            elif self.applied.get(key) != obj:
                self.cluster.replace(obj)
                tick.actions.append(f"replace {key[0]}/{key[1]}")
            self.applied[key] = obj


def manifests(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of `deploy`'s k8s files (YAML documents)."""
    import yaml  # PyYAML (pdtp's sweep extra)

    return [d for text in answer["files"].values() for d in yaml.safe_load_all(text) if d]


def plan_instances(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": r, "layout": plan[r]["layout"]}
        for r in ROLES
        if plan.get(r)
        for _ in range(int(plan[r]["instances"]))
    ]


def trace_demands(path: str) -> Iterator[float]:
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            yield float(row["demand_rps"])


def prometheus_demands(url: str, query: str, interval_s: float) -> Iterator[float]:
    from pdtp.service.metrics import query_prometheus

    while True:
        try:
            yield query_prometheus(url, query)
        except Exception as e:  # keep watching; the next query may work
            print(f"demand query failed: {e}", file=sys.stderr)
        time.sleep(interval_s)


def _token(path: str | None) -> str | None:
    if not path:
        return None
    with open(path) as f:
        return f.read().strip() or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pdtp", default="http://127.0.0.1:8750", help="pdtp serve's URL")
    p.add_argument("--pdtp-token-file", help="pdtp serve's bearer token")
    p.add_argument("--cluster", required=True, help="the Kubernetes API server's URL")
    p.add_argument("--cluster-token-file", help="a bearer token for the API server")
    p.add_argument("--namespace", default="default")
    p.add_argument("--name", default="pdtp", help="object name prefix")
    p.add_argument("--model", required=True)
    p.add_argument("--gpu")
    p.add_argument("--max-gpus", required=True, help="a count or TYPE=N,...")
    p.add_argument("--headroom", type=float, default=0.1, help="plan for demand x (1 + this)")
    p.add_argument("--trace", help="CSV with a demand_rps column: one tick per line")
    p.add_argument("--prometheus-url")
    p.add_argument("--demand-query")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between ticks")
    args = p.parse_args(argv)
    if bool(args.trace) == bool(args.prometheus_url and args.demand_query):
        p.error("give --trace, or --prometheus-url with --demand-query")
    target: dict[str, Any] = {"model": args.model, "max_gpus": args.max_gpus, "mode": "disagg"}
    if args.gpu:
        target["gpu"] = args.gpu
    controller = Controller(
        Planner(args.pdtp, _token(args.pdtp_token_file)),
        Cluster(args.cluster, args.namespace, _token(args.cluster_token_file)),
        target,
        name=args.name,
    )
    demands = (
        trace_demands(args.trace)
        if args.trace
        else prometheus_demands(args.prometheus_url, args.demand_query, args.interval)
    )
    for demand in demands:
        try:
            t = controller.tick(demand * (1 + args.headroom))
        except HttpError as e:
            print(f"tick at {demand:g} req/s failed (retried next tick): {e}", file=sys.stderr)
            continue
        shape = ", ".join(
            f"{r} {t.plan[r]['instances']}x{t.plan[r]['layout']}" for r in layouts(t.plan)
        )
        print(f"{demand:8.2f} req/s -> {shape}: stop {t.stopped}, start {t.started}")
        for action in t.actions:
            print(f"    {action}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
