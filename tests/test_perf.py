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
