"""`pdtp deploy` output against vLLM's own source, release by release.

tests/data/vllm_launch_golden.json is what tools/vllm_launch_golden.py read (with ast) from the
source of every vLLM release from 0.11.0 to the newest: the options `vllm serve` defines, the
KV-transfer config fields, the environment variables, the MoRIIO/NIXL expressions that derive
every bound port, the MoRIIO mode selector and the reference proxies. Here every generated
flag, key and variable must be one the release reads, every port vLLM would derive (evaluating
its own expressions) must be the port pdtp reports, distinct on every host, and the mode vLLM
would select must be the plan's.
"""

from __future__ import annotations

import enum
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest

import pdtp
from conftest import DATA
from pdtp.deployment import ports as port_facts
from pdtp.deployment.connectors import moriio as moriio_facts
from pdtp.deployment.connectors import nixl as nixl_facts
from pdtp.deployment.versions import NEWEST, OLDEST, Version, parse_version

GOLDEN = json.loads((DATA / "vllm_launch_golden.json").read_text())
VERSIONS = GOLDEN["versions"]
DEVICE_ENVS = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}


def facts(version: str) -> dict[str, Any]:
    v = parse_version(version)
    row = next(
        r for r in GOLDEN["facts"] if parse_version(r["from"]) <= v <= parse_version(r["to"])
    )
    return row


def accepts(version: str, flag: str) -> bool:
    v = parse_version(version)
    return any(
        parse_version(a) <= v <= parse_version(b) for a, b in GOLDEN["serve_flags"].get(flag, [])
    )


def plan_dict(connector: str, prefill: tuple[int, int], decode: tuple[int, int], **kw: Any):
    return {
        # A catalog model (a plan file is checked against its shape) whose MLA cache every
        # connector moves between any two of these TP sizes.
        "model": "deepseek-v2-lite",
        "model_id": "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "gpu": "mi300x" if connector.startswith("moriio") else "h100",
        "connector": connector,
        "prefill": {"tp": prefill[0], "instances": prefill[1]},
        "decode": {"tp": decode[0], "instances": decode[1]},
        **kw,
    }


# One node with mixed TP sizes (offsets of different widths side by side), and three nodes.
TOPOLOGIES = {
    "one-node": ((2, 2), (1, 4), None),
    "one-node-wide": ((1, 4), (4, 1), None),
    "three-nodes": ((4, 4), (2, 4), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
}
CONNECTORS = ("moriio", "moriio-write", "nixl")


def deployments():
    for version in VERSIONS:
        for connector in CONNECTORS:
            if connector.startswith("moriio") and facts(version)["moriio"] is None:
                continue
            for topo, (p, d, hosts) in TOPOLOGIES.items():
                yield version, connector, topo, p, d, hosts


CASES = list(deployments())


def test_golden_covers_every_supported_release():
    assert parse_version(VERSIONS[0]) == OLDEST
    assert parse_version(VERSIONS[-1]) == NEWEST, "regenerate the golden data for new releases"
    assert len(VERSIONS) >= 30 and len(CASES) > 250


@pytest.mark.parametrize(("version", "connector", "topo", "p", "d", "hosts"), CASES)
def test_launch_is_what_the_release_reads(version, connector, topo, p, d, hosts):
    f = facts(version)
    dep = pdtp.deploy(plan_dict(connector, p, d), node_hosts=hosts, vllm_version=version)
    roles = set(f["kv_transfer_config"]["kv_roles"])
    for inst in dep.instances:
        argv = inst.launch.argv
        assert argv[:2] == ("vllm", "serve") and argv[2] == dep.model
        for token in argv[3:]:
            if token.startswith("-"):
                assert accepts(version, token), f"vLLM {version} has no {token}"
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert set(config) <= set(f["kv_transfer_config"]["fields"])
        assert config["kv_connector"] in f["connectors"] and config["kv_role"] in roles
        env = dict(inst.launch.env)
        assert set(env) - DEVICE_ENVS <= set(f["env_vars"]), set(env) - set(f["env_vars"])
        assert env.get("CUDA_VISIBLE_DEVICES") == ",".join(map(str, inst.devices))
        if connector.startswith("moriio"):
            extra = config["kv_connector_extra_config"]
            assert set(extra) <= set(f["moriio"]["extra_config_keys"])
            assert extra["proxy_ip"] == dep.proxy.host
            assert int(extra["proxy_ping_port"]) == dep.proxy.discovery_port
            assert int(extra["http_port"]) == inst.ports.http
            # The address MoRIIO advertises: host_ip, else get_ip() (VLLM_HOST_IP).
            advertised = extra.get("host_ip") or env.get("VLLM_HOST_IP")
            assert advertised == inst.host
            assert _vllm_moriio_mode(f, env, extra) == (
                "READ" if connector == "moriio" else "WRITE"
            )
            if "backend" in f["moriio"]["extra_config_keys"]:
                assert extra["backend"] == ("rdma" if hosts or d[0] > p[0] else "xgmi")
        else:
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == inst.host
        assert _vllm_bound_ports(f, connector, inst, config, env) == sorted(
            b.port for b in inst.bound
        )


def _vllm_moriio_mode(f: dict[str, Any], env: dict[str, str], extra: dict[str, Any]) -> str:
    """The mode vLLM's own get_moriio_mode (and envs.py parser) selects for this launch."""
    mode = enum.Enum("MoRIIOMode", {"READ": "read", "WRITE": "write"})
    log = SimpleNamespace(debug=lambda *a: None)
    fake_os = SimpleNamespace(getenv=lambda name, default=None: env.get(name, default))
    envs = SimpleNamespace(
        **{
            name: eval(parser, {"os": fake_os, "int": int})()
            for name, parser in f["env_vars"].items()
            if name.startswith("VLLM_MORIIO")
        }
    )
    ns: dict[str, Any] = {"envs": envs, "logger": log, "MoRIIOMode": mode, "KVTransferConfig": Any}
    exec(f["moriio"]["get_moriio_mode"], ns)
    source = f["moriio"]["get_moriio_mode"]
    arg = SimpleNamespace(kv_connector_extra_config=extra)
    result = (
        ns["get_moriio_mode"](arg) if "kv_transfer_config" in source else ns["get_moriio_mode"]()
    )
    return result.name


def _vllm_bound_ports(f, connector, inst, config, env) -> list[int]:
    """Every port the instance's ranks bind, from vLLM's own expressions for this release."""
    out = [int(inst.launch.argv[inst.launch.argv.index("--port") + 1])]
    ranks = [(d, t) for d in range(inst.dp) for t in range(inst.tp)]
    if connector.startswith("moriio"):
        m = f["moriio"]
        ns: dict[str, Any] = {}
        exec(m["get_port_offset"], ns)
        extra = config["kv_connector_extra_config"]
        assert m["handshake_listener_binds"] == ["make_zmq_path('tcp', host, base_port)"]
        for d, t in ranks:
            (offset_expr,) = m["port_offset"]
            offset = eval(offset_expr, {**ns, "dp_rank": d, "tp_rank": t})
            (notify_expr,) = m["notify_port"]
            out.append(
                eval(
                    notify_expr,
                    {"base_notify_port": int(extra["notify_port"]), "port_offset": offset},
                )
            )
            cfg = SimpleNamespace(handshake_port=int(extra["handshake_port"]))
            me = SimpleNamespace(moriio_config=cfg, dp_rank=d, tp_rank=t)
            (side_expr,) = m["handshake_listen_port"]
            out.append(eval(side_expr, {**ns, "self": me}))
        return sorted(out)
    n = f["nixl"]
    binds = set()
    for d, t in ranks:
        pc = SimpleNamespace(
            data_parallel_rank=d, data_parallel_index=d, tensor_parallel_size=inst.tp
        )
        envs = SimpleNamespace(VLLM_NIXL_SIDE_CHANNEL_PORT=int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]))
        (side_expr,) = n["side_channel_port"]
        side = eval(side_expr, {"envs": envs, "vllm_config": SimpleNamespace(parallel_config=pc)})
        (bind,) = n["listener_binds"]
        binds.add(
            eval(
                bind,
                {
                    "make_zmq_path": lambda proto, host, port: port,
                    "host": "h",
                    "base_port": side,
                    "port": side,
                    "tp_rank": t,
                },
            )
        )
    return sorted(out + sorted(binds))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("connector", CONNECTORS)
def test_every_derived_port_is_distinct_on_every_host(version, connector):
    """Enumerate, from vLLM's expressions, every port every rank of every instance binds, plus
    the proxy's, per host: no two coincide."""
    f = facts(version)
    if connector.startswith("moriio") and f["moriio"] is None:
        with pytest.raises(pdtp.InvalidArgumentError, match="no MoRIIOConnector"):
            pdtp.deploy(plan_dict(connector, (1, 1), (1, 1)), vllm_version=version)
        return
    for p, d, hosts in TOPOLOGIES.values():
        dep = pdtp.deploy(plan_dict(connector, p, d), node_hosts=hosts, vllm_version=version)
        per_host: dict[str, list[int]] = {}
        for inst in dep.instances:
            config = dict(inst.launch.kv_transfer_config)
            per_host.setdefault(inst.host, []).extend(
                _vllm_bound_ports(f, connector, inst, config, dict(inst.launch.env))
            )
        per_host.setdefault(dep.proxy.host, []).append(dep.proxy.http_port)
        if dep.proxy.discovery_port and connector.startswith("moriio"):
            per_host[dep.proxy.host].append(dep.proxy.discovery_port)
        for host, ports in per_host.items():
            assert len(ports) == len(set(ports)), (host, sorted(ports))


def dp_plan(connector: str, tp: int) -> dict[str, Any]:
    """A placement (as the planner will carry) with a data-parallel prefill instance."""
    rows = [
        {"role": "prefill", "index": 0, "node": 0, "devices": list(range(2 * tp))},
        {"role": "decode", "index": 0, "node": 0, "devices": [2 * tp]},
    ]
    plan = plan_dict(connector, (tp, 1), (1, 1), placement=rows)
    plan["prefill"]["dp"] = 2
    return plan


@pytest.mark.parametrize("version", VERSIONS)
def test_data_parallel_ranks(version):
    """DP ranks derive ports too: NIXL (per rank until 0.11.0, per engine since) and MoRIIO,
    whose offset is dp_rank + tp_rank (vLLM omits tp_size): with DP 2 x TP 2 two ranks of one
    instance would bind the same port, which pdtp refuses."""
    f = facts(version)
    connectors = ["nixl"] + (["moriio"] if f["moriio"] else [])
    for connector in connectors:
        dep = pdtp.deploy(
            dp_plan(connector, 1 if connector == "moriio" else 2), vllm_version=version
        )
        inst = dep.instances[0]
        assert inst.dp == 2 and accepts(version, "--data-parallel-size")
        vllm = _vllm_bound_ports(f, connector, inst, inst.launch.kv_transfer_config,
                                 dict(inst.launch.env))  # fmt: skip
        assert vllm == sorted(b.port for b in inst.bound) and len(vllm) == len(set(vllm))
    if f["moriio"]:
        # Refused on reading the plan (the connector's rules), before any port is laid out.
        with pytest.raises(pdtp.InvalidArgumentError, match="moriio_dp_ports_collide"):
            pdtp.deploy(dp_plan("moriio", 2), vllm_version=version)


def test_the_issue_example_collides_and_is_caught():
    """Two TP-2 MoRIIO instances given notify ports 8300 and 8301 both bind 8301."""
    a = port_facts.InstancePorts(http=8100, handshake=6300, notify=8300)
    b = port_facts.InstancePorts(http=8101, handshake=6310, notify=8301)
    bound = port_facts.bound_ports(NEWEST, "MoRIIOConnector", "a", a, 2, 1)
    bound += port_facts.bound_ports(NEWEST, "MoRIIOConnector", "b", b, 2, 1)
    with pytest.raises(pdtp.InvalidArgumentError, match="port 8301 is bound twice"):
        port_facts.check_disjoint("node 0", bound)


def test_port_offset_is_vllms():
    for version in VERSIONS:
        m = facts(version)["moriio"]
        if m is None:
            continue
        ns: dict[str, Any] = {}
        exec(m["get_port_offset"], ns)
        for d in range(4):
            for t in range(8):
                for size in (1, 2, 8):
                    assert port_facts.port_offset(d, t, size) == ns["get_port_offset"](d, t, size)


def test_release_thresholds_match_the_source():
    """Each `since` constant of the launch modules is the first release whose source has it."""

    def first(pred) -> Version:
        return next(parse_version(v) for v in VERSIONS if pred(facts(v)))

    def keys(f):
        return set(f["moriio"]["extra_config_keys"]) if f["moriio"] else set()

    assert first(lambda f: f["moriio"] is not None) == moriio_facts.MORIIO_SINCE
    assert first(lambda f: "backend" in keys(f)) == moriio_facts.MORIIO_BACKEND_KEY_SINCE
    assert first(lambda f: "read_mode" in keys(f)) == moriio_facts.MORIIO_READ_MODE_KEY_SINCE
    assert first(lambda f: "host_ip" in keys(f)) == moriio_facts.MORIIO_HOST_IP_KEY_SINCE
    one = first(lambda f: "tp_rank" not in f["nixl"]["listener_binds"][0])
    assert one == nixl_facts.NIXL_ONE_LISTENER_SINCE


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("connector", ["moriio", "nixl"])
def test_proxy_is_the_release_example(version, connector):
    f = facts(version)
    if connector == "moriio" and f["moriio"] is None:
        return
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    dep = pdtp.deploy(plan_dict(connector, (4, 4), (2, 4)), node_hosts=hosts, vllm_version=version)
    golden = (f["moriio"] or {}).get("proxy") if connector == "moriio" else f["nixl"]["proxy"]
    px = dep.proxy
    assert px.source_path == golden["path"]
    assert px.source_url.endswith(f"/v{version}/{golden['path']}")
    options = [a for a in px.args if a.startswith("--")]
    assert set(options) <= set(golden["options"]), set(options) - set(golden["options"])
    if connector == "moriio":
        if "--port" not in golden["options"]:
            assert px.http_port == moriio_facts.MORIIO_FIXED_HTTP_PORT
        if "--service-discovery-port" not in golden["options"]:
            assert golden["calls"]["service_discovery"] == str(px.discovery_port)
    else:
        # Every instance is listed once, at its host and HTTP port.
        args = list(px.args)

        def values(flag: str) -> list[str]:
            i = args.index(flag) + 1
            out = []
            while i < len(args) and not args[i].startswith("--"):
                out.append(args[i])
                i += 1
            return out

        for role, hf, pf in (("prefill", "--prefiller-hosts", "--prefiller-ports"),
                             ("decode", "--decoder-hosts", "--decoder-ports")):  # fmt: skip
            listed = list(zip(values(hf), map(int, values(pf))))
            assert listed == [(i.host, i.ports.http) for i in dep.instances if i.role == role]
    third_party = {m for m in golden["imports"] if m not in sys.stdlib_module_names}
    provided = {"zmq" if p == "pyzmq" else p for p in px.pip_packages}
    if px.needs_vllm:
        provided.add("vllm")
    assert third_party == provided


def test_moriio_offsets_follow_the_release():
    """Bind and dial offsets come from the core's per-release MoRIIO facts (golden-proven):
    the bind adds the ranks in every release, the dial strides by TP from 0.27.0; for the
    layouts pdtp plans (DP ranks of TP 1, or DP 1) they agree."""
    old, new = Version(0, 26, 0), Version(0, 27, 0)
    assert moriio_facts.moriio_offsets(old, 1, 1, 2) == (2, 2)
    assert moriio_facts.moriio_offsets(new, 1, 1, 2) == (2, 3)
    for v in (old, new):
        for d in range(8):
            assert moriio_facts.moriio_offsets(v, d, 0, 1) == (d, d)
            moriio_facts.check_moriio_dials("x", v, 1, 8)
        moriio_facts.check_moriio_dials("x", v, 8, 1)
