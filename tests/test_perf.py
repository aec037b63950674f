"""The performance model: monotonicity properties, memory fit, evaluate() reporting invalid
configurations instead of raising, Workload validation and check(gpu=)."""

from __future__ import annotations

import dataclasses

import pytest

import pdtp
from pdtp.catalog import models

GPUS = ["mi300x", "h100", "h200", "b200", "a100"]


@pytest.mark.parametrize("name", ["llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b"])
def test_more_tp_never_raises_per_gpu_weight_bytes(name):
    m = pdtp.model(name)
    per_gpu = [m.weight_bytes / tp for tp in (1, 2, 4, 8, 16)]
    assert per_gpu == sorted(per_gpu, reverse=True)
    kv = [m.kv_bytes_per_token_per_rank(tp) for tp in (1, 2, 4, 8, 16, 32)]
    assert kv == sorted(kv, reverse=True)


@pytest.mark.parametrize("gpu", GPUS)
def test_larger_batch_never_lowers_tpot(gpu):
    for m in models()[::3]:
        last = 0.0
        for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            d = pdtp.predict_decode(m, gpu=gpu, tp=8, isl=2048, osl=512, batch=batch)
            assert d.tpot_ms >= last, (m.name, gpu, batch)
            last = d.tpot_ms


def test_more_gpu_memory_never_lowers_max_batch():
    for m in models()[::2]:
        for tp in (4, 8):
            small = pdtp.predict_decode(m, gpu="h100", tp=tp, isl=2048, osl=512, batch=1)
            big = pdtp.predict_decode(m, gpu="h200", tp=tp, isl=2048, osl=512, batch=1)
            assert big.max_batch >= small.max_batch, (m.name, tp)
            for util in (0.5, 0.7, 0.9):
                lo = pdtp.predict_decode(
                    m, gpu="mi300x", tp=tp, isl=2048, osl=512, batch=1, gpu_memory_utilization=util
                )
                hi = pdtp.predict_decode(
                    m,
                    gpu="mi300x",
                    tp=tp,
                    isl=2048,
                    osl=512,
                    batch=1,
                    gpu_memory_utilization=min(1.0, util + 0.1),
                )
                assert hi.max_batch >= lo.max_batch


def test_more_tp_never_slows_prefill_compute():
    m = pdtp.model("llama-3.1-70b")
    ttfts = [pdtp.predict_prefill(m, gpu="h100", tp=tp, isl=4096).prefill_ms for tp in (2, 4, 8)]
    assert ttfts == sorted(ttfts, reverse=True)


def test_longer_prompts_take_longer():
    m = pdtp.model("llama-3.1-8b")
    t = [pdtp.predict_prefill(m, gpu="h100", tp=1, isl=n).ttft_ms for n in (128, 1024, 8192)]
    assert t == sorted(t)


def test_moe_touches_fewer_weights_than_dense_at_small_batch():
    m = pdtp.model("qwen3-30b-a3b")
    small = pdtp.predict_decode(m, gpu="h100", tp=1, isl=1024, osl=128, batch=1).tpot_ms
    dense = pdtp.predict_decode(
        pdtp.model("qwen3-32b"), gpu="h100", tp=1, isl=1024, osl=128, batch=1
    ).tpot_ms
    assert small < dense / 3


def test_fp8_kv_doubles_kv_capacity():
    m = pdtp.model("llama-3.1-70b")
    bf16 = pdtp.predict_decode(m, gpu="mi300x", tp=8, isl=2048, osl=512, batch=1)
    fp8 = pdtp.predict_decode(
        m.with_dtypes(kv_dtype="fp8"), gpu="mi300x", tp=8, isl=2048, osl=512, batch=1
    )
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, rel=1e-6)


def test_evaluate_reports_invalid_not_raises():
    e = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="h100",
        prefill_tp=4,
        prefill_instances=1,
        decode_tp=8,
        decode_instances=1,
    )
    assert not e.valid
    assert [v.code for v in e.violations] == ["kv_heads_not_replicated"]
    e = pdtp.evaluate(
        "llama-3.1-405b",
        gpu="h100",
        prefill_tp=8,
        prefill_instances=1,
        decode_tp=8,
        decode_instances=1,
    )
    assert not e.valid and {v.code for v in e.violations} == {"weights_do_not_fit"}
    assert e.requests_per_s == 0
    e = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="h100",
        workload=pdtp.Workload(tpot_ms=1),
        prefill_tp=8,
        prefill_instances=1,
        decode_tp=8,
        decode_instances=1,
    )
    assert [v.code for v in e.violations] == ["tpot_slo"]


def test_evaluate_capacities():
    e = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="mi300x",
        prefill_tp=2,
        prefill_instances=3,
        decode_tp=2,
        decode_instances=1,
    )
    assert e.valid and e.gpus == 8
    assert e.requests_per_s == min(e.prefill_capacity_rps, e.decode_capacity_rps)
    assert e.output_tokens_per_s == pytest.approx(e.requests_per_s * 512)
    assert e.tpot_ms <= 50 and e.ttft_ms <= 2000
    double = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="mi300x",
        prefill_tp=2,
        prefill_instances=6,
        decode_tp=2,
        decode_instances=2,
    )
    assert double.requests_per_s == pytest.approx(2 * e.requests_per_s)
    assert e.to_dict()["bottleneck"] == e.bottleneck


def test_constants_override_per_call():
    base = pdtp.predict_decode("llama-3.1-8b", gpu="h100", tp=1, isl=1024, osl=128, batch=8)
    slow = pdtp.predict_decode(
        "llama-3.1-8b", gpu="h100", tp=1, isl=1024, osl=128, batch=8, constants={"mbu": 0.4}
    )
    assert slow.tpot_ms > base.tpot_ms
    c = pdtp.Constants(mbu=0.4)
    same = pdtp.predict_decode(
        "llama-3.1-8b", gpu="h100", tp=1, isl=1024, osl=128, batch=8, constants=c
    )
    assert same.tpot_ms == pytest.approx(slow.tpot_ms, rel=0.2)
    with pytest.raises(pdtp.InvalidArgumentError, match="mbu"):
        pdtp.Constants(mbu=1.5)
    with pytest.raises(pdtp.InvalidArgumentError, match="no_such"):
        pdtp.predict_decode(
            "llama-3.1-8b", gpu="h100", tp=1, isl=1, osl=1, batch=1, constants={"no_such": 1}
        )


def test_workload_defaults_and_validation():
    w = pdtp.Workload()
    assert (w.isl, w.osl, w.ttft_ms, w.tpot_ms) == (2048, 512, 2000, 50)
    assert pdtp.Workload(ttft_ms=None, tpot_ms=None).tpot_ms is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.isl = 1  # type: ignore[misc]
    for bad, exc in [
        ({"isl": 0}, pdtp.InvalidArgumentError),
        ({"osl": -5}, pdtp.InvalidArgumentError),
        ({"isl": 1.5}, TypeError),
        ({"ttft_ms": 0}, pdtp.InvalidArgumentError),
        ({"tpot_ms": float("nan")}, pdtp.InvalidArgumentError),
        ({"isl": True}, TypeError),
    ]:
        with pytest.raises(exc, match=next(iter(bad))):
            pdtp.Workload(**bad)


def test_check_with_gpu_reports_memory():
    r = pdtp.check("llama-3.1-405b", 8, 8, gpu="h100")
    assert not r.ok and r.prefill_fits is False and r.decode_fits is False
    assert {v.code for v in r.violations} == {"weights_do_not_fit"}
    assert all(min(p, d) >= 16 for p, d in r.alternatives)
    r = pdtp.check("llama-3.1-405b", 8, 8, gpu="mi300x")
    assert r.ok and r.prefill_fits and r.decode_fits
    with pytest.raises(pdtp.InvalidArgumentError, match="full model"):
        pdtp.check(pdtp.ModelShape(64, 8), 8, 8, gpu="h100")


def test_check_accepts_model_catalog_name_and_config(reference_dir):
    cfg = reference_dir / "hf-configs" / "deepseek-ai--DeepSeek-V3_config.json"
    for model in (pdtp.model("deepseek-v3"), "deepseek-v3", "deepseek-ai/DeepSeek-V3", str(cfg)):
        r = pdtp.check(model, 4, 16)
        assert r.ok, r.violations  # MLA: any divisible pair is fine under MoRIIO


# ---- v2: aggregated serving, layouts, sliding windows -----------------------------------------


def _serve(**kw):
    args = {
        "gpu": "h200",
        "tp": 8,
        "isl": 1024,
        "osl": 1024,
        "concurrency": 16,
        "weight_dtype": "fp8",
        "kv_dtype": "fp8",
    }
    args.update(kw)
    model = args.pop("model", "llama-3.3-70b")
    return pdtp.predict_serving(model, **args)


def test_serving_concurrency_trades_latency_for_throughput():
    points = [_serve(concurrency=c) for c in (1, 4, 16, 64, 128)]
    tps = [p.output_tokens_per_s for p in points]
    tpots = [p.tpot_ms for p in points]
    assert tps == sorted(tps) and tpots == sorted(tpots)
    assert points[0].tokens_per_s_per_user > points[-1].tokens_per_s_per_user
    for p in points:
        # Little's law over the closed loop, less the run's drain tail (< 3%).
        little = p.concurrency / ((p.ttft_ms + (p.osl - 1) * p.tpot_ms) / 1e3)
        assert 0.97 * little <= p.requests_per_s <= little
        assert p.output_tokens_per_s == pytest.approx(p.requests_per_s * p.osl)


def test_serving_long_prompts_queue_and_kv_caps_the_batch():
    short = _serve(tp=1, concurrency=64)
    long = _serve(tp=1, concurrency=64, isl=8192)
    assert long.tpot_ms > short.tpot_ms and long.ttft_ms > short.ttft_ms
    # 64 sequences of 9k tokens do not fit one H200 next to 70 GB of weights: the rest wait.
    assert long.kv_limited and long.batch <= long.max_batch < 64
    assert long.ttft_median_ms > 10 * short.ttft_median_ms
    assert not short.kv_limited
    # The first wave arrives at once: the mean TTFT is above a steady-state request's.
    assert short.ttft_ms > short.ttft_median_ms


def test_serving_engines_and_defaults():
    v = _serve(concurrency=64)
    s = _serve(concurrency=64, engine="sglang")
    assert v.engine == "vllm" and s.engine == "sglang" and s.tpot_ms != v.tpot_ms
    fewer = _serve(concurrency=64, max_num_seqs=8)
    assert fewer.kv_limited and fewer.batch <= 8 and fewer.ttft_ms > v.ttft_ms
    with pytest.raises(pdtp.InvalidArgumentError, match="engine"):
        _serve(engine="trt")
    with pytest.raises(pdtp.InvalidArgumentError, match="do not fit"):
        _serve(model="llama-3.1-405b", weight_dtype="bf16", gpu="h100", tp=1)
    with pytest.raises(pdtp.InvalidArgumentError, match="ep must be 1 or"):
        _serve(ep=4)
    with pytest.raises(pdtp.InvalidArgumentError, match="dp_attention"):
        _serve(dp=2, dp_attention=True)
    assert v.to_dict()["tpot_ms"] == v.tpot_ms


def test_serving_layouts():
    kw = {"model": "deepseek-r1", "gpu": "b200", "kv_dtype": None, "concurrency": 64}
    tp8 = _serve(**kw)
    ep8 = _serve(**kw, ep=8)
    dpa = _serve(**kw, ep=8, dp_attention=True)
    assert (ep8.tp, ep8.dp, ep8.ep, dpa.tp, dpa.dp, dpa.gpus) == (8, 1, 8, 1, 8, 8)
    for p in (tp8, ep8, dpa):
        assert p.tpot_ms > 0 and p.output_tokens_per_s > 0
    # Two data-parallel copies of a TP4 Llama serve twice the clients alike.
    one = _serve(tp=4, concurrency=16)
    two = _serve(tp=4, dp=2, concurrency=32)
    assert two.gpus == 8
    assert two.output_tokens_per_s == pytest.approx(2 * one.output_tokens_per_s, rel=1e-6)
    # Pipeline parallel holds the model on fewer GPUs per stage, at a latency cost.
    pp = _serve(tp=4, pp=2, concurrency=16)
    assert pp.gpus == 8 and pp.tpot_ms > _serve(concurrency=16).tpot_ms


def test_sliding_window_layers_are_cheaper_at_long_context():
    oss = pdtp.model("gpt-oss-120b")
    windows = [(g.kind, g.num_layers, g.window) for g in oss.attention_groups]
    assert ("sliding", 18, 128) in windows
    everything_global = dataclasses.replace(
        oss,
        attention_groups=tuple(
            dataclasses.replace(g, kind="full", window=0) for g in oss.attention_groups
        ),
    )
    kw = {"gpu": "h200", "tp": 1, "isl": 8192, "osl": 1024, "concurrency": 32}
    windowed = pdtp.predict_serving(oss, **kw)
    global_ = pdtp.predict_serving(everything_global, **kw)
    assert windowed.tpot_ms < global_.tpot_ms
    assert windowed.max_batch > global_.max_batch  # window layers keep only the window


def test_step_time_is_exposed_for_the_simulator():
    from pdtp import _core
    from pdtp.constants import constants_for
    from pdtp.perf import constant_inputs, gpu_inputs, model_inputs

    m = pdtp.model("llama-3.1-8b")
    args = (
        model_inputs(m),
        gpu_inputs(pdtp.gpu("h100"), m.weight_dtype),
        constant_inputs(constants_for("h100")),
        (1, 1, 1, False),
    )
    decode = _core.step_time(*args, 32.0, 32.0 * 2000.0, 0.0, 0.0)
    mixed = _core.step_time(*args, 32.0, 32.0 * 2000.0, 1024.0, 1024.0**2 / 2)
    assert 0 < decode < mixed
    d = pdtp.predict_decode(m, gpu="h100", tp=1, isl=1000, osl=2000, batch=32)
    assert d.tpot_ms == pytest.approx(decode * 1e3)


def test_every_catalog_gpu_names_its_scale_out_network_with_a_source():
    for g in pdtp.gpus():
        assert g.scaleout_bandwidth and 10e9 <= g.scaleout_bandwidth <= 200e9, g.name
        assert g.scaleout_latency and 1e-6 <= g.scaleout_latency <= 1e-4, g.name
        assert g.scaleout_source.strip(), g.name
        assert g.scaleup_domain >= g.gpus_per_node
    # GB200 NVL72: one NVLink domain of 72 GPUs over 4-GPU trays.
    gb200 = pdtp.gpu("gb200")
    assert (gb200.gpus_per_node, gb200.scaleup_domain) == (4, 72)
    with pytest.raises(pdtp.InvalidArgumentError, match="scaleup_gpus"):
        dataclasses.replace(pdtp.gpu("h200"), scaleup_gpus=4)
    with pytest.raises(pdtp.InvalidArgumentError, match="scaleout_bandwidth"):
        dataclasses.replace(pdtp.gpu("h200"), scaleout_bandwidth=-1.0)


def test_expert_parallel_across_nodes_is_priced_at_the_scale_out_network():
    """DeepSeek-R1 decoding with DP attention + EP over 32 H200 (4 nodes): the all-to-all
    crosses the 400 Gb/s NICs. The same layout on a GPU whose NVLink domain held all 32 is
    faster, and a slower network makes it slower; inside one node nothing changes."""
    h200 = pdtp.gpu("h200")
    one_domain = dataclasses.replace(h200, scaleup_gpus=32)
    slow_nic = dataclasses.replace(h200, scaleout_bandwidth=h200.scaleout_bandwidth / 4)
    kw = {"tp": 1, "dp": 32, "ep": 32, "isl": 1024, "osl": 1024}
    kw |= {"concurrency": 1024, "engine": "sglang"}

    def tpot(gpu: pdtp.GPU) -> float:
        return pdtp.predict_serving("deepseek-r1", gpu=gpu, **kw).tpot_ms

    assert tpot(one_domain) < tpot(h200) < tpot(slow_nic)
    inside = {**kw, "dp": 8, "ep": 8, "concurrency": 256}
    a = pdtp.predict_serving("deepseek-r1", gpu=h200, **inside).tpot_ms
    b = pdtp.predict_serving("deepseek-r1", gpu=slow_nic, **inside).tpot_ms
    assert a == b


def test_dp_attention_without_ep_slices_experts_over_all_ranks():
    """vLLM's DP attention without EP holds (and streams) a 1/(tp·dp) slice of every expert:
    at the same GPUs it streams fewer expert bytes per step than TP over fewer ranks would
    suggest, and the memory model agrees (a slice of each expert per GPU)."""
    kw = {"isl": 1024, "osl": 1024, "concurrency": 64, "engine": "sglang"}
    dp8 = pdtp.predict_serving("qwen3-235b-a22b", gpu="h200", tp=1, dp=8, **kw)
    dp8ep = pdtp.predict_serving("qwen3-235b-a22b", gpu="h200", tp=1, dp=8, ep=8, **kw)
    for p in (dp8, dp8ep):
        assert p.gpus == 8 and p.tpot_ms > 0 and p.output_tokens_per_s > 0
    # Both hold the model; without EP every GPU holds 1/8 of each expert, with EP 1/8 of the
    # experts — the same bytes, so the KV room (the batch cap) is alike.
    assert dp8.max_batch == pytest.approx(dp8ep.max_batch, rel=0.05)
    # Each rank streams an eighth of the experts its step touches, as with EP: the steps cost
    # alike (a model streaming every touched expert on each rank would be several times
    # slower).
    assert dp8.tpot_ms < 1.5 * dp8ep.tpot_ms


# ---- the constants: one field list (Rust owns it) and engine releases ----------------------


def test_constants_have_one_field_list_owned_by_rust():
    """The Rust struct declares its fields once (`constants!` in src/perf/mod.rs) and exports
    their Python names; Python's dataclass, the fit's bounds and levels and the shipped table
    use those names and no other."""
    import json
    from importlib import resources

    from pdtp import _core
    from pdtp.calibration import BOUNDS, TABLE_LEVELS
    from pdtp.constants import RELEASE_CONSTANTS, Constants

    rust = list(_core.CONSTANT_FIELDS)
    assert [f.name for f in dataclasses.fields(Constants)] == rust
    assert len(set(rust)) == len(rust)
    assert set(BOUNDS) <= set(rust) and set(TABLE_LEVELS) <= set(BOUNDS)
    assert set(RELEASE_CONSTANTS) <= set(TABLE_LEVELS)
    table = json.loads(resources.files("pdtp").joinpath("data/perf_constants.json").read_text())
    for entry in table["gpus"].values():
        for engine in ("vllm", "sglang"):
            assert set(entry[engine]) <= set(rust)
    for engine, ranges in table["releases"].items():
        if engine == "about":
            continue
        for factors in ranges.values():
            assert set(factors) - {"rows"} <= set(RELEASE_CONSTANTS)
    # Every field crosses the binding once, when the typed value is built: one lacking a
    # field is refused naming it, and so is a name outside the list.
    from pdtp.perf import constant_inputs, gpu_inputs, model_inputs

    m = pdtp.model("llama-3.1-8b")
    values = {k: float(v) for k, v in Constants().to_dict().items()}
    args = (model_inputs(m), gpu_inputs(pdtp.gpu("h100"), m.weight_dtype))
    inputs = _core.ConstantInputs(**values)
    assert _core.step_time(*args, inputs, (1, 1, 1, False), 1.0, 100.0, 0.0, 0.0) == (
        _core.step_time(*args, constant_inputs(Constants()), (1, 1, 1, False), 1.0, 100.0, 0.0, 0.0)
    )
    for name in rust:
        with pytest.raises(KeyError, match=name):
            _core.ConstantInputs(**{k: v for k, v in values.items() if k != name})
    with pytest.raises(pdtp.InvalidArgumentError, match='unknown constant "mbu_typo"'):
        _core.ConstantInputs(**values, mbu_typo=0.5)


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("lmsysorg/sglang:v0.5.9-cu130", "0.5.9"),
        ("lmsysorg/sglang:v0.5.12.post1", "0.5.12"),
        ("rocm/sgl-dev:sglang-0.5.9-rocm720-mi35x-mori-0227-3", "0.5.9"),
        ("lmsysorg/sglang-rocm:v0.5.12-rocm720-mi35x-20260519", "0.5.12"),
        ("vllm/vllm-openai:v0.11.0", "0.11.0"),
        ("vllm/vllm-openai:nightly", ""),
        ("0.5.10", "0.5.10"),
        ("", ""),
        (None, ""),
    ],
)
def test_engine_release_is_read_from_the_image(image, release):
    from pdtp.constants import engine_release

    assert engine_release(image) == release


def test_an_engine_release_chooses_its_measured_range_and_says_when_it_has_none():
    import json
    from importlib import resources

    from pdtp.constants import RELEASE_CONSTANTS, constants_for, measured_releases, release_note

    table = json.loads(resources.files("pdtp").joinpath("data/perf_constants.json").read_text())
    measured = measured_releases("sglang")
    assert measured, "the InferenceX rows hold SGLang releases"
    first, newest = measured[0], measured[-1]
    base = constants_for("mi355x", engine="sglang")
    for release, chosen in ((first, first), (newest, newest), ("99.0.0", newest)):
        c = constants_for("mi355x", engine="sglang", release=release)
        for name in RELEASE_CONSTANTS:
            factor = table["releases"]["sglang"][chosen].get(name, 1.0)
            assert getattr(c, name) == pytest.approx(getattr(base, name) * factor)
        # Only the constants a release moves change.
        others = {k: v for k, v in c.to_dict().items() if k not in RELEASE_CONSTANTS}
        assert others == {k: v for k, v in base.to_dict().items() if k not in RELEASE_CONSTANTS}
    assert "own measured runs" in release_note("sglang", first)
    assert f"range from {newest}" in release_note("sglang", "99.0.0")
    # Older than every measured release, or an engine without release data: said plainly.
    assert constants_for("mi355x", engine="sglang", release="0.1.0") == base
    assert "no measured data" in release_note("sglang", "0.1.0")
    assert "no measured data" in release_note("vllm", "vllm/vllm-openai:v0.11.0")
    with pytest.raises(pdtp.PdtpError, match="release"):
        constants_for("mi355x", engine="sglang", release=59)  # type: ignore[arg-type]
    with pytest.raises(pdtp.PdtpError, match="release"):
        release_note("sglang", 0.59)  # type: ignore[arg-type]


# ---- the engine release of a plan or prediction picks its constants ------------------------


@pytest.fixture
def vllm_release_range(monkeypatch):
    """A measured vLLM release range (the shipped table has none for vLLM): its factors make
    the release's constants differ from the baseline, so a planner that ignores the release
    is caught."""
    import copy

    from pdtp import constants as cmod

    table = copy.deepcopy(cmod._table())
    table["releases"]["vllm"] = {"0.26.0": {"rows": 10, "kernel_overhead_s": 3.0}}
    cmod._defaults.cache_clear()
    monkeypatch.setattr(cmod, "_table", lambda: table)
    yield "0.26.0"
    cmod._defaults.cache_clear()


def test_evaluate_and_solve_predict_with_the_constants_of_their_vllm_release(vllm_release_range):
    from pdtp.constants import constants_for

    config = {
        "gpu": "h100",
        "prefill_tp": 2,
        "prefill_instances": 1,
        "decode_tp": 4,
        "decode_instances": 1,
        "connector": "nixl",
    }
    m = "llama-3.1-70b"
    newer = "0.32.0"  # in the measured range from 0.26.0
    own = pdtp.evaluate(m, **config, vllm_version=newer)
    given = pdtp.evaluate(m, **config, constants=constants_for("h100", release=newer))
    base = pdtp.evaluate(m, **config, vllm_version="0.14.0")  # older than the range
    assert own.tpot_ms == given.tpot_ms and own.ttft_ms == given.ttft_ms
    assert own.tpot_ms != base.tpot_ms
    assert (
        own.constants_note.startswith(f"vllm {newer}") and "range from 0.26.0" in own.constants_note
    )
    assert "no measured data" in base.constants_note
    assert "given by the caller" in given.constants_note
    plan = pdtp.solve(m, gpu="h100", gpus=8, connector="nixl", vllm_version=newer)
    again = pdtp.evaluate(
        m,
        gpu="h100",
        prefill_tp=plan.prefill.layout,
        prefill_instances=plan.prefill.instances,
        decode_tp=plan.decode.layout,
        decode_instances=plan.decode.instances,
        connector="nixl",
        vllm_version=newer,
    )
    assert plan.tpot_ms == pytest.approx(again.tpot_ms, rel=1e-9)
    assert plan.constants_note == again.constants_note
    assert pdtp.Plan.from_dict(plan.to_dict()).constants_note == plan.constants_note


def test_defaults_say_the_vllm_release_has_no_measured_data():
    e = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="h100",
        prefill_tp=2,
        prefill_instances=1,
        decode_tp=4,
        decode_instances=1,
        connector="nixl",
    )
    assert "no measured data" in e.constants_note and "baseline" in e.constants_note
    assert e.constants_note.startswith("vllm ")
    tuned = pdtp.evaluate(
        "llama-3.1-70b",
        gpu="h100",
        prefill_tp=2,
        prefill_instances=1,
        decode_tp=4,
        decode_instances=1,
        connector="nixl",
        constants={"mbu": 0.5},
    )
    assert "overridden: mbu" in tuned.constants_note


def test_predict_serving_takes_the_engine_release():
    from pdtp.constants import constants_for, measured_releases

    newest = measured_releases("sglang")[-1]
    args = {"gpu": "mi355x", "tp": 8, "isl": 1024, "osl": 1024, "concurrency": 64}
    args |= {"engine": "sglang", "weight_dtype": "fp8"}
    image = f"lmsysorg/sglang:v{newest}-rocm700-mi35x"
    own = pdtp.predict_serving("llama-3.3-70b", **args, release=image)
    given = pdtp.predict_serving(
        "llama-3.3-70b", **args, constants=constants_for("mi355x", engine="sglang", release=newest)
    )
    base = pdtp.predict_serving("llama-3.3-70b", **args)
    assert own.tpot_ms == given.tpot_ms and own.ttft_ms == given.ttft_ms
    assert own.tpot_ms != base.tpot_ms
    assert "own measured runs" in own.constants_note
    assert "no release given" in base.constants_note
    with pytest.raises(pdtp.PdtpError, match="release"):
        pdtp.predict_serving("llama-3.3-70b", **args, release=59)  # type: ignore[arg-type]


# ---- which TTFT an SLO bounds: the mean, in the planners and the simulator -------------------


def test_the_slo_names_the_mean_ttft_and_refuses_a_median_it_cannot_predict():
    from pdtp.workload import TTFT_STATISTICS

    w = pdtp.Workload()
    assert w.ttft_statistic == "mean" and TTFT_STATISTICS == ("mean",)
    assert w.to_dict()["ttft_statistic"] == "mean"
    assert pdtp.Workload(**w.to_dict()) == w
    for bad in ("median", "p50", "", 0.5):
        with pytest.raises(pdtp.PdtpError, match="ttft_statistic.*mean.*slo_percentile"):
            pdtp.Workload(ttft_statistic=bad)  # type: ignore[arg-type]
    with pytest.raises(pdtp.PdtpError, match="ttft_statistic"):
        pdtp.solve("llama-3.1-8b", gpus=2, gpu="h100", workload={"ttft_statistic": "median"})
    plan = pdtp.solve("llama-3.1-8b", gpus=2, gpu="h100", workload={"ttft_statistic": "mean"})
    assert plan.slo_basis == "mean" and plan.workload.ttft_statistic == "mean"
    back = pdtp.Plan.from_dict(plan.to_dict())
    assert back.workload == plan.workload


def test_the_simulator_judges_the_slo_on_the_statistic_it_names():
    from pdtp.simulate import slo_met

    plan = pdtp.solve("llama-3.1-70b", gpus=24, gpu="mi300x")
    r = pdtp.simulate(plan, rate_rps=0.5 * plan.requests_per_s, requests=2000)
    mean_ttft, mean_tpot = r.ttft_ms.mean, r.tpot_ms.mean
    assert slo_met(r) == (mean_ttft <= r.ttft_slo_ms and mean_tpot <= r.tpot_slo_ms)
    # The mean is the statistic: an SLO between the mean and the max TTFT separates them.
    between = (mean_ttft + r.ttft_ms.max) / 2
    assert r.ttft_ms.mean < between < r.ttft_ms.max
    tight = pdtp.simulate(
        plan,
        rate_rps=0.5 * plan.requests_per_s,
        requests=2000,
        workload=dataclasses.replace(plan.workload, ttft_ms=between),
    )
    assert slo_met(tight) and not tight.meets_slo(0.9999)
    below = dataclasses.replace(plan.workload, ttft_ms=0.99 * mean_ttft)
    r2 = pdtp.simulate(plan, rate_rps=0.5 * plan.requests_per_s, requests=2000, workload=below)
    assert not slo_met(r2)
    assert slo_met(r2, 0.001) == r2.meets_slo(0.001)
    for bad in ("median", 1.0, 0):
        with pytest.raises(pdtp.PdtpError, match="statistic"):
            slo_met(r, bad)


def test_estimates_name_the_network_each_collective_crosses():
    """Each collective on the link the model prices it at: an EP group of 16 H100s spans two
    8-GPU NVLink domains (scale-out), one of 8 stays on NVLink; xGMI on AMD; the KV transfer
    between instances is priced at the scale-out NIC."""
    kw = {"prefill_instances": 1, "decode_instances": 1, "connector": "nixl"}
    e = pdtp.evaluate("qwen3-30b-a3b", gpu="h100", prefill_tp="tp2dp4", decode_tp="tp1dp16ep", **kw)
    assert set(e.networks) == {
        ("prefill", "tp_allreduce", "nvlink"),
        ("prefill", "dp_allgather", "nvlink"),
        ("decode", "ep_alltoall", "scale-out"),
        ("pd", "kv_transfer", "scale-out"),
    }
    inside = pdtp.evaluate("qwen3-30b-a3b", gpu="h100", prefill_tp=1, decode_tp="tp1dp8ep", **kw)
    assert ("decode", "ep_alltoall", "nvlink") in inside.networks
    assert not any(side == "prefill" for side, _, _ in inside.networks)
    amd = pdtp.evaluate("llama-3.1-70b", gpu="mi300x", prefill_tp=4, decode_tp=8, **kw)
    assert ("decode", "tp_allreduce", "xgmi") in amd.networks
    agg = pdtp.evaluate("llama-3.1-70b", gpu="h100", aggregated=4, aggregated_instances=2)
    assert agg.networks == (("aggregated", "tp_allreduce", "nvlink"),)
    assert e.to_dict()["networks"]


def test_a_plans_engine_release_chooses_the_simulators_constants(vllm_release_range):
    """simulate(plan) prices its steps with the constants of the plan's vLLM release, as
    the plan was priced (the fixture's release range makes them differ from the baseline)."""
    from pdtp.constants import constants_for

    newer = vllm_release_range.replace("0.26", "0.32")
    plan = pdtp.solve("llama-3.1-70b", gpu="h100", gpus=8, connector="nixl", vllm_version=newer)
    older = dataclasses.replace(plan, vllm_version="0.14.0")
    w = {"isl": 1024, "osl": 64}
    own = pdtp.simulate(plan, concurrency=2, requests=16, workload=w)
    base = pdtp.simulate(older, concurrency=2, requests=16, workload=w)
    assert own.tpot_ms.mean != pytest.approx(base.tpot_ms.mean, rel=1e-6)
    sides = {"prefill": plan.prefill, "decode": plan.decode}
    if plan.serving == "agg":
        layout = {"layout": str(plan.aggregated.layout), "instances": plan.aggregated.instances}
    else:
        layout = {
            "prefill_layout": str(sides["prefill"].layout),
            "prefill_instances": sides["prefill"].instances,
            "decode_layout": str(sides["decode"].layout),
            "decode_instances": sides["decode"].instances,
        }
    given = pdtp.sim_config(
        "llama-3.1-70b", gpu="h100", constants=constants_for("h100", release=newer), **layout
    )
    same = pdtp.simulate(given, concurrency=2, requests=16, workload=w)
    assert same.tpot_ms.mean == pytest.approx(own.tpot_ms.mean, rel=1e-9)
    with pytest.raises(pdtp.PdtpError, match="vllm_version"):
        pdtp.sim_config("llama-3.1-70b", gpu="h100", tp=4, vllm_version=26)
