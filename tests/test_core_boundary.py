"""The typed boundary to the Rust core (``src/py/``): string arguments naming one of a fixed
set of values raise ``InvalidArgumentError`` naming the field and every allowed value; core
errors arrive as pdtp's exception classes; the placement and feasibility the bindings return
are the core's (``src/plan/placement.rs``, ``feasible.rs``)."""

from __future__ import annotations

import pytest

import pdtp
from pdtp import _core
from pdtp.catalog import gpu as find_gpu
from pdtp.catalog import resolve_model
from pdtp.constants import constants_for
from pdtp.layout import layout_model
from pdtp.perf import constant_inputs, gpu_inputs, model_inputs


@pytest.fixture(scope="module")
def parts() -> dict[str, object]:
    m = resolve_model("llama-3.1-8b")
    g = find_gpu("h100")
    spec = _core.ModelSpec(
        name=m.name,
        model=model_inputs(m),
        workload={"isl": 1024.0, "osl": 256.0, "ttft_s": None, "tpot_s": None},
        gpus=[gpu_inputs(g, m.weight_dtype)],
    )
    consts = constant_inputs(constants_for(g.name))
    return {"model": m, "gpu": g, "spec": spec, "consts": consts}


def _gpu_type(parts: dict[str, object], vendor: str = "NVIDIA") -> _core.GpuType:
    return _core.GpuType(name="h100", vendor=vendor, constants=parts["consts"], node_size=8)


def _scenario(parts: dict[str, object], **kw: object) -> _core.Scenario:
    args: dict[str, object] = {
        "models": [parts["spec"]],
        "gpu_types": [_gpu_type(parts)],
        "nodes": [(0, 8, 2)],
        "connector": "nixl",
        "objective": "throughput",
    }
    args.update(kw)
    return _core.Scenario(**args)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mode": "both"}, 'mode must be one of auto, disagg, agg, got "both"'),
        ({"objective": "speed"}, "objective must be one of throughput, tokens_per_dollar, gpus"),
        ({"layouts": (["tp", "sp"], [])}, "layout family must be one of tp, ep, dp, pp"),
        (
            {
                "objective": "moves",
                "move_cost": (1.0, 1.0, 1.0, 1.0),
                "running": ((0, "prefil", (1, 1, 1, False), 1), (0, "decode", (1, 1, 1, False), 1)),
            },
            'role must be one of prefill, decode, aggregated, got "prefil"',
        ),
    ],
)
def test_scenario_names_the_field_and_its_values(
    parts: dict[str, object], kw: dict[str, object], message: str
) -> None:
    with pytest.raises(pdtp.InvalidArgumentError, match=message.replace("(", r"\(")):
        _scenario(parts, **kw)


def test_default_mode_is_disaggregated(parts: dict[str, object]) -> None:
    c = _core.candidates(_scenario(parts))
    assert c.rows and {r.role for r in c.rows} == {"prefill", "decode"}
    both = _core.candidates(_scenario(parts, mode="auto"))
    assert "aggregated" in {r.role for r in both.rows}


def test_other_choices_name_their_values(parts: dict[str, object]) -> None:
    with pytest.raises(pdtp.InvalidArgumentError, match="vendor must be one of AMD, NVIDIA"):
        _gpu_type(parts, vendor="Intel")
    m = parts["model"]
    with pytest.raises(pdtp.InvalidArgumentError, match="side must be one of prefill, decode"):
        _core.layout_load_violations(layout_model(m), (1, 1, 1, False), "both", "nixl")
    c = _core.candidates(_scenario(parts, mode="auto"))
    with pytest.raises(pdtp.InvalidArgumentError, match="mode must be one of agg, disagg"):
        c.best_of_mode("auto")
    assert c.best_of_mode("agg") is not None
    # Not a string at all: PyO3's TypeError naming the parameter.
    with pytest.raises(TypeError, match="side"):
        _core.layout_load_violations(layout_model(m), (1, 1, 1, False), 3, "nixl")


def test_core_errors_arrive_as_pdtp_classes() -> None:
    with pytest.raises(pdtp.UnknownNameError):
        _core.resolve_connector("mooncake-x")
    with pytest.raises(pdtp.InvalidArgumentError):
        _core.resolve_connector("nixl@banana")
    with pytest.raises(pdtp.RuleValueError):
        _core.remote_tp_rank(0, 3, 2)
    with pytest.raises(pdtp.InvalidArgumentError, match="layout"):
        _core.parse_layout("tp2xx")


def test_placement_and_feasibility_come_from_the_core(parts: dict[str, object]) -> None:
    c = _core.candidates(_scenario(parts, nodes=[(0, 8, 1), (0, 5, 1)]))
    best, complete = c.oracle()
    assert complete and best is not None
    assert c.feasible(best) is True
    placed = c.place(best)
    ch = best[0]
    assert ch is not None
    assert len(placed) == ch.prefill_instances + ch.decode_instances
    used = [(p.node, d) for p in placed for d in p.devices]
    assert len(used) == len(set(used))
    too_many = [_core.Choice(ch.prefill, ch.decode, ch.prefill_instances + 64, ch.decode_instances)]
    assert c.feasible(too_many) is False


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tp_shorthand_predicts_as_the_tp_only_side_path(tp: int) -> None:
    """``predict_prefill/predict_decode(tp=N)`` go through the layout API (layout ``tpN``);
    the planner's TP-only side rows (``side_option``) are an independent path to the same
    numbers."""
    from pdtp.perf import resolve_context, side_point
    from pdtp.workload import Workload

    ctx = resolve_context("llama-3.1-70b", "h100")
    isl, osl = 2048, 512
    w = Workload(isl=isl, osl=osl)
    p = pdtp.predict_prefill("llama-3.1-70b", gpu="h100", tp=tp, isl=isl)
    side = side_point(ctx, w, tp, prefill=True)
    assert p.ttft_ms == pytest.approx(side.latency_ms, rel=1e-12)
    assert p.requests_per_s == pytest.approx(side.requests_per_s, rel=1e-12)
    assert p.weights_fit == side.fits_weights
    d = pdtp.predict_decode("llama-3.1-70b", gpu="h100", tp=tp, isl=isl, osl=osl, batch=8)
    dec = side_point(ctx, w, tp, prefill=False)
    assert d.max_batch == dec.max_batch
    if dec.batch == 8:
        assert d.tpot_ms == pytest.approx(dec.latency_ms, rel=1e-12)


def test_pair_rules_are_the_layout_rules_of_tp_layouts() -> None:
    from pdtp.layout import Layout, loadable_tp_sizes
    from pdtp.violations import layout_rules, pair_rules

    m = resolve_model("llama-3.1-70b")
    for conn in ("nixl", "moriio@0.32.0"):
        for p in (1, 2, 4, 8, 16):
            for d in (1, 2, 4, 8, 16):
                assert pair_rules(m, p, d, conn, None) == layout_rules(
                    m, Layout(p), Layout(d), conn, None
                )
    # 64 heads, 8 KV heads: TP divides the heads and divides or is a multiple of 8.
    assert loadable_tp_sizes(m, 128) == [1, 2, 4, 8, 16, 32, 64]


def test_performance_inputs_are_typed_values_built_once() -> None:
    """A model's, GPU's and constants' inputs are core values, converted when built and cached
    per value (an equal Model shares them); the core calls take nothing else."""
    import dataclasses

    m = resolve_model("llama-3.1-8b")
    g = find_gpu("h100")
    mi, gi = model_inputs(m), gpu_inputs(g, m.weight_dtype)
    ci = constant_inputs(constants_for(g.name))
    assert isinstance(mi, _core.ModelInputs) and isinstance(gi, _core.GpuInputs)
    assert isinstance(ci, _core.ConstantInputs)
    assert model_inputs(dataclasses.replace(m)) is mi and gpu_inputs(g, m.weight_dtype) is gi
    # Another weight dtype is another GPU input (the GEMM peak follows the dtype).
    assert gpu_inputs(g, "fp8") is not gi
    layout = (1, 1, 1, False)
    step = _core.step_time(mi, gi, ci, layout, 8.0, 8000.0, 0.0, 0.0)
    assert step > 0
    with pytest.raises(TypeError):
        _core.step_time({"num_layers": 32.0}, gi, ci, layout, 8.0, 8000.0, 0.0, 0.0)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="num_layers"):
        _core.ModelInputs(hidden_size=4096.0)
    with pytest.raises(KeyError, match="memory_bytes"):
        _core.GpuInputs()


@pytest.mark.parametrize(
    ("model", "gpus", "gpu"),
    # Plans that a next fit in plan order placed on more nodes, or elsewhere, and one with
    # an instance spanning nodes (which Plan.placement() refused).
    [("gemma-3-27b", 24, "h100"), ("llama-3.1-70b", 24, "h100"), ("deepseek-r1", 16, "h100")],
)
def test_a_plan_read_without_its_placement_deploys_as_planned(
    model: str, gpus: int, gpu: str
) -> None:
    """One node-packing routine (``src/plan/placement.rs``): a plan whose JSON lost its
    placement is placed by the planners' own routine, so its scripts, manifests and
    ``Plan.placement()`` are those of the plan as solved (whole nodes, spans included)."""
    from pdtp.planning.plan import Plan

    p = pdtp.solve(model, gpus=gpus, gpu=gpu, mode="auto", layouts=["tp", "ep", "dp", "pp"])
    d = p.to_dict()
    d.pop("placement")
    bare = Plan.from_dict(d)
    assert not bare.assignment
    assert bare.placement() == p.placement()
    hosts = [f"10.0.0.{k}" for k in range(1, gpus // 8 + 1)]
    for fmt in ("scripts", "k8s", "json"):
        assert pdtp.deploy(bare, node_hosts=hosts).files(fmt) == pdtp.deploy(
            p, node_hosts=hosts
        ).files(fmt)


def test_pack_fills_partly_used_nodes_and_names_what_no_node_holds() -> None:
    # 7 x tp1 then 3 x tp3: 16 GPUs on two 8-GPU nodes (placing in plan order, each on the
    # open node or a new one, took three).
    instances = [("prefill", 1)] * 7 + [("decode", 3)] * 3
    placed = _core.pack(instances, 8)
    assert {p.node for p in placed} == {0, 1}
    assert [(p.role, p.index) for p in placed] == [("prefill", k) for k in range(7)] + [
        ("decode", k) for k in range(3)
    ]
    cells = [(p.node, d) for p in placed for d in p.devices]
    assert len(cells) == 16 == len(set(cells))
    span = _core.pack([("decode", 16)], 8)
    assert [(s.nodes, s.devices) for s in span] == [([0, 1], list(range(8)))]
    with pytest.raises(pdtp.InvalidArgumentError, match=r"plan\['decode'\]: an instance of 12"):
        _core.pack([("prefill", 4), ("decode", 12)], 8)
    with pytest.raises(pdtp.InvalidArgumentError, match="role must be one of"):
        _core.pack([("both", 4)], 8)
