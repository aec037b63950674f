"""`pdtp serve`: the CLI's commands over HTTP/JSON (answers equal to `--json`), structured
errors, limits, the token, OpenAPI, and the work off the event loop."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

import pdtp
from pdtp import cli
from pdtp.service import API_VERSION, create_app, ops

# Fields that time the computation: different on every run, the rest must be equal.
TIMINGS = {"solve_ms", "simulated_in_s"}


def stable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [stable(v) for v in x]
    return x


def cli_json(capsys: Any, argv: list[str]) -> tuple[int, Any]:
    capsys.readouterr()
    code = cli.main(argv if argv[0] == "deploy" else [*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


PLAN_FLAGS = ["llama-3.1-70b", "--gpus", "16"]


@pytest.fixture(scope="module")
def current_plan(client: TestClient) -> dict[str, Any]:
    r = client.post("/v1/solve", json={"model": "llama-3.1-70b", "gpus": 16})
    assert r.status_code == 200
    return dict(r.json())


# (operation, request body, the same request as CLI flags, files the flags name)
CASES = [
    (
        "solve",
        {"model": "llama-3.1-70b", "gpus": 16, "tpot": 40},
        ["solve", *PLAN_FLAGS, "--tpot", "40"],
    ),
    (
        "solve",
        {"model": "llama-3.1-8b", "gpus": {"h100": 8}, "ttft": "none", "no_commands": True},
        ["solve", "llama-3.1-8b", "--gpus", "h100=8", "--ttft", "none", "--no-commands"],
    ),
    (
        "solve",
        {"model": "llama-3.1-8b", "nodes": [8, 4], "gpu": "h200"},
        ["solve", "llama-3.1-8b", "--nodes", "8,4", "--gpu", "h200"],
    ),
    (
        "size_for",
        {"model": "llama-3.1-70b", "demand": 20, "max_gpus": 64},
        ["size-for", "llama-3.1-70b", "--demand", "20", "--max-gpus", "64"],
    ),
    (
        "check",
        {"model": "llama-3.1-70b", "prefill_tp": 1, "decode_tp": 4},
        ["check", "--model", "llama-3.1-70b", "--prefill-tp", "1", "--decode-tp", "4"],
    ),
    (
        "check",
        {"heads": 64, "kv_heads": 8, "prefill_tp": 4, "decode_tp": 8, "connector": "nixl"},
        ["check", "--heads", "64", "--kv-heads", "8", "-P", "4", "-D", "8", "--connector", "nixl"],
    ),
    (
        "transfer_map",
        {"kv_heads": 4, "prefill_tp": 4, "decode_tp": 8},
        ["map", "--kv-heads", "4", "--prefill-tp", "4", "--decode-tp", "8"],
    ),
    (
        "simulate",
        {"model": "llama-3.1-8b", "gpus": 8, "gpu": "h100", "rate": 5, "requests": 300},
        [
            "simulate",
            "llama-3.1-8b",
            "--gpus",
            "8",
            "--gpu",
            "h100",
            "--rate",
            "5",
            "--requests",
            "300",
        ],
    ),
    (
        "deploy",
        {"model": "llama-3.1-8b", "gpus": 8, "format": "json"},
        ["deploy", "llama-3.1-8b", "--gpus", "8", "--format", "json"],
    ),
]


@pytest.mark.parametrize(
    ("op", "body", "argv"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_answer_is_the_cli_json(
    client: TestClient, capsys: Any, op: str, body: Any, argv: Any
) -> None:
    r = client.post(f"/v1/{op}", json=body)
    code, expected = cli_json(capsys, argv)
    assert r.status_code == 200, r.text
    assert code in (0, 1)  # check's "invalid" is an answer too
    assert stable(r.json()) == stable(expected)


def test_file_flags_take_the_content(
    client: TestClient, capsys: Any, tmp_path: Any, current_plan: Any
) -> None:
    """replan --current, deploy --plan/--diff, fleet --demands, --config: the body carries
    the file's content; the answers equal the CLI's on the same files."""
    now = tmp_path / "now.json"
    now.write_text(json.dumps(current_plan))
    r = client.post("/v1/replan", json={"current": current_plan, "demand": 20, "max_gpus": 32})
    _, expected = cli_json(
        capsys, ["replan", "--current", str(now), "--demand", "20", "--max-gpus", "32"]
    )
    assert r.status_code == 200 and stable(r.json()) == stable(expected)

    new = r.json()["plan"]
    (tmp_path / "new.json").write_text(json.dumps(new))
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    body = {"old": current_plan, "new": new, "format": "json", "node_hosts": hosts}
    r = client.post("/v1/deploy_diff", json=body)
    argv = ["deploy", "--diff", str(now), str(tmp_path / "new.json"), "--format", "json"]
    _, expected = cli_json(capsys, [*argv, "--node-hosts", ",".join(hosts)])
    assert r.status_code == 200 and r.json() == expected
    assert {i["name"] for i in r.json()["start"]} == {i["name"] for i in expected["start"]}

    demands = [
        {"model": "llama-3.1-8b", "demand_rps": 5},
        {"model": "qwen3-8b", "demand_rps": 3, "weight": 2},
    ]
    csv = tmp_path / "d.csv"
    csv.write_text("model,demand_rps,weight\nllama-3.1-8b,5,\nqwen3-8b,3,2\n")
    r = client.post("/v1/solve_fleet", json={"demands": demands, "gpus": 16})
    _, expected = cli_json(capsys, ["fleet", "--demands", str(csv), "--gpus", "16"])
    assert r.status_code == 200 and stable(r.json()) == stable(expected)

    with open(_hf_config("Llama-3.1-8B")) as f:
        config = json.load(f)
    r = client.post("/v1/solve", json={"config": config, "gpus": 8, "gpu": "h100"})
    # An uploaded config is the model, as the Python API reads a config dict (named by the
    # config, launch lines serving its HF id, not a server folder).
    live = cli._plan_json(pdtp.solve(config, gpus=8, gpu="h100"), commands=True)
    assert r.status_code == 200 and stable(r.json()) == stable(live)
    assert "pdtp-serve" not in r.text


def _hf_config(name: str) -> str:
    from pathlib import Path

    here = Path(__file__).parent / "data" / "hf-configs"
    matches = sorted(p for p in here.rglob("*.json") if name.lower() in str(p).lower())
    assert matches, f"no HF config for {name} under {here}"
    return str(matches[0])


def test_deploy_files(client: TestClient, capsys: Any, tmp_path: Any) -> None:
    """deploy as scripts or k8s: the files `-o DIR` writes, by name."""
    for fmt in ("scripts", "k8s"):
        r = client.post("/v1/deploy", json={"model": "llama-3.1-8b", "gpus": 8, "format": fmt})
        assert r.status_code == 200, r.text
        out = tmp_path / fmt
        assert (
            cli.main(["deploy", "llama-3.1-8b", "--gpus", "8", "--format", fmt, "-o", str(out)])
            == 0
        )
        files = {p.name: p.read_text() for p in out.iterdir()}
        assert r.json() == {"format": fmt, "files": files}


def test_catalogs(client: TestClient, capsys: Any) -> None:
    for name in ("models", "gpus"):
        r = client.get(f"/v1/{name}")
        assert r.status_code == 200 and r.json() == cli_json(capsys, [name])[1]


def test_infeasible_is_422_with_the_cli_json(client: TestClient, capsys: Any) -> None:
    body = {"model": "llama-3.1-405b", "gpus": 2, "gpu": "l40s"}
    r = client.post("/v1/solve", json=body)
    code, expected = cli_json(capsys, ["solve", "llama-3.1-405b", "--gpus", "2", "--gpu", "l40s"])
    assert code == 1 and expected["status"] == "INFEASIBLE"
    assert r.status_code == 422 and r.json() == expected


def error_of(r: Any) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field", "allowed"}
    assert "Traceback" not in r.text
    return dict(body["error"])


def test_errors_name_the_field_and_its_values(client: TestClient) -> None:
    import pdtp

    base = {"model": "llama-3.1-70b", "gpus": 16}
    e = error_of(client.post("/v1/solve", json={**base, "gpu": "zz"}))
    assert e["field"] == "gpu" and e["allowed"] == [g.name for g in pdtp.gpus()]
    assert "zz" in e["message"]
    e = error_of(client.post("/v1/solve", json={**base, "objective": "fast"}))
    assert e["field"] == "objective" and e["allowed"] == ["throughput", "tokens_per_dollar", "cost"]
    e = error_of(client.post("/v1/solve", json={**base, "connector": "tcp"}))
    assert e["field"] == "connector" and "nixl" in e["allowed"]
    e = error_of(client.post("/v1/solve", json={**base, "max_tpp": 4}))
    assert e["code"] == "unknown_field" and e["field"] == "max_tpp" and "max_tp" in e["allowed"]
    e = error_of(client.post("/v1/solve", json={**base, "isl": 1.5}))
    assert e["field"] == "isl"
    e = error_of(client.post("/v1/solve", json={"model": "no-such-model", "gpus": 8}))
    assert e["field"] == "model" and "llama-3.1-70b" in e["allowed"]
    e = error_of(client.post("/v1/solve", json={**base, "gpus": -3}))
    assert e["field"] == "gpus", e
    e = error_of(client.post("/v1/check", content=b""))
    assert e["code"] == "invalid_json" and "empty" in e["message"]
    e = error_of(client.post("/v1/size_for", json={"model": "llama-3.1-70b"}))
    assert e["code"] == "missing_field" and e["field"] == "demand"
    # The CLI's own words come back in the request's: fields, not flags.
    e = error_of(client.post("/v1/check", json={"model": "llama-3.1-70b", "prefill_tp": 2}))
    assert "--" not in e["message"] and "decode_tp" in e["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"xx",
        b"[1]",
        b"null",
        b'"solve"',
        b'{"model": {"a": 1}, "gpus": 8}',
        b'{"model": "-x", "gpus": 8}',
        b'{"model": "llama-3.1-8b", "gpus": 8, "layouts": [1]}',
        b'{"model": "llama-3.1-8b", "gpus": {"h100": "x"}}',
        b'{"model": "llama-3.1-8b", "gpus": 1e400}',
        b'{"model": "llama-3.1-8b", "gpus": 8, "tpot": -1}',
        b'{"model": "llama-3.1-8b", "gpus": 8, "time_limit": 1e9}',
        b'{"model": "llama-3.1-8b", "gpus": 8, "config": "/etc/passwd"}',
        b'{"model": "\\u0000"}',
    ],
)
def test_hostile_bodies_are_4xx(client: TestClient, body: bytes) -> None:
    for op in ("solve", "check", "replan", "deploy", "pareto"):
        r = client.post(f"/v1/{op}", content=body, headers={"content-type": "application/json"})
        error_of(r)


def test_server_files_are_never_read(client: TestClient) -> None:
    """A file field takes content, not a path: the server never opens a path a client names."""
    e = error_of(client.post("/v1/replan", json={"current": "/etc/passwd", "demand": 1}))
    assert e["field"] == "current"
    e = error_of(client.post("/v1/solve", json={"config": "/etc/hostname", "gpus": 8}))
    assert e["field"] == "config"


def test_body_size_limit() -> None:
    c = TestClient(create_app(max_body_bytes=1000))
    e = error_of(c.post("/v1/solve", content=b"{" + b" " * 2000 + b"}"))
    assert e["code"] == "too_large"
    r = c.post("/v1/check", json={"kv_heads": 8, "prefill_tp": 4, "decode_tp": 4})
    assert r.status_code == 200


def test_time_limits(client: TestClient, monkeypatch: Any) -> None:
    """A planner's time limit above the server's is refused; none given runs at the server's."""
    e = error_of(
        TestClient(create_app(max_time_s=5)).post(
            "/v1/solve", json={"model": "llama-3.1-8b", "gpus": 8, "time_limit": 6}
        )
    )
    assert e["field"] == "time_limit" and "5" in e["allowed"]
    seen: list[list[str]] = []

    def fake_main(argv: list[str], **kw: Any) -> int:
        seen.append(argv)
        print("{}")
        return 0

    monkeypatch.setattr(ops.cli, "main", fake_main)
    ops.run(ops.OPS["solve"], {"model": "m", "gpus": 8}, max_time_s=2.5)
    ops.run(ops.OPS["solve"], {"model": "m", "gpus": 8, "time_limit": 1}, max_time_s=2.5)
    assert "--time-limit=2.5" in seen[0] and "--time-limit=1" in seen[1]


def test_a_computation_over_the_limit_is_504(monkeypatch: Any) -> None:
    release = threading.Event()

    def slow(op: Any, body: Any, *, max_time_s: Any = None) -> Any:
        release.wait(30)
        return ops.Outcome(200, {})

    monkeypatch.setattr("pdtp.service.app.ops_mod.run", slow)
    app = create_app(max_time_s=0.1)
    try:
        e = error_of_5xx(TestClient(app).post("/v1/check", json={"kv_heads": 8}))
        assert e["code"] == "timeout"
    finally:
        release.set()


def error_of_5xx(r: Any) -> dict[str, Any]:
    assert r.status_code == 504, r.text
    return dict(r.json()["error"])


def test_bearer_token() -> None:
    c = TestClient(create_app(token="s3cret"))
    body = {"kv_heads": 8, "prefill_tp": 4, "decode_tp": 4}
    assert error_of(c.post("/v1/check", json=body))["code"] == "unauthorized"
    assert (
        c.post("/v1/check", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    )
    assert c.get("/metrics").status_code == 401
    ok = c.post("/v1/check", json=body, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["ok"] is True
    assert c.get("/v1/openapi.json").status_code == 200  # the schema is public
    assert c.get("/").status_code == 200  # so is the page (it asks for the token)


def test_openapi_is_the_cli_schema(client: TestClient) -> None:
    doc = client.get(f"/v{API_VERSION}/openapi.json").json()
    assert doc["info"]["version"] == API_VERSION
    wanted = {
        "check",
        "transfer_map",
        "solve",
        "size_for",
        "replan",
        "solve_fleet",
        "pareto",
        "simulate",
        "deploy",
        "deploy_diff",
        "demand",
        "pairs",
    }
    assert {p.split("/")[-1] for p in doc["paths"]} >= wanted
    schemas = doc["components"]["schemas"]
    sub = cli._subparser(cli.build_parser(), "solve")
    # --scenario names a file on the machine running pdtp: a request's fields are its scenario.
    flags = {a.dest for a in sub._actions} - {"help", "json", "scenario"}
    assert set(schemas["SolveRequest"]["properties"]) == flags
    objective = schemas["SolveRequest"]["properties"]["objective"]
    assert "throughput" in json.dumps(objective)
    assert schemas["SizeForRequest"]["required"] == ["demand"]
    assert schemas["ErrorBody"]


def test_computations_run_off_the_event_loop(monkeypatch: Any) -> None:
    """While a computation holds its worker, the server still answers other requests."""
    pytest.importorskip("uvicorn")
    from pdtp.service.server import BackgroundServer

    started, release = threading.Event(), threading.Event()
    real = ops.run

    def held(op: Any, body: Any, **kw: Any) -> Any:
        if op.name == "solve":
            started.set()
            release.wait(30)
        return real(op, body, **kw)

    monkeypatch.setattr("pdtp.service.app.ops_mod.run", held)
    with BackgroundServer() as url:
        answers: list[int] = []

        def slow_call() -> None:
            answers.append(post(url, "solve", {"model": "llama-3.1-8b", "gpus": 8})[0])

        t = threading.Thread(target=slow_call)
        t.start()
        assert started.wait(30)
        status, body = post(url, "check", {"kv_heads": 8, "prefill_tp": 4, "decode_tp": 4})
        assert status == 200 and body["ok"] is True
        assert not answers  # the solve is still held
        release.set()
        t.join(30)
        assert answers == [200]


def post(url: str, op: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(f"{url}/v1/{op}", data=json.dumps(body).encode(), method="POST")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_command_flags(capsys: Any, tmp_path: Any) -> None:
    assert cli.main(["serve", "--port", "0"]) == 2
    assert "--port" in capsys.readouterr().err
    assert cli.main(["serve", "--prometheus-url", "http://127.0.0.1:9"]) == 2
    assert "--demand-query" in capsys.readouterr().err
    target = tmp_path / "t.json"
    target.write_text(json.dumps({"model": "llama-3.1-8b", "max_tpp": 4}))
    argv = [
        "serve",
        "--prometheus-url",
        "http://x",
        "--demand-query",
        "up",
        "--target",
        str(target),
    ]
    assert cli.main(argv) == 2
    assert "max_tpp" in capsys.readouterr().err


def test_serve_starts_from_one_command(tmp_path: Any) -> None:
    """`pdtp serve --port N` answers on 127.0.0.1 (the default bind)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdtp", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/v1/health", timeout=2) as r:
                    assert json.loads(r.read())["ok"] is True
                    break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read().decode()) from None
                time.sleep(0.1)
        else:
            raise AssertionError("pdtp serve did not answer")
        status, body = post(url, "check", {"kv_heads": 8, "prefill_tp": 4, "decode_tp": 4})
        assert status == 200 and body["ok"] is True
    finally:
        proc.terminate()
        proc.wait(20)


def test_import_pdtp_loads_no_web_framework() -> None:
    code = (
        "import sys, pdtp, pdtp.cli; pdtp.cli.build_parser(); "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'prometheus_client') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_load_benchmark_fast_mode(tmp_path: Any) -> None:
    """benchmarks/serve_load.py --fast: every level answers, no error, no answer that differs
    from the Python API's (its exit code says so; the timings are not asserted)."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("pdtp_serve_load", script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "load.json"
    assert module.main(["--fast", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["op"], r["clients"]) for r in rows} == {
        (op, n) for op in ("solve", "replan") for n in (1, 16, 64)
    }
    assert all(r["requests"] > 0 and r["errors"] == 0 and r["mismatches"] == 0 for r in rows)


# Not simulate: how long it runs is the client's to choose (--requests), bounded by the time
# limit, not by a quick answer.
FUZZ_OPS = ("check", "transfer_map", "solve", "size_for", "replan", "deploy", "deploy_diff",
            "pairs", "pareto", "solve_fleet")  # fmt: skip
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["llama-3.1-8b", "h100", "none", "tp2dp4ep", "-1", "", "a=b,c", "8,x"]),
    st.text(max_size=12),
    st.lists(st.integers(-3, 70000), max_size=4),
    st.dictionaries(st.sampled_from(["h100", "mi300x", "x", ""]), st.integers(-2, 99), max_size=2),
)


@st.composite
def _requests(draw: Any) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(FUZZ_OPS))
    op = ops.OPS.get(name) or ops.CUSTOM_OPS[name]
    keys = draw(st.lists(st.sampled_from([*op.fields, "bogus"]), max_size=5, unique=True))
    return name, {k: draw(_values) for k in keys}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests())
def test_fuzzed_requests_are_answers_or_4xx_never_500(request_: tuple[str, Any]) -> None:
    name, body = request_
    r = _FUZZ_CLIENT.post(f"/v1/{name}", content=json.dumps(body).encode())
    assert r.status_code in (200, 400, 422), (name, body, r.status_code, r.text[:300])
    assert "Traceback" not in r.text
    if r.status_code == 400:
        error_of(r)


_FUZZ_CLIENT = TestClient(create_app(max_time_s=20))


def test_pareto_and_pairs_are_the_python_apis(client: TestClient) -> None:
    """The two operations with no CLI command of their own: the same answers as the Python
    API on the same inputs (parsed by solve's and check's flags)."""
    body = {"model": "llama-3.1-8b", "gpus": 8, "gpu": "h100", "tpot_targets": [10, 20, 50]}
    r = client.post("/v1/pareto", json=body)
    live = pdtp.pareto("llama-3.1-8b", gpus=8, gpu="h100", tpot_ms=[10, 20, 50])
    assert r.status_code == 200 and stable(r.json()) == stable(live.to_dict())
    e = error_of(client.post("/v1/pareto", json={**body, "tpot_targets": "fast"}))
    assert e["field"] == "tpot_targets"

    r = client.post(
        "/v1/pairs", json={"model": "llama-3.1-70b", "connector": "nixl", "sizes": [2, 4, 8]}
    )
    assert r.status_code == 200
    cells = r.json()["cells"]
    for i, p in enumerate([2, 4, 8]):
        for j, d in enumerate([2, 4, 8]):
            want = pdtp.check("llama-3.1-70b", p, d, connector="nixl")
            assert (cells[i][j]["prefill_tp"], cells[i][j]["decode_tp"]) == (p, d)
            assert cells[i][j]["ok"] == want.ok
            if want.violations:
                assert cells[i][j]["code"] == want.violations[0].code
                assert cells[i][j]["message"] == want.violations[0].message
    e = error_of(client.post("/v1/pairs", json={"model": "llama-3.1-70b", "sizes": [0]}))
    assert e["field"] == "sizes"
