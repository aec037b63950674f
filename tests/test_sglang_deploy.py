"""``pdtp deploy`` of an SGLang P/D plan: SGLang's launch lines per node and its P/D router.

The launch lines are :func:`sglang.launch_command`'s (every flag checked against each
release's argument definitions in test_sglang.py); the router's flags against
sglang-router's own definitions (tests/data/sglang_router_flags.json, from
tools/sglang_router_golden.py).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import pdtp
from pdtp.deployment.connectors import sglang, sglang_deploy
from pdtp.errors import InvalidArgumentError

ROUTER = json.loads((Path(__file__).parent / "data" / "sglang_router_flags.json").read_text())


@pytest.fixture(scope="module")
def plan():
    return pdtp.solve(
        "llama-3.1-70b",
        gpus=12,
        gpu="h100",
        connector="sglang-mooncake",
        sglang_version="0.5.9",
        mode="disagg",
    )


def _argv_of(line: str) -> list[str]:
    argv = shlex.split(line.removesuffix(" &"))
    assert argv[0].startswith("CUDA_VISIBLE_DEVICES=")
    return argv[1:]


def test_scripts_launch_every_instance_with_sglangs_own_line(plan):
    d = pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2")
    files = d.files("scripts")
    assert set(files) == {f"node-{n}.sh" for n in range(len(d.nodes))} | {"router.sh"}
    launched = [
        _argv_of(line)
        for name, text in files.items()
        if name.startswith("node-")
        for line in text.splitlines()
        if "sglang.launch_server" in line
    ]
    assert len(launched) == len(d.instances) == plan.prefill.instances + plan.decode.instances
    for inst in d.instances:
        want = sglang.launch_command(
            inst.role,
            "sglang-mooncake",
            plan.model_id,
            tp=inst.tp,
            port=inst.http_port,
            bootstrap_port=inst.bootstrap_port or 8998,
            sglang_version="0.5.9",
        )
        assert want in launched
        assert want[want.index("--tp-size") + 1] == str(
            plan.prefill.tp if inst.role == "prefill" else plan.decode.tp
        )
    # No two instances of a node share a port.
    for n in range(len(d.nodes)):
        ports = [p for i in d.instances if i.node == n for p in (i.http_port, i.bootstrap_port)]
        ports = [p for p in ports if p is not None]
        assert len(ports) == len(set(ports))


def test_router_line_uses_only_flags_sglang_router_defines(plan):
    d = pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2")
    assert ROUTER["version"] == sglang_deploy.ROUTER_CHECKED
    line = d.files("scripts")["router.sh"].splitlines()[-1]
    argv = shlex.split(line.removeprefix("exec "))
    assert argv[:4] == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    flags = ROUTER["flags"]
    prefills, decodes, i = [], [], 4
    while i < len(argv):
        flag = argv[i]
        assert flag in flags, flag
        if flag == "--prefill":  # nargs "+": URL and the bootstrap port
            assert flags[flag] == {"nargs": "+", "action": "append"}
            prefills.append((argv[i + 1], int(argv[i + 2])))
            i += 3
        elif flag == "--decode":  # nargs 1: the URL alone
            assert flags[flag] == {"nargs": 1, "action": "append"}
            decodes.append(argv[i + 1])
            i += 2
        else:
            i += 1 if flags[flag].get("action") == "store_true" else 2
    by_role = {r: [x for x in d.instances if x.role == r] for r in ("prefill", "decode")}
    assert prefills == [(x.url, x.bootstrap_port) for x in by_role["prefill"]]
    assert decodes == [x.url for x in by_role["decode"]]
    for x in by_role["prefill"]:  # the router's bootstrap port is the one prefill binds
        assert x.argv[x.argv.index("--disaggregation-bootstrap-port") + 1] == str(x.bootstrap_port)
        assert x.url.endswith(f":{x.argv[x.argv.index('--port') + 1]}")


def test_json_and_plan_dict_and_refusals(plan, tmp_path):
    d = pdtp.deploy(plan.to_dict(), node_hosts=["10.0.0.1", "10.0.0.2"])
    doc = json.loads(d.files("json")["deployment.json"])
    assert (doc["engine"], doc["connector"], doc["sglang_version"]) == (
        "sglang",
        "sglang-mooncake",
        "0.5.9",
    )
    assert doc["router"]["launch"] == d.router_argv
    assert [i["launch"] for i in doc["instances"]] == [list(i.argv) for i in d.instances]
    written = d.write(tmp_path)
    assert all(p.stat().st_mode & 0o100 for p in written if p.suffix == ".sh")
    with pytest.raises(InvalidArgumentError, match="format must be one of scripts, json"):
        d.files("k8s")
    with pytest.raises(InvalidArgumentError, match="not Kubernetes manifests yet"):
        pdtp.deploy(plan, need_hosts=False)
    # vLLM plans deploy as before.
    vllm = pdtp.deploy(pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg"))
    assert "proxy.sh" in vllm.scripts()
