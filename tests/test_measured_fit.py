"""A run that was measured must never be refused: every configuration of the vendored measured
serving data (tests/data/reference/, see its .md files) that pdtp can express is predicted to
fit at the memory fraction it was launched with. And the memory model's SGLang arithmetic:
SGLang's ``mem_fraction_static`` already leaves out activations and CUDA graphs, so pdtp's
runtime reserve is not subtracted a second time (issue 23, class 14)."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytest

import pdtp
from pdtp import calibration
from pdtp.constants import constants_for
from pdtp.errors import PdtpError

REF = Path(__file__).parent / "data" / "reference"
AGGREGATED = ("measured-serving.csv", "measured-serving-inferencex-agg.csv")
# What pdtp does not model, refused by the row reader on purpose (the .md files say so):
# TensorRT-LLM / ATOM runs, GPU types outside the catalog or not recorded.
NOT_MODELLED = ("is not one pdtp models", "unknown GPU")


def _points(name: str) -> tuple[list[calibration.PerfPoint], list[str]]:
    points, skipped = [], []
    with (REF / name).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows, name
    for i, raw in enumerate(rows, 1):
        where = f"{name} {raw.get('row_id') or i}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", calibration.SpeculativeDecodingWarning)
                points.append(calibration._parse_row(raw, i, where))
        except PdtpError as exc:
            # Refusing a run for memory is exactly what must not happen.
            assert "does not fit" not in str(exc), f"{where} refused: {exc}"
            assert any(s in str(exc) for s in NOT_MODELLED), f"{where}: {exc}"
            skipped.append(where)
    return points, skipped


@pytest.mark.parametrize("name", AGGREGATED)
def test_every_measured_run_is_predicted_to_fit(name: str) -> None:
    points, _ = _points(name)
    assert len(points) > 100, name  # the check covers the data, not a handful of rows
    for p in points:
        estimate = pdtp.predict_serving(
            p.model.name,
            gpu=p.gpu.name,
            tp=p.tp,
            ep=p.ep,
            dp_attention=p.dp_attention,
            isl=round(p.isl),
            osl=round(p.osl),
            concurrency=p.concurrency or 1,
            weight_dtype=p.model.weight_dtype,
            kv_dtype=p.model.kv_dtype,
            engine=p.engine,
            max_num_seqs=p.max_num_seqs,
            max_num_batched_tokens=p.max_num_batched_tokens,
            gpu_memory_utilization=p.gpu_memory_utilization,
        )
        assert estimate.max_batch >= 1, p.where


def test_deepseek_r1_fp8_on_four_b200_under_sglang_is_read_and_fits() -> None:
    """The issue's reproducer: InferenceX's TP-4 DeepSeek-R1 FP8 SGLang run on B200
    (row A0034), launched with --mem-fraction-static 0.95 and an fp8 KV cache."""
    points, _ = _points("measured-serving-inferencex-agg.csv")
    (p,) = [
        p
        for p in points
        if p.engine == "sglang" and p.gpu.name == "b200" and p.tp == 4
        if p.model.weight_dtype == "fp8" and p.model.name == "deepseek-r1"
    ]
    assert p.gpu_memory_utilization == 0.95 and p.model.kv_dtype == "fp8"
    assert p.max_num_seqs == 32
    s = pdtp.predict_serving(
        "deepseek-r1",
        gpu="b200",
        tp=4,
        isl=7373,
        osl=927,
        concurrency=32,
        weight_dtype="fp8",
        kv_dtype="fp8",
        engine="sglang",
        gpu_memory_utilization=0.95,
    )
    assert s.max_batch >= 32 and not s.kv_limited
    # At SGLang's own default fraction the weights alone (0.87 of a B200 at tp 4) do not
    # fit, and SGLang itself refuses to start ("Not enough memory"): pdtp says so, and does
    # not suggest fp8 to weights already fp8.
    with pytest.raises(pdtp.InvalidArgumentError, match="mem_fraction_static") as info:
        pdtp.predict_serving(
            "deepseek-r1",
            gpu="b200",
            tp=4,
            isl=7373,
            osl=927,
            concurrency=32,
            weight_dtype="fp8",
            engine="sglang",
        )
    assert "fp8 weights" not in str(info.value)


def _smallest_fitting_fraction(engine: str) -> float:
    """The smallest memory fraction at which deepseek-r1 fp8 runs on 4 B200s (bisection on
    predict_serving's own refusal)."""
    lo, hi = 0.5, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        try:
            pdtp.predict_serving(
                "deepseek-r1",
                gpu="b200",
                tp=4,
                isl=1,
                osl=1,
                concurrency=1,
                weight_dtype="fp8",
                engine=engine,
                gpu_memory_utilization=mid,
            )
            hi = mid
        except pdtp.InvalidArgumentError:
            lo = mid
    return hi


def test_sglang_fraction_is_weights_plus_kv_with_no_second_reserve() -> None:
    m = pdtp.model("deepseek-r1")
    g = pdtp.gpu("b200")
    assert m.weight_dtype == "fp8"
    # TP 4, no expert parallel: every GPU holds a quarter of every weight.
    weights = m.weight_bytes / 4
    kv = 2 * m.kv_bytes_per_token  # one 2-token sequence, negligible
    reserve = constants_for("b200", engine="vllm").reserve_bytes
    assert constants_for("b200", engine="sglang").reserve_bytes == 0
    assert reserve > 1e9
    sglang = _smallest_fitting_fraction("sglang")
    vllm = _smallest_fitting_fraction("vllm")
    assert sglang == pytest.approx((weights + kv) / g.memory_bytes, abs=1e-4)
    # vLLM's gpu_memory_utilization covers its activations and graphs too: the reserve stays.
    assert vllm == pytest.approx((weights + kv + reserve) / g.memory_bytes, abs=1e-4)


def test_reserve_bytes_may_be_zero_but_not_negative() -> None:
    assert pdtp.Constants().replace(reserve_bytes=0).reserve_bytes == 0
    with pytest.raises(pdtp.PdtpError, match="reserve_bytes"):
        pdtp.Constants().replace(reserve_bytes=-1.0)
    with pytest.raises(pdtp.PdtpError, match="mbu"):
        pdtp.Constants().replace(mbu=0)
