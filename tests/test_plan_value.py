"""One plan value end to end: ``Plan.from_dict`` reads back exactly what ``to_dict`` wrote for
every plan kind ``solve`` returns, refuses a tampered plan naming the field, keeps a config
file's model; replan and the deploy diff agree on every plan kind."""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdtp
from pdtp import Plan
from pdtp.cli import main
from pdtp.deployment import replan_diff

DATA = Path(__file__).parent / "data" / "reference" / "hf-configs"
QWEN32 = DATA / "Qwen--Qwen3-32B_config.json"
GPUS = ("mi300x", "mi355x", "h100", "h200")


def connector_of(gpu: str) -> str:
    """MoRIIO needs AMD GPUs; NVIDIA pools plan NIXL."""
    return "moriio" if gpu.startswith("mi") else "nixl"


def kind(p: Plan) -> str:
    """``agg``/``disagg`` plus what the layouts use: dp, ep, pp, spans (nodes), types."""
    tags = {p.serving}
    for _, s in p.sides:
        tags |= {t for t, on in (("dp", s.dp > 1), ("ep", s.ep), ("pp", s.pp > 1)) if on}
    if any(len(a.nodes) > 1 for a in p.assignment):
        tags.add("spans")
    if "+" in p.gpu:
        tags.add("two-types")
    return "/".join(sorted(tags))


def sample_plans() -> list[Plan]:
    """Default plans over the catalog × the four GPU types × 8/16/32/64 GPUs (a fixed third
    of them), plus the kinds defaults rarely pick: PP, a P/D split with DP+EP, two types."""
    out = []
    for i, m in enumerate(pdtp.models()):
        for g in GPUS:
            for n in (8, 16, 32, 64):
                if (i + n + len(g)) % 3:
                    continue
                try:
                    out.append(pdtp.solve(m, gpus=n, gpu=g, connector=connector_of(g)))
                except pdtp.InfeasibleError:
                    pass
    out.append(pdtp.solve("llama-3.1-405b", gpus=32, gpu="mi300x", layouts="tp,pp", mode="agg"))
    out.append(pdtp.solve("qwen3-235b-a22b", gpus=32, gpu="mi355x", mode="disagg"))
    out.append(pdtp.solve("llama-3.1-70b", gpus=TWO_TYPES))
    return out


# A pool of two GPU types; nodes are numbered in the pool, so a re-plan keeps this pool.
TWO_TYPES = {"mi355x": 8, "mi300x": 16}


@pytest.fixture(scope="module")
def plans() -> list[Plan]:
    return sample_plans()


def test_round_trip_is_exact_for_every_plan_kind(plans):
    kinds = Counter(kind(p) for p in plans)
    # Every kind solve returns is in the sample (the property is checked on all of them).
    for wanted in ("agg", "disagg", "dp", "ep", "pp", "spans", "two-types"):
        assert any(wanted in k.split("/") for k in kinds), (wanted, kinds)
    for p in plans:
        d = p.to_dict()
        text = p.to_json()
        back = Plan.from_dict(json.loads(text))
        assert back == p and back.assignment == p.assignment, p.summary()
        assert back.to_dict() == d
        assert Plan.from_json(text) == back
        assert back.model_spec == p.model_spec and back.model_spec is not None
        assert back.model_spec.serve_ref == p.model_spec.serve_ref


def test_from_json_reads_a_file_and_refuses_what_is_not_a_plan(tmp_path):
    p = pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x")
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    assert Plan.from_json(f) == p == Plan.from_json(str(f))
    with pytest.raises(pdtp.InvalidArgumentError, match="not JSON"):
        Plan.from_json("{nope")
    with pytest.raises(pdtp.ArgumentTypeError, match="must be a dict"):
        Plan.from_dict([1, 2])
    with pytest.raises(pdtp.InvalidArgumentError, match="cannot read"):
        Plan.from_json(tmp_path / "missing.json")


@pytest.fixture(scope="module")
def pd70() -> dict[str, Any]:
    return pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x", mode="disagg").to_dict()


def _side(d: dict[str, Any], role: str, tp: int, n: int) -> None:
    d[role].update(tp=tp, layout=f"tp{tp}", instances=n, gpus=tp * n)
    d.pop("placement")
    d.pop("gpus_used")


def _p4d8(d):
    _side(d, "prefill", 4, 2)
    _side_keep(d, "decode", 8, 1)


def _side_keep(d, role, tp, n):
    d[role].update(tp=tp, layout=f"tp{tp}", instances=n, gpus=tp * n)


def _tp3(d):
    _side(d, "prefill", 3, 2)


def _on_h100(d):
    d.update(gpu="h100", visible_devices_env="CUDA_VISIBLE_DEVICES")
    for role in ("prefill", "decode"):
        d[role]["gpu"] = "h100"
    d.pop("placement")


def _shared_gpu(d):
    d["placement"][1]["devices"] = list(d["placement"][0]["devices"])


def _listed_twice(d):
    d["placement"][1]["index"] = d["placement"][0]["index"]


TAMPERED = [
    ("P4/D8 under MoRIIO", _p4d8, r"plan\['prefill'\] / plan\['decode'\].*kv_heads_not_replicated"),
    ("TP 3 for 64 heads", _tp3, r"plan\['prefill'\].*divisible by tensor parallel size \(3\)"),
    ("kv_role bogus", lambda d: d.update(prefill_role="bogus"), r"plan\['prefill_role'\]"),
    ("MoRIIO on h100", _on_h100, r"plan\['connector'\].*only on AMD"),
    ("one GPU, two instances", _shared_gpu, r"plan\['placement'\]\[1\]: GPU \d+ of node"),
    ("an instance listed twice", _listed_twice, r"plan\['placement'\]\[1\]: prefill 0 is listed"),
    (
        "layout tp2zz",
        lambda d: d["prefill"].update(layout="tp2zz"),
        r"plan\['prefill'\]\['layout'\]",
    ),
    ("layout against its fields", lambda d: d["prefill"].update(layout="tp4"), "layout'\\] is tp4"),
    ("gpus_used", lambda d: d.update(gpus_used=3), r"plan\['gpus_used'\]"),
    ("an unknown field", lambda d: d.update(surprise=1), "unknown field.*surprise"),
    ("a device off the node", lambda d: d["placement"][0].update(devices=[8, 9]), "devices"),
    ("an instance that does not exist", lambda d: d["placement"][0].update(index=9), "does not"),
    ("a negative count", lambda d: d["decode"].update(instances=-1), r"'decode'\]\['instances'"),
    ("a bool for a count", lambda d: d["decode"].update(instances=True), "instances"),
    ("serving", lambda d: d.update(serving="both"), r"plan\['serving'\]"),
    ("the release", lambda d: d.update(vllm_version="0.9.0"), r"plan\['vllm_version'\]"),
    ("the MoRIIO mode", lambda d: d.update(mode="write"), r"plan\['mode'\]"),
    ("a utilization", lambda d: d.update(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    ("a NaN", lambda d: d.update(requests_per_s=float("nan")), r"plan\['requests_per_s'\]"),
    ("the workload", lambda d: d["workload"].update(isl=0), r"plan\['workload'\]"),
    ("the model", lambda d: d["model_spec"].update(num_layers=0), r"plan\['model_spec'\]"),
    ("a model_id option", lambda d: d.update(model_id="--help"), r"plan\['model_id'\]"),
    ("an unknown GPU", lambda d: d.update(gpu="tpu9"), r"plan\['gpu'\]"),
]


@pytest.mark.parametrize(("what", "tamper", "match"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_tampered_plan_is_refused_naming_the_field(pd70, what, tamper, match):
    d = copy.deepcopy(pd70)
    tamper(d)
    with pytest.raises(pdtp.PdtpError, match=match):
        Plan.from_dict(d)
    # Deploy and simulate read plans through the same reader: the same refusal.
    with pytest.raises(pdtp.PdtpError, match=match):
        pdtp.deploy(d, need_hosts=False)
    with pytest.raises(pdtp.PdtpError, match=match):
        pdtp.simulate(d, rate_rps=1.0, requests=10)


def test_untampered_plan_reads_and_the_checks_are_live(pd70):
    """The reader accepts the solve output as is, and the rules it applies are the
    connector's: the same P/D pair that MoRIIO READ refuses reads under NIXL."""
    assert Plan.from_dict(pd70).to_dict() == pd70
    d = copy.deepcopy(pd70)
    _p4d8(d)
    for k in ("kv_connector", "prefill_role", "decode_role", "mode"):
        d.pop(k)
    nixl = {**d, "connector": "nixl", "gpu": "h100", "visible_devices_env": "CUDA_VISIBLE_DEVICES"}
    for role in ("prefill", "decode"):
        nixl[role] = {**d[role], "gpu": "h100"}
    assert pdtp.check("llama-3.1-70b", 4, 8, connector="nixl").ok
    assert not pdtp.check("llama-3.1-70b", 4, 8, connector="moriio").ok
    assert Plan.from_dict(nixl).prefill.tp == 4


def test_a_plan_written_by_hand_reads_with_nothing_predicted():
    p = Plan.from_dict(
        {
            "model": "llama-3.1-70b",
            "gpu": "mi300x",
            "prefill": {"tp": 2, "instances": 2},
            "decode": {"tp": 2, "instances": 1},
        }
    )
    assert p.status == "GIVEN" and p.requests_per_s == 0.0 and p.vllm_version is None
    assert p.model_spec == pdtp.model("llama-3.1-70b") and p.gpus_used == 6
    assert p.kv_connector == "MoRIIOConnector" and p.assignment == ()
    with pytest.raises(pdtp.UnknownNameError, match="model_spec"):
        Plan.from_dict({"model": "org/not-in-catalog", "gpu": "mi300x",
                        "aggregated": {"tp": 1, "instances": 1}})  # fmt: skip


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_config_file_plan_keeps_its_model(capsys, tmp_path):
    """Solve from --config: the plan carries the config's model, so it simulates, re-plans
    and goodput-plans; vllm serve cannot load a folder of unrelated configs, so its launch
    is refused with the reason — and a real model folder serves that folder."""
    code, out, err = run(capsys, "solve", "--config", str(QWEN32), "--gpus", "8", "--gpu",
                         "h200", "--connector", "nixl", "--json", "--no-commands")  # fmt: skip
    assert code == 0, err
    plan = Plan.from_dict(json.loads(out))
    # solve prints the reason instead of lines that would serve a folder of other configs
    code, text, err = run(capsys, "solve", "--config", str(QWEN32), "--gpus", "8", "--gpu",
                          "h200", "--connector", "nixl")  # fmt: skip
    assert code == 0 and "launch: none" in text and "not its model folder" in text, err
    config_model = pdtp.Model.from_hf_config(QWEN32)
    assert plan.model_spec == config_model and plan.model == config_model.name
    with pytest.raises(pdtp.InvalidArgumentError, match="not its model folder"):
        _ = plan.serve_ref
    with pytest.raises(pdtp.InvalidArgumentError, match="not its model folder"):
        pdtp.deploy(plan, need_hosts=False)
    f = tmp_path / "plan.json"
    f.write_text(out)
    code, out, err = run(capsys, "simulate", "--plan", str(f), "--rate", "2", "--requests", "50")
    assert code == 0, err
    code, out, err = run(capsys, "replan", "--current", str(f), "--demand", "3", "--max-gpus",
                         "16", "--json")  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert r["plan"]["model_spec"] == plan.model_spec.to_dict()
    assert "model folder" in r["deploy"]["error"]
    code, out, err = run(capsys, "solve", "--config", str(QWEN32), "--gpus", "8", "--gpu",
                         "h200", "--connector", "nixl", "--slo-percentile", "0.9",
                         "--no-commands")  # fmt: skip
    assert code == 0, err
    # A model folder (config.json of this model): launch lines serve the folder itself.
    folder = tmp_path / "Qwen3-32B"
    folder.mkdir()
    shutil.copy(QWEN32, folder / "config.json")
    p = pdtp.solve(str(folder), gpus=8, gpu="h200", connector="nixl", mode="disagg")
    assert p.serve_error is None and p.serve_ref == str(folder.resolve())
    dep = pdtp.deploy(p, need_hosts=False)
    assert all(str(folder.resolve()) in i.launch.command for i in dep.instances)


# --- replan and the deploy diff --------------------------------------------------------


def _moves(r: Any) -> tuple[int, int]:
    return r.instances_started, r.instances_stopped


def test_replan_and_the_diff_agree_on_every_plan_kind(plans):
    """Scaled up and down, the diff stops and starts exactly the instances replan moves
    (whole instances, also those spanning nodes), and what keeps running stays where it
    runs (same node, devices and launch line)."""
    checked = Counter()
    for p in plans:
        for factor in (1.6, 0.5):
            try:
                pool = TWO_TYPES if "+" in p.gpu else 2 * p.gpus
                r = pdtp.replan(p, p.requests_per_s * factor, max_gpus=pool)
            except pdtp.InfeasibleError:
                continue
            # MoRIIO over RDMA: xGMI works within one node, so a plan growing past one node
            # would restart every instance to switch (the diff says so; replan counts GPUs).
            backend = "rdma" if p.kv_connector == "MoRIIOConnector" else None
            d = replan_diff(r, need_hosts=False, backend=backend)
            assert (d.instances_started, d.instances_stopped) == _moves(r), (
                p.summary(),
                r.summary(),
                d.summary(),
            )
            kept = sum(s.instances for _, s in r.current_sides) - r.instances_stopped
            assert d.instances_kept == kept
            before = {(i.name, i.node, i.devices, i.launch.command) for i in d.old.instances}
            assert all((i.name, i.node, i.devices, i.launch.command) in before for i in d.keep)
            # The target is a valid deployment: no GPU given twice.
            cells = [(i.node, x) for i in d.target.instances for x in i.devices]
            assert len(cells) == len(set(cells))
            checked[kind(p)] += 1
    assert any("spans" in k for k in checked) and any("dp" in k for k in checked), checked


def test_a_release_change_keeps_nothing():
    """0.33.0 -> 0.25.0: the same instances launch another vLLM; every one restarts."""
    new = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg")
    old = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x", mode="disagg", vllm_version="0.25.0")
    d = pdtp.deploy_diff(old, new, need_hosts=False)
    assert d.instances_kept == 0 and d.instances_stopped == old.prefill.instances + (
        old.decode.instances
    )
    assert "0.25.0" in d.restart_all and "0.33.0" in d.restart_all
    same = pdtp.deploy_diff(new, new, need_hosts=False)
    assert not same.changed and same.instances_kept == new.prefill.instances + new.decode.instances


def test_cli_replan_matches_python_on_a_multi_node_dp_plan(capsys, tmp_path):
    """The issue's case: qwen3-235b on 32 MI355X scaled up; the CLI's moves are replan's."""
    p = pdtp.solve("qwen3-235b-a22b", gpus=32, gpu="mi355x", mode="disagg")
    assert any(len(a.nodes) > 1 or s.dp > 1 for a in p.assignment for _, s in p.sides)
    f = tmp_path / "now.json"
    f.write_text(p.to_json())
    demand = 1.5 * p.requests_per_s
    code, out, err = run(capsys, "replan", "--current", str(f), "--demand", f"{demand:.6f}",
                         "--max-gpus", "64", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    r = pdtp.replan(p, float(f"{demand:.6f}"), max_gpus=64)
    assert got["instances_started"] == r.instances_started
    assert got["instances_stopped"] == r.instances_stopped
    assert got["deploy"]["instances_started"] == r.instances_started
    assert got["deploy"]["instances_stopped"] == r.instances_stopped
    assert got["deploy"]["instances_kept"] == (
        sum(s.instances for _, s in r.current_sides) - r.instances_stopped
    )


def test_growing_past_one_node_says_why_every_moriio_instance_restarts(capsys, tmp_path):
    """A one-node MoRIIO deployment moves KV over xGMI; once instances span nodes the
    backend is RDMA, so every instance restarts — the diff says so. Deployed over RDMA from
    the start, the instances replan keeps keep running."""
    p = pdtp.solve("llama-3.1-70b", gpus=8, gpu="mi300x", mode="disagg")
    r = pdtp.replan(p, 1.5 * p.requests_per_s, max_gpus=16)
    assert r.plan.gpus_used > 8 and r.instances_stopped < sum(s.instances for _, s in p.sides)
    d = replan_diff(r, need_hosts=False)
    assert (d.old.backend, d.target.backend) == ("xgmi", "rdma")
    assert d.instances_kept == 0 and "xgmi" in d.restart_all and "xgmi" in d.text()
    rdma = replan_diff(r, need_hosts=False, backend="rdma")
    assert not rdma.restart_all
    assert (rdma.instances_started, rdma.instances_stopped) == _moves(r)
    # The CLI says the same, and takes the running backend.
    f = tmp_path / "now.json"
    f.write_text(p.to_json())
    demand = f"{1.5 * p.requests_per_s:.6f}"
    for extra, kept in (([], 0), (["--backend", "rdma"], rdma.instances_kept)):
        code, out, err = run(capsys, "replan", "--current", str(f), "--demand", demand,
                             "--max-gpus", "16", "--json", *extra)  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["deploy"]["instances_kept"] == kept
    code, out, err = run(capsys, "replan", "--current", str(f), "--demand", demand,
                         "--max-gpus", "16")  # fmt: skip
    assert "every running instance restarts" in out and "--backend rdma" in out


def test_cli_replan_runs_on_an_aggregated_moe_plan(capsys, tmp_path):
    """The kind that crashed (AttributeError): an aggregated DP+EP plan re-plans from the
    CLI; its moves are Python's, and the diff agrees."""
    p = pdtp.solve("qwen3-30b-a3b", gpus=16, gpu="h100", connector="nixl", mode="agg")
    f = tmp_path / "now.json"
    f.write_text(p.to_json())
    demand = f"{1.5 * p.requests_per_s:.6f}"
    code, out, err = run(capsys, "replan", "--current", str(f), "--demand", demand,
                         "--max-gpus", "32", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    r = pdtp.replan(p, float(demand), max_gpus=32)
    assert (got["instances_started"], got["instances_stopped"]) == _moves(r)
    assert got["current"]["gpus_used"] == p.gpus_used
    deploy = got["deploy"]
    assert (deploy["instances_started"], deploy["instances_stopped"]) == _moves(r)
    code, out, err = run(capsys, "replan", "--current", str(f), "--demand", demand,
                         "--max-gpus", "32")  # fmt: skip
    assert code == 0 and "replan:" in out, err


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_edit_of_a_plan_reads_or_is_a_pdtp_error(pd70, data):
    """Any field of a plan's JSON (top level, a side, a placement row) set to any JSON
    value: the reader returns a plan or raises a PdtpError — never another exception."""
    d = copy.deepcopy(pd70)
    where = data.draw(st.sampled_from(["top", "prefill", "decode", "placement", "workload"]))
    target = d if where == "top" else d[where][0] if where == "placement" else d[where]
    key = data.draw(st.sampled_from(sorted(target)) | st.text(max_size=6))
    target[key] = data.draw(_JSON)
    try:
        back = Plan.from_dict(d)
    except pdtp.PdtpError:
        return
    assert back.to_dict()["prefill"]["instances"] >= 0


def test_fp8_weights_of_a_16_bit_checkpoint_launch_with_quantization():
    """The plan says what the weights need: FP8 sized for a bf16 checkpoint is vLLM's online
    `--quantization fp8` (else vLLM loads 16-bit weights the plan never sized); a
    checkpoint stored in FP8, or served as stored, needs none."""
    p = pdtp.solve(pdtp.model("llama-3.1-405b", weight_dtype="fp8"), gpus=64, gpu="h100",
                   connector="nixl")  # fmt: skip
    assert p.quantization == "fp8" and Plan.from_json(p.to_json()).quantization == "fp8"
    assert all("--quantization fp8" in i.launch.command
               for i in pdtp.deploy(p, need_hosts=False).instances)  # fmt: skip
    assert pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x").quantization is None
    native = next(m for m in pdtp.models() if m.weight_dtype == "fp8")
    assert Plan.from_dict({"model": native.name, "gpu": "mi355x",
                           "aggregated": {"tp": 8, "instances": 1}}, rules=False).quantization is None  # fmt: skip
