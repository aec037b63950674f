"""Replica metrics for KEDA / HPA: what a plan for the current demand asks of each role.

``pdtp_desired_replicas{model, role, layout, gpu}`` is the number of instances of each role
(prefill, decode, or aggregated) the plan sized for the demand runs; a KEDA ``ScaledObject``
per role reads it with a Prometheus trigger (examples/keda/). Beside it: the plan's predicted
capacity per role, its margins to the SLOs, and the demand it was sized for.

The demand comes from a caller (``POST /v1/demand``) or from a Prometheus query of the serving
metrics (:class:`DemandWatcher`). Each update replaces the model's series, so a layout change
shows as the old layout's series going away (an autoscaler cannot change a layout; the
example controller in examples/layout_controller.py can).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["DemandWatcher", "ReplicaMetrics", "query_prometheus", "replicas_of"]

log = logging.getLogger("pdtp.serve")


def replicas_of(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{role, layout, gpu, replicas, capacity_rps}]`` of a plan (``solve --json``)."""
    out = []
    for role, capacity in (
        ("prefill", "prefill_capacity_rps"),
        ("decode", "decode_capacity_rps"),
        ("aggregated", "requests_per_s"),
    ):
        side = plan.get(role)
        if side:
            out.append(
                {
                    "role": role,
                    "layout": str(side.get("layout", f"tp{side.get('tp')}")),
                    "gpu": str(side.get("gpu") or plan.get("gpu") or ""),
                    "replicas": int(side["instances"]),
                    "capacity_rps": plan.get(capacity),
                }
            )
    return out


class ReplicaMetrics:
    """The gauges, in a registry of their own (one per app: tests run several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, list(labels), registry=self.registry)

        self.desired = gauge(
            "pdtp_desired_replicas",
            "Instances of each role the plan for the current demand runs",
            *("model", "role", "layout", "gpu"),
        )
        self.capacity = gauge(
            "pdtp_predicted_capacity_rps",
            "Requests/s the plan is predicted to serve, per role and in all (role=total)",
            *("model", "role"),
        )
        self.margin = gauge(
            "pdtp_slo_margin_ms",
            "The SLO bound less the plan's predicted latency (ms; negative: missed)",
            *("model", "slo"),
        )
        self.headroom = gauge(
            "pdtp_capacity_headroom_ratio",
            "Predicted capacity / demand - 1 (0: exactly enough)",
            "model",
        )
        self.demand = gauge("pdtp_demand_rps", "The demand the plan was sized for (req/s)", "model")
        self.gpus = gauge("pdtp_plan_gpus", "GPUs the plan uses", "model")
        self.updated = gauge(
            "pdtp_plan_updated_timestamp_seconds",
            "When the plan was last computed (Unix time)",
            "model",
        )
        self.errors = Counter(
            "pdtp_planning_errors",
            "Demand updates that produced no plan (bad demand query, infeasible demand)",
            ["model", "reason"],
            registry=self.registry,
        )
        self._lock = threading.Lock()
        self._series: dict[str, list[tuple[str, str, str]]] = {}

    def update(self, model: str, plan: Mapping[str, Any], demand_rps: float) -> list[Any]:
        """Publish ``plan`` (sized for ``demand_rps``) as ``model``'s series."""
        replicas = replicas_of(plan)
        with self._lock:
            for labels in self._series.pop(model, []):
                self.desired.remove(model, *labels)
            series = []
            for r in replicas:
                labels = (r["role"], r["layout"], r["gpu"])
                self.desired.labels(model, *labels).set(r["replicas"])
                if r["capacity_rps"] is not None:
                    self.capacity.labels(model, r["role"]).set(r["capacity_rps"])
                series.append(labels)
            self._series[model] = series
            served = float(plan.get("requests_per_s") or 0.0)
            self.capacity.labels(model, "total").set(served)
            self.demand.labels(model).set(demand_rps)
            self.headroom.labels(model).set(served / demand_rps - 1 if demand_rps > 0 else 0.0)
            self.gpus.labels(model).set(float(plan.get("gpus_used") or 0))
            workload = plan.get("workload") or {}
            for slo in ("ttft", "tpot"):
                bound, predicted = workload.get(f"{slo}_ms"), plan.get(f"{slo}_ms")
                if bound is not None and predicted is not None:
                    self.margin.labels(model, slo).set(float(bound) - float(predicted))
            self.updated.labels(model).set(time.time())
        return replicas

    def failed(self, model: str, reason: str) -> None:
        self.errors.labels(model, reason).inc()


def query_prometheus(base_url: str, query: str, *, timeout_s: float = 10.0) -> float:
    """The value of an instant PromQL query that returns one number (a scalar, or a vector
    whose samples are summed). ``base_url`` is Prometheus's (``http://prometheus:9090``)."""
    scheme = urllib.parse.urlparse(base_url).scheme
    if scheme not in ("http", "https"):
        raise ValueError(f"prometheus_url: expected an http(s) URL, got {base_url!r}")
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        answer = json.loads(response.read(1 << 20))
    if answer.get("status") != "success":
        raise ValueError(f"Prometheus answered {answer.get('error') or answer.get('status')!r}")
    data = answer.get("data") or {}
    kind, result = data.get("resultType"), data.get("result") or []
    if kind == "scalar":
        values = [float(result[1])]
    elif kind == "vector":
        values = [float(sample["value"][1]) for sample in result]
    else:
        raise ValueError(f"demand query: expected a scalar or a vector, got {kind!r}")
    if not values:
        raise ValueError("demand query returned no samples")
    value = sum(values)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"demand query returned {value!r}, not a demand in req/s")
    return value


class DemandWatcher:
    """Polls Prometheus every ``interval_s`` for the demand and publishes a plan sized for it
    (``plan_for(demand) -> (model, plan dict)``)."""

    def __init__(
        self,
        url: str,
        query: str,
        plan_for: Callable[[float], tuple[str, Mapping[str, Any]]],
        metrics: ReplicaMetrics,
        *,
        model: str,
        interval_s: float = 30.0,
    ) -> None:
        self.url, self.query, self.plan_for, self.metrics = url, query, plan_for, metrics
        self.model, self.interval_s = model, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def poll_once(self) -> bool:
        """One query and plan; False (and a counted error) when either fails."""
        try:
            demand = query_prometheus(self.url, self.query)
        except Exception as e:  # the watcher keeps going; the error is counted and logged
            self.last_error = f"demand query: {e}"
            self.metrics.failed(self.model, "query")
            log.warning("pdtp serve: %s", self.last_error)
            return False
        try:
            name, plan = self.plan_for(demand)
        except Exception as e:
            self.last_error = f"plan for {demand:g} req/s: {e}"
            self.metrics.failed(self.model, "plan")
            log.warning("pdtp serve: %s", self.last_error)
            return False
        self.metrics.update(name, plan, demand)
        self.last_error = None
        return True

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.poll_once()
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=loop, name="pdtp-demand-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
