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
from pdtp.deployment.adapter import view_of
from pdtp.deployment.build import HostsNeededError
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
    assert set(files) == {f"node-{n}.sh" for n in range(len(d.nodes))} | {
        "router.sh",
        "README.md",
    }
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
    with pytest.raises(InvalidArgumentError, match="format must be one of scripts, k8s, json"):
        d.files("yaml")
    # Without addresses a multi-node plan gets its manifests alone.
    k8s_only = pdtp.deploy(plan, need_hosts=False)
    assert not k8s_only.hosts_known and k8s_only.manifests()
    with pytest.raises(HostsNeededError, match="need the nodes' addresses"):
        k8s_only.files("scripts")
    with pytest.raises(InvalidArgumentError, match="vllm_version applies to vLLM plans"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", vllm_version="0.33.0")
    # vLLM plans deploy as before.
    vllm = pdtp.deploy(pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg"))
    assert "proxy.sh" in vllm.scripts()


LAUNCH = json.loads((Path(__file__).parent / "data" / "sglang_launch_flags.json").read_text())
HOSTS4 = "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4"


@pytest.fixture(scope="module")
def spanning():
    """A plan whose instances span nodes (405B on H100: PP over two nodes a side)."""
    p = pdtp.solve("llama-3.1-405b", gpus=32, gpu="h100", connector="sglang-mooncake",
                   mode="disagg")  # fmt: skip
    assert any(i.parts > 1 for i in view_of(p).instances), "the planner changed: pick another"
    return p


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_multi_node_instances_launch_once_per_node(spanning):
    d = pdtp.deploy(spanning, node_hosts=HOSTS4)
    by_instance: dict[tuple[str, int], list] = {}
    for i in d.instances:
        by_instance.setdefault((i.role, i.index), []).append(i)
    for (role, _), parts in by_instance.items():
        planned = [p for p in view_of(spanning).instances if p.role == role]
        n = planned[0].parts
        assert n > 1 and len(parts) == n
        leader = next(p for p in parts if p.part == 0)
        ranks = []
        for p in parts:
            argv = list(p.argv)
            assert _flag(argv, "--nnodes") == str(n)
            ranks.append(int(_flag(argv, "--node-rank")))
            # Every node meets at node rank 0's own address, on the port deploy reserved.
            assert _flag(argv, "--dist-init-addr") == f"{leader.host}:{d.ports.dist_init}"
            # The whole instance's sizes on every node (SGLang splits them itself).
            side = spanning.prefill if role == "prefill" else spanning.decode
            assert _flag(argv, "--tp-size") == str(side.tp * side.dp)
            assert ("--pp-size" in argv) == (side.pp > 1)
            if side.pp > 1:
                assert _flag(argv, "--pp-size") == str(side.pp)
            # The rest of the line is the same on every node.
            strip = {"--node-rank"}
            rest = [a for k, a in enumerate(argv) if a not in strip and argv[k - 1] not in strip]
            lead = list(leader.argv)
            assert rest == [a for k, a in enumerate(lead) if a not in strip and lead[k - 1]
                            not in strip]  # fmt: skip
            assert p.host == d.nodes[p.node]
        assert sorted(ranks) == list(range(n))
    # The router reaches node rank 0 of each instance only.
    argv = d.router_argv
    urls = [argv[k + 1] for k, a in enumerate(argv) if a in ("--prefill", "--decode")]
    assert urls == [i.url for i in d.instances if i.part == 0]
    # Each node's script starts only its own part.
    files = d.files("scripts")
    for i in d.instances:
        assert shlex.join(i.argv) in files[f"node-{i.node}.sh"]
        others = [f for n, f in files.items() if n.startswith("node-") and n != f"node-{i.node}.sh"]
        assert all(shlex.join(i.argv) not in f for f in others)


@pytest.mark.parametrize("version", sglang.SGLANG_RELEASES)
def test_multi_node_and_pp_lines_use_only_flags_the_release_defines(version):
    facts = LAUNCH["releases"][version]
    defined = {f for f, there in facts["flags"].items() if there}
    for dp, pp in ((1, 2), (8, 1)):
        if pp > 1 and not sglang._since(version, sglang.PP_SIZE_SINCE):
            with pytest.raises(InvalidArgumentError, match="--pp-size"):
                sglang.launch_command("prefill", "sglang-nixl", "m", tp=8, pp=pp,
                                      sglang_version=version)  # fmt: skip
            continue
        for rank in (0, 1):
            argv = sglang.launch_command(
                "prefill", "sglang-nixl", "m", tp=8, dp=dp, ep=8, pp=pp, nnodes=2,
                node_rank=rank, dist_init_addr="10.0.0.1:20000", sglang_version=version,
            )  # fmt: skip
            used = {a for a in argv if a.startswith("--")}
            assert used <= defined, (version, sorted(used - defined))
            assert {"--nnodes", "--node-rank", "--dist-init-addr"} <= used


def test_launch_command_refuses_bad_multi_node_input():
    with pytest.raises(InvalidArgumentError, match="dist_init_addr"):
        sglang.launch_command("decode", "sglang-mooncake", "m", tp=8, nnodes=2)
    with pytest.raises(InvalidArgumentError, match="node_rank"):
        sglang.launch_command("decode", "sglang-mooncake", "m", tp=8, nnodes=2, node_rank=2,
                              dist_init_addr="h:1")  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="pp must be"):
        sglang.launch_command("decode", "sglang-mooncake", "m", tp=8, pp=0)


def test_dp_attention_layouts_count_sglangs_tp_over_all_gpus():
    """pdtp's tp1dp16ep (TP per DP rank) is SGLang's --tp-size 16 with DP attention 16 and
    EP 16: attention TP 1, as the rules checked it."""
    p = pdtp.solve("deepseek-r1", gpus=32, gpu="h100", connector="sglang-mooncake", mode="disagg")
    d = pdtp.deploy(p, node_hosts=HOSTS4)
    for i in d.instances:
        side = p.prefill if i.role == "prefill" else p.decode
        argv = list(i.argv)
        assert int(_flag(argv, "--tp-size")) == side.tp * side.dp
        if side.dp > 1:
            assert int(_flag(argv, "--attn-dp-size")) == side.dp
            assert int(_flag(argv, "--tp-size")) // side.dp == side.tp  # attention TP
        if side.ep:
            assert _flag(argv, "--ep-size") == _flag(argv, "--tp-size")


def test_ports_are_honoured_and_checked(plan):
    d = pdtp.deploy(
        plan,
        node_hosts="10.0.0.1,10.0.0.2",
        ports={"http": 31000, "bootstrap": 9100, "router": 9000},
    )
    assert d.router_port == 9000 and d.router_argv[-4:] == [
        "--port",
        "9000",
        "--prometheus-port",
        "29000",
    ]
    for i in d.instances:
        assert i.http_port == 31000 + min(i.devices)
        assert _flag(list(i.argv), "--port") == str(i.http_port)
        if i.role == "prefill":
            assert i.bootstrap_port == 9100 + min(i.devices)
    with pytest.raises(InvalidArgumentError, match=r"unknown field\(s\) \['proxy_discovery'\]"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", ports={"proxy_discovery": 9})
    with pytest.raises(InvalidArgumentError, match=r"ports.router must be an integer"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", ports={"router": 80})
    # The bootstrap family over the HTTP one: two things on one port, refused by name.
    with pytest.raises(InvalidArgumentError, match=r"http=9000 \(ports 9000-9007\) and bootstrap"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", ports={"http": 9000, "bootstrap": 9001})
    with pytest.raises(InvalidArgumentError, match="past 65535"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", ports={"http": 65530})
    with pytest.raises(InvalidArgumentError, match="both bind port 30000"):
        pdtp.deploy(plan, node_hosts="10.0.0.1,10.0.0.2", ports={"router": 30000})


@pytest.fixture(scope="module")
def lws():
    import jsonschema

    from test_deploy_kinds import LWS_SCHEMA, strict

    return jsonschema.Draft7Validator(strict(json.loads(LWS_SCHEMA.read_text())["schema"]))


@pytest.mark.parametrize("which", ["single-node", "spanning"])
def test_k8s_manifests_validate_and_route_to_each_instance(which, plan, spanning, lws):
    """Per single-node instance a Deployment and a Service of its own name (the router
    sends each request with its prefill's bootstrap address, so every prefill needs one);
    instances spanning nodes a LeaderWorkerSet a role; the router a Deployment and Service.
    Validated against the Kubernetes schemas and LeaderWorkerSet's CRD schema."""
    from test_deploy_kinds import validate

    p = plan if which == "single-node" else spanning
    d = pdtp.deploy(p, need_hosts=False, name="sg", namespace="llm")
    docs = d.manifests()
    for doc in docs:
        validate(doc, lws)
        assert doc["metadata"]["namespace"] == "llm"
    assert d.files("k8s")["sg.yaml"] == d.manifests_yaml()
    kinds = [(doc["kind"], doc["metadata"]["name"]) for doc in docs]
    by = {(k, n): doc for (k, n), doc in zip(kinds, docs)}
    planned = [i for i in view_of(p).instances if i.part == 0]
    spans = planned[0].parts > 1
    router = by[("Deployment", "sg-router")]["spec"]["template"]["spec"]["containers"][0]
    argv = ["python", *router["command"][1:], *router["args"]]
    assert ("Service", "sg-router") in by
    prefills = [(argv[k + 1], argv[k + 2]) for k, a in enumerate(argv) if a == "--prefill"]
    decodes = [argv[k + 1] for k, a in enumerate(argv) if a == "--decode"]
    assert len(prefills) == p.prefill.instances and len(decodes) == p.decode.instances
    assert ("LeaderWorkerSet" in {k for k, _ in kinds}) is spans
    for role, urls in (("prefill", [u for u, _ in prefills]), ("decode", decodes)):
        for n, url in enumerate(urls):
            host, port = url.removeprefix("http://").rsplit(":", 1)
            if spans:  # the group leader under the LeaderWorkerSet's headless Service
                assert host == f"sg-{role}-{n}.sg-{role}"
                spec = by[("LeaderWorkerSet", f"sg-{role}")]["spec"]["leaderWorkerTemplate"]
                c = spec["leaderTemplate"]["spec"]["containers"][0]
                worker = spec["workerTemplate"]["spec"]["containers"][0]
                assert '--node-rank "$LWS_WORKER_INDEX"' in worker["args"][0]
                assert "--dist-init-addr '$(LWS_LEADER_ADDRESS):20000'" in worker["args"][0]
                assert spec["size"] == planned[0].parts
            else:  # a Service of the instance's own selecting its Deployment's one pod
                svc, dep = by[("Service", host)], by[("Deployment", host)]
                assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
                assert dep["spec"]["replicas"] == 1
                c = dep["spec"]["template"]["spec"]["containers"][0]
                svc_ports = {x["name"]: x["port"] for x in svc["spec"]["ports"]}
                assert svc_ports["http"] == int(port)
                if role == "prefill":
                    assert svc_ports["bootstrap"] == int(prefills[n][1])
            args = c["args"]
            assert args[args.index("--disaggregation-mode") + 1] == role
            assert args[args.index("--port") + 1] == port
            if role == "prefill":
                assert args[args.index("--disaggregation-bootstrap-port") + 1] == prefills[n][1]
            gpus = c["resources"]["limits"]["nvidia.com/gpu"]
            side = p.prefill if role == "prefill" else p.decode
            assert gpus * planned[0].parts == side.tp * side.dp * side.pp
    assert (
        by[("Deployment", "sg-router")]["spec"]["template"]["spec"]["containers"][0]["image"]
        == f"lmsysorg/sglang:v{d.sglang_version}"
    )


def test_k8s_refusals(plan):
    mi = pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", connector="sglang-mori", mode="disagg")
    with pytest.raises(InvalidArgumentError, match="give the one to run with --image"):
        pdtp.deploy(mi).manifests()
    docs = pdtp.deploy(mi, image="lmsysorg/sglang:v0.5.23-rocm700-mi30x").manifests()
    limits = docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "amd.com/gpu" in limits
    with pytest.raises(InvalidArgumentError, match="name must be a lowercase DNS label"):
        pdtp.deploy(plan, need_hosts=False, name="Bad_Name")


# ---- the CLI: --sglang-version beside every --vllm-version -----------------------------------


def _subcommands():
    import argparse

    from pdtp.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_command_with_vllm_version_takes_sglang_version():
    with_vllm = {
        name: sub
        for name, sub in _subcommands().items()
        if any("--vllm-version" in a.option_strings for a in sub._actions)
    }
    assert {"check", "map", "solve", "size-for", "replan", "deploy", "sweep"} <= set(with_vllm)
    for name, sub in with_vllm.items():
        (flag,) = [a for a in sub._actions if "--sglang-version" in a.option_strings]
        assert "SGLang release" in flag.help and "sglang-nixl" in flag.help, name


def run_cli(capsys, *argv):
    from pdtp.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_sglang_version_selects_the_release_and_refuses_mixing(capsys, tmp_path):
    pair = ("--model", "llama-3.1-70b", "-P", "4", "-D", "2", "--connector", "sglang-mooncake")
    # 0.5.9 corrupts P > D without the head-offset modulo; 0.5.10 fixed it (the rules' data).
    for version in ("0.5.9", "0.5.10"):
        code, out, _ = run_cli(capsys, "check", *pair, "--sglang-version", version, "--json")
        doc = json.loads(out)
        want = pdtp.check("llama-3.1-70b", 4, 2, connector="sglang-mooncake",
                          sglang_version=version)  # fmt: skip
        assert (doc["ok"], doc["verdict"]["kind"]) == (want.ok, want.verdict.kind)
    assert (
        json.loads(run_cli(capsys, "check", *pair, "--sglang-version", "0.5.9", "--json")[1])["ok"]
        != json.loads(run_cli(capsys, "check", *pair, "--sglang-version", "0.5.10", "--json")[1])[
            "ok"
        ]
    )
    # Mixed with vLLM: one line naming both flags, exit 2.
    for argv, words in (
        (("check", "--model", "llama-3.1-70b", "-P", "4", "-D", "2", "--connector", "nixl",
          "--sglang-version", "0.5.9"), "--sglang-version 0.5.9 is for SGLang's connectors"),
        (("check", *pair, "--vllm-version", "0.33.0"), "give --sglang-version"),
        (("check", "--model", "llama-3.1-70b", "-P", "4", "-D", "2", "--sglang-version", "0.5.9"),
         "needs an SGLang --connector"),
        (("sweep", "--models", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--connector",
          "nixl,moriio", "--sglang-version", "0.5.9"), "names none"),
    ):  # fmt: skip
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and words in err and "Traceback" not in err, err
    # solve and deploy: the release travels in the plan, and deploy --plan holds to it.
    code, out, _ = run_cli(capsys, "solve", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100",
                           "--connector", "sglang-nixl", "--sglang-version", "0.5.9",
                           "--mode", "disagg", "--json")  # fmt: skip
    assert code == 0
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(out)
    code, out, _ = run_cli(capsys, "deploy", "--plan", str(plan_file), "--format", "json")
    doc = json.loads(out)
    assert (doc["sglang_version"], doc["connector"]) == ("0.5.9", "sglang-nixl")
    assert all(i["launch"][i["launch"].index("--disaggregation-transfer-backend") + 1] == "nixl"
               for i in doc["instances"])  # fmt: skip
    code, _, err = run_cli(capsys, "deploy", "--plan", str(plan_file), "--sglang-version", "0.5.10")
    assert code == 2 and "differs from the plan's SGLang 0.5.9" in err
    code, out, _ = run_cli(capsys, "deploy", "--plan", str(plan_file), "--format", "k8s")
    assert code == 0 and "kind: LeaderWorkerSet" not in out
    assert 'image: "lmsysorg/sglang:v0.5.9"' in out


# ---- the performance model knows the engine --------------------------------------------------


def test_sglang_plans_are_estimated_with_sglangs_constants():
    """An SGLang connector's instances are predicted with SGLang's constants (its scheduling
    as fitted on its measured aggregated runs, per release), and the plan says so; the
    same constants given explicitly give the same plan, vLLM's give another estimate."""
    from pdtp.constants import constants_for, constants_note

    args = ("llama-3.1-70b",)
    kw = dict(gpus=16, gpu="h100", connector="sglang-nixl", mode="disagg")
    p = pdtp.solve(*args, sglang_version="0.5.9", **kw)
    assert p.constants_note == constants_note(None, "sglang", "0.5.9")
    assert p.constants_note.startswith("sglang 0.5.9")
    sglang_c = constants_for("h100", engine="sglang", release="0.5.9")
    vllm_c = constants_for("h100", engine="vllm")
    assert sglang_c != vllm_c
    same = pdtp.solve(*args, sglang_version="0.5.9", constants=sglang_c, **kw)
    assert (same.requests_per_s, same.prefill, same.decode) == (
        p.requests_per_s,
        p.prefill,
        p.decode,
    )
    split = dict(
        gpu="h100",
        prefill_tp=p.prefill.tp,
        prefill_instances=p.prefill.instances,
        decode_tp=p.decode.tp,
        decode_instances=p.decode.instances,
    )
    e = pdtp.evaluate(*args, connector="sglang-nixl@0.5.9", **split)
    assert e.constants_note == p.constants_note
    assert e.requests_per_s == pytest.approx(p.requests_per_s, rel=1e-6)
    given = pdtp.evaluate(*args, connector="sglang-nixl@0.5.9", constants=sglang_c, **split)
    assert (given.ttft_ms, given.tpot_ms) == (e.ttft_ms, e.tpot_ms)
    other = pdtp.evaluate(*args, connector="sglang-nixl@0.5.9", constants=vllm_c, **split)
    assert (other.ttft_ms, other.tpot_ms) != (e.ttft_ms, e.tpot_ms)
    # A newer release than any measured one: the newest measured range's, said so.
    newest = pdtp.solve(*args, **kw)
    assert newest.constants_note == constants_note(None, "sglang", sglang.DEFAULT_SGLANG_VERSION)
    # vLLM plans keep vLLM's.
    v = pdtp.solve(*args, gpus=16, gpu="h100", connector="nixl", mode="disagg")
    assert v.constants_note.startswith("vllm ")


def test_aggregated_sglang_plans_deploy_sglang_and_its_worker_router(lws):
    from test_deploy_kinds import validate

    p = pdtp.solve("llama-3.1-8b", gpus=2, gpu="h100", connector="sglang-nixl",
                   sglang_version="0.5.9", mode="agg")  # fmt: skip
    d = pdtp.deploy(p)
    assert d.aggregated and len(d.instances) == p.aggregated.instances
    facts = LAUNCH["releases"]["0.5.9"]
    defined = {f for f, there in facts["flags"].items() if there}
    for i in d.instances:
        argv = list(i.argv)
        assert argv[:3] == ["python", "-m", "sglang.launch_server"]
        assert {a for a in argv if a.startswith("--")} <= defined
        assert not any(a.startswith("--disaggregation") for a in argv)
        assert i.bootstrap_port is None
    argv = d.router_argv
    assert argv[3] == "--worker-urls" and "--pd-disaggregation" not in argv
    assert argv[4 : 4 + len(d.instances)] == [i.url for i in d.instances]
    assert {a for a in argv if a.startswith("--")} <= set(ROUTER["flags"])
    assert ROUTER["flags"]["--worker-urls"] == {"nargs": "*"}
    assert "aggregated" in d.files("scripts")["README.md"].splitlines()[0]
    assert pdtp.deploy(p.to_dict()).router_argv == argv
    for doc in pdtp.deploy(p, need_hosts=False).manifests():
        validate(doc, lws)
    lines = p.vllm_commands()  # Plan's launch lines: SGLang's, then its router's
    assert all("sglang" in x for x in lines) and lines[-1].endswith("# SGLang's aggregated router")


@pytest.mark.parametrize("version", ["0.4.6", "0.5.9", sglang.DEFAULT_SGLANG_VERSION])
def test_the_plans_kv_dtype_and_quantization_reach_sglangs_line(version):
    """A plan sized with an FP8 KV cache and FP8 weights of a 16-bit checkpoint launches
    SGLang with them (its defaults would hold a 16-bit cache and the checkpoint's weights),
    both sides alike, with values the release accepts."""
    from pdtp.catalog import resolve_model

    m = resolve_model("llama-3.1-70b", weight_dtype="fp8", kv_dtype="fp8")
    p = pdtp.solve(m, gpus=8, gpu="h100", connector="sglang-nixl", sglang_version=version,
                   mode="disagg")  # fmt: skip
    assert (p.kv_dtype, p.quantization) == ("fp8", "fp8")
    facts = LAUNCH["releases"][version]
    for i in pdtp.deploy(p).instances:
        argv = list(i.argv)
        assert _flag(argv, "--kv-cache-dtype") in facts["choices"]["--kv-cache-dtype"]
        assert _flag(argv, "--kv-cache-dtype") == "fp8_e4m3"
        assert _flag(argv, "--quantization") in facts["choices"]["--quantization"]
        assert {a for a in argv if a.startswith("--")} <= {
            f for f, there in facts["flags"].items() if there
        }
    plain = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", connector="sglang-nixl",
                       sglang_version=version, mode="disagg")  # fmt: skip
    for i in pdtp.deploy(plain).instances:
        assert "--kv-cache-dtype" not in i.argv and "--quantization" not in i.argv


def test_deploy_diff_of_sglang_plans_moves_what_changes(plan):
    """Growing an SGLang deployment (replan's plan): the running instances keep their launch
    lines, hosts and devices; the started ones get SGLang's lines from the same launch-line
    maker as ``pdtp.deploy``; the router restarts with the target's backend list."""
    bigger = pdtp.replan(plan, 2 * plan.requests_per_s, max_gpus=24).plan
    assert (bigger.connector, bigger.vllm_version) == ("sglang-mooncake", "0.5.9")
    d = pdtp.deploy_diff(plan, bigger, node_hosts=HOSTS4)
    old = {i.name: i for i in d.old.instances}
    assert d.keep and d.start and not d.stop
    for i in d.keep:  # running on as they run: the same line on the same host
        assert (i.command, i.host, i.devices) == (old[i.name].command, old[i.name].host,
                                                  old[i.name].devices)  # fmt: skip
    target_lines = {i.name: i.line() for i in d.target.instances}
    text = d.text()
    for i in d.start:
        assert i.name not in old or old[i.name].command != i.command
        assert i.argv[:3] == ("python", "-m", "sglang.launch_server")
        assert target_lines[i.name] in text
        assert f"--tp-size {i.tp * i.dp}" in i.line()
    # Started instances only, node by node, each line as the target's script has it.
    scripts = d.start_scripts()
    started = {i.node for i in d.start}
    assert sorted(scripts) == [f"start-node-{n}.sh" for n in sorted(started)]
    for i in d.start:
        assert i.line() in scripts[f"start-node-{i.node}.sh"]
    for i in d.keep:  # a line names no host: one started on another node may read alike
        if f"start-node-{i.node}.sh" in scripts:
            assert i.line() not in scripts[f"start-node-{i.node}.sh"]
    # The router takes its backends on its command line: restarted, with every prefill's own
    # bootstrap port.
    assert "then restart the router on 10.0.0.1" in text and "bash router.sh" in text
    argv = d.target.router_argv
    for i in d.target.api_instances:
        if i.role == "prefill":
            k = argv.index(i.url)
            assert argv[k - 1] == "--prefill" and argv[k + 1] == str(i.bootstrap_port)
    assert d.to_dict()["router"]["launch"] == argv
    # The same plan again: nothing moves, the router stays.
    same = pdtp.deploy_diff(plan, plan, node_hosts=HOSTS4)
    assert not same.changed and same.restart_proxy == ""
    assert same.instances_kept == len({(i.role, i.index) for i in same.target.instances})


def test_deploy_diff_across_releases_and_engines_restarts_everything(plan):
    """Another SGLang release, or vLLM in place of SGLang: no instance runs on."""
    newer = pdtp.solve("llama-3.1-70b", gpus=12, gpu="h100", connector="sglang-mooncake",
                       sglang_version="0.5.10", mode="disagg")  # fmt: skip
    d = pdtp.deploy_diff(plan, newer, node_hosts=HOSTS4)
    assert not d.keep and len(d.stop) == len(d.old.instances)
    if d.restart_all:  # said when the new plan runs instances of the kinds running now
        assert d.restart_all == "SGLang 0.5.9 -> 0.5.10"
    assert all("sglang.launch_server" in i.command for i in d.start)
    vllm = pdtp.solve("llama-3.1-70b", gpus=12, gpu="h100", connector="nixl", mode="disagg")
    d = pdtp.deploy_diff(plan, vllm, node_hosts=HOSTS4)
    assert not d.keep and all("vllm serve" in i.command for i in d.start)
    assert all("sglang.launch_server" in i.command for i in d.stop)
    if d.restart_all:
        assert d.restart_all.startswith("SGLang 0.5.9 -> vLLM ")
    with pytest.raises(InvalidArgumentError, match="vllm_version applies to vLLM plans"):
        pdtp.deploy_diff(plan, plan, node_hosts=HOSTS4, vllm_version="0.20.0")
    with pytest.raises(InvalidArgumentError, match="differs from the plan's SGLang 0.5.9"):
        pdtp.deploy_diff(plan, plan, node_hosts=HOSTS4, sglang_version="0.5.10")


def test_replan_prints_the_moves_of_an_sglang_deployment(plan, capsys, tmp_path):
    """``pdtp replan`` of an SGLang plan: the new plan, then its deploy diff (the started
    instances' SGLang lines), as for vLLM."""
    current = tmp_path / "current.json"
    current.write_text(plan.to_json())
    code, out, err = run_cli(capsys, "replan", "--current", str(current), "--demand",
                             str(2 * plan.requests_per_s), "--max-gpus", "24",
                             "--node-hosts", HOSTS4)  # fmt: skip
    assert code == 0, err
    assert "deploy diff: stop 0" in out and "python -m sglang.launch_server" in out
    assert "then restart the router" in out
    code, out, err = run_cli(capsys, "replan", "--current", str(current), "--demand",
                             str(2 * plan.requests_per_s), "--max-gpus", "24",
                             "--json", "--node-hosts", HOSTS4)  # fmt: skip
    moves = json.loads(out)["deploy"]
    assert moves["changed"] and moves["instances_started"] > 0
    assert all(i["launch"][:3] == ["python", "-m", "sglang.launch_server"] for i in moves["start"])
