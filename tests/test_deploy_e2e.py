"""Loopback end-to-end test of `pdtp deploy`'s output: no GPU, no network.

The generated ``node-0.sh`` starts stand-in instances (tests/standin_vllm.py on PATH as
``vllm``: vLLM's OpenAI endpoints and, under MoRIIO, the connector's registration heartbeats
as vLLM 0.33.0 sends them); the generated ``proxy.sh`` runs the release's real proxy — vLLM
0.33.0's ``moriio_toy_proxy_server.py`` / NIXL ``toy_proxy_server.py`` as pdtp carries them
(python/pdtp/deployment/vendored), or pdtp's router for aggregated plans — and one request
goes through: prefill then decode (P/D), or through the router (aggregated). The only thing
stood in for besides the engine is the one constant the MoRIIO proxy imports from vLLM
(``MoRIIOConstants.TRANSFER_PREFIX``, "tx" in 0.33.0's moriio_common.py)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import pdtp
from conftest import REPO, HangGuard
from test_deploy_vllm import plan_dict

STANDIN = REPO / "tests" / "standin_vllm.py"
VENDORED = REPO / "python" / "pdtp" / "deployment" / "vendored"
# Waiting for servers to come up is bounded by this (a failure, never a timing assertion).
START_LIMIT_S = 90


def free_base(count: int) -> int:
    """A port base with ``count`` consecutive free ports (the instances' HTTP ports)."""
    rng = random.Random()
    for _ in range(200):
        # Below the ephemeral range, where deploy keeps instance ports.
        base = rng.randrange(20000, 32000)
        ok = True
        for p in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise AssertionError("no free ports")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vllm = bin_dir / "vllm"
    vllm.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} "$@"\n')
    vllm.chmod(0o755)
    # The one vLLM name the MoRIIO proxy imports (vLLM itself needs torch).
    shim = tmp_path / "shim"
    pkg = shim / "vllm/distributed/kv_transfer/kv_connector/v1/moriio"
    pkg.mkdir(parents=True)
    for d in [shim / "vllm", *[p for p in pkg.parents if shim / "vllm" in p.parents], pkg]:
        (d / "__init__.py").touch()
    (pkg / "moriio_common.py").write_text('class MoRIIOConstants:\n    TRANSFER_PREFIX = "tx"\n')
    record = tmp_path / "record"
    record.mkdir()
    path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), os.environ["PATH"]])
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("PDTP_PROXY_PY", None)
    return {**env, "PATH": path, "RECORD": str(record), "PYTHONPATH": str(shim),
            "PDTP_LOG_DIR": str(tmp_path / "logs"), "NO_PROXY": "*"}  # fmt: skip


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def get(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def run_deployment(dep: Any, tmp_path: Path, requests: int = 1) -> tuple[list[str], Path]:
    """Start proxy.sh and node-0.sh as written; send ``requests`` completions through the
    proxy once it answers; stop everything. Returns the answers' texts and the record dir."""
    out = tmp_path / "out"
    dep.write(out, "scripts")
    env = environment(tmp_path)
    procs = []
    try:
        for script in ("proxy.sh", "node-0.sh"):
            log = open(tmp_path / f"{script}.log", "w")  # noqa: SIM115 (closed with the process)
            procs.append(subprocess.Popen(["bash", str(out / script)], cwd=tmp_path, env=env,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))  # fmt: skip
        # Ready when every instance's /health answers (as the deployment's README says).
        guard = HangGuard(polls=int(START_LIMIT_S / 0.2), interval_s=0.2)
        for inst in (i for i in dep.instances if i.serves_api):
            while get(f"http://127.0.0.1:{inst.ports.http}/health") != 200:
                for p, script in zip(procs, ("proxy.sh", "node-0.sh")):
                    assert p.poll() is None, (tmp_path / f"{script}.log").read_text()[-3000:]
                guard.tick(f"no /health answer: {_logs(tmp_path)}")
        url = f"http://127.0.0.1:{dep.proxy.http_port}/v1/completions"
        body = {"model": dep.request_model, "prompt": "San Francisco is a", "max_tokens": 8}
        texts: list[str] = []
        guard = HangGuard(polls=int(START_LIMIT_S / 0.3), interval_s=0.3)
        status, text = 0, ""
        while len(texts) < requests:
            for p, script in zip(procs, ("proxy.sh", "node-0.sh")):
                assert p.poll() is None, (tmp_path / f"{script}.log").read_text()[-3000:]
            status, text = post(url, body)
            if status == 200:
                texts.append(json.loads(text)["choices"][0]["text"])
                continue
            guard.tick(f"no completion ({status}, {text!r}): {_logs(tmp_path)}")
        return texts, Path(env["RECORD"])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text()[-2000:] for p in sorted(tmp_path.glob("*.log")))


def records(directory: Path) -> dict[int, list[dict[str, Any]]]:
    out = {}
    for f in directory.glob("*.jsonl"):
        out[int(f.stem)] = [json.loads(x) for x in f.read_text().splitlines()]
    return out


@pytest.mark.parametrize("connector", ["moriio", "moriio-write", "nixl"])
def test_one_request_goes_prefill_then_decode(connector, tmp_path):
    plan = plan_dict(connector, (1, 1), (1, 1))
    http = free_base(2)
    ports = {"http": http, "proxy_http": free_port(), "proxy_discovery": free_port()}
    dep = pdtp.deploy(plan, ports=ports)
    assert dep.proxy.bundled is not None  # the release's real proxy, carried by pdtp
    (text,), rec = run_deployment(dep, tmp_path)
    prefill = next(i for i in dep.instances if i.role == "prefill")
    decode = next(i for i in dep.instances if i.role == "decode")
    seen = records(rec)
    (p_req,) = seen[prefill.ports.http]
    (d_req,) = seen[decode.ports.http]
    # The proxy sent the prompt to prefill for one token, handing the KV cache over ...
    assert p_req["body"]["max_tokens"] == 1 and p_req["body"]["prompt"] == "San Francisco is a"
    assert p_req["body"]["kv_transfer_params"]["do_remote_decode"] is True
    # ... then to decode, which pulls (NIXL, MoRIIO READ) or is sent (WRITE) that cache.
    d_params = d_req["body"]["kv_transfer_params"]
    assert d_params["do_remote_prefill"] is True
    assert text.startswith(f"served by {dep.view.decode_role} engine-{decode.ports.http}")
    if connector != "moriio-write":
        assert d_params["remote_engine_id"] == f"engine-{prefill.ports.http}"
        assert text.endswith(f"with KV from engine-{prefill.ports.http}")
    if connector.startswith("moriio"):
        # MoRIIO's proxy routes by the registrations: both peers' addresses in the request id.
        rid = d_req["headers"]["X-Request-Id"]
        assert f"handshake:{prefill.ports.handshake}" in rid
        assert f"handshake:{decode.ports.handshake}" in rid


def test_aggregated_requests_go_through_the_router(tmp_path):
    plan = pdtp.solve("llama-3.1-8b", gpus=2, gpu="h100", mode="agg")
    n = plan.aggregated.instances
    assert n == len(plan.assignment) >= 1
    ports = {"http": free_base(8), "proxy_http": free_port()}
    dep = pdtp.deploy(plan, ports=ports)
    assert dep.proxy.kind == "router"
    texts, rec = run_deployment(dep, tmp_path, requests=2 * n)
    assert all(t.startswith("served by aggregated engine-") for t in texts)
    seen = records(rec)
    # Every instance got its share (requests one at a time: the router rotates).
    assert sorted(seen) == sorted(i.ports.http for i in dep.instances)
    assert all(len(v) == 2 for v in seen.values())
    assert all("kv_transfer_params" not in r["body"] for v in seen.values() for r in v)


def test_carried_proxies_are_vllm_s_files_verbatim():
    """The vendored files are byte for byte those of vLLM 0.33.0's sdist (sha256 listed in
    their README with the archive's), Apache-2.0 with vLLM's LICENSE beside them."""
    readme = (VENDORED / "README.md").read_text()
    for f in (VENDORED / "vllm-0.33.0").glob("*.txt"):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        assert f"`{f.name}` {digest}" in readme
        assert f.read_text().startswith("# SPDX-License-Identifier: Apache-2.0")
    assert "Apache License" in (VENDORED / "vllm-0.33.0" / "LICENSE").read_text()
