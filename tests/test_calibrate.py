"""pdtp.calibrate: row parsing and errors, the row-kind predictions, the fit (recovers known
constants, improves a bad start, deterministic) and the accuracy benchmark's functions.
Nothing here touches the network; reference data comes from the ``reference_dir`` fixture."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import math
import pathlib
import sys
from collections import Counter
from typing import Any

import pytest

import pdtp
from pdtp.calibration import (
    PerfPoint,
    calibrate,
    load_points,
    point_errors,
    predict_point,
    summarize,
)
from pdtp.constants import GENERIC as GENERIC_C
from pdtp.constants import Constants, constants_for
from pdtp.errors import ConfigError, InvalidArgumentError

REPO = pathlib.Path(__file__).resolve().parents[1]
COLUMNS = [
    "source",
    "model",
    "gpu",
    "engine",
    "weight_dtype",
    "tp",
    "isl",
    "osl",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
    "output_tokens_per_s",
    "note",
]


def _row(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "tp": 1,
        "isl": 1024,
        "osl": 256,
        "concurrency": 8,
        "tpot_ms": 9.0,
    }
    base.update(fields)
    return base


def _median_error(points: Any, constants: Any, kind: str | None = None) -> float:
    errs = [e.rel_error for e in point_errors(points, constants) if kind in (None, e.kind)]
    return summarize(errs)["median"]


# ---- synthetic points: the model's own predictions under chosen constants ---------------------

TRUE = constants_for("h100").replace(
    mbu=0.72, mfu_prefill=0.42, kernel_overhead_s=3e-6, api_overhead_s=0.03
)
FIT = ("mbu", "mfu_prefill", "kernel_overhead_s", "api_overhead_s")


def _synthetic_rows(constants: Constants) -> list[dict[str, Any]]:
    rows = []
    shapes = (("qwen3-32b", (1, 2, 4, 8)), ("llama-3.1-8b", (1, 2)))
    for (model, tps), isl, osl, conc in itertools.product(
        shapes, (512, 2048, 4096), (128, 1024), (1, 8, 64)
    ):
        for tp in tps:
            row = _row(model=model, tp=tp, isl=isl, osl=osl, concurrency=conc, tpot_ms=1.0)
            row["ttft_ms"] = 1.0
            row["output_tokens_per_s"] = 1.0
            predicted = predict_point(row, constants)
            row.update(predicted)
            rows.append(row)
    return rows


def test_recovers_known_constants_from_synthetic_points():
    rows = _synthetic_rows(TRUE)
    fitted = calibrate(rows, fit=FIT)
    for name in FIT:
        want, got = getattr(TRUE, name), getattr(fitted, name)
        assert got == pytest.approx(want, rel=0.03), name
    # Constants outside ``fit`` keep the base (the GPU's defaults).
    assert fitted.mfu_decode == constants_for("h100").mfu_decode
    assert fitted.reserve_bytes == constants_for("h100").reserve_bytes
    assert _median_error(rows, fitted) < 0.005


def test_fit_leaves_uninformed_constants_alone():
    # No fp4 rows: nothing depends on the fp4 kernels' efficiency; no TTFT rows: nothing on
    # the request overhead.
    rows = [{k: v for k, v in r.items() if k != "ttft_ms"} for r in _synthetic_rows(TRUE)]
    base = constants_for("h100")
    fitted = calibrate(rows, fit=("mbu", "fp4_weight_efficiency", "api_overhead_s"))
    assert fitted.fp4_weight_efficiency == base.fp4_weight_efficiency
    assert fitted.api_overhead_s == base.api_overhead_s
    assert fitted.mbu != base.mbu


def test_deterministic():
    rows = _synthetic_rows(TRUE)[::3]
    assert calibrate(rows) == calibrate(list(rows))
    assert calibrate(rows, fit=("mbu",)) == calibrate(rows, fit=("mbu",))


def test_result_is_a_constants_usable_everywhere():
    c = calibrate(_synthetic_rows(TRUE)[::4], fit=("mbu", "step_overhead_s"))
    assert isinstance(c, Constants)
    d = pdtp.predict_decode(
        "llama-3.1-8b", gpu="h100", tp=1, isl=512, osl=128, batch=4, constants=c
    )
    s = pdtp.predict_serving(
        "llama-3.1-8b", gpu="h100", tp=1, isl=512, osl=128, concurrency=4, constants=c
    )
    assert d.tpot_ms > 0 and s.tpot_ms > 0


# ---- the reference data -------------------------------------------------------------------------


def test_improves_a_bad_start_on_the_reference(reference_dir: pathlib.Path):
    path = reference_dir / "perf-points.csv"
    bad = constants_for("h100").replace(mbu=0.35, mfu_prefill=0.15, kernel_overhead_s=30e-6)
    before = _median_error(path, bad)
    fitted = calibrate(path, base=bad, gpu="h100")
    after = _median_error(load_points(path, gpu="h100"), fitted)
    assert after < 0.5 * before
    # Only the fitted constants moved.
    assert fitted.reserve_bytes == bad.reserve_bytes
    assert fitted.seq_overhead_s == bad.seq_overhead_s


def test_reads_measured_serving_as_it_is(reference_dir: pathlib.Path):
    points = load_points(reference_dir / "measured-serving.csv")
    assert len(points) == 619
    first = points[0]
    assert first.model.name == "deepseek-r1" and first.model.weight_dtype == "fp4"
    assert first.engine == "sglang" and first.gpu.name == "b200" and first.tp == 4
    # Lengths drawn from [0.8, 1] x nominal: the prompt mean is 0.9 x isl, the output mean the
    # measured one; mean TTFT and TPOT, output tokens/s.
    assert first.isl == pytest.approx(0.9 * 1024) and first.osl == pytest.approx(920.7)
    assert (first.ttft_ms, first.tpot_ms, first.output_tokens_per_s) == (
        416.1445,
        9.4192,
        403.1076,
    )
    vllm = [p for p in points if p.engine == "vllm"]
    assert vllm and all(p.model.kv_dtype == "fp8" for p in vllm)
    assert all(p.max_num_seqs == p.concurrency for p in vllm)
    assert {p.max_num_batched_tokens for p in vllm if p.gpu.vendor == "AMD"} == {131072}
    assert {p.ep for p in points} == {1, 4, 8}
    assert {p.gpu.name for p in points} == {"mi300x", "mi325x", "mi355x", "h100", "h200", "b200"}
    # calibrate() takes the file as it is.
    c = calibrate(reference_dir / "measured-serving.csv", gpu="mi325x", fit=("mbu",))
    assert 0.3 <= c.mbu <= 1.0


def test_defaults_are_accurate_in_sample(reference_dir: pathlib.Path):
    # The shipped defaults were fitted on these rows (benchmarks/fit_defaults.py): this checks
    # that the file matches the fit, not accuracy (accuracy is the out-of-sample test below).
    points = load_points(reference_dir / "measured-serving.csv")
    assert _median_error(points, None, "tpot_ms") < 0.08


def test_gpu_filter(reference_dir: pathlib.Path):
    path = reference_dir / "perf-points.csv"
    rows = load_points(path, gpu="mi300x")
    assert rows and {p.gpu.name for p in rows} == {"mi300x"}
    fitted = calibrate(path, gpu="MI300X", fit=("mbu",))
    # The search starts from that GPU's defaults and changes only mbu.
    assert fitted.allreduce_latency_s == constants_for("mi300x").allreduce_latency_s
    with pytest.raises(InvalidArgumentError, match="no points for gpu 'b200'"):
        calibrate(path, gpu="b200")


def test_reference_rows_parse(reference_dir: pathlib.Path):
    points = load_points(reference_dir / "perf-points.csv")
    first = points[0]
    assert first.row == 1 and "line 2" in first.where
    assert first.model.name == "qwen3-32b" and first.gpu.name == "h100"
    # The row's weight dtype overrides the model's; "fp8 KV cache" in a note sets the KV dtype.
    amd = [p for p in points if p.gpu.name == "mi300x"]
    assert all(p.model.weight_dtype == "fp8" and p.model.kv_dtype == "fp8" for p in amd)
    # vLLM 0.8.3 ran at most 256 sequences; vLLM 0.12 rows have its default of 1024.
    assert all(p.max_num_seqs == 256 for p in amd)
    assert first.max_num_seqs == 1024


# ---- inputs -------------------------------------------------------------------------------------


def _write_csv(path: pathlib.Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k, "") for k in COLUMNS})


def test_accepts_csv_path_dicts_with_strings_and_dataframe(tmp_path: pathlib.Path):
    rows = _synthetic_rows(TRUE)[::5]
    path = tmp_path / "points.csv"
    _write_csv(path, rows)
    as_strings = [{k: str(v) for k, v in r.items()} for r in rows]
    from_dicts = calibrate(rows, fit=("mbu", "step_overhead_s"))
    assert calibrate(path, fit=("mbu", "step_overhead_s")) == from_dicts
    assert calibrate(str(path), fit=("mbu", "step_overhead_s")) == from_dicts
    assert calibrate(as_strings, fit=("mbu", "step_overhead_s")) == from_dicts
    assert calibrate(iter(rows), fit=("mbu", "step_overhead_s")) == from_dicts
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(path)  # empty cells become NaN, integer columns with gaps floats
    assert calibrate(frame, fit=("mbu", "step_overhead_s")) == from_dicts


def test_optional_columns():
    base = _row(concurrency=None, tpot_ms=None, output_tokens_per_s=5000.0, engine="vllm 0.8.3")
    (p,) = load_points([base])
    assert p.max_num_seqs == 256
    (p,) = load_points([{**base, "engine": "vLLM v0.11.0"}])
    assert p.max_num_seqs == 1024
    (p,) = load_points([{**base, "engine": "SGLang 0.5"}])
    assert p.engine == "sglang"
    (p,) = load_points([{**base, "max_num_seqs": "64"}])
    assert p.max_num_seqs == 64
    (p,) = load_points([{**base, "kv_dtype": "fp8_e4m3", "weight_dtype": "fp8"}])
    assert (p.model.kv_dtype, p.model.weight_dtype) == ("fp8", "fp8")
    (p,) = load_points([_row(model="meta-llama/Llama-3.1-8B")])  # an HF id
    assert p.model.name == "llama-3.1-8b"
    (p,) = load_points([_row(random_range_ratio=0.8, ep=1, dp_attention="false")])
    assert p.isl == pytest.approx(0.9 * 1024) and p.osl == pytest.approx(0.9 * 256)
    (p,) = load_points(
        [_row(model="deepseek-r1", gpu="h200", weight_dtype="fp8", tp=8, ep=8, dp_attention="True")]
    )
    assert p.layout == (1, 1, 8, True)


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        ({"tp": None}, InvalidArgumentError, r"row 2: field 'tp' is required"),
        ({"isl": "lots"}, InvalidArgumentError, r"row 2: field 'isl' must be a number"),
        ({"osl": 12.5}, InvalidArgumentError, r"row 2: field 'osl' must be a positive integer"),
        ({"tp": 0}, InvalidArgumentError, r"row 2: field 'tp' must be a positive"),
        ({"tpot_ms": -3}, InvalidArgumentError, r"row 2: field 'tpot_ms' must be a positive"),
        ({"concurrency": None}, InvalidArgumentError, r"row 2: field 'concurrency' is required"),
        ({"tpot_ms": None}, InvalidArgumentError, r"row 2: no measurement"),
        ({"model": "no-such-model"}, ConfigError, r"row 2: field 'model'"),
        ({"gpu": "tpu-v9"}, ConfigError, r"row 2: field 'gpu'"),
        ({"weight_dtype": "fp7"}, InvalidArgumentError, r"row 2: field 'weight_dtype'"),
        ({"model": 7}, InvalidArgumentError, r"row 2: field 'model' must be a string"),
        (
            {"model": "llama-3.1-405b", "tp": 1},
            InvalidArgumentError,
            r"row 2: fields 'model'/'tp'.*does not fit",
        ),
    ],
)
def test_malformed_rows_name_row_and_field(change, error, pattern):
    rows = [_row(), _row(**change)]
    with pytest.raises(error, match=pattern):
        calibrate(rows)


def test_csv_errors_name_the_line(tmp_path: pathlib.Path):
    path = tmp_path / "bad.csv"
    _write_csv(path, [_row(), _row(), _row(isl="x")])
    with pytest.raises(InvalidArgumentError, match=r"row 3 \(line 4 of bad.csv\): field 'isl'"):
        calibrate(path)


def test_bad_inputs():
    with pytest.raises(InvalidArgumentError, match="no points"):
        calibrate([])
    with pytest.raises(InvalidArgumentError, match="points must be"):
        calibrate(_row())  # one dict, not an iterable of rows
    with pytest.raises(InvalidArgumentError, match="points must be"):
        calibrate(42)
    with pytest.raises(InvalidArgumentError, match="cannot read points file"):
        calibrate("/no/such/file.csv")
    with pytest.raises(InvalidArgumentError, match=r"row 1: a point must be a mapping"):
        calibrate([["llama-3.1-8b", "h100"]])
    with pytest.raises(InvalidArgumentError, match="cannot fit.*max_num_seqs"):
        calibrate([_row()], fit=("mbu", "max_num_seqs"))
    with pytest.raises(InvalidArgumentError, match="time_limit_s"):
        calibrate([_row()], time_limit_s=0)
    # Nothing to fit: the base comes back.
    assert calibrate([_row()], fit=()) == constants_for("h100")


def test_bounded_inputs_fail_fast(tmp_path: pathlib.Path, monkeypatch: Any):
    import pdtp.calibration as cal

    # A device that never ends: refused before any read, naming what it is.
    if pathlib.Path("/dev/zero").exists():
        with pytest.raises(InvalidArgumentError, match="points file '/dev/zero' is a device"):
            calibrate("/dev/zero")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"model,gpu\n\0\0\0")
    with pytest.raises(InvalidArgumentError, match="not a CSV text file"):
        calibrate(binary)
    monkeypatch.setattr(cal, "MAX_POINTS", 3)
    with pytest.raises(InvalidArgumentError, match="more than 3 points"):
        calibrate([_row()] * 4)
    path = tmp_path / "many.csv"
    _write_csv(path, [_row()] * 4)
    with pytest.raises(InvalidArgumentError, match="more than 3 points"):
        calibrate(path)
    with pytest.raises(InvalidArgumentError, match="more than 3 points"):
        calibrate(iter([_row()] * 10**9))  # never materialised past the limit


class _Clock:
    """Stands in for ``time`` in pdtp.calibration: the code's own clock, set by the test, so
    the limit is checked against what the code measures, not against a loaded machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_time_limit_holds_on_many_points(monkeypatch: Any):
    import warnings

    import pdtp.calibration as cal

    rows = _synthetic_rows(TRUE)
    many = rows * (4000 // len(rows) + 1)
    clock = _Clock()
    monkeypatch.setattr(cal, "time", clock)
    # The limit passes while reading: a clear error at the next check (every 16 rows).
    reads = cal.load_points

    def slow_reads(points: Any, **kw: Any) -> Any:
        clock.now = 2.0  # the reading took past the 1 s limit
        return reads(points, **kw)

    monkeypatch.setattr(cal, "load_points", slow_reads)
    with pytest.raises(InvalidArgumentError, match="time limit while reading row 16;"):
        calibrate(many, time_limit_s=1.0)

    # The limit passes after reading: the fit gets no time, stops and says so.
    def reads_then_time_is_up(points: Any, **kw: Any) -> Any:
        out = reads(points, **kw)
        clock.now = 1.0  # exactly the deadline: no time left for the fit
        return out

    monkeypatch.setattr(cal, "load_points", reads_then_time_is_up)
    clock.now = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = calibrate(many, time_limit_s=1.0)
    assert isinstance(c, Constants)
    assert any(issubclass(w.category, cal.CalibrationTimeLimit) for w in caught)

    # With time left, the same fit completes: no warning (the cut above was the limit's).
    monkeypatch.setattr(cal, "load_points", reads)
    clock.now = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibrate(rows, time_limit_s=1e6)
    assert not any(issubclass(w.category, cal.CalibrationTimeLimit) for w in caught)


def test_point_predictions_are_predict_serving():
    row = _row(model="qwen3-32b", tp=2, isl=2048, osl=512, concurrency=32, ttft_ms=1.0)
    got = predict_point({**row, "output_tokens_per_s": 1.0})
    s = pdtp.predict_serving(
        "qwen3-32b", gpu="h100", tp=2, isl=2048, osl=512, concurrency=32, num_prompts=320
    )
    assert got["tpot_ms"] == pytest.approx(s.tpot_ms)
    assert got["ttft_ms"] == pytest.approx(s.ttft_ms)
    assert got["output_tokens_per_s"] == pytest.approx(s.output_tokens_per_s)


def test_offline_throughput_row_runs_the_engine_full():
    row = _row(concurrency=None, tpot_ms=None, isl=1000, osl=1000, output_tokens_per_s=1.0)
    got = predict_point(row)["output_tokens_per_s"]
    capped = predict_point({**row, "max_num_seqs": 16})["output_tokens_per_s"]
    assert capped < got
    busy = pdtp.predict_serving(
        "llama-3.1-8b", gpu="h100", tp=1, isl=1000, osl=1000, concurrency=16
    )
    assert capped == pytest.approx(busy.output_tokens_per_s, rel=0.1)


def test_predict_point_takes_parsed_points_and_overrides():
    (p,) = load_points([_row(ttft_ms=50.0)])
    assert isinstance(p, PerfPoint) and p.kinds == ("tpot_ms", "ttft_ms")
    assert set(predict_point(p)) == {"tpot_ms", "ttft_ms"}
    slow = predict_point(p, {"mbu": 0.4})["tpot_ms"]
    assert slow > predict_point(p)["tpot_ms"]


def test_lazy_export_is_callable_either_way():
    import pdtp.calibration

    assert "calibrate" in pdtp.__all__
    assert callable(pdtp.calibrate)
    assert pdtp.calibrate([_row()], fit=()) == constants_for("h100")


# ---- the accuracy benchmark (out of sample) ----------------------------------------------------


@pytest.fixture(scope="module")
def accuracy_module() -> Any:
    path = REPO / "benchmarks" / "accuracy.py"
    spec = importlib.util.spec_from_file_location("pdtp_benchmark_accuracy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_out_of_sample_accuracy(accuracy_module: Any, tmp_path: pathlib.Path, capsys: Any):
    """Rows predicted by constants fitted without them: a GPU type held out (MI325X takes
    its generation's constants from MI300X) and a (model, GPU) family held out (Llama-3.3-70B
    on H200) and a model held out (Qwen3-32B, whose 64 layers no other model has). Never the
    fit's own rows. The tables put v2, v3 before and v3 side by side, as the README does."""
    out = tmp_path / "accuracy.json"
    assert accuracy_module.main(["--quick", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| v2 AMD | v2 NVIDIA | v3 before AMD | v3 before NVIDIA | v3 AMD | v3 NVIDIA |" in text
    assert "| leave model out | TPOT |" in text and "| qwen3-32b | TPOT | NVIDIA |" in text
    result = json.loads(out.read_text())
    held = result["settings"]["model"]["tpot_ms/NVIDIA"]
    assert held["n"] >= 90 and held["median"] <= 0.10
    assert result["by_model"]["qwen3-32b"]["tpot_ms/NVIDIA"]["bias"] is not None
    assert result["v3_before"]["settings"]["model"]["tpot_ms/AMD"]["n"] > 300
    gpu = result["settings"]["gpu"]
    pair = result["settings"]["model_gpu"]
    assert gpu["tpot_ms/AMD"]["n"] > 80 and pair["tpot_ms/NVIDIA"]["n"] > 50
    assert gpu["tpot_ms/AMD"]["median"] <= 0.11
    assert gpu["output_tokens_per_s/AMD"]["median"] <= 0.10
    assert gpu["ttft_ms/AMD"]["median"] <= 0.25
    assert pair["tpot_ms/NVIDIA"]["median"] <= 0.10
    assert pair["output_tokens_per_s/NVIDIA"]["median"] <= 0.10
    # v1 (before) is reported next to it, from its stored run.
    assert result["settings"]["v1"]["tpot_ms/AMD"]["median"] > 0.15
    # The measured P/D runs are scored with constants fitted without their model, and the
    # rows pdtp cannot express are counted by reason, not dropped silently.
    disagg = result["disaggregated"]["model"]
    assert disagg["output_tokens_per_s/all"]["n"] >= 30
    # ... and through pdtp.evaluate (the user's path), with the invalid ones counted.
    evaluated = result["disaggregated_evaluate"]["model"]
    assert evaluated["output_tokens_per_s/all"]["n"] == disagg["output_tokens_per_s/all"]["n"]
    assert 0 <= evaluated["invalid"]["n"] < evaluated["output_tokens_per_s/all"]["n"]
    # ... and pdtp.solve's own plan for each run's pool, with how often it splits it alike.
    solved = result["disaggregated_solve"]["model"]
    assert solved["output_tokens_per_s/all"]["n"] == disagg["output_tokens_per_s/all"]["n"]
    assert 0 < solved["same_split"]["n"] <= solved["output_tokens_per_s/all"]["n"]
    assert result["skipped"]["speculative decoding (mtp)"] > 100
    assert result["disaggregated_runs"] + sum(result["skipped"].values()) > 300


def test_the_accuracy_benchmark_splits_and_scores_as_described(accuracy_module: Any) -> None:
    """Every expressible InferenceX row is loaded with its layout family; a P/D prediction
    follows its layouts (more decode workers serve more at the same concurrency) and the
    layout family split keys what it says."""
    skipped: Counter[str] = Counter()
    points = accuracy_module.load_all(skipped)
    families = {p.label("layout") for p in points}
    assert {"tp", "tp+ep"} <= families
    assert any(p.label("file") == accuracy_module.INFERENCEX_AGG for p in points)
    assert all(accuracy_module.layout_family(p) == p.label("layout") for p in points)
    runs = accuracy_module.load_disaggregated(skipped)
    assert runs and all(r["decode"].gpu.name != "gb300" for r in runs)
    from pdtp.calibration import fit_table

    table = fit_table(points[:200], max_iterations=5)
    run = max(runs, key=lambda r: r["decode"].concurrency or 0)
    base = accuracy_module.predict_disaggregated(run, table)
    more = accuracy_module.predict_disaggregated(
        {
            **run,
            "decode_workers": 4 * run["decode_workers"],
            "prefill_workers": 4 * run["prefill_workers"],
        },
        table,
    )
    assert more["tpot_ms"] < base["tpot_ms"]
    assert more["output_tokens_per_s"] > base["output_tokens_per_s"]
    # Little's law holds for the closed loop it predicts, less the run's drain (its last
    # requests finish with fewer in flight: a few per cent of a 10-request-per-client run).
    conc = run["decode"].concurrency
    osl = run["decode"].osl
    e2e_s = (base["ttft_ms"] + (osl - 1) * base["tpot_ms"]) / 1e3
    held = base["output_tokens_per_s"] * e2e_s / osl
    assert 0.95 * conc <= held <= conc * 1.0001
    # The median (steady) request does not wait for the first wave; the mean does.
    assert base["ttft_median_ms"] <= base["ttft_ms"]


@pytest.fixture(scope="module")
def decision_module() -> Any:
    path = REPO / "benchmarks" / "decision_accuracy.py"
    spec = importlib.util.spec_from_file_location("pdtp_benchmark_decision_accuracy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_decision_accuracy_scores_a_perfect_and_a_wrong_chooser(
    accuracy_module: Any, decision_module: Any
) -> None:
    """Predictions equal to the measurements choose the measured best every time (score 1);
    a chooser that prefers the slowest configuration scores below 1; the score is the
    measured tokens/s per GPU of the choice over the best within the limit."""
    points = [p for p in accuracy_module.load_all() if p.model.name == "llama-3.3-70b"]
    kinds = ("tpot_ms", "ttft_ms", "output_tokens_per_s")
    exact = [
        {k: math.nan if getattr(p, k) is None else float(getattr(p, k)) for k in kinds}
        for p in points
    ]
    ds = decision_module.decisions(points, exact, decision_module.TPOT_LIMITS_MS)
    assert len(ds) > 50
    assert all(d["score"] == pytest.approx(1.0) and d["meets_limit"] for d in ds)
    wrong = [{**e, "output_tokens_per_s": 1.0 / e["output_tokens_per_s"]} for e in exact]
    worse = decision_module.summary(
        decision_module.decisions(points, wrong, decision_module.TPOT_LIMITS_MS)
    )
    assert worse["all"]["median"] < 0.9
    # A chooser that thinks everything is fast picks configurations that miss the limit.
    fast = [{**e, "tpot_ms": 1.0} for e in exact]
    rash = decision_module.summary(
        decision_module.decisions(points, fast, decision_module.TPOT_LIMITS_MS)
    )
    assert rash["all"]["slo_misses"] > 0 and rash["all"]["worst"] == 0.0


def test_decision_accuracy_quick_run(decision_module: Any, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "decisions.json"
    assert decision_module.main(["--quick", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    s = result["splits"]["model"]["summary"]["llama-3.3-70b"]
    assert s["decisions"] > 50 and 0.0 <= s["worst"] <= s["median"] <= 1.0
    # P/D decisions: one per measured group and limit, by framework, both choosers scored.
    pd = result["disaggregated"]["summary"]
    assert pd["all"]["decisions"] >= 20
    assert set(pd) == {"all", "dynamo-sglang", "mori-sglang"}
    for v in pd.values():
        assert 0.0 <= v["worst"] <= v["median"] <= 1.0
        assert 0.0 <= v["evaluate_worst"] <= v["evaluate_median"] <= 1.0


def test_pd_runs_are_scored_through_evaluate_as_a_user_calls_it(accuracy_module: Any) -> None:
    """The P/D scoring's evaluate path is pdtp.evaluate itself (same numbers as a live call
    with the run's layouts, instance counts, model, GPU and constants), launched with the KV
    dtype the runs used, and it answers as a capacity at a TPOT limit should: a looser limit
    never serves less, more decode instances serve more where the decode side binds."""
    runs = accuracy_module.load_disaggregated()
    assert runs and all(r["decode"].model.kv_dtype == "fp8" for r in runs)
    assert {r["framework"] for r in runs} == {"dynamo-sglang", "mori-sglang"}

    class Defaults:
        def constants(self, gpu: Any, engine: str, release: str = "") -> Constants:
            return constants_for(gpu.name, engine=engine, release=release)

    table = Defaults()
    run = next(r for r in runs if r["framework"] == "dynamo-sglang" and r["decode_workers"] == 1)
    dec = run["decode"]
    got = accuracy_module.evaluate_disaggregated(run, table)
    live = pdtp.evaluate(
        dec.model,
        gpu=dec.gpu.name,
        workload=pdtp.Workload(
            isl=round(dec.isl), osl=round(dec.osl), ttft_ms=None, tpot_ms=run["measured"]["tpot_ms"]
        ),
        prefill_tp=run["prefill_layout_text"],
        prefill_instances=run["prefill_workers"],
        decode_tp=run["decode_layout_text"],
        decode_instances=run["decode_workers"],
        connector=f"sglang-nixl@{dec.engine_release}",
        constants=table.constants(dec.gpu, dec.engine, dec.engine_release),
        gpu_memory_utilization=dec.gpu_memory_utilization,
    )
    assert got["output_tokens_per_s"] == live.output_tokens_per_s
    assert got["ttft_ms"] == live.ttft_ms and got["valid"] == live.valid
    limits = [5.0, 20.0, 50.0, 200.0]
    served = [
        accuracy_module.evaluate_disaggregated(run, table, x)["output_tokens_per_s"] for x in limits
    ]
    assert served == sorted(served) and served[-1] > 0
    wide = {**run, "decode_workers": 4, "prefill_workers": 16 * run["prefill_workers"]}
    assert (
        accuracy_module.evaluate_disaggregated(wide, table, 50.0)["output_tokens_per_s"] > served[2]
    )
    # solve on the run's pool with its two layouts: where it splits the pool as the run did,
    # it plans exactly what evaluate rates that deployment (one pricing path); a TPOT limit
    # nothing meets plans nothing.
    same = 0
    for r in runs[:12]:
        planned = accuracy_module.solve_disaggregated(r, table)
        if planned["same_split"]:
            same += 1
            rated = accuracy_module.evaluate_disaggregated(r, table)
            assert planned["output_tokens_per_s"] == pytest.approx(rated["output_tokens_per_s"])
    assert same >= 3
    tight = {**run, "measured": {**run["measured"], "tpot_ms": 0.5}}
    assert accuracy_module.solve_disaggregated(tight, table) == {
        **accuracy_module.solve_disaggregated(tight, table),
        "feasible": False,
        "output_tokens_per_s": 0.0,
    }
    # Residuals are broken down by what the issue names; every run lands once per breakdown.
    loop = [accuracy_module.predict_disaggregated(r, table) for r in runs]
    rows = accuracy_module.disaggregated_breakdown(runs, loop)
    for by in (
        "framework/GPU",
        "decode layout",
        "prefill:decode GPUs",
        "concurrency",
        "side that binds (predicted)",
        "measured median TTFT",
    ):
        assert sum(r["n"] for r in rows if r["by"] == by) == len(runs)


def test_pd_residuals_are_split_by_the_side_that_binds(accuracy_module: Any) -> None:
    """The loop's binding side is read from its own limits: at the prefill workers'
    capacity the prefill side binds, at the decode ranks' most sequences the decode side,
    else the clients; a deployment starved of prefill workers is prefill-bound, one starved
    of decode ranks is decode-bound, and a lone client binds neither."""
    from dataclasses import replace
    from types import SimpleNamespace

    side = accuracy_module.binding_side
    point = {"requests_per_s": 5.0, "prefill_capacity_rps": 5.0, "batch": 1.0, "max_batch": 64.0}
    assert side(SimpleNamespace(**point)) == "prefill"
    assert side(SimpleNamespace(**{**point, "prefill_capacity_rps": 50.0})) == "clients"
    full = {**point, "prefill_capacity_rps": 50.0, "batch": 64.0}
    assert side(SimpleNamespace(**full)) == "decode"

    class Defaults:
        def constants(self, gpu: Any, engine: str, release: str = "") -> Constants:
            return constants_for(gpu.name, engine=engine, release=release)

    table = Defaults()
    runs = accuracy_module.load_disaggregated()
    run = max(runs, key=lambda r: r["decode"].concurrency or 0)
    starved = {**run, "prefill_workers": 1, "decode_workers": 8 * run["decode_workers"]}
    assert accuracy_module.predict_disaggregated(starved, table)["bound"] == "prefill"
    few = {**run, "prefill_workers": 16 * run["prefill_workers"], "decode_workers": 1}
    few["decode"] = replace(run["decode"], concurrency=1e6)
    assert accuracy_module.predict_disaggregated(few, table)["bound"] == "decode"
    lone = {**run, "decode": replace(run["decode"], concurrency=1)}
    assert accuracy_module.predict_disaggregated(lone, table)["bound"] == "clients"
    # The prefill side under load is judged on the runs whose clients queued, per prefill GPU.
    rates = accuracy_module.prefill_rates(runs, {"model": table})
    queued = {r["row_id"] for r in runs if r["measured"]["ttft_median_ms"] >= 1e4}
    assert queued and {row["run"] for row in rates} == queued
    assert all(row["measured"] > 0 and row["model"] > 0 for row in rates)
    # The decode step's error at the measured batch: every DP-attention decode run once, and
    # a measured TPOT 10 ms longer at the same batch is a gap 10 ms wider.
    dp = [r for r in runs if r["decode_layout"][2] > 1]
    gaps = accuracy_module.decode_step_gaps(runs, table)
    assert [g["run"] for g in gaps] == [r["row_id"] for r in dp]
    r = dp[0]
    m = r["measured"]
    slower = {
        **r,
        "measured": {
            **m,
            "tpot_ms": m["tpot_ms"] + 10.0,
            "output_tokens_per_s": m["output_tokens_per_s"] * m["tpot_ms"] / (m["tpot_ms"] + 10.0),
        },
    }
    (g,) = accuracy_module.decode_step_gaps([slower], table)
    assert g["gap_ms"] == pytest.approx(gaps[0]["gap_ms"] + 10.0)


def test_pd_decisions_score_a_perfect_and_a_wrong_chooser(
    accuracy_module: Any, decision_module: Any
) -> None:
    """A chooser that knows the measurements picks the measured best P/D run (and the
    deployment holding it) for every limit; one that prefers the slowest scores lower."""
    runs = accuracy_module.load_disaggregated()
    exact = [dict(r["measured"]) for r in runs]
    best_of: dict[tuple[str, float], float] = {}

    def per_gpu(r: dict[str, Any]) -> float:
        return r["measured"]["output_tokens_per_s"] / r["gpus"]

    def knows(sign: float) -> Any:
        def evaluated(run: dict[str, Any], limit: float) -> dict[str, Any]:
            # The best measured per-GPU throughput of the deployment within the limit.
            mine = [
                per_gpu(r)
                for r in runs
                if decision_module._pd_group(r) == decision_module._pd_group(run)
                and decision_module._deployment(r) == decision_module._deployment(run)
                and r["measured"]["tpot_ms"] <= limit
            ]
            v = max(mine) if mine else 0.0
            best_of[(decision_module._deployment(run), limit)] = v
            return {"output_tokens_per_s_per_gpu": sign * v, "valid": bool(mine)}

        return evaluated

    ds = decision_module.pd_decisions(runs, exact, knows(1.0), decision_module.TPOT_LIMITS_MS)
    assert len(ds) >= 20
    assert all(d["score"] == pytest.approx(1.0) for d in ds)
    assert all(d["evaluate_score"] == pytest.approx(1.0) for d in ds)
    slow = [{**e, "output_tokens_per_s": 1.0 / e["output_tokens_per_s"]} for e in exact]
    worse = decision_module.pd_summary(
        decision_module.pd_decisions(runs, slow, knows(-1.0), decision_module.TPOT_LIMITS_MS)
    )
    assert worse["all"]["median"] < 0.9 and worse["all"]["evaluate_median"] < 0.9


# ---- physically scaled fixed costs and engine releases (issue 22) ------------------------------


def test_a_model_of_another_depth_is_predicted_out_of_sample(reference_dir: pathlib.Path):
    """Qwen3-32B (64 layers, bf16, vLLM on H100) predicted by constants fitted on every other
    model's rows: its fixed costs must follow its own layers and kernels, not a per-step cost
    that stood in for the fitted models' 61 and 80 layers."""
    from pdtp.calibration import fit_table, predict_points

    points = load_points(reference_dir / "measured-serving.csv")
    points += load_points(reference_dir / "perf-points.csv")
    held = [p for p in points if p.model.name == "qwen3-32b" and p.model.weight_dtype == "bf16"]
    train = [p for p in points if p.model.name != "qwen3-32b"]
    assert len(held) > 50 and train
    table = fit_table(train, max_iterations=30)
    preds = predict_points(held, lambda p: table.constants(p.gpu, p.engine))
    errors = [abs(pr["tpot_ms"] / p.tpot_ms - 1) for p, pr in zip(held, preds) if p.tpot_ms]
    assert summarize(errors)["median"] <= 0.10
    # The per-step cost stays host work: at most its bound, whatever the fit would prefer.
    from pdtp.calibration import BOUNDS

    for gpu in {p.gpu for p in train}:
        assert table.constants(gpu, "vllm").step_overhead_s <= BOUNDS["step_overhead_s"][1] * 1.001


def test_deepseek_r1_held_out_follows_its_kernels_on_nvidia(accuracy_module: Any):
    """DeepSeek-R1 (61 layers, MLA + fused MoE, SGLang) predicted on H200/B200 by constants
    fitted on the dense models only: its fixed step cost must follow the kernels its layers
    launch. Counted at 10 per MoE layer ("about twice a dense FFN") it came out 19% over
    (median); measured, its fixed cost is 1.9x Llama-3.3-70B's per layer, what the MLA
    block and a fused MoE FFN launch. Its prompts' grouped expert GEMMs pad each expert's
    rows to whole tiles (about 2x their FLOPs at 1k tokens), at the default expert rate: no
    other MoE model's rows fit that rate, so the bias bound is 12% (10.1% at 30 iterations)."""
    from pdtp.calibration import fit_table, predict_points

    points = accuracy_module.load_all()
    held = [p for p in points if p.model.name == "deepseek-r1" and p.gpu.vendor == "NVIDIA"]
    table = fit_table([p for p in points if p.model.name != "deepseek-r1"], max_iterations=30)
    preds = predict_points(held, lambda p: table.constants(p.gpu, p.engine, p.engine_release))
    signed = [pr["tpot_ms"] / p.tpot_ms - 1 for p, pr in zip(held, preds) if p.tpot_ms]
    assert len(signed) > 150
    assert summarize([abs(e) for e in signed])["median"] <= 0.15
    assert abs(sorted(signed)[len(signed) // 2]) <= 0.12  # no large bias either way


def test_rows_carry_their_engine_release_and_median_ttft():
    rows = [
        {
            "model": "llama-3.1-8b",
            "gpu": "h100",
            "engine": "sglang",
            "tp": 1,
            "isl": 1024,
            "osl": 128,
            "concurrency": 4,
            "tpot_ms": 8.0,
            "ttft_ms": 90.0,
            "ttft_median_ms": 60.0,
            "engine_image": "lmsysorg/sglang:v0.5.9-cu130",
        }
    ]
    (p,) = load_points(rows)
    assert p.engine_release == "0.5.9" and p.ttft_median_ms == 60.0
    (q,) = load_points([{k: v for k, v in rows[0].items() if k != "engine_image"}])
    assert q.engine_release == "" and "ttft_median_ms" not in q.kinds  # scored, never fitted


def test_a_table_fits_factors_per_engine_release_range():
    """Rows of two releases of one engine, generated with the second release's kernels
    twice as fast: the fit finds a factor below 1 for that release, applies it to releases
    after it, and not to older or unrecorded ones."""
    from pdtp.calibration import MIN_RELEASE_ROWS, fit_table

    old = TRUE
    new = TRUE.replace(kernel_overhead_s=TRUE.kernel_overhead_s / 2)
    rows = []
    for c, release in ((old, ""), (new, "0.5.9")):
        for r in _synthetic_rows(c):
            rows.append({**r, "engine": "sglang", "engine_release": release})
    points = load_points(rows)
    assert sum(p.engine_release == "0.5.9" for p in points) >= MIN_RELEASE_ROWS
    table = fit_table(points, max_iterations=40)
    assert table.releases("sglang") == ["0.5.9"]
    gpu = points[0].gpu
    base = table.constants(gpu, "sglang").kernel_overhead_s
    assert table.constants(gpu, "sglang", "0.5.9").kernel_overhead_s < 0.8 * base
    assert table.constants(gpu, "sglang", "0.5.11").kernel_overhead_s == pytest.approx(
        table.constants(gpu, "sglang", "0.5.9").kernel_overhead_s
    )
    assert table.constants(gpu, "sglang", "0.5.4").kernel_overhead_s == base
    assert "no measured data" in table.release_note("sglang", "0.5.4")
    # A release with too few rows starts no range of its own.
    few = load_points([{**rows[0], "engine_release": "0.6.0"}])
    assert fit_table(points + few, max_iterations=5).releases("sglang") == ["0.5.9"]


def test_a_table_puts_the_first_waves_stall_in_the_mean_and_not_the_median():
    """Rows generated with an SGLang warm-up stall of 1.5 s that every run's first wave waits
    out: the table fits the steady terms on the median TTFT and finds the stall on the mean
    (not in the per-request overhead, which every steady request would then pay)."""
    from pdtp.calibration import fit_table, predict_points

    truth = TRUE.replace(first_wave_stall_s=1.5)
    rows = []
    for r in _synthetic_rows(truth):
        (p,) = load_points([{**r, "engine": "sglang"}])
        (pred,) = predict_points([p], truth)
        rows.append({**r, **pred, "engine": "sglang"})
    points = load_points(rows)
    assert all(p.ttft_median_ms is not None and p.num_prompts for p in points)
    # The stall moves the mean, never the median.
    (calm,) = predict_points([points[0]], truth.replace(first_wave_stall_s=0.0))
    assert calm["ttft_median_ms"] == pytest.approx(rows[0]["ttft_median_ms"])
    assert calm["ttft_ms"] < rows[0]["ttft_ms"]
    table = fit_table(points, max_iterations=40)
    fitted = table.constants(points[0].gpu, "sglang")
    assert fitted.first_wave_stall_s == pytest.approx(1.5, rel=0.2)
    assert fitted.api_overhead_s == pytest.approx(TRUE.api_overhead_s, rel=0.3)


def test_an_engines_kernel_factor_is_fitted_per_gpu_vendor():
    """SGLang rows generated with kernels 2x vLLM's on an AMD type and 1x on an NVIDIA type
    (DeepSeek-R1's fixed step cost is 3.4-3.9x Llama-3.3-70B's per layer on MI300X/MI325X and
    1.8-1.9x on H200/B200): the table finds a factor per vendor, which one factor for both
    engines' kernels cannot, and a type without rows takes its vendor's."""
    from pdtp.calibration import fit_table
    from pdtp.catalog import gpu as find_gpu

    rows = []
    for gpu, factor in (("h100", 1.0), ("mi300x", 2.0)):
        for engine, k in (("vllm", 1.0), ("sglang", factor)):
            truth = constants_for(gpu, engine=engine).replace(kernel_overhead_s=4e-6 * k)
            for model, tp, conc, isl in itertools.product(
                ("llama-3.1-8b", "qwen3-32b"), (1, 2), (1, 16, 64), (512, 4096)
            ):
                row = _row(model=model, gpu=gpu, engine=engine, tp=tp, concurrency=conc, isl=isl)
                rows.append({**row, **predict_point(row, truth)})
    table = fit_table(load_points(rows), max_iterations=40)

    def ratio(name: str) -> float:
        g = find_gpu(name)
        return table.constants(g, "sglang").kernel_overhead_s / (
            table.constants(g, "vllm").kernel_overhead_s
        )

    assert ratio("mi300x") == pytest.approx(2.0, rel=0.25)
    assert ratio("h100") == pytest.approx(1.0, rel=0.25)
    assert ratio("mi325x") == pytest.approx(ratio("mi300x"))  # no rows: its vendor's factor
    assert ratio("b200") == pytest.approx(ratio("h100"))


def test_b200_sglang_runs_poll_for_new_requests_as_their_scripts_launched_them(
    reference_dir: pathlib.Path,
):
    """The InferenceMAX/InferenceX B200 SGLang scripts pass ``--scheduler-recv-interval`` 10
    below 16 clients and 30 from 16 (10 at fp8 TP 4, 1 with DP attention); every other run
    polls every step. A polled prompt waits (R - 1) / 2 decode steps more: the median TTFT
    rises, the first wave (an idle engine) does not wait."""
    points = load_points(reference_dir / "measured-serving.csv")
    for p in points:
        b200_sglang = p.engine == "sglang" and p.gpu.name == "b200"
        expected = (30 if p.concurrency >= 16 else 10) if b200_sglang else 1
        if b200_sglang and p.model.weight_dtype == "fp8" and p.tp == 4:
            expected = 10
        assert p.scheduler_recv_interval == expected, p.where
    (row,) = load_points([_row(scheduler_recv_interval=30, engine="sglang", ttft_ms=200.0)])
    assert row.scheduler_recv_interval == 30
    base = dict(
        gpu="b200", tp=8, isl=1024, osl=1024, concurrency=32, engine="sglang", weight_dtype="fp8"
    )
    every = pdtp.predict_serving("deepseek-r1", **base)
    polled = pdtp.predict_serving("deepseek-r1", **base, scheduler_recv_interval=30)
    assert polled.ttft_median_ms > every.ttft_median_ms + 10 * every.tpot_ms
    assert polled.tpot_ms == pytest.approx(every.tpot_ms, rel=0.05)
    with pytest.raises(InvalidArgumentError, match="scheduler_recv_interval"):
        pdtp.predict_serving("deepseek-r1", **base, scheduler_recv_interval=0)


def test_the_experts_prompt_rate_is_fitted_on_moe_rows_only_and_moves_no_dense_model():
    """`moe_prefill_efficiency` multiplies only routed experts' GEMMs on prompt tokens: rows of a
    dense model do not inform it, and no value of it changes a dense model's prediction; a
    MoE model's TTFT grows as it falls."""
    from pdtp.calibration import _informed, predict_points

    dense = load_points([_row(ttft_ms=100.0)])
    moe = load_points(
        [_row(model="deepseek-r1", gpu="h200", tp=8, weight_dtype="fp8", ttft_ms=300.0)]
    )
    assert not _informed("moe_prefill_efficiency", dense)
    assert _informed("moe_prefill_efficiency", moe)
    assert not _informed(
        "moe_prefill_efficiency",
        load_points([_row(model="deepseek-r1", gpu="h200", tp=8, weight_dtype="fp8")]),
    )
    slow = GENERIC_C.replace(moe_prefill_efficiency=0.2)
    assert predict_points(dense, GENERIC_C) == predict_points(dense, slow)
    (fast_p,), (slow_p,) = predict_points(moe, GENERIC_C), predict_points(moe, slow)
    assert slow_p["ttft_median_ms"] > fast_p["ttft_median_ms"]


def test_an_all_reduce_latency_the_rows_cannot_tell_from_the_kernels_takes_its_vendors_anchor():
    """Rows of dense GQA models at one TP size pay the all-reduce latency and the per-kernel
    cost both per layer, so they cannot tell them apart: the table puts the latency at its
    vendor's physical anchor (not a value shared with the other vendor, nor one another model
    set) and the per-kernel cost carries the rest, so the rows are still met."""
    from pdtp.calibration import ANCHORS, fit_table, predict_points
    from pdtp.catalog import gpu as find_gpu

    rows = []
    for gpu in ("h100", "mi300x"):
        # Per-layer fixed cost mostly in the latency (30 µs), little in the kernels.
        truth = constants_for(gpu).replace(allreduce_latency_s=30e-6, kernel_overhead_s=2e-6)
        for model, conc, isl in itertools.product(
            ("llama-3.1-8b", "qwen3-32b"), (1, 8, 64), (512, 4096)
        ):
            row = _row(model=model, gpu=gpu, tp=8, concurrency=conc, isl=isl)
            rows.append({**row, **predict_point(row, truth)})
    points = load_points(rows)
    table = fit_table(points, max_iterations=40)
    for gpu, vendor in (("h100", "NVIDIA"), ("mi300x", "AMD")):
        alpha = table.constants(find_gpu(gpu), "vllm").allreduce_latency_s
        assert alpha == pytest.approx(ANCHORS["allreduce_latency_s"][vendor], rel=0.35)
    preds = predict_points(points, lambda p: table.constants(p.gpu, p.engine))
    errors = [abs(pr["tpot_ms"] / p.tpot_ms - 1) for p, pr in zip(points, preds)]
    assert summarize(errors)["median"] <= 0.03
