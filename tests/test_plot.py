"""``pdtp.plot`` and ``pdtp plot``: charts are written as PNG / SVG from sweep rows or files,
and the pairs chart's cells are exactly what ``pdtp.check`` says."""

from __future__ import annotations

import sys

import pytest

import pdtp
from pdtp.check import check
from pdtp.cli import main
from pdtp.errors import InvalidArgumentError

pytest.importorskip("matplotlib")

from pdtp import plot  # after the skip: charts need matplotlib

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rows():
    return pdtp.sweep(
        ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"],
        gpus=range(1, 65),
        gpu=["mi300x", "h100"],
        workers=1,
        as_frame=False,
    )


def test_throughput_chart_png_and_svg(rows, tmp_path):
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    fig = plot.throughput_chart(rows, png)
    assert png.read_bytes().startswith(PNG)
    axes = fig.get_axes()
    # Each GPU type's default connector (NIXL on NVIDIA, MoRIIO on AMD) sets the panels apart.
    assert [a.get_title() for a in axes] == ["h100\nconnector: nixl", "mi300x\nconnector: moriio"]
    assert "GPU budget" in axes[0].get_xlabel() and "requests/s per GPU" in axes[0].get_ylabel()
    # One line per model in each panel; deepseek-v3 does not fit on h100 below 16 GPUs.
    assert len(axes[0].get_lines()) == 3
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {
        "llama-3.1-8b",
        "llama-3.1-70b",
        "deepseek-v3",
    }
    plot.throughput_chart(rows, svg, gpu="mi300x", models=["llama-3.1-8b"], title="x")
    assert b"<svg" in svg.read_bytes()[:500]


def test_throughput_values_are_requests_per_gpu(rows):
    fig = plot.throughput_chart(rows, gpu="mi300x", models=["llama-3.1-70b"])
    xs, ys = fig.get_axes()[0].get_lines()[0].get_data()
    by_budget = {
        r["gpus"]: r for r in rows if r["gpu"] == "mi300x" and r["model"] == "llama-3.1-70b"
    }
    for x, y in zip(xs, ys):
        r = by_budget[int(x)]
        if r["requests_per_s"] is None:
            assert y != y  # NaN: a gap in the line
        else:
            assert y == pytest.approx(r["requests_per_s"] / r["gpus"])


def test_throughput_from_dataframe_and_file(rows, tmp_path):
    pd = pytest.importorskip("pandas")
    out = tmp_path / "s.csv"
    pdtp.sweep("llama-3.1-8b", gpus=range(1, 17), workers=1, output=out)
    plot.throughput_chart(str(out), tmp_path / "a.png")
    df = pdtp.sweep("llama-3.1-8b", gpus=range(1, 17), workers=1)
    assert isinstance(df, pd.DataFrame)
    plot.throughput_chart(df, tmp_path / "b.png")
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_pairs_grid_matches_check():
    sizes = [1, 2, 4, 5, 8]
    for model in ("llama-3.1-70b", "llama-2-13b", "deepseek-v3"):
        for connector in ("moriio", "nixl", "nixl-legacy"):
            grid = plot.pairs_grid(model, connector, sizes)
            for i, p in enumerate(sizes):
                for j, d in enumerate(sizes):
                    r = check(model, p, d, connector=connector, alternatives=0)
                    if r.ok:
                        assert grid[i][j] == ("valid_warning" if r.warnings else "valid")
                    else:
                        assert grid[i][j] == r.violations[0].code


def test_pairs_chart(tmp_path):
    out = tmp_path / "p.png"
    fig = plot.pairs_chart(["llama-3.1-70b", "deepseek-v3"], ["moriio", "nixl"], out)
    assert out.read_bytes().startswith(PNG)
    axes = fig.get_axes()
    assert len(axes) == 4
    assert "llama-3.1-70b" in axes[0].get_title() and "connector: moriio" in axes[0].get_ylabel()
    # Sizes that load either model: 1, 2, 4, 8 (tp=3, 5, 6, 7 load neither).
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["1", "2", "4", "8"]
    labels = {t.get_text() for t in axes[0].texts}
    assert {"ok", "KV"} <= labels  # llama-3.1-70b under MoRIIO: P4/D8 breaks the head rule
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert "valid" in legend and "KV heads" in legend


def test_bad_file_extension(rows, tmp_path):
    with pytest.raises(InvalidArgumentError, match=".png or .svg"):
        plot.throughput_chart(rows, tmp_path / "x.jpg")
    with pytest.raises(InvalidArgumentError, match="no sweep rows"):
        plot.throughput_chart(rows, gpu="b200")


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_plot(capsys, tmp_path):
    out = tmp_path / "t.svg"
    code, text, err = run(
        capsys,
        "plot",
        "throughput",
        "--models",
        "llama-3.1-8b,qwen3-8b",
        "--gpus",
        "1-32",
        "--gpu",
        "h200",
        "-o",
        str(out),
    )
    assert code == 0, err
    assert "wrote" in text and out.exists()
    sweep_file = tmp_path / "s.jsonl"
    pdtp.sweep("llama-3.1-8b", gpus=range(1, 9), gpu=["h100"], workers=1, output=sweep_file)
    code, _, err = run(
        capsys, "plot", "throughput", "--input", str(sweep_file), "-o", str(tmp_path / "f.png")
    )
    assert code == 0, err
    code, _, err = run(
        capsys,
        "plot",
        "pairs",
        "--models",
        "qwen3-235b-a22b",
        "--connector",
        "moriio",
        "--max-tp",
        "16",
        "-o",
        str(tmp_path / "p.png"),
    )
    assert code == 0, err
    code, _, err = run(capsys, "plot", "pairs", "-o", str(tmp_path / "p.gif"))
    assert code == 2 and ".png or .svg" in err


def test_importing_pdtp_does_not_import_matplotlib():
    import subprocess

    code = "import sys, pdtp, pdtp.cli; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- faceting and legends ------------------------------------------------------------------


def fake_rows(models, *, workloads=((2048, 512),), connectors=("moriio",), gpus=("mi300x",)):
    """Sweep-shaped rows with known values: model k serves (k + 1) * budget * factor req/s,
    the factor distinct per workload and connector, so a mixed-up panel shows."""
    rows = []
    for wi, (isl, osl) in enumerate(workloads):
        for ci, c in enumerate(connectors):
            for g in gpus:
                for k, m in enumerate(models):
                    for b in (1, 2, 4, 8, 16):
                        rows.append({
                            "model": m, "gpu": g, "connector": c, "gpus": b, "isl": isl,
                            "osl": osl, "slo_ttft_ms": 2000.0, "slo_tpot_ms": None,
                            "requests_per_s": (k + 1) * b * (1 + wi) * (1 + 10 * ci),
                        })  # fmt: skip
    return rows


def test_throughput_facets_by_workload_and_connector():
    models = ["a", "b", "c"]
    rows = fake_rows(models, workloads=((1024, 128), (8192, 512)), connectors=("moriio", "nixl"))
    fig = plot.throughput_chart(rows)
    axes = fig.get_axes()
    assert len(axes) == 4  # 2 workloads x 2 connectors, one GPU type
    seen = set()
    for ax in axes:
        title = ax.get_title()
        wi = 0 if "isl=1024" in title else 1
        ci = 0 if "connector: moriio" in title else 1
        assert ("isl=1024" in title) != ("isl=8192" in title)
        assert ("moriio" in title) != ("nixl" in title)
        seen.add((wi, ci))
        lines = ax.get_lines()
        assert sorted(line.get_label() for line in lines) == models  # one line per model
        for line in lines:
            xs, ys = line.get_data()
            assert list(xs) == [1, 2, 4, 8, 16]  # no zig-zag: one facet's rows only
            k = models.index(line.get_label())
            assert list(ys) == [pytest.approx((k + 1) * (1 + wi) * (1 + 10 * ci))] * 5
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # What all panels share (the GPU type) is said once, in the figure title.
    assert "GPU: mi300x" in fig._suptitle.get_text()


def test_throughput_top_n_by_peak_and_models_to_choose():
    models = [f"m{k:02d}" for k in range(14)]  # m13 has the highest peak
    rows = fake_rows(models)
    fig = plot.throughput_chart(rows)
    drawn = [line.get_label() for line in fig.get_axes()[0].get_lines()]
    by_peak = sorted(
        models, key=lambda m: -max(r["requests_per_s"] / r["gpus"] for r in rows if r["model"] == m)
    )
    assert drawn == by_peak[:10]
    legend = fig.legends[0]
    assert "top 10 of 14" in legend.get_title().get_text()
    assert [t.get_text() for t in legend.get_texts()] == by_peak[:10]
    assert "top 10 of 14" in fig._suptitle.get_text()
    # top=3; top=0 draws every model; models= chooses (and the title claims no ranking).
    assert len(plot.throughput_chart(rows, top=3).get_axes()[0].get_lines()) == 3
    assert len(plot.throughput_chart(rows, top=0).get_axes()[0].get_lines()) == 14
    fig = plot.throughput_chart(rows, models=["m00", "m05"])
    assert sorted(line.get_label() for line in fig.get_axes()[0].get_lines()) == ["m00", "m05"]
    assert "top" not in fig.legends[0].get_title().get_text()
    with pytest.raises(InvalidArgumentError, match="top"):
        plot.throughput_chart(rows, top=-1)


def test_every_model_has_its_own_style():
    models = [f"m{k:02d}" for k in range(60)]
    fig = plot.throughput_chart(fake_rows(models), top=0)
    lines = fig.get_axes()[0].get_lines()
    styles = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in lines}
    assert len(lines) == 60 and len(styles) == 60
    # The same model looks the same in every panel.
    fig = plot.throughput_chart(fake_rows(models[:12], connectors=("moriio", "nixl")), top=0)
    a, b = fig.get_axes()
    for la, lb in zip(a.get_lines(), b.get_lines()):
        assert (la.get_label(), la.get_color(), la.get_linestyle()) == (
            lb.get_label(),
            lb.get_color(),
            lb.get_linestyle(),
        )


def test_cli_plot_facets_top_and_conflicts(capsys, tmp_path):
    sweep_file = tmp_path / "two.jsonl"
    pdtp.sweep(
        ["llama-3.1-8b", "llama-3.1-70b"],
        gpus=range(1, 17),
        gpu=["h100"],
        workloads=[{"isl": 1024, "osl": 128}, {"isl": 8192, "osl": 512}],
        connector=["moriio", "nixl"],
        workers=1,
        output=sweep_file,
    )
    out = tmp_path / "facets.svg"
    code, _, err = run(
        capsys, "plot", "throughput", "--input", str(sweep_file), "--top", "1", "-o", str(out)
    )
    assert code == 0, err
    svg = out.read_text()
    # Four panels (2 workloads x 2 connectors), each titled; the top model only.
    assert svg.count("connector: moriio") == 2 and svg.count("connector: nixl") == 2
    assert svg.count("isl=1024") == 2 and svg.count("isl=8192") == 2
    assert "top 1 of 2" in svg and "llama-3.1-8b" in svg and "llama-3.1-70b" not in svg
    # Flags that would be silently ignored are refused, naming both.
    code, _, err = run(
        capsys, "plot", "throughput", "--input", str(sweep_file), "--gpus", "1-8", "-o", str(out)
    )
    assert code == 2 and "--input" in err and "--gpus" in err
    code, _, err = run(capsys, "plot", "pairs", "--top", "3", "-o", str(out))
    assert code == 2 and "--top" in err


# ---- the Pareto chart -----------------------------------------------------------------------


def test_pareto_chart_draws_the_frontier_and_the_rule_blind_one(tmp_path):
    # llama-3.1-70b under MoRIIO: the rules refuse some pairs, so the rule-blind frontier
    # can differ from the valid one; both are drawn from the Pareto's own points.
    front = pdtp.pareto("llama-3.1-70b", gpus=24, gpu="mi300x", tpot_ms=[15, 25, 40, 80])
    out = tmp_path / "pareto.png"
    fig = plot.pareto_chart(front, out)
    assert out.read_bytes().startswith(PNG)
    ax = fig.get_axes()[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    valid = lines["valid frontier"]
    assert list(valid.get_xdata()) == [p.tokens_per_s_per_user for p in front.frontier]
    assert list(valid.get_ydata()) == [p.tokens_per_s_per_gpu for p in front.frontier]
    blind = next(ln for label, ln in lines.items() if label.startswith("rule-blind"))
    assert list(blind.get_ydata()) == [p.tokens_per_s_per_gpu for p in front.rule_blind]
    assert blind.get_alpha() < 0.5  # faint, behind
    labels = {t.get_text() for t in ax.texts}
    assert {p.summary.replace("aggregated", "agg") for p in front.frontier} <= labels
    with pytest.raises(TypeError, match="pdtp.Pareto"):
        plot.pareto_chart([1, 2])


def test_cli_plot_pareto(capsys, tmp_path):
    out = tmp_path / "p.svg"
    code, text, err = run(
        capsys, "plot", "pareto", "--models", "qwen3-30b-a3b", "--gpu", "h200", "--gpus", "8",
        "--connector", "nixl", "--tpot-targets", "10,20,50", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "wrote" in text and out.read_text().lstrip().startswith("<?xml")
    for argv, words in [
        (["pareto", "-o", str(tmp_path / "x.png")], "needs --models"),
        (["pareto", "--models", "a,b", "-o", str(tmp_path / "x.png")], "one model"),
        (["pairs", "--mode", "agg", "-o", str(tmp_path / "x.png")], "--mode is for pareto"),
        (["pareto", "--models", "qwen3-8b", "--top", "2", "-o", str(tmp_path / "x.png")], "--top"),
        (
            [
                "pareto",
                "--models",
                "qwen3-8b",
                "--tpot-targets",
                "x",
                "-o",
                str(tmp_path / "x.png"),
            ],
            "--tpot-targets must be numbers",
        ),
    ]:
        code, _, err = run(capsys, "plot", *argv)
        assert code == 2 and words in err, (argv, err)
