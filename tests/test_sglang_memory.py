"""SGLang's ``mem_fraction_static`` per release, and SGLang plans sized at it.

``tests/data/sglang_mem_fraction.json.gz`` holds what each release's own code answers
(``tools/sglang_memory_golden.py`` runs ``ServerArgs`` / ``arg_groups/memory_hook.py`` of every
release on a stand-in, over GPU memory × TP × DP attention × PP × role × MLA); pdtp's
function must give the same fraction everywhere. Plans of an SGLang connector size each
kind of instance at that fraction unless the caller names one, and the launch lines state
``--mem-fraction-static`` only where the plan needs another than SGLang's own.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import pdtp
from pdtp.catalog import gpu as catalog_gpu
from pdtp.catalog import model as catalog_model
from pdtp.deployment.connectors.sglang import SGLANG_RELEASES
from pdtp.deployment.connectors.sglang_memory import mem_fraction_static
from pdtp.engine import engine
from pdtp.layout import Layout

GOLDEN = Path(__file__).parent / "data" / "sglang_mem_fraction.json.gz"
ROLE = {"null": "aggregated", "prefill": "prefill", "decode": "decode"}


@pytest.fixture(scope="module")
def golden():
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


def test_every_release_gives_its_own_codes_fraction(golden):
    releases = [r for g in golden["groups"] for r in g["releases"]]
    assert sorted(releases) == sorted(SGLANG_RELEASES)  # every release pdtp knows
    wrong = []
    for g in golden["groups"]:
        for release in g["releases"]:
            for p, want in zip(golden["grid"], g["fractions"], strict=True):
                gpu = SimpleNamespace(memory_bytes=p["memory_mib"] * 2**20, vendor=p["vendor"])
                got = mem_fraction_static(gpu, release, tp=p["tp"], pp=p["pp"],
                                          dp_attention=p["dp_attention"], mla=p["mla"],
                                          role=ROLE[p["role"]])  # fmt: skip
                if abs(got - want) > 1e-9:
                    wrong.append((release, p, got, want))
    assert not wrong, (len(wrong), wrong[:3])
    # The data tells the eras apart (a constant or one era's formula would not pass).
    assert len(golden["groups"]) >= 10
    values = {v for g in golden["groups"] for v in g["fractions"]}
    assert len(values) > 100


def test_the_fraction_depends_on_what_sglang_reads():
    h100 = catalog_gpu("h100")
    f = engine("sglang").memory_fraction
    # From 0.5.15 a decode instance's activations scale with its running requests, not the
    # chunked-prefill size; DP attention reserves a lot for its graphs; more GPUs per
    # instance hold back more.
    assert f(h100, "0.5.23", tp=8, role="decode") > f(h100, "0.5.23", tp=8, role="prefill")
    assert f(h100, "0.5.9", tp=8, role="decode") == f(h100, "0.5.9", tp=8, role="prefill")
    assert f(h100, "0.5.23", tp=8, dp_attention=True, role="decode") < f(
        h100, "0.5.23", tp=8, role="decode"
    )
    assert f(h100, "0.5.9", tp=8) < f(h100, "0.5.9", tp=1)
    # vLLM's is one value whatever the layout.
    assert engine("vllm").memory_fraction(h100, None, tp=8, role="decode") == 0.9


@pytest.fixture(scope="module")
def sized():
    """An SGLang plan at the release's own fractions, and one at a named 0.9."""
    kw = dict(gpus=8, gpu="h100", connector="sglang-nixl", sglang_version="0.5.23",
              mode="disagg")  # fmt: skip
    return pdtp.solve("llama-3.1-70b", **kw), pdtp.solve(
        "llama-3.1-70b", gpu_memory_utilization=0.9, **kw
    )


def test_sglang_plans_are_sized_at_the_releases_fraction(sized):
    own, named = sized
    h100, mla = catalog_gpu("h100"), catalog_model("llama-3.1-70b").is_mla
    eng = engine("sglang")
    assert own.memory_fractions == {
        "prefill": eng.layout_fraction(h100, "0.5.23", own.prefill.layout, "prefill", mla),
        "decode": eng.layout_fraction(h100, "0.5.23", own.decode.layout, "decode", mla),
    }
    assert named.memory_fractions is None and named.gpu_memory_utilization == 0.9
    # Said in the plan's notes (what `pdtp solve` prints).
    said = [n for n in own.notes if n.startswith("memory: ")]
    assert len(said) == 1 and "SGLang 0.5.23's own mem_fraction_static" in said[0]
    assert f"decode {own.memory_fractions['decode']:g}" in said[0]
    assert not [n for n in named.notes if n.startswith("memory: ")]
    # The plan reads back as written.
    again = pdtp.Plan.from_dict(json.loads(own.to_json()))
    assert again.memory_fractions == own.memory_fractions
    # vLLM plans keep one fraction.
    vllm = pdtp.solve("llama-3.1-70b", gpus=8, gpu="h100", connector="nixl", mode="disagg")
    assert vllm.memory_fractions is None


def test_the_core_sizes_each_instance_at_its_fraction():
    """The planner's numbers follow the fraction: one layout, a long context that makes the
    decode batch memory-bound; SGLang's own fraction on H100 is below 0.9, so the batch is
    smaller than at a named 0.9, and equal to the batch at that fraction named."""
    w = pdtp.Workload(isl=8192, osl=2048, ttft_ms=10000, tpot_ms=200)
    kw = dict(gpus=8, gpu="h100", connector="sglang-nixl", sglang_version="0.5.23",
              mode="disagg", layouts=["tp4"], workload=w)  # fmt: skip
    own = pdtp.solve("llama-3.1-70b", **kw)
    frac = own.memory_fractions["decode"]
    assert frac < 0.9
    at_9 = pdtp.solve("llama-3.1-70b", gpu_memory_utilization=0.9, **kw)
    at_frac = pdtp.solve("llama-3.1-70b", gpu_memory_utilization=frac, **kw)
    assert own.decode.layout == at_9.decode.layout == Layout(4)
    assert own.decode_batch < at_9.decode_batch
    assert own.decode_batch == at_frac.decode_batch


def test_launch_lines_state_the_fraction_only_where_sglang_would_pick_another(sized):
    own, named = sized
    for i in pdtp.deploy(own).instances:
        assert "--mem-fraction-static" not in i.argv
    for i in pdtp.deploy(named).instances:
        k = i.argv.index("--mem-fraction-static")
        assert i.argv[k + 1] == "0.9"
    # vLLM's lines are unchanged: their fraction is the plan's, stated as vLLM's flag.
    vllm = pdtp.solve("llama-3.1-8b", gpus=8, gpu="mi300x", mode="disagg")
    assert all("--mem-fraction-static" not in i.launch.argv for i in pdtp.deploy(vllm).instances)


def test_check_sizes_each_side_at_the_releases_fraction():
    """``check(gpu=)`` with an SGLang connector fits each side in the release's fraction for
    its layout and role: the same answer as naming that fraction, and a pair that fits
    at vLLM's 0.9 may not (70B at TP 2 on H100: 70 GB of weights a GPU)."""
    h100, mla = catalog_gpu("h100"), False
    kw = dict(connector="sglang-mooncake", sglang_version="0.5.9", gpu="h100", alternatives=0)
    r = pdtp.check("llama-3.1-70b", 2, 4, **kw)
    f = engine("sglang").layout_fraction
    for side, tp, fits in (("prefill", 2, r.prefill_fits), ("decode", 4, r.decode_fits)):
        at = pdtp.check("llama-3.1-70b", 2, 4, gpu_memory_utilization=f(h100, "0.5.9",
                        Layout(tp), side, mla), **kw)  # fmt: skip
        assert fits == (at.prefill_fits if side == "prefill" else at.decode_fits)
    at_9 = pdtp.check("llama-3.1-70b", 2, 4, gpu_memory_utilization=0.9, **kw)
    assert at_9.prefill_fits and not r.prefill_fits
