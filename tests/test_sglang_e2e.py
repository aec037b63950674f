"""Loopback end-to-end test of an SGLang plan: solve → deploy → run what deploy wrote.

``pdtp.solve`` picks an SGLang P/D plan on one node; ``pdtp.deploy`` writes ``node-0.sh``
(``python -m sglang.launch_server …`` per instance) and ``router.sh`` (``python -m
sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT … --decode URL
…``). The test runs both scripts as written. ``sglang.launch_server`` is the stand-in of
tests/standin_sglang.py (SGLang's API as the router uses it, the prefill's bootstrap server, a
decode that pulls its room's KV from the bootstrap address it was sent); the router is
sglang-router 0.3.2 itself, the release whose flags deploy's router line is checked against:
its Rust router (``router.sh`` verbatim) and its Python mini load balancer (the same line with
``--mini-lb``, ``sglang_router/mini_lb.py``). Requests go through the router and each must
reach one prefill and one decode of the plan with the same bootstrap room and that prefill's
own bootstrap host and port.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import pdtp
from conftest import REPO, HangGuard
from test_deploy_e2e import free_base, free_port, get

STANDIN = REPO / "tests" / "standin_sglang.py"
# Waiting for servers to come up is bounded by this many polls (a failure, never a timing).
POLLS, INTERVAL_S = 450, 0.2
ROUTERS = ("rust", "mini-lb")


def environment(tmp_path: Path) -> dict[str, str]:
    """``python`` on PATH is this interpreter (with sglang-router); ``sglang.launch_server``
    is the stand-in (a package on PYTHONPATH)."""
    shim = tmp_path / "shim" / "sglang"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    (shim / "launch_server.py").write_text(
        f"import runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n"
    )
    record = tmp_path / "record"
    record.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    path = os.pathsep.join([str(bin_dir), os.environ["PATH"]])
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return {**env, "PATH": path, "PYTHONPATH": str(shim.parent), "RECORD": str(record),
            "NO_PROXY": "*", "HF_HUB_OFFLINE": "1"}  # fmt: skip


def router_ports() -> dict[str, int]:
    """Two distinct free ports: the router's HTTP API and its Prometheus exporter."""
    router = free_port()
    prometheus = free_port()
    while prometheus == router:
        prometheus = free_port()
    return {"router": router, "prometheus": prometheus}


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=60) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def start(script: Path, tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = open(tmp_path / f"{script.name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text()[-2000:] for p in sorted(tmp_path.glob("*.log")))


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def records(directory: Path) -> dict[int, list[dict[str, Any]]]:
    return {
        int(f.stem): [json.loads(x) for x in f.read_text().splitlines()]
        for f in directory.glob("*.jsonl")
    }


@pytest.fixture(scope="module")
def plan() -> pdtp.Plan:
    # One node of 8 H100s: several prefill and decode instances on it (their number and
    # sizes are the planner's; the test reads them from the plan).
    return pdtp.solve(
        "llama-3.1-8b", gpus=8, gpu="h100", connector="sglang-mooncake", mode="disagg"
    )


@pytest.mark.parametrize("router", ROUTERS)
def test_requests_go_prefill_then_decode_through_sglangs_router(plan, router, tmp_path):
    pytest.importorskip("sglang_router", reason="pip install sglang-router==0.3.2")
    model = tmp_path / "model"  # a local folder: the router reads no tokenizer from the Hub
    model.mkdir()
    base = free_base(16)  # the HTTP family, then the bootstrap one: never overlapping
    ports = {"http": base, "bootstrap": base + 8, **router_ports()}
    dep = pdtp.deploy(plan, ports=ports, model_path=model)
    assert {i.role for i in dep.instances} == {"prefill", "decode"}
    assert len(dep.instances) == plan.prefill.instances + plan.decode.instances
    out = tmp_path / "out"
    dep.write(out, "scripts")
    if router == "mini-lb":  # the same line, served by sglang_router/mini_lb.py
        script = out / "router.sh"
        script.write_text(script.read_text().rstrip() + " --mini-lb\n")
    env = environment(tmp_path)
    procs = [start(out / "node-0.sh", tmp_path, env), start(out / "router.sh", tmp_path, env)]
    try:
        guard = HangGuard(POLLS, INTERVAL_S)
        for inst in dep.instances:  # up when /health answers (the README says so)
            while get(f"http://127.0.0.1:{inst.http_port}/health") != 200:
                assert all(p.poll() is None for p in procs), logs(tmp_path)
                guard.tick(f"{inst.name} never answered /health: {logs(tmp_path)}")
        answers = []
        prompts = [f"prompt {k}" for k in range(2 * len(dep.instances))]
        for k, prompt in enumerate(prompts):
            generate = k % 2 == 0  # SGLang's /generate and the OpenAI route alike
            url = f"http://127.0.0.1:{dep.router_port}/" + ("generate" if generate else
                                                             "v1/completions")  # fmt: skip
            body = (
                {"text": prompt, "sampling_params": {"max_new_tokens": 4}}
                if generate
                else {"model": str(model), "prompt": prompt, "max_tokens": 4}
            )
            while True:  # the router may still be registering its workers
                assert all(p.poll() is None for p in procs), logs(tmp_path)
                status, reply = post(url, body)
                if status == 200:
                    break
                # An instance refused the request (wrong room or bootstrap address): no retry.
                assert "stand-in:" not in reply, reply
                guard.tick(f"no answer through the router ({status} {reply!r}): {logs(tmp_path)}")
            doc = json.loads(reply)
            answers.append(doc["text"] if generate else doc["choices"][0]["text"])
    finally:
        stop(procs)
    by_port = {i.http_port: i for i in dep.instances}
    seen = records(Path(env["RECORD"]))
    assert set(seen) <= set(by_port), "a request reached a port no instance of the plan has"
    rooms: dict[int, dict[str, Any]] = {}
    for port, reqs in seen.items():
        inst = by_port[port]
        for r in reqs:
            assert r["role"] == inst.role  # the stand-in runs the role its launch line says
            room = rooms.setdefault(r["body"]["bootstrap_room"], {})
            assert inst.role not in room, "one room reached two instances of a role"
            room[inst.role] = (inst, r["body"])
    # Every request: one prefill and one decode of the plan, the same room, and the
    # prefill's own bootstrap address, which the decode pulled the prompt's KV from.
    assert len(rooms) == len(prompts)
    for room, legs in rooms.items():
        assert set(legs) == {"prefill", "decode"}, room
        prefill, p_body = legs["prefill"]
        decode, d_body = legs["decode"]
        for body in (p_body, d_body):
            assert (body["bootstrap_host"], body["bootstrap_port"]) == (
                "127.0.0.1",
                prefill.bootstrap_port,
            )
        prompt = p_body.get("text") or p_body.get("prompt")
        assert prompt == (d_body.get("text") or d_body.get("prompt"))
        attn_tp = plan.prefill.tp  # pdtp's TP is per DP-attention rank
        want = (
            f"served by decode-{decode.http_port} with kv of {prompt!r} from "
            f"prefill-{prefill.http_port} (prefill attention TP {attn_tp}) room {room}"
        )
        assert want in answers
    # The bootstrap port each prefill was launched with is the one the router sent.
    for inst in dep.instances:
        if inst.role == "prefill":
            argv = list(inst.argv)
            assert argv[argv.index("--disaggregation-bootstrap-port") + 1] == str(
                inst.bootstrap_port
            )
    # The router line that ran is deploy's (plus --mini-lb for the Python balancer).
    ran = shlex.split((out / "router.sh").read_text().splitlines()[-1].removeprefix("exec "))
    assert ran[: len(dep.router_argv)] == dep.router_argv


def test_aggregated_sglang_plan_runs_sglang_behind_its_router(tmp_path):
    """An aggregated plan of an SGLang connector launches SGLang (not vLLM), each instance
    serving both phases, behind the router's --worker-urls; requests spread over them."""
    pytest.importorskip("sglang_router", reason="pip install sglang-router==0.3.2")
    plan = pdtp.solve("llama-3.1-8b", gpus=2, gpu="h100", connector="sglang-nixl", mode="agg")
    assert plan.serving == "agg"
    model = tmp_path / "model"
    model.mkdir()
    ports = {"http": free_base(8), **router_ports()}
    dep = pdtp.deploy(plan, ports=ports, model_path=model)
    assert {i.role for i in dep.instances} == {"aggregated"}
    out = tmp_path / "out"
    dep.write(out, "scripts")
    assert "vllm" not in (out / "node-0.sh").read_text()
    env = environment(tmp_path)
    procs = [start(out / "node-0.sh", tmp_path, env), start(out / "router.sh", tmp_path, env)]
    answers = []
    try:
        guard = HangGuard(POLLS, INTERVAL_S)
        for inst in dep.instances:
            while get(f"http://127.0.0.1:{inst.http_port}/health") != 200:
                assert all(p.poll() is None for p in procs), logs(tmp_path)
                guard.tick(f"{inst.name} never answered /health: {logs(tmp_path)}")
        for k in range(4 * len(dep.instances)):
            body = {"text": f"prompt {k}", "sampling_params": {"max_new_tokens": 4}}
            while True:
                assert all(p.poll() is None for p in procs), logs(tmp_path)
                status, reply = post(f"http://127.0.0.1:{dep.router_port}/generate", body)
                if status == 200:
                    break
                assert "stand-in:" not in reply, reply
                guard.tick(f"no answer through the router ({status} {reply!r}): {logs(tmp_path)}")
            answers.append(json.loads(reply)["text"])
    finally:
        stop(procs)
    served = {i.http_port for i in dep.instances}
    assert all(a.startswith("served by aggregated-") and a.endswith(" alone") for a in answers)
    seen = records(Path(env["RECORD"]))
    assert set(seen) <= served and sum(len(v) for v in seen.values()) == len(answers)
    assert all("bootstrap_room" not in r["body"] for v in seen.values() for r in v)
