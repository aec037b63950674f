"""Physical properties of the performance model on models no fit has measured: gpt-oss-120b
(36 layers, MXFP4 experts, sliding-window layers) and GLM-5 (78 MLA layers with a DSA
indexer). Each term must count what it physically counts: per-layer costs scale with the
layers, weight streaming with the bytes a rank holds, collectives with the layers that run
them, DSA attention with the latents its indexer picks. No predicted number is asserted:
every comparison is between live predictions."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

import pdtp
from conftest import REPO
from pdtp import Model
from pdtp.constants import constants_for

#: A value that switches a per-event cost off (constants must be positive).
OFF = 1e-15
HF = REPO / "tests" / "data" / "hf-configs"


def _tpot(model: Any, gpu: str, tp: int, batch: int, **constants: float) -> float:
    return pdtp.predict_decode(
        model,
        gpu=gpu,
        tp=tp,
        isl=1024,
        osl=1024,
        batch=batch,
        constants=constants or None,
    ).tpot_ms


def _gpt_oss(layers: int = 36) -> Model:
    cfg = json.loads((HF / "openai--gpt-oss-120b" / "config.json").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["num_hidden_layers"] = layers
    cfg["layer_types"] = cfg["layer_types"][:layers]
    return Model.from_hf_config(cfg, name=f"gpt-oss-120b-{layers}l")


def _term(model: Model, gpu: str, tp: int, batch: int, constant: str) -> float:
    """What one fitted per-event constant adds to the step (ms)."""
    return _tpot(model, gpu, tp, batch) - _tpot(model, gpu, tp, batch, **{constant: OFF})


@pytest.mark.parametrize("gpu", ["b200", "mi355x"])
def test_half_the_layers_pay_half_the_per_layer_overheads(gpu: str) -> None:
    full, half = _gpt_oss(36), _gpt_oss(18)
    assert half.num_layers * 2 == full.num_layers
    for constant in ("kernel_overhead_s", "allreduce_latency_s"):
        assert _term(full, gpu, 8, 1, constant) == pytest.approx(
            2 * _term(half, gpu, 8, 1, constant), rel=1e-6
        ), constant
    # The per-step and per-sequence costs do not depend on the layers.
    for constant in ("step_overhead_s", "seq_overhead_s"):
        assert _term(full, gpu, 8, 4, constant) == pytest.approx(
            _term(half, gpu, 8, 4, constant), rel=1e-6
        ), constant


@pytest.mark.parametrize("gpu", ["b200", "mi355x"])
def test_two_all_reduces_per_layer_at_tp_above_one(gpu: str) -> None:
    m = pdtp.model("gpt-oss-120b")
    alpha = constants_for(gpu).allreduce_latency_s
    assert _term(m, gpu, 1, 1, "allreduce_latency_s") == pytest.approx(0.0, abs=1e-9)
    for tp in (2, 4, 8):
        per_step = _term(m, gpu, tp, 1, "allreduce_latency_s") / 1e3
        assert per_step == pytest.approx(2 * m.num_layers * alpha, rel=1e-6), tp


@pytest.mark.parametrize("gpu", ["b200", "mi355x"])
def test_tp_scales_what_a_rank_streams_and_nothing_else(gpu: str) -> None:
    """TPOT at TP 8 vs TP 1 of a 36-layer model: the work left once the per-kernel, per-step
    and per-sequence costs and the collectives' latency are switched off is what a rank
    streams and computes, and at batch 1 that is the weight and KV bytes a rank holds: it
    falls 8x (within the all-reduces' bandwidth term). The fixed terms stay as they are."""
    m = pdtp.model("gpt-oss-120b")
    off = {
        "kernel_overhead_s": OFF,
        "allreduce_latency_s": OFF,
        "step_overhead_s": OFF,
        "seq_overhead_s": OFF,
    }
    work = {tp: _tpot(m, gpu, tp, 1, **off) for tp in (1, 8)}
    assert work[1] / work[8] == pytest.approx(8.0, rel=0.1)
    assert _term(m, gpu, 1, 1, "kernel_overhead_s") == pytest.approx(
        _term(m, gpu, 8, 1, "kernel_overhead_s"), rel=1e-9
    )


def _glm5_dense() -> Model:
    """GLM-5 priced as if its MLA attended every latent (no DSA top-k)."""
    return dataclasses.replace(pdtp.model("glm-5"), index_topk=0, index_heads=0, index_head_dim=0)


def _glm5_tpot(model: Model, isl: int, batch: int = 16) -> float:
    return pdtp.predict_decode(model, gpu="h200", tp=8, isl=isl, osl=2, batch=batch).tpot_ms


def test_dsa_decode_reads_the_top_k_latents_not_the_context() -> None:
    m = pdtp.model("glm-5")
    assert (m.index_topk, m.index_heads, m.index_head_dim) == (2048, 32, 128)
    dsa, dense = m, _glm5_dense()
    # Past the top-k, DSA's step grows only by the indexer's scan of its 132-byte keys; the
    # dense pricing by the 1,152-byte latents as well: about 9.7x faster.
    dsa_growth = _glm5_tpot(dsa, 32_768) - _glm5_tpot(dsa, 16_384)
    dense_growth = _glm5_tpot(dense, 32_768) - _glm5_tpot(dense, 16_384)
    assert 0 < dsa_growth < dense_growth / 4
    # Within the top-k both attend every latent.
    short = _glm5_tpot(dsa, 1024) / _glm5_tpot(dense, 1024)
    assert 0.95 < short < 1.2


def test_dsa_prompts_pay_the_indexer_over_every_causal_pair() -> None:
    """The indexer scores every (query, key) pair of a prompt on every rank (its heads are
    replicated), so a prompt's cost past the top-k grows quadratically even though the
    attention itself attends only top-k latents per query."""
    m = pdtp.model("glm-5")
    t = {
        isl: pdtp.predict_prefill(m, gpu="h200", tp=8, isl=isl).prefill_ms
        for isl in (8192, 16_384, 32_768)
    }
    assert t[32_768] - t[16_384] > 2.2 * (t[16_384] - t[8192])


def test_glm5_kv_capacity_counts_the_indexer_keys() -> None:
    """The KV pool holds each token's 1,152-byte latent and its 132-byte index key on every
    layer, as Model.kv_bytes_per_token counts them."""
    m = pdtp.model("glm-5")
    dsa = pdtp.predict_decode(m, gpu="h200", tp=8, isl=1024, osl=1024, batch=1)
    dense = pdtp.predict_decode(_glm5_dense(), gpu="h200", tp=8, isl=1024, osl=1024, batch=1)
    # Without the DSA fields the pool is sized from the latent alone.
    latent = m.num_attention_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * 2
    assert dsa.kv_capacity_tokens / dense.kv_capacity_tokens == pytest.approx(
        latent / m.kv_bytes_per_token, rel=1e-3
    )


@pytest.mark.parametrize(("name", "gpu"), [("glm-5", "h200"), ("gpt-oss-120b", "b200")])
def test_a_batch_of_one_streams_the_experts_it_touches(name: str, gpu: str) -> None:
    """One decode token touches k of E experts per layer: what a rank streams at batch 1 is
    the dense weights plus k/E of the experts, against (nearly) all of them at batch 256. The
    rest of the batch-256 step (GEMM FLOPs, attention) only lowers the ratio."""
    m = pdtp.model(name)
    off = {"kernel_overhead_s": OFF, "allreduce_latency_s": OFF, "step_overhead_s": OFF}
    off["seq_overhead_s"] = OFF

    def work(batch: int) -> float:
        return pdtp.predict_decode(
            m, gpu=gpu, tp=8, isl=256, osl=2, batch=batch, constants=off
        ).tpot_ms

    experts = m.weight_bytes - m.dense_weight_bytes
    # The input embedding is gathered row by row, never streamed.
    dense = m.dense_weight_bytes - m.vocab_size * m.hidden_size * 2
    touched = (dense + experts * m.experts_per_token / m.num_experts) / (dense + experts)
    assert 0.5 * touched < work(1) / work(256) < 1.3 * touched
