"""Replica metrics: /metrics publishes the plan for a posted demand or for the demand a
Prometheus query returns (a fake Prometheus on loopback), and the example KEDA ScaledObjects
validate against KEDA's CRD schema (vendored under tests/data/keda)."""

from __future__ import annotations

import json
import pathlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

pytest.importorskip("prometheus_client")
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import pdtp
from pdtp.service import create_app
from pdtp.service.metrics import ReplicaMetrics, query_prometheus

ROOT = pathlib.Path(__file__).resolve().parent.parent
KEDA_CRD = pathlib.Path(__file__).parent / "data" / "keda" / "keda.sh_scaledobjects.yaml"
KEDA_EXAMPLES = ROOT / "examples" / "keda"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def desired(text: str, model: str) -> dict[tuple[str, str, str], float]:
    return {
        (dict(k[1])["role"], dict(k[1])["layout"], dict(k[1])["gpu"]): v
        for k, v in samples(text).items()
        if k[0] == "pdtp_desired_replicas" and dict(k[1])["model"] == model
    }


def expected_replicas(plan: Any) -> dict[tuple[str, str, str], float]:
    out = {}
    for role in ("prefill", "decode", "aggregated"):
        side = getattr(plan, role, None)
        if side is not None:
            out[(role, str(side.layout), side.gpu or plan.gpu)] = float(side.instances)
    return out


def test_posted_demand_publishes_the_plans_replicas() -> None:
    c = TestClient(create_app())
    body = {"model": "llama-3.1-70b", "demand": 20, "max_gpus": 64, "gpu": "h100"}
    r = c.post("/v1/demand", json=body)
    assert r.status_code == 200, r.text
    plan = pdtp.size_for("llama-3.1-70b", 20, max_gpus=64, gpu="h100")
    text = c.get("/metrics").text
    assert desired(text, plan.model) == expected_replicas(plan)
    got = samples(text)
    m = (("model", plan.model),)
    assert got[("pdtp_demand_rps", m)] == 20
    assert got[("pdtp_plan_gpus", m)] == plan.gpus_used
    total = got[("pdtp_predicted_capacity_rps", (*m, ("role", "total")))]
    assert total == pytest.approx(plan.requests_per_s)
    assert got[("pdtp_capacity_headroom_ratio", m)] == pytest.approx(plan.requests_per_s / 20 - 1)
    tpot = got[("pdtp_slo_margin_ms", (*m, ("slo", "tpot")))]
    assert tpot == pytest.approx(plan.workload.tpot_ms - plan.tpot_ms)
    assert tpot >= 0  # the plan meets its SLO
    # The answer carries the same replicas and size_for's JSON.
    assert r.json()["answer"]["gpus_used"] == plan.gpus_used
    assert {(x["role"], x["layout"], x["gpu"]): x["replicas"] for x in r.json()["replicas"]} == (
        expected_replicas(plan)
    )


def test_demand_with_current_plan_replans() -> None:
    c = TestClient(create_app())
    now = c.post("/v1/solve", json={"model": "llama-3.1-70b", "gpus": 16}).json()
    r = c.post("/v1/demand", json={"current": now, "demand": 30, "max_gpus": 48})
    assert r.status_code == 200, r.text
    live = pdtp.replan(now, 30, max_gpus=48)
    assert desired(c.get("/metrics").text, live.plan.model) == expected_replicas(live.plan)
    assert "start" in r.json()["answer"]  # replan's own answer, moves included


def test_a_demand_no_plan_serves_is_counted_not_published() -> None:
    c = TestClient(create_app())
    r = c.post("/v1/demand", json={"model": "llama-3.1-70b", "demand": 1e6, "max_gpus": 8})
    assert r.status_code == 422 and r.json()["status"] == "INFEASIBLE"
    got = samples(c.get("/metrics").text)
    key = ("pdtp_planning_errors_total", (("model", "llama-3.1-70b"), ("reason", "plan")))
    assert got[key] == 1
    assert not desired(c.get("/metrics").text, "llama-3.1-70b")


def test_a_layout_change_replaces_the_series() -> None:
    m = ReplicaMetrics()

    def plan(layout: str, n: int) -> dict[str, Any]:
        side = {"layout": layout, "instances": n, "gpu": "h100"}
        return {"model": "x", "prefill": side, "decode": side, "requests_per_s": 5.0}

    m.update("x", plan("tp2", 3), 4.0)
    m.update("x", plan("tp4", 2), 4.0)
    from prometheus_client import generate_latest

    got = desired(generate_latest(m.registry).decode(), "x")
    assert got == {("prefill", "tp4", "h100"): 2, ("decode", "tp4", "h100"): 2}


class FakePrometheus:
    """Answers /api/v1/query with ``self.answer`` and records the queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.answer: Any = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/api/v1/query":
                    self.send_error(404)
                    return
                fake.queries.append(parse_qs(url.query)["query"][0])
                data = json.dumps(fake.answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def vector(self, *values: float) -> None:
        result = [{"metric": {"pod": f"p{i}"}, "value": [0, str(v)]} for i, v in enumerate(values)]
        self.answer = {"status": "success", "data": {"resultType": "vector", "result": result}}

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def prometheus() -> Any:
    fake = FakePrometheus()
    yield fake
    fake.close()


QUERY = 'sum(rate(vllm:request_success_total{model_name="meta-llama/Meta-Llama-3.1-70B"}[2m]))'


def test_the_demand_from_a_prometheus_query(prometheus: FakePrometheus) -> None:
    target = {"model": "llama-3.1-70b", "max_gpus": 64, "gpu": "h100"}
    app = create_app(prometheus_url=prometheus.url, demand_query=QUERY, target=target)
    c = TestClient(app)
    watcher = app.state.watcher
    prometheus.vector(7.5, 4.5)  # two serving pods: the demand is their sum
    assert watcher.poll_once(), watcher.last_error
    assert prometheus.queries == [QUERY]
    plan = pdtp.size_for("llama-3.1-70b", 12.0, max_gpus=64, gpu="h100")
    text = c.get("/metrics").text
    assert desired(text, plan.model) == expected_replicas(plan)
    assert samples(text)[("pdtp_demand_rps", (("model", plan.model),))] == 12.0
    # More demand: the replicas follow it.
    prometheus.vector(40.0)
    assert watcher.poll_once()
    bigger = pdtp.size_for("llama-3.1-70b", 40.0, max_gpus=64, gpu="h100")
    assert desired(c.get("/metrics").text, plan.model) == expected_replicas(bigger)


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "error", "error": "parse error"},
        {"status": "success", "data": {"resultType": "vector", "result": []}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"value": [0, "NaN"]}]}},
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success", "data": {"resultType": "scalar", "result": [0, "-3"]}},
    ],
)
def test_a_bad_demand_query_is_counted_and_keeps_the_last_plan(
    prometheus: FakePrometheus, answer: Any
) -> None:
    target = {"model": "llama-3.1-8b", "max_gpus": 16}
    app = create_app(prometheus_url=prometheus.url, demand_query="x", target=target)
    c = TestClient(app)
    prometheus.vector(3.0)
    assert app.state.watcher.poll_once()
    before = desired(c.get("/metrics").text, "llama-3.1-8b")
    assert before
    prometheus.answer = answer
    assert not app.state.watcher.poll_once()
    assert app.state.watcher.last_error
    assert c.get("/v1/health").json()["watcher"]["last_error"] == app.state.watcher.last_error
    text = c.get("/metrics").text
    assert desired(text, "llama-3.1-8b") == before
    key = ("pdtp_planning_errors_total", (("model", "llama-3.1-8b"), ("reason", "query")))
    assert samples(text)[key] == 1


def test_prometheus_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="prometheus_url"):
        query_prometheus("file:///etc/passwd", "up")


def keda_schema() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    crd = yaml.safe_load(KEDA_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return dict(version["schema"]["openAPIV3Schema"])


def test_keda_scaled_objects_validate_and_point_at_pdtps_objects() -> None:
    import jsonschema
    import yaml

    schema = keda_schema()
    validator = jsonschema.Draft7Validator(schema)
    c = TestClient(create_app())
    manifests = c.post("/v1/deploy", json={"model": "llama-3.1-70b", "gpus": 16, "format": "k8s"})
    objects = [d for f in manifests.json()["files"].values() for d in yaml.safe_load_all(f) if d]
    statefulsets = {o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"}
    c.post("/v1/demand", json={"model": "llama-3.1-70b", "demand": 5, "max_gpus": 16})
    published = {
        (dict(k[1])["model"], dict(k[1])["role"])
        for k in samples(c.get("/metrics").text)
        if k[0] == "pdtp_desired_replicas"
    }
    files = sorted(KEDA_EXAMPLES.glob("scaledobject-*.yaml"))
    assert {f.stem.split("-", 1)[1] for f in files} == {"prefill", "decode"}
    for f in files:
        doc = yaml.safe_load(f.read_text())
        errors = sorted(validator.iter_errors(doc), key=str)
        assert not errors, (f.name, [e.message for e in errors])
        assert (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
        assert doc["spec"]["scaleTargetRef"]["name"] in statefulsets
        (trigger,) = doc["spec"]["triggers"]
        query = trigger["metadata"]["query"]
        role = f.stem.split("-", 1)[1]
        assert "pdtp_desired_replicas" in query and f'role="{role}"' in query
        assert ("llama-3.1-70b", role) in published


def test_the_keda_schema_refuses_a_broken_scaled_object() -> None:
    """The validator bites: a wrong type and a missing trigger field are errors."""
    import jsonschema
    import yaml

    validator = jsonschema.Draft7Validator(keda_schema())
    doc = yaml.safe_load((KEDA_EXAMPLES / "scaledobject-decode.yaml").read_text())
    doc["spec"]["minReplicaCount"] = "one"
    assert list(validator.iter_errors(doc))
    doc = yaml.safe_load((KEDA_EXAMPLES / "scaledobject-decode.yaml").read_text())
    del doc["spec"]["triggers"][0]["type"]
    assert list(validator.iter_errors(doc))
    del doc["spec"]["scaleTargetRef"]
    assert list(validator.iter_errors(doc))


def test_demand_refuses_fields_of_the_other_operation() -> None:
    c = TestClient(create_app())
    now = c.post("/v1/solve", json={"model": "llama-3.1-8b", "gpus": 8}).json()
    r = c.post("/v1/demand", json={"current": now, "demand": 3, "isl": 4096})
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "isl" and "current" in r.json()["error"]["allowed"]
