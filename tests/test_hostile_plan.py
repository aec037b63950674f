"""Issue 23: a plan file is input. ``Plan.from_dict`` / ``Plan.from_json`` and ``deploy`` of
what they read end in a plan (and its files) or one :class:`pdtp.PdtpError` naming the
field, for every field of every kind of plan set to a hostile value or removed.

Found by this file (fixed): a lone surrogate in any string of a plan reached the Rust core as
a ``UnicodeEncodeError`` (``vllm_version``, a side's ``layout``); ``Plan.from_json`` of a
FIFO's path waited on it forever; a surrogate ``surrogateescape`` makes (``\\udcff``) passed
the argument check of every public function into the core (``solve(vllm_version=...)``,
``layouts=``, ``check(connector=...)``).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import pdtp
from hostile import assert_pdtp_error, call_here
from pdtp.errors import MAX_MESSAGE_CHARS


def _plans() -> dict[str, dict[str, Any]]:
    return {
        "disagg": pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg").to_dict(),
        "agg": pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="agg").to_dict(),
        "moriio": pdtp.solve("llama-3.1-70b", gpus=16, gpu="mi300x", mode="disagg").to_dict(),
    }


PLANS = _plans()
HOSTILE = [None, -1, 2**70, float("nan"), "x" * 5000, "\udcff", "-rf", {"a": 1}]


def _leaves(d: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:2]):
            yield from _leaves(v, (*path, i))


def _at(d: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        d = d[k]
    return d


def _read_and_deploy(data: dict[str, Any]) -> None:
    plan = pdtp.Plan.from_dict(data)
    hosts = None if plan.gpus_used <= plan.gpus_per_node else [f"10.0.0.{i}" for i in range(64)]
    for fmt in ("scripts", "k8s", "json"):
        pdtp.deploy(plan, node_hosts=hosts).files(fmt)


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_every_field_hostile_or_missing_is_a_plan_or_one_pdtp_error(kind):
    base = PLANS[kind]
    _read_and_deploy(copy.deepcopy(base))  # the plan itself reads and deploys
    values = HOSTILE if kind == "disagg" else ["\udcff", -1, [], None]
    for path in _leaves(base):
        for value in [*values, "<del>"]:
            data = copy.deepcopy(base)
            if value == "<del>":
                del _at(data, path)[path[-1]]
            else:
                _at(data, path)[path[-1]] = value
            out = call_here(_read_and_deploy, data)
            where = (kind, path, repr(value)[:30])
            assert out.how in ("returned", "raised"), (where, out.describe())
            if out.how == "raised":
                assert out.is_a(pdtp.PdtpError), (where, out.describe())
                assert len(out.message) <= MAX_MESSAGE_CHARS + 100, where


@pytest.mark.parametrize(
    "path", [("vllm_version",), ("prefill", "layout"), ("decode", "kv_role"), ("model",)]
)
def test_a_lone_surrogate_in_a_plan_names_its_field(path):
    data = copy.deepcopy(PLANS["disagg"])
    _at(data, path)[path[-1]] = "\udcff"
    where = "plan" + "".join(f"[{k!r}]" for k in path)
    out = call_here(pdtp.Plan.from_dict, data)
    assert_pdtp_error(out, where, "Unicode", error=pdtp.InvalidArgumentError)


def test_plan_from_json_reads_files_with_the_capped_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # No writer: read to its end (nothing), never waited on.
    assert_pdtp_error(call_here(pdtp.Plan.from_json, str(fifo), timeout_s=60), "plan")
    # A writer that sends a plan: read through the FIFO like a file.
    text = pdtp.Plan.from_dict(PLANS["agg"]).to_json()

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(text)

    writer = threading.Thread(target=write)
    writer.start()
    got = call_here(pdtp.Plan.from_json, str(fifo), timeout_s=60)
    writer.join()
    assert got.how == "returned", got.describe()
    assert_pdtp_error(call_here(pdtp.Plan.from_json, "/dev/zero"), "/dev/zero", "device")
    assert_pdtp_error(call_here(pdtp.Plan.from_json, str(tmp_path)), "folder")
    assert_pdtp_error(call_here(pdtp.Plan.from_json, "[" * 100_000), "neither")
    assert_pdtp_error(call_here(pdtp.Plan.from_json, '{"a":' * 100_000), "nested")


@pytest.mark.parametrize(
    "call",
    [
        lambda: pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", vllm_version="\udcff"),
        lambda: pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", layouts=["tp", "\udcff"]),
        lambda: pdtp.check("llama-3.1-8b", 2, 4, connector="nixl@\udcff"),
        lambda: pdtp.size_for("llama-3.1-8b", 5, gpu="h100", vllm_version="0.\udcff"),
    ],
)
def test_surrogateescape_text_outside_paths_is_refused_naming_the_argument(call):
    """``\\udcff`` is what ``surrogateescape`` makes of a byte 0xff: a path may hold it, a
    version, layout or connector name cannot (the core takes UTF-8)."""
    out = call_here(call)
    assert_pdtp_error(out, "is not valid Unicode text", error=pdtp.InvalidArgumentError)


def test_a_path_may_still_hold_surrogateescape_bytes(tmp_path):
    name = os.fsdecode(b"hosts-\xff.txt")
    (tmp_path / name).write_text("10.0.0.1\n")
    plan = pdtp.solve("llama-3.1-8b", gpus=8, gpu="h100", mode="disagg")
    dep = pdtp.deploy(plan, hosts_file=tmp_path / name)
    assert dep.nodes == ("10.0.0.1",)
