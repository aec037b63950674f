"""The hostile-input helper every area's tests can use: run a call (Python API or CLI) with
bad input and assert that it ends in **one** ``pdtp.PdtpError`` whose message names the
field — no other exception, no traceback, no hang, no crash.

Three ways to run a call, one promise each:

* :func:`call_api` — Python source run in a fresh subprocess, killed after ``timeout_s``
  (so a hang, a crash or memory exhaustion is reported, never inherited by pytest).
* :func:`run_cli` — ``python -m pdtp ARGV`` in a subprocess, same limits.
* :func:`call_here` — a callable run in this process on a watchdog thread (cheap enough
  for hypothesis; cannot interrupt native code that holds the GIL).
* :func:`run_cli_here` — ``pdtp.cli.main(ARGV)`` the same way.

Each returns an :class:`Outcome`; :func:`assert_pdtp_error` / :func:`assert_cli_error`
check it. Shortcuts: :func:`expect_api_error`, :func:`expect_cli_error`,
:func:`expect_error_here`. :func:`start_api` / :func:`start_cli` start several subprocesses
at once (their time overlaps) and ``.result()`` collects each.

Time limits are generous backstops against hangs (default 60 s), never performance
assertions: a correct answer takes well under a second.

Example::

    from hostile import expect_api_error, expect_cli_error

    expect_api_error("pdtp.remote_tp_rank(2**64, 8, 4)", "local_tp_rank")
    expect_cli_error(["sweep", "--gpus", "1-99999999999"], "gpus", "1,048,576")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pdtp

# A backstop against hangs, not a speed limit: a correct answer takes well under a second.
TIMEOUT_S = float(os.environ.get("PDTP_HOSTILE_TIMEOUT_S", "60"))
_MARK = "@@pdtp-hostile-outcome@@"

# Set in the child itself (a preexec_fn is unsafe when the parent has threads): the cap on
# its address space, from the environment.
_LIMIT = """
import os, sys
if os.environ.get("PDTP_HOSTILE_MEMORY") and sys.platform == "linux":
    import resource
    _cap = int(os.environ["PDTP_HOSTILE_MEMORY"])
    resource.setrlimit(resource.RLIMIT_AS, (_cap, _cap))
"""
# `python -m pdtp ARGV`, with the cap.
_CLI_CHILD = (
    _LIMIT
    + """
import runpy
sys.argv = ["pdtp", *sys.argv[1:]]
runpy.run_module("pdtp", run_name="__main__", alter_sys=True)
"""
)
# Run in the child: execute the source, report how it ended as one JSON line on stdout.
_CHILD = (
    _LIMIT
    + f"""
import json, sys, traceback
def _report(**kw):
    sys.stdout.flush()
    sys.stdout.write("\\n{_MARK}" + json.dumps(kw) + "\\n")
    sys.stdout.flush()
_ns = {{}}
try:
    exec(compile("import pdtp\\n" + sys.argv[1], "<hostile call>", "exec"), _ns)
except BaseException as e:
    _report(how="raised", mro=[c.__module__ + "." + c.__qualname__ for c in type(e).__mro__],
            message=str(e), detail=traceback.format_exc())
else:
    _report(how="returned", value=repr(_ns.get("result"))[:2000])
"""
)


@dataclass(frozen=True)
class Outcome:
    """How a hostile call ended.

    ``how``: ``"returned"``, ``"raised"`` (``mro``: the exception's classes, qualified),
    ``"exited"`` (a CLI run: ``returncode``, ``stdout``, ``stderr``), ``"timeout"`` or
    ``"crashed"`` (killed by a signal, or no report from the child)."""

    how: str
    what: str
    mro: tuple[str, ...] = ()
    message: str = ""
    detail: str = ""
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    value: str = ""

    def is_a(self, error: type[BaseException]) -> bool:
        return f"{error.__module__}.{error.__qualname__}" in self.mro

    def describe(self) -> str:
        head = f"{self.what}: {self.how}"
        if self.how == "raised":
            return f"{head} {self.mro[0] if self.mro else '?'}: {self.message}\n{self.detail}"
        if self.how == "returned":
            return f"{head} {self.value}"
        return f"{head} (rc={self.returncode})\nstdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-4000:]}"


class Pending:
    """A started subprocess; ``result()`` waits for it (killing it at the time limit). Its
    output is read as it comes (a full pipe must not look like a hang), and the limit runs
    from the start, so processes started together end together."""

    def __init__(self, what: str, proc: subprocess.Popen[bytes], timeout_s: float, cli: bool):
        self.what, self.proc, self.timeout_s, self.cli = what, proc, timeout_s, cli
        self.started = time.monotonic()
        self._outcome: Outcome | None = None
        self._chunks: dict[str, list[bytes]] = {"out": [], "err": []}
        self._readers = [
            threading.Thread(target=self._drain, args=(stream, self._chunks[key]), daemon=True)
            for key, stream in (("out", proc.stdout), ("err", proc.stderr))
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _drain(stream: Any, into: list[bytes]) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            into.append(chunk)

    def result(self) -> Outcome:
        if self._outcome is None:
            self._outcome = self._wait()
        return self._outcome

    def _text(self, key: str) -> str:
        return b"".join(self._chunks[key]).decode("utf-8", "replace")

    def _wait(self) -> Outcome:
        left = max(0.0, self.started + self.timeout_s - time.monotonic())
        try:
            self.proc.wait(timeout=left)
            timed_out = False
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            timed_out = True
        for t in self._readers:
            t.join()
        stdout, stderr = self._text("out"), self._text("err")
        rc = self.proc.returncode
        head, mark, report = stdout.rpartition(_MARK)
        if timed_out and not (mark and not self.cli):
            return Outcome(
                "timeout",
                self.what,
                stdout=stdout,
                stderr=stderr,
                detail=f"no answer within {self.timeout_s:g} s (a hang?)",
            )
        if self.cli:
            how = "crashed" if rc < 0 else "exited"
            return Outcome(how, self.what, returncode=rc, stdout=stdout, stderr=stderr)
        if not mark:
            return Outcome("crashed", self.what, returncode=rc, stdout=stdout, stderr=stderr)
        data = json.loads(report)  # the call ended (even if the interpreter then lingered)
        return Outcome(
            data["how"],
            self.what,
            mro=tuple(data.get("mro", ())),
            message=data.get("message", ""),
            detail=data.get("detail", ""),
            returncode=rc,
            stdout=head,
            stderr=stderr,
            value=data.get("value", ""),
        )


def _env(memory_bytes: int | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONIOENCODING": "utf-8"}
    env.pop("PDTP_HOSTILE_MEMORY", None)
    if memory_bytes is not None:
        env["PDTP_HOSTILE_MEMORY"] = str(int(memory_bytes))
    return env


def start_api(
    source: str,
    *,
    timeout_s: float = TIMEOUT_S,
    memory_bytes: int | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Pending:
    """Start ``source`` (Python; ``pdtp`` is imported; assign ``result`` to see a value) in
    a fresh interpreter. ``memory_bytes`` caps its address space (Linux)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, source],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(memory_bytes),
        cwd=cwd,
    )
    return Pending(source, proc, timeout_s, cli=False)


def start_cli(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout_s: float = TIMEOUT_S,
    memory_bytes: int | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Pending:
    """Start ``python -m pdtp ARGV`` (stdin: the bytes given, or nothing); ``memory_bytes``
    caps its address space (Linux)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI_CHILD, *argv],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(memory_bytes),
        cwd=cwd,
    )
    if stdin is not None:
        assert proc.stdin is not None

        def feed() -> None:
            try:
                proc.stdin.write(stdin)  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass  # the command stopped reading: that is its answer

        threading.Thread(target=feed, daemon=True).start()
    return Pending("pdtp " + " ".join(argv), proc, timeout_s, cli=True)


def call_api(source: str, **kw: Any) -> Outcome:
    return start_api(source, **kw).result()


def run_cli(argv: Sequence[str], **kw: Any) -> Outcome:
    return start_cli(argv, **kw).result()


def call_here(fn: Callable[..., Any], *args: Any, timeout_s: float = TIMEOUT_S, **kwargs: Any):
    """Run ``fn(*args, **kwargs)`` in this process on a watchdog thread."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # a PanicException is a BaseException
            box["error"] = e
            box["detail"] = traceback.format_exc()

    what = f"{getattr(fn, '__qualname__', fn)}(...)"
    thread = threading.Thread(target=target, name="pdtp-hostile-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return Outcome("timeout", what, detail=f"no answer within {timeout_s:g} s (a hang?)")
    if "error" in box:
        e = box["error"]
        return Outcome(
            "raised",
            what,
            mro=tuple(f"{c.__module__}.{c.__qualname__}" for c in type(e).__mro__),
            message=str(e),
            detail=box["detail"],
        )
    return Outcome("returned", what, value=repr(box.get("value"))[:2000])


def run_cli_here(argv: Sequence[str], *, timeout_s: float = TIMEOUT_S) -> Outcome:
    """``pdtp ARGV`` through ``pdtp.cli.main`` in this process (on a watchdog thread, stdout
    and stderr captured): much cheaper than :func:`run_cli`; an exception escaping ``main``
    is reported as ``"raised"`` (what a user would see as a traceback)."""
    import contextlib
    import io

    from pdtp.cli import main

    out, err = io.StringIO(), io.StringIO()

    def cli() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                return main(list(argv))
            except SystemExit as e:  # argparse's usage errors
                return e.code if isinstance(e.code, int) else 1

    ran = call_here(cli, timeout_s=timeout_s)
    what = "pdtp " + " ".join(argv)
    if ran.how != "returned":
        return Outcome(ran.how, what, ran.mro, ran.message, ran.detail, stderr=err.getvalue())
    return Outcome(
        "exited", what, returncode=int(ran.value), stdout=out.getvalue(), stderr=err.getvalue()
    )


def _names_all(text: str, names: Iterable[str]) -> list[str]:
    return [n for n in names if n not in text]


def assert_pdtp_error(
    outcome: Outcome, *names: str, error: type[BaseException] = pdtp.PdtpError
) -> Outcome:
    """The call raised ``error`` (a PdtpError subclass) whose message contains each of
    ``names`` (the field, the file, the limit...)."""
    assert outcome.how == "raised", f"expected a {error.__name__}, got:\n{outcome.describe()}"
    assert outcome.is_a(error), f"expected a {error.__name__}, got:\n{outcome.describe()}"
    missing = _names_all(outcome.message, names)
    assert not missing, f"the message does not name {missing}:\n{outcome.describe()}"
    return outcome


def assert_cli_error(outcome: Outcome, *names: str, exit_code: int = 2) -> Outcome:
    """The command exited with ``exit_code`` (2: bad input; 1: a "no" such as an infeasible
    demand), printed no traceback, and its output (stderr, then stdout) names each of
    ``names``."""
    assert outcome.how == "exited", f"expected exit {exit_code}, got:\n{outcome.describe()}"
    assert "Traceback (most recent call last)" not in outcome.stderr, outcome.describe()
    assert outcome.returncode == exit_code, outcome.describe()
    missing = _names_all(outcome.stderr + outcome.stdout, names)
    assert not missing, f"the output does not name {missing}:\n{outcome.describe()}"
    return outcome


def expect_api_error(
    source: str, *names: str, error: type[BaseException] = pdtp.PdtpError, **kw: Any
) -> Outcome:
    return assert_pdtp_error(call_api(source, **kw), *names, error=error)


def expect_cli_error(argv: Sequence[str], *names: str, exit_code: int = 2, **kw: Any) -> Outcome:
    return assert_cli_error(run_cli(argv, **kw), *names, exit_code=exit_code)


def expect_cli_error_here(
    argv: Sequence[str], *names: str, exit_code: int = 2, **kw: Any
) -> Outcome:
    return assert_cli_error(run_cli_here(argv, **kw), *names, exit_code=exit_code)


def expect_error_here(
    fn: Callable[..., Any],
    *args: Any,
    names: Sequence[str] = (),
    error: type[BaseException] = pdtp.PdtpError,
    timeout_s: float = TIMEOUT_S,
    **kwargs: Any,
) -> Outcome:
    return assert_pdtp_error(
        call_here(fn, *args, timeout_s=timeout_s, **kwargs), *names, error=error
    )
