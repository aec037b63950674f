"""``pdtp.sweep`` and ``pdtp sweep``: every row equals ``pdtp.solve`` (the exact oracle and
CP-SAT), parallel equals serial, output files resume after a kill, Ray runs the same sweep."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pdtp
import pdtp.sweeps
from pdtp.cli import main
from pdtp.errors import InfeasibleError, InvalidArgumentError

SW = pdtp.sweeps

# Budgets around every TP size boundary, plus large ones (where the infeasibility memo of
# reasons is shared across budgets).
BUDGETS = [1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 64, 100, 127, 256, 512]
GPUS = ["mi300x", "h100", "a100"]


PLAN_KEYS = (
    "status",
    "mode",
    "aggregated_layout",
    "aggregated_instances",
    "prefill_layout",
    "prefill_tp",
    "prefill_instances",
    "decode_layout",
    "decode_tp",
    "decode_instances",
    "gpus_used",
    "requests_per_s",
    "output_tokens_per_s",
    "ttft_ms",
    "tpot_ms",
    "decode_batch",
    "concurrency",
    "prefill_capacity_rps",
    "decode_capacity_rps",
    "bottleneck",
)


def plan_fields(p: pdtp.Plan) -> dict:
    """A plan's sweep columns, from the Plan `solve` returns (any mode and layout)."""
    agg, pre, dec = p.aggregated, p.prefill, p.decode
    return {
        "status": p.status,
        "mode": p.serving,
        "aggregated_layout": str(agg.layout) if agg else None,
        "aggregated_instances": agg.instances if agg else None,
        "prefill_layout": str(pre.layout) if pre else None,
        "prefill_tp": pre.tp if pre else None,
        "prefill_instances": pre.instances if pre else None,
        "decode_layout": str(dec.layout) if dec else None,
        "decode_tp": dec.tp if dec else None,
        "decode_instances": dec.instances if dec else None,
        "gpus_used": p.gpus_used,
        "requests_per_s": p.requests_per_s,
        "output_tokens_per_s": p.output_tokens_per_s,
        "ttft_ms": p.ttft_ms,
        "tpot_ms": p.tpot_ms,
        "decode_batch": p.decode_batch,
        "concurrency": p.concurrency,
        "prefill_capacity_rps": p.prefill_capacity_rps,
        "decode_capacity_rps": p.decode_capacity_rps,
        "bottleneck": p.bottleneck,
    }


def row_fields(r: dict) -> dict:
    return {k: r[k] for k in PLAN_KEYS}


@pytest.fixture(scope="module")
def grid_rows() -> list[dict]:
    """The whole catalog x 3 GPU types x 22 budgets, two connectors (5,808 scenarios)."""
    return pdtp.sweep(
        "all", gpus=BUDGETS, gpu=GPUS, connector=["moriio", "nixl"], workers=1, as_frame=False
    )


def _solve_kwargs(r: dict) -> dict:
    return {
        "gpu": r["gpu"],
        "connector": r["connector"],
        "workload": pdtp.Workload(
            isl=r["isl"], osl=r["osl"], ttft_ms=r["slo_ttft_ms"], tpot_ms=r["slo_tpot_ms"]
        ),
        "max_tp": r["max_tp"],
        # solve's defaults: mode auto, the default layouts (what the sweep plans too).
    }


def _compare(r: dict, method: str) -> None:
    try:
        plan = pdtp.solve(r["model"], r["gpus"], method=method, **_solve_kwargs(r))
    except InfeasibleError as e:
        assert r["status"] == "INFEASIBLE", r
        assert r["reason"] == str(e)
        assert r["mode"] is None and r["requests_per_s"] is None
        return
    assert r["status"] == "OPTIMAL", (r, plan)
    assert row_fields(r) == plan_fields(plan)
    assert r["reason"] is None


def test_grid_shape_and_order(grid_rows):
    n_models = len(pdtp.models())
    assert len(grid_rows) == n_models * len(GPUS) * len(BUDGETS) * 2
    keys = [SW.scenario_key(r) for r in grid_rows]
    assert len(set(keys)) == len(keys)
    # Grid order: models, GPU types, workloads, connectors, then budgets ascending.
    first = grid_rows[: len(BUDGETS)]
    assert [r["gpus"] for r in first] == BUDGETS
    assert {(r["model"], r["gpu"], r["connector"]) for r in first} == {
        (pdtp.models()[0].name, GPUS[0], "moriio")
    }
    assert tuple(grid_rows[0]) == SW.COLUMNS
    statuses = {r["status"] for r in grid_rows}
    assert statuses == {"OPTIMAL", "INFEASIBLE"}


def test_rows_equal_the_exact_oracle(grid_rows):
    rng = random.Random(5)
    feasible = [r for r in grid_rows if r["status"] == "OPTIMAL"]
    infeasible = [r for r in grid_rows if r["status"] != "OPTIMAL"]
    for r in rng.sample(feasible, 80) + rng.sample(infeasible, 30):
        _compare(r, "enumerate")


def test_rows_equal_cpsat(grid_rows):
    rng = random.Random(11)
    feasible = [r for r in grid_rows if r["status"] == "OPTIMAL"]
    for r in rng.sample(feasible, 40):
        _compare(r, "cpsat")
    # Every mode and layout kind the sweep picks is in the sample it checks.
    kinds = {(r["mode"], r["aggregated_layout"] or r["decode_layout"]) for r in feasible}
    assert {m for m, _ in kinds} == {"agg", "disagg"}
    assert any("dp" in layout for _, layout in kinds)


def test_infeasible_reasons_match_solve_for_every_distinct_reason(grid_rows):
    # One scenario per (model, gpu, connector, reason), including the memoised large budgets.
    seen: dict[tuple, dict] = {}
    for r in grid_rows:
        if r["status"] == "INFEASIBLE":
            seen.setdefault((r["model"], r["gpu"], r["connector"], r["reason"]), r)
    assert len(seen) > 20
    for r in seen.values():
        _compare(r, "enumerate")
    # The largest budgets of a model that never fits share one memoised reason: check each.
    big = [r for r in grid_rows if r["status"] == "INFEASIBLE" and r["gpus"] >= 100]
    assert big
    for r in big[:12]:
        _compare(r, "enumerate")


def test_other_workloads_connectors_and_limits():
    rows = pdtp.sweep(
        ["llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v2-lite", "llama-2-13b"],
        gpus=[2, 6, 8, 10, 16, 40, 96],
        gpu=["h200", "b200"],
        workloads=[
            pdtp.Workload(isl=8192, osl=256, ttft_ms=800, tpot_ms=20),
            {"isl": 512, "osl": 2048, "ttft_ms": None, "tpot_ms": 8},
        ],
        connector=["moriio", "nixl-legacy"],
        max_tp=16,
        workers=1,
        as_frame=False,
    )
    assert len(rows) == 4 * 7 * 2 * 2 * 2
    assert {r["max_tp"] for r in rows} == {16}
    assert any(r["status"] == "INFEASIBLE" for r in rows)
    assert any(r["status"] == "OPTIMAL" for r in rows)
    for r in rows:
        _compare(r, "enumerate")


def test_max_acks_is_applied():
    rows = pdtp.sweep(
        "qwen3-30b-a3b", gpus=[16, 64], gpu="mi300x", max_acks=1, workers=1, as_frame=False
    )
    for r in rows:
        plan = pdtp.solve(
            r["model"],
            r["gpus"],
            gpu="mi300x",
            max_acks=1,
            method="enumerate",
        )
        assert row_fields(r) == plan_fields(plan)
        if r["mode"] == "disagg":
            assert r["decode_tp"] <= r["prefill_tp"]


def test_rule_blind_columns(grid_rows):
    """The rule-blind columns: the plan itself when the connector's pair rules cost
    nothing, else a better split whose layouts the rules refuse."""
    from pdtp.catalog import resolve_model
    from pdtp.layout import Layout
    from pdtp.planning.plan import layout_rules

    checked = 0
    for r in grid_rows:
        if r["rule_blind_requests_per_s"] is None:
            assert r["status"] == "INFEASIBLE"
            continue
        if r["status"] == "OPTIMAL":
            assert r["rule_blind_requests_per_s"] >= r["requests_per_s"]
        if r["rule_blind_valid"]:
            own = (r["prefill_layout"], r["decode_layout"])
            if r["mode"] == "agg":
                own = (r["aggregated_layout"], None)
            assert (r["rule_blind_prefill_layout"], r["rule_blind_decode_layout"]) == own
            assert r["rule_blind_mode"] == r["mode"]
            assert r["rule_blind_requests_per_s"] == r["requests_per_s"]
        elif checked < 100:
            checked += 1
            assert r["rule_blind_mode"] == "disagg"
            broken, _ = layout_rules(
                resolve_model(r["model"]),
                Layout.parse(r["rule_blind_prefill_layout"]),
                Layout.parse(r["rule_blind_decode_layout"]),
                r["connector"],
                None,
            )
            assert broken, r
    assert checked > 0  # the connectors' pair rules do reject some rule-blind optima


def test_parallel_equals_serial():
    kw = dict(gpus=range(1, 65), gpu=["mi300x", "h100"], chunk_size=100, as_frame=False)
    models = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen3-235b-a22b"]
    serial = pdtp.sweep(models, workers=1, **kw)
    parallel = pdtp.sweep(models, workers=2, **kw)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "solve_ms"} for r in rows]  # noqa: E731
    assert strip(parallel) == strip(serial)


def test_progress_reports_every_chunk():
    calls = []
    pdtp.sweep(
        "llama-3.1-8b",
        gpus=range(1, 101),
        workers=1,
        chunk_size=25,
        progress=lambda d, t: calls.append((d, t)),
        as_frame=False,
    )
    assert calls == [(0, 100), (25, 100), (50, 100), (75, 100), (100, 100)]


def test_dataframe_and_dicts():
    pd = pytest.importorskip("pandas")
    df = pdtp.sweep(["llama-3.1-8b", "deepseek-v3"], gpus=[1, 8, 64], gpu="h100", workers=1)
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == list(SW.COLUMNS)
    assert len(df) == 6
    assert str(df["prefill_tp"].dtype) == "Int64"
    assert df["requests_per_s"].dtype.kind == "f"
    # deepseek-v3 on one H100 (row 3): no plan, empty plan columns.
    assert df.loc[0, "status"] == "OPTIMAL" and df.loc[0, "mode"] == "agg"
    assert df.loc[3, "status"] == "INFEASIBLE" and pd.isna(df.loc[3, "prefill_tp"])


def test_list_of_dicts_without_pandas(monkeypatch):
    real = SW._optional

    def no_pandas(name):
        if name == "pandas":
            raise ImportError(name)
        return real(name)

    monkeypatch.setattr(SW, "_optional", no_pandas)
    rows = pdtp.sweep("llama-3.1-8b", gpus=[4], workers=1)
    assert isinstance(rows, list) and rows[0]["status"] == "OPTIMAL"
    with pytest.raises(InvalidArgumentError, match="pandas"):
        pdtp.sweep("llama-3.1-8b", gpus=[4], workers=1, as_frame=True)


def test_the_module_does_not_shadow_the_function():
    import pdtp.sweeps

    rows = pdtp.sweep("llama-3.1-8b", gpus=[4], workers=1, as_frame=False)
    assert rows[0]["gpus"] == 4


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"gpus": 0}, InvalidArgumentError),
        ({"gpus": []}, InvalidArgumentError),
        ({"gpus": [4], "backend": "spark"}, InvalidArgumentError),
        ({"gpus": [4], "workers": 0}, InvalidArgumentError),
        ({"gpus": [4], "output": "x.xlsx"}, InvalidArgumentError),
        ({"gpus": [4], "gpu": "tpu-v9"}, pdtp.UnknownNameError),
        ({"gpus": [4], "connector": "nccl"}, pdtp.UnknownNameError),
        ({"gpus": [4], "gpu_memory_utilization": 1.5}, InvalidArgumentError),
        ({"gpus": [4], "workloads": {"isl": 0}}, InvalidArgumentError),
        ({"gpus": [4.5]}, TypeError),
    ],
)
def test_bad_arguments(kwargs, error, tmp_path):
    if "output" in kwargs:
        kwargs["output"] = str(tmp_path / kwargs["output"])
    kwargs.setdefault("workers", 1)
    with pytest.raises(error):
        pdtp.sweep("llama-3.1-8b", **kwargs)


# ---- resumable output -----------------------------------------------------------------------

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"]


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "solve_ms"} for r in rows]


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet"])
def test_resume_skips_finished_scenarios(tmp_path, ext):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"sweep{ext}"
    fresh = pdtp.sweep(MODELS, gpus=range(1, 41), gpu="h100", workers=1, as_frame=False)
    half = pdtp.sweep(
        MODELS[:2],
        gpus=range(1, 41),
        gpu="h100",
        workers=1,
        output=out,
        chunk_size=16,
        as_frame=False,
    )
    assert len(half) == 80
    calls = []
    full = pdtp.sweep(
        MODELS,
        gpus=range(1, 41),
        gpu="h100",
        workers=1,
        output=out,
        chunk_size=16,
        progress=lambda d, t: calls.append((d, t)),
        as_frame=False,
    )
    assert calls[0] == (80, 120)  # the first 80 came from the file
    assert calls[-1] == (120, 120)
    assert _strip(full) == _strip(fresh)
    on_disk = SW.read_rows(out)
    assert len(on_disk) == 120
    assert len({SW.scenario_key(r) for r in on_disk}) == 120
    assert sorted(_strip(on_disk), key=SW.scenario_key) == sorted(
        _strip(fresh), key=SW.scenario_key
    )
    # Nothing left to do: a third run reads everything back, computes nothing.
    calls.clear()
    again = pdtp.sweep(
        MODELS,
        gpus=range(1, 41),
        gpu="h100",
        workers=1,
        output=out,
        progress=lambda d, t: calls.append((d, t)),
        as_frame=False,
    )
    assert calls == [(120, 120)]
    assert _strip(again) == _strip(fresh)
    if ext == ".parquet":
        assert not (tmp_path / "sweep.parquet.parts").exists()


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_torn_last_line_is_repaired(tmp_path, ext):
    out = tmp_path / f"s{ext}"
    pdtp.sweep("llama-3.1-8b", gpus=range(1, 11), workers=1, output=out, as_frame=False)
    with out.open("a", encoding="utf-8") as f:
        f.write(
            "llama-3.1-8b,mi300x,moriio,2048,512,2000.0,50.0,8,11,OPTI"
            if ext == ".csv"
            else '{"model": "llama-3.1-8b", "gpu": "mi3'
        )
    with pytest.warns(SW.SweepFileWarning, match=rf"{out.name}, line \d+: a torn last line"):
        rows = pdtp.sweep("llama-3.1-8b", gpus=range(1, 21), workers=1, output=out, as_frame=False)
    assert [r["gpus"] for r in rows] == list(range(1, 21))
    assert len(SW.read_rows(out)) == 20


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_file_from_another_version_is_refused_and_kept(tmp_path, ext):
    out = tmp_path / f"old{ext}"
    if ext == ".csv":
        out.write_text("model,gpu,gpus\nx,y,1\n")
    else:
        pa = pytest.importorskip("pyarrow")
        pytest.importorskip("pyarrow.parquet").write_table(pa.table({"model": ["x"]}), out)
    before = out.read_bytes()
    with pytest.raises(InvalidArgumentError, match="columns"):
        pdtp.sweep("llama-3.1-8b", gpus=[4], workers=1, output=out)
    assert out.read_bytes() == before


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import pdtp
    seen = []
    def progress(done, total):
        seen.append(done)
        if len(seen) == 4:  # after three chunks were written: die without cleanup
            os.kill(os.getpid(), signal.SIGKILL)
    pdtp.sweep(["llama-3.1-8b", "llama-3.1-70b"], gpus=range(1, 201), gpu="h100",
               workers=int(sys.argv[2]), chunk_size=50, output=sys.argv[1], progress=progress)
    """
)


@pytest.mark.parametrize("ext, workers", [(".csv", 1), (".parquet", 1), (".jsonl", 2)])
def test_killed_sweep_loses_nothing(tmp_path, ext, workers):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"killed{ext}"
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:  # a file, not a pipe: workers may outlive the parent briefly
        proc = subprocess.run(
            [sys.executable, "-c", KILL_SCRIPT, str(out), str(workers)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=120,
        )
    assert proc.returncode == -9, log.read_text()
    assert len(SW.read_rows(out)) >= 150  # three chunks of 50 survived the kill
    calls = []
    rows = pdtp.sweep(
        ["llama-3.1-8b", "llama-3.1-70b"],
        gpus=range(1, 201),
        gpu="h100",
        workers=1,
        chunk_size=50,
        output=out,
        progress=lambda d, t: calls.append(d),
        as_frame=False,
    )
    assert calls[0] >= 150
    fresh = pdtp.sweep(
        ["llama-3.1-8b", "llama-3.1-70b"], gpus=range(1, 201), gpu="h100", workers=1, as_frame=False
    )
    assert _strip(rows) == _strip(fresh)
    assert len(SW.read_rows(out)) == 400


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_forked_process_does_not_hold_the_output_lock(tmp_path):
    # A forked sweep worker inherits the lock's descriptor, and an flock stays held while any
    # copy is open: a worker outliving a killed sweep by a moment would hold the output
    # against the rerun that resumes it. The child closes its copy as it is forked.
    out = tmp_path / "held.jsonl"
    lock = os.path.realpath(tmp_path / "held.jsonl.lock")
    store = SW.Store(out)
    store.open()
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: which of its descriptors name the lock file?
            held = [f for f in os.listdir("/proc/self/fd") if _names(f"/proc/self/fd/{f}", lock)]
            os.write(w, b"held" if held else b"free")
            os._exit(0)
        os.close(w)
        seen = os.read(r, 16)
        os.waitpid(pid, 0)
        os.close(r)
        # The parent still holds it: a second writer is refused.
        with pytest.raises(pdtp.OutputFileError, match="being written by another pdtp sweep"):
            SW.Store(out).open()
    finally:
        store.close()
    assert seen == b"free"


def _names(fd_link: str, path: str) -> bool:
    with contextlib.suppress(OSError):
        return os.path.realpath(fd_link) == path
    return False


# ---- Ray --------------------------------------------------------------------------------------


def test_ray_backend_equals_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        kw = dict(gpus=range(1, 49), gpu=["mi300x", "h100"], chunk_size=40, as_frame=False)
        models = ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"]
        calls = []
        remote = pdtp.sweep(models, backend="ray", progress=lambda d, t: calls.append(d), **kw)
        local = pdtp.sweep(models, workers=1, **kw)
        assert _strip(remote) == _strip(local)
        assert calls[-1] == len(local) and len(calls) > 2
    finally:
        ray.shutdown()


def test_ray_missing_is_a_clear_error(monkeypatch):
    real = SW._optional

    def no_ray(name):
        if name == "ray":
            raise ImportError(name)
        return real(name)

    monkeypatch.setattr(SW, "_optional", no_ray)
    with pytest.raises(InvalidArgumentError, match=r"pdtp\[ray\]"):
        pdtp.sweep("llama-3.1-8b", gpus=[4], backend="ray")


# ---- helpers: ranges, grid files, progress bar --------------------------------------------------


def test_parse_ints():
    assert SW.parse_ints("1-4") == [1, 2, 3, 4]
    assert SW.parse_ints("8,16, 32") == [8, 16, 32]
    assert SW.parse_ints("8-32:8,64") == [8, 16, 24, 32, 64]
    assert SW.parse_ints(["1-2", 5]) == [1, 2, 5]
    with pytest.raises(InvalidArgumentError, match="ranges"):
        SW.parse_ints("1..8")


def test_progress_bar_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    SW.ProgressBar(quiet)(5, 10)
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = SW.ProgressBar(tty)
    bar(0, 1000)
    bar(1000, 1000)
    text = tty.getvalue()
    assert "1,000/1,000" in text and "100.0%" in text and "/s" in text and "ETA" in text
    assert text.endswith("\n")


# ---- the CLI -------------------------------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_sweep_to_file_and_resume(capsys, tmp_path):
    out = tmp_path / "s.csv"
    args = [
        "sweep",
        "--models",
        "llama-3.1-8b,llama-3.1-70b",
        "--gpus",
        "1-16",
        "--gpu",
        "mi300x,h200",
        "--workers",
        "1",
        "-o",
        str(out),
    ]
    code, text, err = run(capsys, *args)
    assert code == 0, err
    assert "64 scenarios" in text and str(out) in text
    assert err == ""  # no progress bar when stderr is not a terminal
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 64 and rows[0]["model"] == "llama-3.1-8b"  # the order given
    code, text, _ = run(capsys, *args)
    assert code == 0 and "64 already in" in text and "0 solved" in text


def test_cli_sweep_stdout_csv_and_jsonl(capsys):
    code, text, _ = run(
        capsys,
        "sweep",
        "--models",
        "llama-3.1-8b",
        "--gpus",
        "4,8",
        "--isl",
        "1024,4096",
        "--tpot",
        "none",
        "--workers",
        "1",
    )
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["isl"], r["gpus"]) for r in rows] == [
        ("1024", "4"),
        ("1024", "8"),
        ("4096", "4"),
        ("4096", "8"),
    ]
    assert {r["slo_tpot_ms"] for r in rows} == {""}
    code, text, _ = run(
        capsys,
        "sweep",
        "--models",
        "llama-3.1-8b",
        "--gpus",
        "4",
        "--json",
        "--connector",
        "moriio,nixl",
        "--workers",
        "1",
    )
    lines = [json.loads(x) for x in text.splitlines()]
    assert [x["connector"] for x in lines] == ["moriio", "nixl"]


def test_cli_sweep_grid_files(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("yaml")
    Path("grid.yaml").write_text(
        "models: [llama-3.1-8b, deepseek-v3]\ngpus: 8-24:8\ngpu: h200\n"
        "workloads:\n  - {isl: 2048, osl: 512}\n  - {isl: 8192, osl: 128, tpot_ms: 30}\n"
        "output: out.jsonl\nworkers: 1\n"
    )
    code, _, err = run(capsys, "sweep", "grid.yaml")
    assert code == 0, err
    rows = SW.read_rows("out.jsonl")
    assert len(rows) == 2 * 3 * 2
    Path("grid.toml").write_text(
        'models = "llama-3.1-8b"\ngpus = [4, 8]\ngpu = ["mi300x", "b200"]\nosl = [128, 1024]\n'
        "workers = 1\n"
    )
    code, _, err = run(capsys, "sweep", "grid.toml", "--gpus", "16", "-o", "t.csv")
    assert code == 0, err
    rows = SW.read_rows("t.csv")
    assert {r["gpus"] for r in rows} == {16} and len(rows) == 4  # the flag overrides the file
    Path("bad.yaml").write_text("modles: all\ngpus: 4\n")
    code, _, err = run(capsys, "sweep", "bad.yaml")
    assert code == 2 and "modles" in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["sweep", "--models", "llama-3.1-8b"], "--gpus"),
        (["sweep", "--gpus", "4", "-o", "x.xlsx"], ".csv"),
        (["sweep", "--gpus", "four"], "ranges"),
        (["sweep", "--gpus", "4", "--models", "nope-1b"], "unknown model"),
        (["sweep", "grid.ini", "--gpus", "4"], ".toml"),
    ],
)
def test_cli_sweep_usage_errors(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2 and needle in err


# ---- import cost ---------------------------------------------------------------------------------


def test_importing_pdtp_and_sweep_is_light():
    code = (
        "import sys, pdtp, pdtp.sweeps; pdtp.sweep\n"
        "heavy = [m for m in ('pandas', 'pyarrow', 'matplotlib', 'ray', 'yaml', 'ortools')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


# ---- the benchmark scripts run (on a tiny grid) -------------------------------------------------


def _load_script(name: str):
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rule_blind_report_script(tmp_path, capsys):
    out = tmp_path / "rb.md"
    # On AMD GPUs: MoRIIO pairs nothing on NVIDIA ones (its worker does not start there).
    _load_script("rule_blind").main(["--gpus", "1-24", "--gpu", "mi300x", "--out", str(out)])
    text = out.read_text()
    assert "## Headline" in text and "## moriio" in text and "## nixl" in text
    assert "kv_heads_not_replicated" in text  # MoRIIO's head rule rejects rule-blind optima
    assert "rejected by vLLM" in capsys.readouterr().out


def test_sweep_rate_script(tmp_path, capsys):
    out = tmp_path / "rate.json"
    _load_script("sweep_rate").main(
        ["--gpus", "1-8", "--gpu", "h100", "--workers", "1", "--repeat", "1", "--json", str(out)]
    )
    data = json.loads(out.read_text())
    assert data["scenarios"] == len(pdtp.models()) * 8
    assert data["results"][0]["rows_per_s"] > 0
    assert "scenarios/s" in capsys.readouterr().out
