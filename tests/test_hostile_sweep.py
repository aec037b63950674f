"""Sweep output files under attack (issue 13): killed at every write and at random
moments (the final Parquet merge included) and resumed, written by two sweeps at once,
corrupted, or not pdtp's at all. Each scenario ends up in the file exactly once; a second
writer is refused; pdtp never changes a file it did not write.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdtp
import pdtp.sweeps as SW
from conftest import HangGuard
from hostile import expect_cli_error_here
from pdtp._sweep_output import arrow_table
from pdtp.errors import OutputFileError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MODELS = ["llama-3.1-8b", "llama-3.1-70b"]
# 40 scenarios in 3 chunks: 3 appends (CSV, JSON Lines) or 3 parts and a merge (Parquet).
GRID = {"gpus": range(1, 21), "gpu": "h100", "workers": 1, "chunk_size": 16, "as_frame": False}
FORMATS = [".csv", ".jsonl", ".parquet"]


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "solve_ms"} for r in rows]


@pytest.fixture(scope="module")
def fresh():
    return _strip(pdtp.sweep(MODELS, **GRID))


def _sweep(out, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = pdtp.sweep(MODELS, **{**GRID, **kw}, output=out)
    for w in caught:  # the only repair: a torn last line, named by file and line
        assert issubclass(w.category, SW.SweepFileWarning), w
        assert str(out) in str(w.message)
        assert ", line " in str(w.message) or ": unreadable" in str(w.message)
    return rows


def _assert_exactly_once(out: Path, fresh: list[dict]) -> None:
    """The file holds every scenario of the grid once, with the fresh sweep's values, and
    nothing of pdtp's bookkeeping is left behind."""
    on_disk = SW.read_rows(out)
    keys = [SW.scenario_key(r) for r in on_disk]
    assert len(keys) == len(set(keys)) == len(fresh), (len(keys), len(set(keys)), len(fresh))
    assert sorted(_strip(on_disk), key=SW.scenario_key) == sorted(fresh, key=SW.scenario_key)
    assert not out.with_name(out.name + ".parts").exists()
    assert not out.with_name(out.name + ".lock").exists()


# ---- kill -9 at every write ------------------------------------------------------------------

# The file-system calls the store makes. A crash point is (call number, before/after); a
# kill "before" an os.write writes half of its bytes first (a torn write).
_HOOKED = ("write", "replace", "unlink", "rmdir", "truncate", "ftruncate", "fsync", "mkdir")


def _die_at(point: int) -> None:
    """In a forked child: SIGKILL this process at crash point ``point``."""
    count = [0]
    target, after = divmod(point, 2)

    def hook(name, real):
        def call(*args, **kwargs):
            count[0] += 1
            if count[0] == target + 1:
                if not after:
                    if name == "write":
                        real(args[0], bytes(args[1])[: max(1, len(args[1]) // 2)])
                    os.kill(os.getpid(), signal.SIGKILL)
                try:
                    return real(*args, **kwargs)
                finally:  # after the call, whether it worked or raised
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    for name in _HOOKED:
        setattr(os, name, hook(name, getattr(os, name)))


def _run_killed(out: Path, point: int) -> bool:
    """Run the sweep in a forked child that dies at ``point``; True if it died there."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            _die_at(point)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pdtp.sweep(MODELS, **GRID, output=out)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the child sweep failed (its traceback is above)"
    return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="unmeetable: needs os.fork (POSIX)")
@pytest.mark.parametrize("ext", FORMATS)
def test_killed_at_every_write_then_resumed_holds_each_scenario_once(tmp_path, ext, fresh):
    """Every crash point of a whole sweep (Parquet: every part, the merge, the clean-up),
    each followed by a resume: always exactly once."""
    point = 0
    while True:
        out = tmp_path / f"p{point}" / f"s{ext}"
        out.parent.mkdir()
        died = _run_killed(out, point)
        rows = _sweep(out)
        assert _strip(rows) == fresh
        _assert_exactly_once(out, fresh)
        if not died:
            break  # past the last crash point
        point += 1
    assert point > (20 if ext == ".parquet" else 8)  # the hooks saw the writes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="unmeetable: needs os.fork (POSIX)")
@pytest.mark.parametrize("ext", FORMATS)
def test_killed_again_and_again_then_resumed(tmp_path, ext, fresh):
    """Several kills in a row at seeded random crash points (a resume killed too)."""
    rng = random.Random(f"kills{ext}")
    out = tmp_path / f"s{ext}"
    for _ in range(6):
        _run_killed(out, rng.randrange(0, 30))
    _sweep(out)
    _assert_exactly_once(out, fresh)


# ---- kill -9 from outside, at moments chosen by the clock --------------------------------------

# 1,056 scenarios in 33 chunks: long enough to be killed at a random moment.
_BIG = ["--models", "all", "--gpus", "1-24", "--gpu", "h100", "--workers", "1"]


def _cli(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pdtp",
            "sweep",
            *_BIG,
            "--chunk-size",
            "64",
            "-o",
            str(out),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(scope="module")
def big_fresh():
    return _strip(pdtp.sweep("all", gpus=range(1, 25), gpu="h100", workers=1, as_frame=False))


def test_kill_9_during_the_parquet_merge_then_rerun(tmp_path, big_fresh):
    """A real SIGKILL from another process while the merge is writing, then a rerun (the
    issue's reproducer: every row twice)."""
    out = tmp_path / "s.parquet"
    merging = tmp_path / "s.parquet.parts" / "merge.tmp"
    proc = _cli(out)
    deadline = time.monotonic() + 120
    while not merging.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before its merge was seen"
    rerun = _cli(out)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err.decode()
    _assert_exactly_once(out, big_fresh)


@pytest.mark.parametrize("ext", [".jsonl", ".parquet"])
def test_kill_9_at_random_moments_then_rerun(tmp_path, ext, big_fresh):
    out = tmp_path / f"s{ext}"
    rng = random.Random(f"clock{ext}")  # seeded: the same moments on every run
    for _ in range(2):
        proc = _cli(out)
        time.sleep(rng.uniform(0.2, 1.0))
        proc.kill()
        proc.communicate()
    rerun = _cli(out)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err.decode()
    _assert_exactly_once(out, big_fresh)


# ---- two writers ----------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import os, sys, time, pdtp
    out, ready, go = sys.argv[1:4]
    def progress(done, total):  # holds the output (locked) until told to go on
        if not os.path.exists(ready):
            open(ready, "w").close()
        while not os.path.exists(go):
            time.sleep(0.01)
    pdtp.sweep(["llama-3.1-8b", "llama-3.1-70b"], gpus=range(1, 21), gpu="h100", workers=1,
               chunk_size=16, output=out, progress=progress)
    """
)


def _holder(tmp_path: Path, out: Path) -> tuple[subprocess.Popen, Path]:
    ready, go = tmp_path / "ready", tmp_path / "go"
    for f in (ready, go):
        f.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out), str(ready), str(go)])
    guard = HangGuard(polls=12_000, interval_s=0.01)
    while not ready.exists():
        assert proc.poll() is None, "the holder exited before it was ready"
        guard.tick("the holder did not start")
    return proc, go


@pytest.mark.parametrize("ext", FORMATS)
def test_a_second_writer_is_refused_naming_the_first(tmp_path, ext, fresh):
    out = tmp_path / f"s{ext}"
    first, go = _holder(tmp_path, out)
    try:
        with pytest.raises(OutputFileError, match="another pdtp sweep") as e:
            pdtp.sweep(MODELS, **GRID, output=out)
        assert f"pid {first.pid}" in str(e.value) and str(out) in str(e.value)
        argv = ["sweep", "--models", ",".join(MODELS), "--gpus", "1-20", "--gpu", "h100"]
        expect_cli_error_here([*argv, "--workers", "1", "-o", str(out)], "another pdtp sweep")
    finally:
        go.touch()
        assert first.wait(timeout=120) == 0
    _assert_exactly_once(out, fresh)


@pytest.mark.parametrize("ext", FORMATS)
def test_a_writer_killed_while_holding_the_lock_leaves_no_stale_lock(tmp_path, ext, fresh):
    out = tmp_path / f"s{ext}"
    first, _ = _holder(tmp_path, out)
    first.kill()
    first.wait()
    assert out.with_name(out.name + ".lock").exists()  # left behind, but not held
    _sweep(out)
    _assert_exactly_once(out, fresh)


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_two_writers_started_together(tmp_path, ext, big_fresh):
    """Whatever the interleaving: each sweep either finishes or is refused cleanly, and the
    file holds each scenario once (the issue: every scenario twice, or FileNotFoundError)."""
    out = tmp_path / f"s{ext}"
    procs = [_cli(out) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1].decode() for p in procs]
    for p, err in zip(procs, errs):
        assert p.returncode == 0 or (p.returncode == 2 and "another pdtp sweep" in err), err
        assert "Traceback" not in err
    if any(p.returncode for p in procs):
        rerun = _cli(out)
        rerun.communicate(timeout=120)
    _assert_exactly_once(out, big_fresh)


# ---- files pdtp did not write are refused, untouched -------------------------------------------


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _foreign_parquet(path: Path) -> None:
    pq.write_table(pa.table({"model": ["x"], "gpus": [1]}), path)


FOREIGN = {
    # case: (output name, setup(folder), what the error names)
    "jsonl-unrelated": ("o.jsonl", lambda d: (d / "o.jsonl").write_text('{"a": 1}\n'), "o.jsonl"),
    "jsonl-one-torn-looking-line": ("o.jsonl", lambda d: (d / "o.jsonl").write_text('{"a": 1'), "o.jsonl"),
    "jsonl-array": ("o.jsonl", lambda d: (d / "o.jsonl").write_text("[1, 2]\n"), "o.jsonl"),
    "csv-unrelated-no-final-newline": ("o.csv", lambda d: (d / "o.csv").write_text("a,b\n1,2\n3,4"), "o.csv"),
    "csv-unrelated": ("o.csv", lambda d: (d / "o.csv").write_text("model,gpu\nx,y\n"), "o.csv"),
    "csv-one-line": ("o.csv", lambda d: (d / "o.csv").write_text("hello"), "o.csv"),
    "parquet-text": ("o.parquet", lambda d: (d / "o.parquet").write_text("hello"), "o.parquet"),
    "parquet-other-schema": ("o.parquet", lambda d: _foreign_parquet(d / "o.parquet"), "o.parquet"),
    "parts-folder-of-the-user": (
        "o.parquet",
        lambda d: ((d / "o.parquet.parts").mkdir(), (d / "o.parquet.parts" / "notes.txt").write_text("mine")),
        "o.parquet.parts",
    ),
    "parts-folder-with-a-user-file": (
        "o.parquet",
        lambda d: ((d / "o.parquet.parts").mkdir(), (d / "o.parquet.parts" / ".pdtp-sweep-parts").touch(),
                   (d / "o.parquet.parts" / "notes.txt").write_text("mine")),
        "notes.txt",
    ),
    "parts-is-a-file": ("o.parquet", lambda d: (d / "o.parquet.parts").write_text("mine"), "o.parquet.parts"),
    "lock-file-of-the-user": ("o.csv", lambda d: (d / "o.csv.lock").write_text("my notes"), "o.csv.lock"),
    "output-is-a-folder": ("o.csv", lambda d: (d / "o.csv").mkdir(), "o.csv"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_a_file_pdtp_did_not_write_is_refused_untouched(tmp_path, case):
    name, setup, named = FOREIGN[case]
    setup(tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(OutputFileError) as e:
        pdtp.sweep(MODELS, **GRID, output=tmp_path / name)
    assert named in str(e.value)
    assert _tree(tmp_path) == before
    # The CLI says the same, with no traceback and exit 2.
    argv = ["sweep", "--models", MODELS[0], "--gpus", "4", "--gpu", "h100", "--workers", "1"]
    expect_cli_error_here([*argv, "-o", str(tmp_path / name)], named)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("ext", FORMATS)
def test_an_empty_file_or_folder_is_taken_as_new(tmp_path, ext, fresh):
    """Nothing to lose: an empty output file (e.g. from mktemp), or an empty parts folder."""
    out = tmp_path / f"s{ext}"
    if ext == ".parquet":
        (tmp_path / "s.parquet.parts").mkdir()
    else:
        out.touch()
    _sweep(out)
    _assert_exactly_once(out, fresh)


def test_unwritable_output_is_one_clear_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputFileError, match="afile"):
        pdtp.sweep(MODELS, **GRID, output=tmp_path / "afile" / "s.csv")
    if Path("/proc").is_dir():
        with pytest.raises(OutputFileError, match="/proc/pdtp-x.csv"):
            pdtp.sweep(MODELS, **GRID, output="/proc/pdtp-x.csv")


# ---- damaged rows: the torn last line is repaired, anything else refused by file and line ------


def _written(tmp_path: Path, ext: str, gpus=range(1, 13)) -> Path:
    out = tmp_path / f"s{ext}"
    pdtp.sweep(MODELS[0], gpus=gpus, gpu="h100", workers=1, output=out, as_frame=False)
    return out


def _replace_line(path: Path, n: int, text: str) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[n - 1] = text.encode() + (b"\r\n" if path.suffix == ".csv" else b"\n")
    path.write_bytes(b"".join(lines))


DAMAGE = {
    # case: (format, line to replace, new text, words the error must contain)
    "csv-garbage": (".csv", 5, "this is not a row", ["line 5", "fields"]),
    "csv-int-column": (".csv", 4, None, ["line 4", "column gpus", "integer"]),
    "csv-status": (".csv", 3, None, ["line 3", "column status"]),
    "csv-missing-key": (".csv", 6, None, ["line 6", "column model"]),
    "jsonl-garbage": (".jsonl", 5, "#$%^ garbage", ["line 5", "not a JSON object"]),
    "jsonl-wrong-type": (".jsonl", 3, None, ["line 3", "column isl", "integer"]),
    "jsonl-extra-field": (".jsonl", 4, None, ["line 4", "unknown: extra"]),
    "jsonl-deep": (".jsonl", 2, "[" * 100_000, ["line 2"]),
}


def _damaged(path: Path, case: str, n: int) -> str:
    ext = path.suffix
    original = path.read_bytes().splitlines()[n - 1].decode()
    if ext == ".csv":
        fields = original.split(",")
        if case == "csv-int-column":
            fields[SW.COLUMNS.index("gpus")] = "four"
        elif case == "csv-status":
            fields[SW.COLUMNS.index("status")] = "MAYBE"
        else:
            fields[0] = ""
        return ",".join(fields)
    row = json.loads(original)
    if case == "jsonl-wrong-type":
        row["isl"] = "2048"
    else:
        row["extra"] = 1
    return json.dumps(row)


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_row_is_refused_naming_file_line_and_column(tmp_path, case):
    ext, n, text, words = DAMAGE[case]
    out = _written(tmp_path, ext)
    _replace_line(out, n, text if text is not None else _damaged(out, case, n))
    before = out.read_bytes()
    for attempt in (
        lambda: pdtp.sweep(MODELS[0], gpus=range(1, 21), gpu="h100", workers=1, output=out),
        lambda: SW.read_rows(out),
    ):
        with pytest.raises(OutputFileError) as e:
            attempt()
        assert str(out) in str(e.value)
        for w in words:
            assert w in str(e.value), str(e.value)
    assert out.read_bytes() == before


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_a_repeated_scenario_is_refused_naming_both_lines(tmp_path, ext):
    out = _written(tmp_path, ext)
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join([*lines, lines[3]]))
    with pytest.raises(
        OutputFileError, match=rf"line {len(lines) + 1}: the same scenario as .*line 4 "
    ):
        SW.read_rows(out)


def test_a_damaged_parquet_part_is_refused_naming_the_part(tmp_path):
    out = tmp_path / "s.parquet"
    parts = tmp_path / "s.parquet.parts"
    parts.mkdir()
    (parts / ".pdtp-sweep-parts").touch()
    rows = [tuple(r.values()) for r in pdtp.sweep(MODELS[0], gpus=[4], workers=1, as_frame=False)]
    bad = [(*rows[0][:9], "MAYBE", *rows[0][10:])]
    pq.write_table(arrow_table(bad), parts / "part-000001.parquet")
    with pytest.raises(OutputFileError, match=r"part-000001\.parquet, row 1: column status"):
        pdtp.sweep(MODELS[0], gpus=[4, 8], workers=1, output=out)
    assert sorted(os.listdir(parts)) == [".pdtp-sweep-parts", "part-000001.parquet"]


def test_an_unreadable_part_is_dropped_with_a_warning(tmp_path, fresh):
    """What a machine crash can leave (parts are renamed into place but not fsynced)."""
    out = tmp_path / "s.parquet"
    point = 0
    while len(list(out.parent.glob("s.parquet.parts/part-*.parquet"))) < 2:
        assert _run_killed(out, point)  # until two parts are renamed into place
        point += 1
    parts = sorted((tmp_path / "s.parquet.parts").glob("part-*.parquet"))
    parts[-1].write_bytes(b"")  # as after a power cut
    with pytest.warns(SW.SweepFileWarning, match=rf"{parts[-1].name}: unreadable"):
        pdtp.sweep(MODELS, **GRID, output=out)
    _assert_exactly_once(out, fresh)


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_a_torn_last_line_is_dropped_with_a_warning_naming_file_and_line(tmp_path, ext):
    out = _written(tmp_path, ext)
    whole = out.read_bytes()
    out.write_bytes(whole[:-40])  # a kill in the middle of the last row
    line = whole.count(b"\n")
    with pytest.warns(SW.SweepFileWarning, match=rf"{out.name}, line {line}: a torn last line"):
        assert len(SW.read_rows(out)) == 11  # reading leaves the file alone
    assert out.read_bytes() == whole[:-40]
    with pytest.warns(SW.SweepFileWarning, match="dropped"):
        rows = pdtp.sweep(MODELS[0], gpus=range(1, 13), gpu="h100", workers=1, output=out)
    assert len(rows) == 12 and len(SW.read_rows(out)) == 12


def test_the_cli_prints_the_repair_as_a_warning_line(tmp_path):
    out = _written(tmp_path, ".csv")
    out.write_bytes(out.read_bytes()[:-10])
    cli = subprocess.run(
        [sys.executable, "-m", "pdtp", "sweep", "--models", MODELS[0], "--gpus", "1-12",
         "--gpu", "h100", "--workers", "1", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert cli.stderr.startswith(f"pdtp sweep: warning: {out}, line 13: a torn last line")


# ---- property: any damage is either repaired exactly once or refused untouched -----------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pristine")
    return {ext: _written(folder, ext).read_bytes() for ext in (".csv", ".jsonl")}


def _resume(out: Path):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        return pdtp.sweep(
            MODELS[0], gpus=range(1, 13), gpu="h100", workers=1, output=out, as_frame=False
        )


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ext=st.sampled_from([".csv", ".jsonl"]), cut=st.floats(0, 1))
def test_any_prefix_of_a_file_resumes_exactly_once(tmp_path_factory, pristine, ext, cut):
    """What a kill leaves (any prefix) is always resumed, never refused."""
    data = pristine[ext]
    out = tmp_path_factory.mktemp("prefix") / f"s{ext}"
    out.write_bytes(data[: int(len(data) * cut)])
    _resume(out)
    on_disk = SW.read_rows(out)
    assert len({SW.scenario_key(r) for r in on_disk}) == len(on_disk) == 12


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    ext=st.sampled_from([".csv", ".jsonl"]),
    at=st.floats(0, 1),
    junk=st.binary(min_size=1, max_size=40) | st.sampled_from([b"\n", b",", b'"', b"\x00", b"}"]),
    replace=st.booleans(),
)
def test_any_damage_is_resumed_exactly_once_or_refused_untouched(
    tmp_path_factory, pristine, ext, at, junk, replace
):
    data = pristine[ext]
    i = int(len(data) * at)
    damaged = data[:i] + junk + data[i + (len(junk) if replace else 0) :]
    out = tmp_path_factory.mktemp("damage") / f"s{ext}"
    out.write_bytes(damaged)
    try:
        rows = _resume(out)
    except OutputFileError as e:
        assert str(out) in str(e) and ("line" in str(e) or "not a pdtp sweep file" in str(e))
        assert out.read_bytes() == damaged
        return
    assert len(rows) == 12
    on_disk = SW.read_rows(out)
    keys = [SW.scenario_key(r) for r in on_disk]
    assert len(set(keys)) == len(keys)  # nothing twice
    assert {SW.scenario_key(r) for r in rows} <= set(keys)  # the whole grid is there
