"""pdtp.calibrate: row parsing and errors, the row-kind predictions, the fit (recovers known
constants, improves a bad start, deterministic) and the accuracy benchmark's functions.
Nothing here touches the network; reference data comes from the ``reference_dir`` fixture."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import pathlib
import sys
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

TRUE = Constants(
    mbu=0.72,
    mfu_prefill=0.42,
    mfu_decode=0.5,
    step_overhead_s=2.2e-3,
    allreduce_latency_s=18e-6,
    ttft_queue_factor=2.4,
)
FIT = ("mbu", "mfu_prefill", "step_overhead_s", "allreduce_latency_s", "ttft_queue_factor")


def _synthetic_rows(constants: Constants) -> list[dict[str, Any]]:
    rows = []
    shapes = (("qwen3-32b", (1, 2, 4, 8)), ("llama-3.1-8b", (1, 2)))
    for (model, tps), isl, osl, conc in itertools.product(
        shapes, (512, 2048, 4096), (128, 1024), (1, 8, 64)
    ):
        for tp in tps:
            row = _row(model=model, tp=tp, isl=isl, osl=osl, concurrency=conc, tpot_ms=1.0)
            row["ttft_ms"] = 1.0
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
    # TPOT rows only: nothing in them depends on ttft_queue_factor.
    rows = [{k: v for k, v in r.items() if k != "ttft_ms"} for r in _synthetic_rows(TRUE)]
    base = constants_for("h100")
    fitted = calibrate(rows, fit=("mbu", "ttft_queue_factor"))
    assert fitted.ttft_queue_factor == base.ttft_queue_factor
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
    assert d.tpot_ms > 0


# ---- the reference CSV ----------------------------------------------------------------------


def test_improves_a_bad_start_on_the_reference(reference_dir: pathlib.Path):
    path = reference_dir / "perf-points.csv"
    bad = Constants(mbu=0.35, mfu_prefill=0.15, step_overhead_s=8e-3, ttft_queue_factor=6.0)
    before = _median_error(path, bad)
    fitted = calibrate(path, base=bad)
    after = _median_error(path, fitted)
    assert after < 0.5 * before
    assert _median_error(path, fitted, "tpot_ms") < 0.15
    # Only the fitted constants moved.
    assert fitted.reserve_bytes == bad.reserve_bytes
    assert fitted.max_num_seqs == bad.max_num_seqs


def test_defaults_meet_the_accuracy_goals(reference_dir: pathlib.Path):
    points = load_points(reference_dir / "perf-points.csv")
    nvidia = [p for p in points if p.gpu.vendor == "NVIDIA"]
    mi300x = [p for p in points if p.gpu.name == "mi300x"]
    assert _median_error(nvidia, None, "tpot_ms") <= 0.15
    assert _median_error(mi300x, None, "output_tokens_per_s") <= 0.25


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
    # vLLM 0.8.3 ran at most 256 sequences; vLLM 0.12 rows keep the constants' cap.
    assert all(p.max_num_seqs == 256 for p in amd)
    assert first.max_num_seqs is None


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
    assert p.max_num_seqs is None
    (p,) = load_points([{**base, "max_num_seqs": "64"}])
    assert p.max_num_seqs == 64
    (p,) = load_points([{**base, "kv_dtype": "fp8_e4m3", "weight_dtype": "fp8"}])
    assert (p.model.kv_dtype, p.model.weight_dtype) == ("fp8", "fp8")
    (p,) = load_points([_row(model="meta-llama/Llama-3.1-8B")])  # an HF id
    assert p.model.name == "llama-3.1-8b"


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
    # Nothing to fit: the base comes back.
    assert calibrate([_row()], fit=()) == constants_for("h100")


# ---- predictions agree with the public API -----------------------------------------------------


def test_tpot_row_is_decode_step_plus_prefill_share():
    row = _row(model="qwen3-32b", tp=2, isl=2048, osl=512, concurrency=32)
    got = predict_point(row)["tpot_ms"]
    step = pdtp.predict_decode("qwen3-32b", gpu="h100", tp=2, isl=2048, osl=512, batch=32)
    prefill = pdtp.predict_prefill("qwen3-32b", gpu="h100", tp=2, isl=2048).prefill_ms
    one = pdtp.predict_prefill("qwen3-32b", gpu="h100", tp=2, isl=1).prefill_ms
    assert got == pytest.approx(step.tpot_ms + 32 / 512 * (prefill - one))


def test_ttft_row_is_queue_factor_times_prefill():
    c = constants_for("h100").replace(ttft_queue_factor=2.5)
    got = predict_point(_row(ttft_ms=100.0), c)["ttft_ms"]
    prefill = pdtp.predict_prefill("llama-3.1-8b", gpu="h100", tp=1, isl=1024, constants=c)
    assert got == pytest.approx(2.5 * prefill.prefill_ms)


def test_throughput_row_is_one_instance_at_max_batch():
    row = _row(concurrency=None, tpot_ms=None, isl=1000, osl=1000, output_tokens_per_s=1.0)
    got = predict_point(row)["output_tokens_per_s"]
    kw: dict[str, Any] = {"gpu": "h100", "tp": 1}
    b = pdtp.predict_decode("llama-3.1-8b", isl=1000, osl=1000, batch=1, **kw).max_batch
    step = pdtp.predict_decode("llama-3.1-8b", isl=1000, osl=1000, batch=b, **kw).tpot_ms / 1e3
    prefill = pdtp.predict_prefill("llama-3.1-8b", isl=1000, **kw).prefill_ms / 1e3
    assert got == pytest.approx(1000 / (prefill + 1000 * step / b))
    capped = predict_point({**row, "max_num_seqs": 16})["output_tokens_per_s"]
    assert capped < got


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


# ---- the accuracy benchmark -----------------------------------------------------------------


@pytest.fixture(scope="module")
def accuracy_module() -> Any:
    path = REPO / "benchmarks" / "accuracy.py"
    spec = importlib.util.spec_from_file_location("pdtp_benchmark_accuracy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_accuracy_benchmark_runs_on_reference(
    accuracy_module: Any, reference_dir: pathlib.Path, tmp_path: pathlib.Path, capsys: Any
):
    path = reference_dir / "perf-points.csv"
    first, second = accuracy_module.split_halves(load_points(path))
    assert abs(len(first) - len(second)) <= 1
    assert {p.row for p in first}.isdisjoint({p.row for p in second})

    result = accuracy_module.run(path)
    assert list(result["groups"]) == ["NVIDIA", "MI300X"]
    nvidia = result["groups"]["NVIDIA"]
    for setting in accuracy_module.SETTINGS:
        assert nvidia[setting]["tpot_ms"]["n"] == nvidia["default"]["tpot_ms"]["n"] > 50
    assert all(g["met"] for g in result["goals"]), result["goals"]

    table = accuracy_module.render_markdown(result)
    assert "| TPOT | NVIDIA |" in table and "| throughput | MI300X |" in table

    out = tmp_path / "accuracy.json"
    assert accuracy_module.main(["--reference", str(path), "--json", str(out)]) == 0
    assert "| kind | group |" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["groups"]["MI300X"]["default"]["output_tokens_per_s"]["n"] == 4
    assert accuracy_module.main(["--reference", str(tmp_path / "missing.csv")]) == 2
