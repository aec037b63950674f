"""A model pdtp never fitted: GLM-5 in the catalog as vLLM loads it, and
``benchmarks/unseen_model.py``, which scores its measured curves without knowing the GPU type."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

import pdtp
from conftest import REPO
from pdtp.catalog import gpu as find_gpu


def _bench() -> ModuleType:
    path = REPO / "benchmarks" / "unseen_model.py"
    spec = importlib.util.spec_from_file_location("bench_unseen_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _bench()


@pytest.fixture(scope="module")
def fast(bench: ModuleType) -> dict:
    return bench.run(fast=True)


def test_glm5_is_the_fp8_checkpoint_with_its_indexer_cache() -> None:
    m = pdtp.model("glm-5")
    assert m is pdtp.model("zai-org/GLM-5-FP8")
    assert (m.weight_dtype, m.model_type, m.is_mla) == ("fp8", "glm_moe_dsa", True)
    # Every layer keeps the 576-value latent and the DSA indexer's fp8 key (128 + 4 scale
    # bytes); the MTP layer is not loaded without speculative decoding.
    (group,) = m.attention_groups
    assert (group.num_layers, group.head_dim, group.index_bytes) == (78, 576, 132)
    assert m.kv_bytes_per_token == 78 * (576 * 2 + 132)
    assert m.num_experts == 256 and m.num_moe_layers == 75


def test_the_rows_are_the_unrecorded_gpu_runs_accuracy_skips(bench: ModuleType) -> None:
    rows = bench.glm5_rows()
    assert len(rows) == 52
    assert {r["hw"] for r in rows} == {"unknown"}
    assert {(r["framework"], r["tp"]) for r in rows} == {("vllm", "8")}
    sys.path.insert(0, str(REPO / "benchmarks"))
    import accuracy

    assert {accuracy.inferencex_skip_reason(r) for r in rows} == {"GPU type not recorded"}


def test_shape_cancels_absolute_speed_and_absolute_does_not(bench: ModuleType) -> None:
    measured = [(4, 20.0, 100.0), (16, 40.0, 300.0), (64, 90.0, 500.0)]

    def items(scale: float, growth: float) -> list[dict]:
        out = []
        for c, tpot, tps in measured:
            grow = growth ** (c > 4)
            out.append(
                {
                    "isl": 1024,
                    "osl": 128,
                    "concurrency": c,
                    "measured_tpot_ms": tpot,
                    "predicted_tpot_ms": scale * tpot * grow,
                    "measured_output_tokens_per_s": tps,
                    "predicted_output_tokens_per_s": tps / scale,
                }
            )
        return out

    # A GPU twice as fast as measured: the shape is exact, the absolute error is not.
    twice = items(0.5, 1.0)
    assert bench.shape_errors(twice, "tpot_ms") == [0.0, 0.0]
    assert bench.shape_errors(twice, "output_tokens_per_s") == [0.0, 0.0]
    assert bench.absolute_errors(twice, "tpot_ms") == [-0.5, -0.5, -0.5]
    # A curve that grows 30% too fast past the reference concurrency.
    steep = items(1.0, 1.3)
    assert bench.shape_errors(steep, "tpot_ms") == pytest.approx([0.3, 0.3])
    s = bench.stats([-0.1, 0.2, 0.4])
    assert (s["n"], s["median"], s["bias"]) == (3, pytest.approx(0.2), pytest.approx(0.2))


def test_fast_run_scores_every_candidate_that_loads(bench: ModuleType, fast: dict) -> None:
    m = pdtp.model("glm-5")
    assert [g["gpu"] for g in fast["gpus"]] == list(bench.CANDIDATES)
    groups = len(bench.FAST_ISLS)
    for g in fast["gpus"]:
        gpu = find_gpu(g["gpu"])
        per_gpu = m.weight_bytes / 8
        # Physics, not the fit: a node whose GPUs cannot hold an eighth of the weights does
        # not load; one with room for them and a KV cache does.
        if per_gpu > gpu.memory_bytes:
            assert not g["loads"] and "does not fit" in g["reason"], g["gpu"]
        if per_gpu < 0.75 * gpu.memory_bytes:
            assert g["loads"], g["gpu"]
        if not g["loads"]:
            continue
        assert g["absolute"]["tpot_ms"]["n"] == fast["rows"]
        assert g["shape"]["tpot_ms"]["n"] == fast["rows"] - groups
        for kind in ("tpot_ms", "output_tokens_per_s"):
            for part in ("shape", "absolute"):
                assert g[part][kind]["median"] <= g[part][kind]["p90"]
    loaded = [g for g in fast["gpus"] if g["loads"]]
    assert fast["best_fit_gpu"] == min(loaded, key=bench.absolute_fit)["gpu"]
    assert fast["source_gpu"] in bench.CANDIDATES
    assert "H200" in fast["source_gpu_evidence"]
    assert "mtp" in fast["speculative_evidence"]


def test_markdown_labels_the_gpu_choices(bench: ModuleType, fast: dict) -> None:
    text = bench.render_markdown(fast)
    assert "(named by the source)" in text
    assert "(best absolute fit: GPU-inferred)" in text
    assert text.count("\n| ") == 1 + len(bench.CANDIDATES)  # the header and a row each


def test_readme_has_the_subsection_and_a_row_per_candidate(bench: ModuleType) -> None:
    readme = (REPO / "README.md").read_text()
    assert "### A model never measured: GLM-5 without its GPU type" in readme
    section = readme.split("### A model never measured: GLM-5 without its GPU type", 1)[1]
    section = section.split("\n## ", 1)[0].split("\n### ", 1)[0]
    assert "python benchmarks/unseen_model.py" in section
    live = bench.run()
    table = section.split("| GPU type |", 1)[1].split("\n\n", 1)[0]
    rows = ["| GPU type |"] + [line for line in table.splitlines()[1:] if line.startswith("| ")]
    names = [r.split("|")[1].strip().split(" ")[0] for r in rows[1:]]
    assert names == [g["gpu"].upper() for g in live["gpus"]]
    for row, g in zip(rows[1:], live["gpus"]):
        assert ("does not load" in row) == (not g["loads"])
        assert ("(best absolute fit: GPU-inferred)" in row) == (g["gpu"] == live["best_fit_gpu"])
