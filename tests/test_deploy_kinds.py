"""`pdtp deploy` of every plan kind `solve` returns — aggregated (TP, DP-attention + EP, PP),
P/D sides with DP/EP, instances spanning nodes — in every format: scripts (bash -n,
shellcheck), Kubernetes (built-in kinds against the Kubernetes schemas, LeaderWorkerSets
against LWS's own CRD schema, vendored under tests/data/lws) and JSON. Plans come from live
`solve` calls; the tests assert properties of what is written, not which plan is picked."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

import pdtp
from conftest import REPO
from pdtp.cli import main
from pdtp.deployment import HostsNeededError
from pdtp.deployment.k8s import LWS_API
from test_deploy import shell_ok

LWS_SCHEMA = REPO / "tests" / "data" / "lws" / "leaderworkerset-v1.schema.json"
K8S_VERSION = kubernetes_validate.latest_version()

# (label, solve arguments): every kind of plan, each kind picked by the planner itself.
KINDS = {
    "agg-tp": ("llama-3.1-8b", {"gpus": 8, "gpu": "h100"}),
    # perf v3 prices collectives across nodes: solve keeps DP within a node unless the layouts
    # allowed leave a 16-rank one as the best (here, and pd-dp-ep-moriio's sides).
    "agg-dp-ep-2-nodes": ("qwen3-30b-a3b", {"gpus": 16, "gpu": "h100", "layouts": "tp1dp16ep"}),
    "agg-pp-2-nodes": ("llama-3.1-405b", {"gpus": 16, "gpu": "h100", "layouts": "pp"}),
    "agg-pp-1-node": ("llama-3.1-70b", {"gpus": 16, "gpu": "h100", "layouts": "pp", "mode": "agg"}),
    "pd-dp-ep-moriio": (
        "qwen3-235b-a22b",
        {"gpus": 32, "gpu": "mi355x", "layouts": "tp1dp16", "mode": "disagg"},
    ),
    "pd-dp-ep-moriio-write": (
        "qwen3-235b-a22b",
        {"gpus": 32, "gpu": "mi355x", "connector": "moriio-write"},
    ),
    "pd-dp-ep-nixl": (
        "qwen3-235b-a22b",
        {"gpus": 32, "gpu": "h100", "connector": "nixl", "mode": "disagg"},
    ),
    "pd-tp-old-release": ("llama-3.1-70b", {"gpus": 24, "vllm_version": "0.25.0"}),
}


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {k: pdtp.solve(m, **kw) for k, (m, kw) in KINDS.items()}


def hosts_of(plan: Any) -> list[str]:
    nodes = 1 + max(n for p in plan.assignment for n in p.nodes)
    return [f"10.0.0.{n + 1}" for n in range(nodes)]


def strict(schema: Any) -> Any:
    """The CRD schema as the API server prunes it: an object with listed properties takes no
    others (unless it preserves unknown fields), so a misspelt field fails validation."""
    if isinstance(schema, list):
        return [strict(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def lws_validator() -> jsonschema.Draft7Validator:
    body = json.loads(LWS_SCHEMA.read_text())
    assert body["_source"]["repository"] == "https://github.com/kubernetes-sigs/lws"
    return jsonschema.Draft7Validator(strict(body["schema"]))


def validate(doc: dict[str, Any], lws: jsonschema.Draft7Validator) -> None:
    if doc["kind"] == "LeaderWorkerSet":
        assert doc["apiVersion"] == LWS_API
        errors = sorted(lws.iter_errors(doc), key=str)
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
        # The pod templates are core PodTemplateSpecs: validate them as Kubernetes does.
        spec = doc["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            pod = {"apiVersion": "v1", "kind": "Pod", **spec[key]}
            pod["metadata"] = {"name": "x", **pod["metadata"]}
            kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_plan_kind_deploys_in_every_format(kind, plans, tmp_path, lws_validator):
    plan = plans[kind]
    hosts = hosts_of(plan)
    dep = pdtp.deploy(plan, node_hosts=hosts)
    view = dep.view
    # Every planned GPU is launched once: per node, no device twice.
    assert sum(len(i.devices) for i in dep.instances) == plan.gpus_used
    for n in range(len(dep.nodes)):
        used = [d for i in dep.on_node(n) for d in i.devices]
        assert len(used) == len(set(used))
    # Scripts.
    written = dep.write(tmp_path, "scripts")
    for p in written:
        if p.suffix == ".sh":
            shell_ok(p)
    names = {p.name for p in written}
    if plan.serving == "agg":
        assert "router.py" in names and all("--kv-transfer-config" not in i.launch.argv
                                            for i in dep.instances)  # fmt: skip
        proxy_sh = (tmp_path / "proxy.sh").read_text()
        api = [i for i in dep.instances if i.serves_api]
        for i in api:  # the router knows every instance's API server, nothing else
            assert f"--backend {i.host}:{i.ports.http}" in proxy_sh
        assert proxy_sh.count("--backend") == len(api) == plan.aggregated.instances
    else:
        assert all("--kv-transfer-config" in i.launch.argv for i in dep.instances)
    # Instances spanning nodes: vLLM's multi-node launch, meeting at the first node.
    for inst in dep.instances:
        p, argv = inst.planned, list(inst.launch.argv)
        if p.parts == 1:
            assert "--headless" not in argv
            continue
        leader = dep.nodes[p.leader]
        if p.dp > 1:
            assert argv[argv.index("--data-parallel-address") + 1] == leader
            assert argv[argv.index("--data-parallel-size-local") + 1] == str(p.dp // p.parts)
            if p.part:
                start = argv[argv.index("--data-parallel-start-rank") + 1]
                assert start == str(p.part * p.dp // p.parts)
        else:
            assert argv[argv.index("--master-addr") + 1] == leader
            assert argv[argv.index("--node-rank") + 1] == str(p.part)
        assert ("--headless" in argv) is (p.part > 0)
    # Kubernetes.
    docs = dep.manifests()
    for doc in docs:
        validate(doc, lws_validator)
    kinds = {d["kind"] for d in docs}
    spans = any(i.planned.parts > 1 for i in dep.instances)
    assert ("LeaderWorkerSet" in kinds) is spans
    assert ("ConfigMap" in kinds) is (plan.serving != "agg" and dep.proxy.bundled is not None)
    for d in docs:
        for c in _containers(d):
            image = c["image"]
            assert image.endswith(f":v{dep.vllm_version}"), image  # pinned, never :latest
    if plan.serving == "agg":
        (router,) = [d for d in docs if d["metadata"]["name"] == "pdtp-router"]
        assert router["kind"] == "Service"
    for d in docs:
        if d["kind"] == "LeaderWorkerSet":
            lwt = d["spec"]["leaderWorkerTemplate"]
            sample = next(i for i in dep.instances if i.role in d["metadata"]["name"])
            assert lwt["size"] == sample.planned.parts
            (worker,) = lwt["workerTemplate"]["spec"]["containers"]
            script = worker["args"][0]
            assert "--headless" in script and "LWS_WORKER_INDEX" in script
            assert "$(LWS_LEADER_ADDRESS)" in script
    # JSON: everything as data.
    d = json.loads(dep.to_json())
    assert d["serving"] == plan.serving and len(d["instances"]) == len(dep.instances)
    assert view.vllm_version is not None and d["vllm_version"] == str(view.vllm_version)
    # `pdtp solve --json` output deploys the same (with its placement, or placed anew).
    as_json = json.loads(plan.to_json())
    argv = [i.launch.argv for i in dep.instances]
    assert [i.launch.argv for i in pdtp.deploy(as_json, node_hosts=hosts).instances] == argv
    as_json.pop("placement")
    anew = pdtp.deploy(as_json, node_hosts=hosts).instances
    assert sorted(len(i.devices) for i in anew) == sorted(len(i.devices) for i in dep.instances)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    if doc["kind"] == "LeaderWorkerSet":
        t = spec["leaderWorkerTemplate"]
        return [
            *t["leaderTemplate"]["spec"]["containers"],
            *t["workerTemplate"]["spec"]["containers"],
        ]
    if "template" in spec:
        return list(spec["template"]["spec"]["containers"])
    return []


def test_vllm_commands_are_the_deploy_lines(plans):
    """One launch-line maker: solve's printout, Plan.vllm_commands() and deploy agree."""
    for kind in ("agg-tp", "agg-pp-1-node", "pd-dp-ep-moriio", "agg-dp-ep-2-nodes"):
        plan = plans[kind]
        hosts = hosts_of(plan)
        lines = [x.split("  # ")[0] for x in plan.vllm_commands(node_hosts=hosts)]
        assert lines == [i.launch.command for i in pdtp.deploy(plan, node_hosts=hosts).instances]
    # Several nodes whose lines need addresses: refused without them, never guessed.
    for kind in ("pd-dp-ep-moriio", "agg-dp-ep-2-nodes", "agg-pp-2-nodes"):
        with pytest.raises(HostsNeededError, match="pdtp deploy --plan"):
            plans[kind].vllm_commands()
    # Aggregated instances each within a node need no address: the lines are ready as they are.
    lines = plans["agg-pp-1-node"].vllm_commands()
    assert all("127.0.0.1" not in x and "node0" not in x for x in lines)


def test_headless_part_binds_the_ports_of_its_node_ranks(plans, tmp_path):
    """vLLM folds a DP rank to its rank on the node before MoRIIO's port offset: both nodes of
    a 16-rank DP instance bind handshake_port + 0..7 (the README lists what is bound)."""
    plan = plans["pd-dp-ep-moriio"]
    dep = pdtp.deploy(plan, node_hosts=hosts_of(plan))
    parts = [i for i in dep.instances if i.planned.parts > 1]
    assert len(parts) >= 2
    for inst in parts:
        local = inst.planned.dp // inst.planned.parts
        hs = sorted(b.port for b in inst.bound if b.purpose.startswith("MoRIIO handshake"))
        assert hs == [inst.ports.handshake + k for k in range(local)]
    readme = dep.scripts()["README.md"]
    headless = next(i for i in parts if i.planned.part == 1)
    row = next(line for line in readme.splitlines() if f"| {headless.name} |" in line)
    base = headless.ports.handshake
    assert f"MoRIIO handshake {base}-{base + 7}" in row
    # An instance spanning nodes counts once.
    n_decode = plan.decode.instances
    assert f"{plan.prefill.instances} prefill + {n_decode} decode instance(s)" in readme


def test_cli_deploy_plans_what_solve_picks(capsys, plans):
    """`pdtp deploy MODEL --gpus N` deploys solve's plan for the same flags (any mode)."""
    plan = plans["agg-dp-ep-2-nodes"]
    hosts = ",".join(hosts_of(plan))
    flags = ["qwen3-30b-a3b", "--gpus", "16", "--gpu", "h100", "--layouts", "tp1dp16ep"]
    assert main(["deploy", *flags, "--format", "json", "--node-hosts", hosts]) == 0
    got = json.loads(capsys.readouterr().out)
    want = json.loads(pdtp.deploy(plan, node_hosts=hosts).to_json())
    assert got["serving"] == plan.serving
    assert [i["argv"] for i in got["instances"]] == [i["argv"] for i in want["instances"]]
    # solve's printout points at that command instead of lines needing addresses.
    assert main(["solve", *flags]) == 0
    out = capsys.readouterr().out
    assert "pdtp deploy --plan plan.json --node-hosts ADDR0,ADDR1" in out
    assert "vllm serve" not in out


def test_host_aliases_do_not_hide_collisions(plans):
    plan = plans["pd-tp-old-release"]
    with pytest.raises(pdtp.InvalidArgumentError, match=r"node_hosts\[1\] repeats"):
        pdtp.deploy(plan, node_hosts=["node-a", "NODE-A.", "node-c"])
    one = pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg")
    # The proxy's host spelt differently is still the node: its port meets an instance's.
    with pytest.raises(pdtp.InvalidArgumentError, match="port 8100 is bound twice"):
        pdtp.deploy(one, node_hosts=["node-a"], proxy_host="NODE-A.", ports={"proxy_http": 8100})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "0pdtp"}, "starting with a letter"),
        ({"name": "x" * 1000}, "at most 40"),
        ({"image": "Vllm/Bad Image"}, "image must be"),
        ({"image": "vllm/vllm-openai:v0.33.0:extra"}, "image must be"),
        ({"image": "x" * 300}, "image must be"),
    ],
)
def test_k8s_names_and_images_are_validated(plans, kwargs, match):
    with pytest.raises(pdtp.InvalidArgumentError, match=match) as info:
        pdtp.deploy(plans["agg-tp"], **kwargs)
    assert len(str(info.value)) < 300  # the input is quoted, not repeated in full


def test_proxy_offline_failure_is_one_line_naming_the_fix(plans, tmp_path):
    """A release whose proxy pdtp does not carry: the script downloads it, and offline it
    fails with one line naming $PDTP_PROXY_PY; with that set it uses the local file."""
    dep = pdtp.deploy(plans["pd-tp-old-release"], node_hosts=hosts_of(plans["pd-tp-old-release"]))
    assert dep.proxy.bundled is None and dep.proxy.downloads[0] == dep.proxy.source_url
    assert any("downloads" in n and "PDTP_PROXY_PY" in n for n in dep.notes)
    dep.write(tmp_path / "out", "scripts")
    # No network: every connection is refused by a proxy that does not exist.
    env = {**os.environ, "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    env.pop("PDTP_PROXY_PY", None)
    r = subprocess.run(["bash", str(tmp_path / "out" / "proxy.sh")], env=env, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "PDTP_PROXY_PY" in r.stderr
    # A local copy: no download (the import check then names the missing packages).
    local = tmp_path / "proxy_copy.py"
    local.write_text("raise SystemExit(0)\n")
    r = subprocess.run(["bash", str(tmp_path / "out" / "proxy.sh")],
                       env={**env, "PDTP_PROXY_PY": str(local)}, capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert "cannot download" not in r.stderr


def test_carried_proxy_needs_no_download(plans):
    dep = pdtp.deploy(plans["pd-dp-ep-moriio"], node_hosts=hosts_of(plans["pd-dp-ep-moriio"]))
    assert dep.proxy.bundled is not None
    assert not [d for d in dep.proxy.downloads if d.startswith("http")]
    files = dep.scripts()
    assert files[dep.proxy.file_name] == dep.proxy.bundled
    assert "Apache License" in files["LICENSE-vllm.txt"]
    assert "urlretrieve" not in files["proxy.sh"]
    assert any("HF_TOKEN" in n for n in dep.notes)


def test_fp8_weights_from_a_16_bit_checkpoint_launch_quantized():
    """A plan that sized a bf16 checkpoint's weights as FP8 launches `--quantization fp8`
    (else vLLM loads the 16-bit weights, twice the memory planned); a checkpoint that is FP8
    already, or a plan in its own dtype, launches without it."""
    fp8 = pdtp.solve(pdtp.model("llama-3.1-405b", weight_dtype="fp8"), gpus=16, gpu="h100")
    assert fp8.quantization == "fp8" and fp8.to_dict()["quantization"] == "fp8"
    dep = pdtp.deploy(fp8, node_hosts=hosts_of(fp8))
    for inst in dep.instances:
        argv = list(inst.launch.argv)
        assert argv[argv.index("--quantization") + 1] == "fp8"
    # Through the plan's JSON as well.
    again = pdtp.deploy(json.loads(fp8.to_json()), node_hosts=hosts_of(fp8))
    assert [i.launch.argv for i in again.instances] == [i.launch.argv for i in dep.instances]
    native = pdtp.solve("deepseek-r1", gpus=16, gpu="h200")  # an FP8 checkpoint
    bf16 = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100")
    for plan in (native, bf16):
        assert plan.quantization is None
        for line in plan.vllm_commands(node_hosts=hosts_of(plan)):
            assert "--quantization" not in line
    bad = {**json.loads(bf16.to_json()), "quantization": "awq; rm -rf /"}
    with pytest.raises(pdtp.InvalidArgumentError, match="quantization"):
        pdtp.deploy(bad)


@pytest.mark.parametrize("per_node", [128, 256])
def test_large_nodes_bind_every_port_once(per_node):
    """On nodes of 128 and 256 GPUs every instance's ports — and every port its ranks derive
    — are distinct (the default bases spread out on nodes wider than vLLM's 200-port gaps).
    MoRIIO (AMD only) derives handshake and notify ports per rank; max_tp=8 keeps a 256-GPU
    node's fill patterns under the planner's bound."""
    plan = pdtp.solve("llama-3.1-8b", gpus=per_node, gpu="mi355x", gpus_per_node=per_node,
                      mode="disagg", layouts="tp", max_tp=8)  # fmt: skip
    assert plan.connector == "moriio"
    dep = pdtp.deploy(plan)
    bound = [b.port for i in dep.instances for b in i.bound]
    assert len(bound) == len(set(bound)) >= 3 * len(dep.instances)
    lines = plan.vllm_commands()
    ports = [int(x.split("--port ")[1].split()[0]) for x in lines]
    assert len(set(ports)) == len(lines) == len(dep.instances)
