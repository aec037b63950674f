"""examples/layout_controller.py against `pdtp serve` and a fake Kubernetes API on loopback:
each tick the cluster holds the plan the Python API's size_for/replan chain gives (replica
counts and TP per role), a role whose layout changes is stopped and started (its StatefulSet
deleted, then created), a role that only changes its count is replaced, and a tick whose
plan does not change touches nothing. A failed apply is retried."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import pytest

pytest.importorskip("uvicorn")
import pdtp
from pdtp.service.server import BackgroundServer

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "examples" / "layout_controller.py"
PATH = re.compile(
    r"^/(?:api/v1|apis/apps/v1)/namespaces/(?P<ns>[^/]+)"
    r"/(?P<plural>services|configmaps|statefulsets|deployments)"
    r"(?:/(?P<name>[^/]+))?$"
)
KINDS = {
    "services": "Service",
    "configmaps": "ConfigMap",
    "statefulsets": "StatefulSet",
    "deployments": "Deployment",
}


class FakeKubernetes:
    """Objects by (namespace, kind, name); every write in ``ops``; ``fail_next`` makes the
    next write answer 500 (an API server having a bad moment)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.ops: list[tuple[str, str, str]] = []
        self.fail_next = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> tuple[str, str, str | None] | None:
                m = PATH.match(urlparse(self.path).path)
                if not m:
                    self._send(404, {"kind": "Status", "reason": "NotFound"})
                    return None
                return m["ns"], KINDS[m["plural"]], m["name"]

            def _body(self) -> Any:
                return json.loads(self.rfile.read(int(self.headers["content-length"])))

            def do_GET(self) -> None:
                route = self._route()
                if route is None:
                    return
                ns, kind, name = route
                obj = fake.objects.get((ns, kind, name or ""))
                self._send(200, obj) if obj else self._send(404, {"reason": "NotFound"})

            def _write(self, method: str) -> None:
                route = self._route()
                if route is None:
                    return
                ns, kind, name = route
                if fake.fail_next:
                    fake.fail_next = False
                    self._send(500, {"reason": "InternalError"})
                    return
                if method == "DELETE":
                    existed = fake.objects.pop((ns, kind, name or ""), None)
                    fake.ops.append(("DELETE", kind, name or ""))
                    self._send(200 if existed else 404, {"kind": "Status"})
                    return
                obj = self._body()
                if obj.get("kind") != kind or not obj.get("metadata", {}).get("name"):
                    self._send(400, {"reason": "BadRequest"})
                    return
                key = (ns, kind, obj["metadata"]["name"])
                if method == "POST" and key in fake.objects:
                    self._send(409, {"reason": "AlreadyExists"})
                    return
                if method == "PUT" and (key not in fake.objects or name != key[2]):
                    self._send(404, {"reason": "NotFound"})
                    return
                fake.objects[key] = obj
                fake.ops.append((method, kind, key[2]))
                self._send(201 if method == "POST" else 200, obj)

            def do_POST(self) -> None:
                self._write("POST")

            def do_PUT(self) -> None:
                self._write("PUT")

            def do_DELETE(self) -> None:
                self._write("DELETE")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def statefulsets(self) -> dict[str, dict[str, Any]]:
        return {n: o for (_, k, n), o in self.objects.items() if k == "StatefulSet"}


@pytest.fixture(scope="module")
def example() -> Any:
    spec = importlib.util.spec_from_file_location("pdtp_layout_controller", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def service() -> Any:
    with BackgroundServer() as url:
        yield url


def tp_of(statefulset: dict[str, Any]) -> int:
    args = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    return int(args[args.index("--tensor-parallel-size") + 1])


# Demands (req/s) that grow a P/D deployment of an MoE model past what its first decode
# layout serves, then shrink it: layouts change on the way up, counts on the way down.
MODEL, GPU, MAX_GPUS = "qwen3-30b-a3b", "h100", 32
DEMANDS = [1.0, 1.0, 40.0, 45.0, 12.0]


def test_the_loop_follows_the_python_api_and_stops_starts_changed_layouts(
    example: Any, service: str
) -> None:
    cluster = FakeKubernetes()
    target = {"model": MODEL, "gpu": GPU, "max_gpus": MAX_GPUS, "mode": "disagg"}
    c = example.Controller(
        example.Planner(service), example.Cluster(cluster.url, "llm"), target, log=lambda _: None
    )
    live = None
    layout_changes = count_changes = 0
    for demand in DEMANDS:
        before_ops = len(cluster.ops)
        old = example.layouts(c.current)
        tick = c.tick(demand)
        # The plan the Python API gives for the same chain.
        if live is None:
            live = pdtp.size_for(MODEL, demand, max_gpus=MAX_GPUS, gpu=GPU, mode="disagg")
            changed = True
        else:
            r = pdtp.replan(live.to_dict(), demand, max_gpus=MAX_GPUS, gpu=GPU)
            live, changed = r.plan, bool(r.start or r.stop)
        assert tick.plan["gpus_used"] == live.gpus_used
        ops = cluster.ops[before_ops:]
        if not changed:
            assert ops == [], (demand, ops)
            continue
        sets = cluster.statefulsets()
        # The plan's roles: prefill and decode, or aggregated instances (replan picks the
        # better mode for each demand, as the Python API does).
        for role in example.ROLES:
            side = getattr(live, role, None)
            name = f"pdtp-{role}"
            if side is None:
                assert name not in sets, (demand, role)
                continue
            obj = sets[name]
            assert obj["spec"]["replicas"] == side.instances, (demand, role)
            assert tp_of(obj) == side.layout.tp, (demand, role)
            writes = [(m, n) for m, k, n in ops if k == "StatefulSet" and n == name]
            if old and old.get(role) != str(side.layout):  # a new layout: stop, then start
                stop = [("DELETE", name)] if role in old else []
                assert writes == [*stop, ("POST", name)]
                layout_changes += 1
            elif old:  # the same layout: no stop; a new count is a replace
                assert ("DELETE", name) not in writes
                if writes:
                    count_changes += 1
    # The demands were chosen so that both happen (a regression in either path shows).
    assert layout_changes >= 1 and count_changes >= 1
    kinds = sorted(k for (_, k, _) in cluster.objects)
    roles = [r for r in example.ROLES if getattr(live, r, None) is not None]
    assert kinds.count("StatefulSet") == len(roles)
    if live.serving == "disagg":  # and the P/D proxy in front of them
        assert "Deployment" in kinds


def test_a_failed_apply_is_retried_next_tick(example: Any, service: str) -> None:
    cluster = FakeKubernetes()
    target = {"model": MODEL, "gpu": GPU, "max_gpus": MAX_GPUS, "mode": "disagg"}
    c = example.Controller(example.Planner(service), example.Cluster(cluster.url, "llm"), target)
    c.tick(1.0)
    first = c.current
    cluster.fail_next = True
    with pytest.raises(example.HttpError):
        c.tick(40.0)
    assert c.current is first  # not taken: the cluster did not apply it
    c.tick(40.0)
    live = pdtp.replan(first, 40.0, max_gpus=MAX_GPUS, gpu=GPU).plan
    sets = cluster.statefulsets()
    roles = [r for r in example.ROLES if getattr(live, r, None) is not None]
    assert set(sets) == {f"pdtp-{r}" for r in roles}
    for role in roles:
        side = getattr(live, role)
        assert sets[f"pdtp-{role}"]["spec"]["replicas"] == side.instances
        assert tp_of(sets[f"pdtp-{role}"]) == side.layout.tp


def test_the_command_line_replays_a_trace(
    example: Any, service: str, tmp_path: Any, capsys: Any
) -> None:
    cluster = FakeKubernetes()
    trace = tmp_path / "trace.csv"
    trace.write_text("t_s,demand_rps\n0,1\n60,40\n")
    argv = [
        "--pdtp",
        service,
        "--cluster",
        cluster.url,
        "--namespace",
        "llm",
        "--model",
        MODEL,
        "--gpu",
        GPU,
        "--max-gpus",
        str(MAX_GPUS),
        "--trace",
        str(trace),
        "--headroom",
        "0",
    ]
    assert example.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if "req/s ->" in line]) == 2
    assert any("create StatefulSet/pdtp-decode" in line for line in out)  # the P/D start
    # Then what replan gives for 40 req/s (either mode), as the Python API gives it.
    first = pdtp.size_for(MODEL, 1.0, max_gpus=MAX_GPUS, gpu=GPU, mode="disagg")
    live = pdtp.replan(first.to_dict(), 40.0, max_gpus=MAX_GPUS, gpu=GPU).plan
    roles = [r for r in example.ROLES if getattr(live, r, None) is not None]
    assert set(cluster.statefulsets()) == {f"pdtp-{r}" for r in roles}
