"""Issue 24 part 5: each repeated fact once — the engines' defaults (pdtp.engine), vLLM
release numbers (pdtp._version), the GPU generation (GPU.generation, from the catalog's
``arch``) — each read by every part that needs it."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

import pdtp
from pdtp._version import Version, named_vllm_release, parse_version
from pdtp.engine import engine_defaults, vllm_batch_defaults, vllm_max_num_seqs_of_run

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_vllm_batch_defaults_follow_the_device_name_as_vllm_does():
    a100 = pdtp.gpu("a100")
    assert a100.memory_bytes >= 70 * 2**30  # an 80 GiB part: only the name decides
    assert vllm_batch_defaults("a100", a100.memory_bytes) == (256, 2048)
    # vLLM tests `"a100" not in device_name`: any A100 device name gets the small defaults.
    assert vllm_batch_defaults("NVIDIA A100-SXM4-80GB", a100.memory_bytes) == (256, 2048)
    assert vllm_batch_defaults("h100", pdtp.gpu("h100").memory_bytes) == (1024, 8192)
    assert vllm_batch_defaults("l40s", pdtp.gpu("l40s").memory_bytes) == (256, 2048)


def test_the_planner_the_predictor_and_the_simulator_read_one_rule():
    # A GPU the catalog lacks, named like an A100: the two copies pdtp had disagreed here
    # (one compared the name to "a100", the other looked for "a100" in it).
    custom = dataclasses.replace(pdtp.gpu("a100"), name="a100-80gb-custom", aliases=())
    assert engine_defaults("vllm", custom)["max_num_batched_tokens"] == 2048
    assert engine_defaults("vllm", custom)["max_num_seqs"] == 256
    from pdtp.simulate import vllm_scheduler_defaults

    assert vllm_scheduler_defaults(custom.name, custom.memory_bytes) == (256, 2048)
    for g in pdtp.gpus():
        d = engine_defaults("vllm", g)
        assert (d["max_num_seqs"], d["max_num_batched_tokens"]) == vllm_scheduler_defaults(
            g.name, g.memory_bytes
        )


def test_the_engine_rule_is_written_once():
    # The memory threshold of vLLM's batch defaults appears in one module.
    hits = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "python" / "pdtp").rglob("*.py")
        if "70 * 2**30" in p.read_text() or "70 * _GIB" in p.read_text()
    ]
    assert hits == ["python/pdtp/engine.py"]


def test_runs_on_old_vllm_had_256_sequences():
    assert vllm_max_num_seqs_of_run("vLLM v0.8.5") == 256
    assert vllm_max_num_seqs_of_run("vllm 0.8.5rc1 (CUDA 12.4)") == 256
    assert vllm_max_num_seqs_of_run("vllm 0.9.0") is None
    assert vllm_max_num_seqs_of_run("sglang 0.4.6") is None
    assert vllm_max_num_seqs_of_run(None) is None


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("0.33.0", Version(0, 33, 0)),
        ("0.33", Version(0, 33, 0)),
        (" v0.11.0 ", Version(0, 11, 0)),
        ("0.10.1.1", Version(0, 10, 1, 1)),
    ],
)
def test_one_release_parser(text, version):
    assert parse_version(text) == version
    assert str(parse_version(text)) == str(version)


@pytest.mark.parametrize("text", ["", "0", "0.33.0.1.2", "latest", "0.33.x", "0..1"])
def test_a_bad_release_is_one_error_naming_the_field(text):
    with pytest.raises(pdtp.InvalidArgumentError, match="vllm_version must look like 0.33.0"):
        parse_version(text)


def test_releases_compare_as_numbers_and_the_deploy_layer_uses_the_same_parser():
    from pdtp.deployment import versions

    assert versions.parse_version is parse_version
    assert parse_version("0.10.0") > parse_version("0.9.2")
    assert parse_version("0.33") == parse_version("0.33.0")
    assert named_vllm_release("served by vllm 0.12.0 on 8 GPUs") == Version(0, 12, 0)


def test_replan_keeps_instances_across_spellings_of_one_release():
    now = {
        "model": "llama-3.1-8b",
        "gpu": "h100",
        "connector": "nixl",
        "vllm_version": "0.33",
        "prefill": {"tp": 1, "instances": 1},
        "decode": {"tp": 1, "instances": 1},
    }
    same = pdtp.replan(now, 1.0, max_gpus=8, vllm_version="0.33.0")
    assert not same.stop  # one release: nothing restarts
    other = pdtp.replan(now, 1.0, max_gpus=8, vllm_version="0.20.0")
    assert other.stop  # another release restarts every instance


def test_every_catalog_gpu_has_its_generation_from_the_catalog():
    gens = {g.name: g.generation for g in pdtp.gpus()}
    assert all(gens.values()), gens
    assert gens["gb200"] == gens["b200"] == "blackwell"
    assert gens["h100"] == gens["h200"] == "hopper"
    assert gens["mi300x"] == gens["mi325x"] == "cdna3" != gens["mi355x"]
    assert dataclasses.replace(pdtp.gpu("h100"), arch="").generation is None


def test_a_type_without_rows_takes_its_generations_fit():
    from pdtp.calibration import Table

    fit = Table(values={("mbu", "b200"): 0.5}, measured_gpus=("b200",), complete=True)
    assert "blackwell" in fit.source(pdtp.gpu("gb200"))
    assert fit._per_gpu("mbu", pdtp.gpu("gb200")) == pytest.approx(0.5)
    assert "blackwell" not in fit.source(pdtp.gpu("h100"))


def test_plan_and_estimate_share_one_definition_of_what_they_serve():
    from pdtp.served import SERVED_FIELDS, Served

    members = [n for n in vars(Served) if not n.startswith("_")]
    assert tuple(members) == SERVED_FIELDS
    want = {n: getattr(Served, n).fget.__annotations__["return"] for n in SERVED_FIELDS}
    for cls in (pdtp.Plan, pdtp.Estimate):
        hints = {f.name: f.type for f in dataclasses.fields(cls)}
        assert {n: hints[n] for n in SERVED_FIELDS} == want, cls.__name__
    plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", connector="nixl", mode="disagg")
    e = pdtp.evaluate(
        "llama-3.1-8b",
        gpu="h100",
        connector="nixl",
        prefill_tp=plan.prefill.layout.tp,
        prefill_instances=plan.prefill.instances,
        decode_tp=plan.decode.layout.tp,
        decode_instances=plan.decode.instances,
    )
    # The same configuration, planned and evaluated: the same numbers.
    for n in ("requests_per_s", "ttft_ms", "tpot_ms", "decode_batch", "serving"):
        assert getattr(e, n) == pytest.approx(getattr(plan, n)), n
    assert e.gpus == plan.gpus_used  # `gpus` is not shared: a plan's is its pool
