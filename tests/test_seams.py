"""The seams docs/architecture.md lists, each shown the way a contributor would add to it
(as ``tests/test_connectors.py`` shows a connector), in a fresh interpreter since an
addition lasts for the process:

- ``test_a_gpu_type_is_one_data_row_and_its_constants``: a GPU type of a known vendor read
  from a data file at run time (a ``gpus.json`` row and a ``perf_constants.json`` row, here
  H100's under another name) predicts, plans and deploys exactly as the GPU it copies —
  nothing else in pdtp keys on a GPU's name — and a changed figure changes the answers;
- ``test_a_deploy_format_is_one_module``: a format registered at run time (what a module in
  ``pdtp/deployment/formats/`` defines) is written by ``Deployment.files``/``write`` and by
  ``pdtp deploy --format``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest

import pdtp


def _run(script: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# ---- a GPU type: one data row (+ its constants) ---------------------------------------------

GPU_TYPE = """
import json, sys
import pdtp
from pdtp import catalog, constants

# What a contributor adds: a gpus.json row and a perf_constants.json row (read from the
# data file the test wrote, merged into the shipped tables before pdtp reads them).
extra = json.loads(open(sys.argv[1]).read())
shipped = catalog._read_data
def with_extra(filename):
    data = shipped(filename)
    if filename == "gpus.json":
        data["gpus"].extend(extra["gpus"])
    return data
catalog._read_data = with_extra
constants._table()["gpus"].update(extra["constants"])

def same(d, name):
    # A result with the new GPU's name written as the copied GPU's.
    return json.loads(json.dumps(d).replace(name, "h100"))

out = {}
for name in [g["name"] for g in extra["gpus"]]:
    g = pdtp.gpu(name)
    r = out[name] = {"vendor": g.vendor, "listed": name in [x.name for x in pdtp.gpus()]}
    r["serving"] = pdtp.predict_serving(
        "llama-3.1-70b", gpu=name, tp=4, isl=1024, osl=512, concurrency=32
    ).to_dict()
    r["decode"] = pdtp.predict_decode(
        "llama-3.1-70b", gpu=name, tp=4, isl=1024, osl=512, batch=16
    ).to_dict()
    r["check"] = pdtp.check("llama-3.1-70b", 4, 8, gpu=name).ok
    plan = pdtp.solve("llama-3.1-70b", gpus=16, gpu=name)
    r["plan"] = {k: v for k, v in plan.to_dict().items() if k != "solve_ms"}
    r["connector"] = plan.connector
    hosts = ["10.0.0.1", "10.0.0.2"]
    r["deploy"] = pdtp.deploy(plan, node_hosts=hosts).files("scripts")
    r["same"] = {k: same(v, name) for k, v in r.items() if k != "same"}
print(json.dumps(out))
"""


def _h100_rows() -> tuple[dict[str, object], dict[str, object]]:
    data = resources.files("pdtp").joinpath("data")
    gpu = next(
        g for g in json.loads(data.joinpath("gpus.json").read_text())["gpus"] if g["name"] == "h100"
    )
    consts = json.loads(data.joinpath("perf_constants.json").read_text())["gpus"]["h100"]
    return gpu, consts


def test_a_gpu_type_is_one_data_row_and_its_constants(tmp_path: Path) -> None:
    gpu, consts = _h100_rows()
    twin = {**gpu, "name": "toy-h100", "display_name": "Toy H100 twin", "aliases": []}
    # The same GPU with twice the memory: a figure of the row must reach the answers.
    roomy = {**twin, "name": "toy-h100-2x", "display_name": "Toy H100 2x memory"}
    roomy["memory_mib"] = 2 * int(gpu["memory_mib"])  # type: ignore[call-overload]
    rows = tmp_path / "toy_gpus.json"
    rows.write_text(
        json.dumps(
            {"gpus": [twin, roomy], "constants": {"toy-h100": consts, "toy-h100-2x": consts}}
        )
    )
    out = _run(GPU_TYPE, str(rows))
    h100 = {
        "serving": pdtp.predict_serving(
            "llama-3.1-70b", gpu="h100", tp=4, isl=1024, osl=512, concurrency=32
        ).to_dict(),
        "decode": pdtp.predict_decode(
            "llama-3.1-70b", gpu="h100", tp=4, isl=1024, osl=512, batch=16
        ).to_dict(),
        "check": pdtp.check("llama-3.1-70b", 4, 8, gpu="h100").ok,
    }
    plan = pdtp.solve("llama-3.1-70b", gpus=16, gpu="h100")
    h100["plan"] = {k: v for k, v in plan.to_dict().items() if k != "solve_ms"}
    h100["deploy"] = pdtp.deploy(plan, node_hosts=["10.0.0.1", "10.0.0.2"]).files("scripts")
    t = out["toy-h100"]
    assert isinstance(t, dict)
    assert t["vendor"] == "NVIDIA" and t["listed"] is True
    assert t["connector"] == plan.connector  # the vendor's default connector
    for key, want in h100.items():
        assert t["same"][key] == json.loads(json.dumps(want)), key
    r = out["toy-h100-2x"]
    assert isinstance(r, dict)
    assert r["decode"]["max_batch"] > t["decode"]["max_batch"]
    assert r["decode"]["kv_capacity_tokens"] > t["decode"]["kv_capacity_tokens"]


# ---- a deploy format: one module ------------------------------------------------------------

FORMAT = """
import json, sys, tempfile
import pdtp
from pdtp.deployment import formats

# What a module in pdtp/deployment/formats/ defines (registered here at run time): one env
# file per instance.
def render(dep):
    return {
        f"{i.name}.env": "".join(f"{k}={v}\\n" for k, v in i.launch.env) for i in dep.instances
    }

formats.register(formats.Format("toy-env", "one env file per instance", render))
plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg")
dep = pdtp.deploy(plan)
out = {"names": list(formats.names()), "files": dep.files("toy-env")}
with tempfile.TemporaryDirectory() as d:
    out["written"] = sorted(p.name for p in dep.write(d, "toy-env"))
    from pdtp.cli import main
    rc = main(["deploy", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--mode", "disagg",
               "--format", "toy-env", "-o", d + "/cli"])
    import os
    out["cli"] = [rc, sorted(os.listdir(d + "/cli"))]
out["instances"] = [i.name for i in dep.instances]
print(json.dumps(out))
"""


def test_a_deploy_format_is_one_module() -> None:
    out = _run(FORMAT)
    names = out["names"]
    assert isinstance(names, list) and {"scripts", "k8s", "json", "toy-env"} <= set(names)
    files = out["files"]
    assert isinstance(files, dict)
    instances = out["instances"]
    assert isinstance(instances, list) and len(instances) >= 2
    assert sorted(files) == sorted(f"{n}.env" for n in instances)
    assert all("CUDA_VISIBLE_DEVICES=" in text for text in files.values())
    assert out["written"] == sorted(files)
    assert out["cli"] == [0, sorted(files)]


def test_the_shipped_formats_are_modules_and_unknown_ones_are_named() -> None:
    from pdtp.deployment import FORMATS, formats

    assert set(formats.names()) == set(FORMATS)
    for name in FORMATS:
        assert (Path(formats.__file__).parent / f"{name}.py").exists()
    dep = pdtp.deploy(pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100"))
    with pytest.raises(pdtp.InvalidArgumentError, match="format must be one of json, k8s"):
        dep.files("yaml")
    with pytest.raises(pdtp.InvalidArgumentError, match="exists"):
        formats.register(formats.Format("json", "again", lambda d: {}))
