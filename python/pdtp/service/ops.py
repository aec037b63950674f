"""The service's operations: each one is a CLI command, with the same inputs and answer.

A request's fields are the command's flags, read from the CLI's own parser (``--max-tp`` is
``max_tp``, the positional MODEL is ``model``); :func:`run` turns them into that command's
argument list, runs :func:`pdtp.cli.main` on it in the calling (worker) thread with ``--json``
and returns what it printed, parsed. So parsing, validation, defaults and the JSON answer
are the CLI's, one definition for both, and a flag added to the CLI is a field here at once.

Values are JSON: numbers, strings, ``true`` for a switch, lists for comma lists
(``"nodes": [8, 8, 5]``), objects for ``TYPE=N`` lists (``"gpus": {"mi300x": 16}``). A flag
that names a file takes the file's *content* (``"config": {...}``, ``"current": {<plan>}``,
``"demands": [{"model": ..., "demand_rps": ...}]``); the service writes it to a private
temporary folder, and never reads a path a client names.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import cli

__all__ = ["OPS", "Op", "Outcome", "ServiceError", "run", "run_custom"]


class ServiceError(Exception):
    """A request the service answers with an error: ``status`` (4xx, or 500 for a bug in
    pdtp, never with a traceback), a ``code``, the ``field`` at fault and its ``allowed``
    values where they are known."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        allowed: list[Any] | str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.allowed = field, allowed

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "field": self.field,
                "allowed": self.allowed,
            }
        }


# ---- fields, from the CLI's parser -----------------------------------------------------------

# Flags whose value is a file: the request carries the content, of this kind.
FILE_FIELDS = {
    "config": "json",  # an HF config.json object
    "current": "json",  # a plan (`solve --json` / `replan --json` output)
    "plan": "json",
    "demands": "demands",  # the fleet CSV's rows as objects, or the CSV text
    "trace": "text",  # simulate's request trace (CSV text)
    "hosts_file": "lines",  # hosts, one per line (a list or the text)
}
# Flags that take `TYPE=N,...` / `K=V,...` lists: a JSON object is written that way.
KEY_VALUE_FIELDS = {"gpus", "max_gpus", "prices", "move_cost", "ports"}
# Comma lists: a JSON list is joined with commas.
LIST_FIELDS = {"layouts", "node_hosts", "nodes"}
# Never fields: the service adds --json itself, writes no file where a client says, and reads
# no server file a client names (``--scenario``: a request's fields are its scenario).
EXCLUDED = {"json", "output", "help", "scenario"}


@dataclass(frozen=True)
class Field:
    """One request field: a flag of the command (``flag`` empty for the positional MODEL)."""

    name: str
    flag: str
    kind: str  # bool int float slo layout choice pool nodes keyvalues list file:<kind> str
    help: str = ""
    required: bool = False
    choices: tuple[Any, ...] = ()
    default: Any = None


def _kind(action: argparse.Action) -> str:
    dest, conv = action.dest, action.type
    if isinstance(action, argparse._StoreTrueAction):
        return "bool"
    if dest in FILE_FIELDS:
        return f"file:{FILE_FIELDS[dest]}"
    if action.choices:
        return "choice"
    name = getattr(conv, "__name__", "")
    if conv is int or name == "_count":
        return "int"
    if conv is float:
        return "float"
    if name == "_slo":
        return "slo"
    if name == "_layout":
        return "layout"
    if dest in ("gpus", "max_gpus"):
        return "pool"
    if dest == "nodes":
        return "nodes"
    if dest in KEY_VALUE_FIELDS:
        return "keyvalues"
    if dest in LIST_FIELDS:
        return "list"
    return "str"


def command_fields(command: str, exclude: tuple[str, ...] = ()) -> dict[str, Field]:
    """The request fields of CLI ``command``, in the parser's order."""
    sub = cli._subparser(cli.build_parser(), command)
    out: dict[str, Field] = {}
    for action in sub._actions:
        dest = action.dest
        if dest in EXCLUDED or dest in exclude or dest == argparse.SUPPRESS:
            continue
        long = [o for o in action.option_strings if o.startswith("--")]
        default = action.default
        if default is argparse.SUPPRESS or isinstance(action, argparse._StoreTrueAction):
            default = None
        out[dest] = Field(
            name=dest,
            flag=long[0] if long else "",
            kind=_kind(action),
            help=" ".join((action.help or "").split()).replace("%%", "%"),
            required=bool(action.required),
            choices=tuple(action.choices or ()),
            default=default,
        )
    return out


@dataclass(frozen=True)
class Op:
    """One HTTP operation: ``POST /v1/<name>`` runs ``pdtp <command> ... --json``."""

    name: str
    command: str
    summary: str
    fields: dict[str, Field] = field(default_factory=dict)
    # The answer when the command exits 1 with JSON: 200 (`check`: a valid "no") or 422.
    exit1_ok: bool = False
    # Whether the command takes --json (deploy prints JSON with --format json instead).
    json_flag: bool = True


def _ops() -> dict[str, Op]:
    deploy_fields = command_fields("deploy", exclude=("diff",))
    diff_keep: tuple[str, ...] = ("format", "vllm_version", "ports", "backend")
    diff_keep += ("node_hosts", "hosts_file", "proxy_host")
    diff_fields = {
        "old": Field("old", "", "file:json", "the deployed plan (a plan object)", True),
        "new": Field("new", "", "file:json", "the plan to move to (a plan object)", True),
        **{k: v for k, v in deploy_fields.items() if k in diff_keep},
    }
    # (name, CLI command, summary); `check` answers its "invalid" (exit 1) as a 200.
    specs: list[tuple[str, str, str]] = [
        ("check", "check", "Check a prefill/decode pair against vLLM's rules"),
        ("transfer_map", "map", "Which prefill rank sends which KV heads to which decode rank"),
        ("solve", "solve", "The best valid plan for a GPU pool"),
        ("size_for", "size-for", "The smallest valid plan that serves a demand"),
        ("replan", "replan", "Move a deployed plan to a new demand, and the stop/start diff"),
        ("solve_fleet", "fleet", "Share a GPU pool among several models"),
        ("simulate", "simulate", "Simulate a plan under load (TTFT/TPOT percentiles, goodput)"),
        ("deploy", "deploy", "Launch scripts, Kubernetes manifests or JSON for a plan"),
        ("models", "models", "The model catalog"),
        ("gpus", "gpus", "The GPU catalog"),
    ]
    ops: dict[str, Op] = {}
    for spec in specs:
        name, command, summary = spec
        fields = deploy_fields if name == "deploy" else command_fields(command)
        ops[name] = Op(
            name, command, summary, fields, exit1_ok=name == "check", json_flag=name != "deploy"
        )
    ops["deploy_diff"] = Op(
        "deploy_diff",
        "deploy",
        "What to stop and start to move from one plan to another",
        diff_fields,
        json_flag=False,
    )
    return ops


OPS: dict[str, Op] = _ops()


# ---- request -> argument list ----------------------------------------------------------------


def _scalar(f: Field, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ServiceError(400, "invalid_argument", f"{f.name}: expected a single value", f.name)
    return str(value)


def _render(f: Field, value: Any) -> str:
    """The flag's text for a JSON value (``{"mi300x": 16}`` -> ``mi300x=16``)."""
    if f.kind in ("keyvalues", "pool") and isinstance(value, Mapping):
        return ",".join(f"{k}={_scalar(f, v)}" for k, v in value.items())
    if f.kind == "nodes" and isinstance(value, Mapping):
        return ";".join(
            f"{k}:{','.join(_scalar(f, n) for n in v)}" if isinstance(v, list) else f"{k}:{v}"
            for k, v in value.items()
        )
    if f.kind in ("list", "nodes") and isinstance(value, list):
        return ",".join(_scalar(f, v) for v in value)
    return _scalar(f, value)


def _write_file(f: Field, value: Any, folder: str) -> str:
    """Write a file field's content to ``folder``; its path for the flag."""
    kind = f.kind.split(":", 1)[1]
    if kind == "json":
        if not isinstance(value, Mapping):
            raise ServiceError(400, "invalid_argument", f"{f.name}: expected a JSON object", f.name)
        text = json.dumps(value)
    elif kind == "demands" and isinstance(value, list):
        text = _demands_csv(f, value)
    elif kind == "lines" and isinstance(value, list):
        text = "\n".join(_scalar(f, v) for v in value) + "\n"
    elif isinstance(value, str):
        text = value
    else:
        raise ServiceError(400, "invalid_argument", f"{f.name}: expected text", f.name)
    path = os.path.join(folder, f"{f.name}.json" if kind == "json" else f.name)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def _demands_csv(f: Field, rows: list[Any]) -> str:
    columns = list(cli.DEMAND_COLUMNS)
    for row in rows:
        if not isinstance(row, Mapping):
            raise ServiceError(
                400,
                "invalid_argument",
                f"{f.name}: expected objects with keys "
                f"{', '.join(cli.DEMAND_COLUMNS + cli.DEMAND_OPTIONAL)}",
                f.name,
                list(cli.DEMAND_COLUMNS + cli.DEMAND_OPTIONAL),
            )
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return buf.getvalue()


def _config_as_model(op: Op, body: Mapping[str, Any]) -> Mapping[str, Any]:
    """An uploaded ``config`` goes in as the model itself, as JSON text (which the CLI's
    model argument reads like a config dict): a file would name the model after the
    server's temporary folder and launch lines would serve that folder."""
    config = body.get("config")
    if config is None or "model" not in op.fields:
        return body
    if body.get("model") is not None:
        raise ServiceError(400, "invalid_argument", "give model or config, not both", "config")
    if not isinstance(config, Mapping):
        raise ServiceError(
            400, "invalid_argument", "config: expected the config.json object", "config"
        )
    rest = {k: v for k, v in body.items() if k != "config"}
    return {**rest, "model": json.dumps(config)}


def argv_for(op: Op, body: Mapping[str, Any], folder: str) -> list[str]:
    """``pdtp <command>``'s argument list for a request (``--json`` added where it is a flag;
    ``deploy`` prints JSON for ``--format json``)."""
    argv = [op.command]
    unknown = [k for k in body if k not in op.fields]
    if unknown:
        raise ServiceError(
            400,
            "unknown_field",
            f"{op.name} has no field {unknown[0]!r}",
            unknown[0],
            sorted(op.fields),
        )
    body = _config_as_model(op, body)
    for name, f in op.fields.items():
        value = body.get(name)
        if value is None or value is False:
            if f.required:
                raise ServiceError(400, "missing_field", f"{name} is required", name)
            continue
        if f.kind == "bool":
            if value is not True:
                raise ServiceError(400, "invalid_argument", f"{name}: expected true or false", name)
            argv.append(f.flag)
        elif f.kind.startswith("file:"):
            path = _write_file(f, value, folder)
            if name in ("old", "new"):
                continue  # both go to --diff below, in order
            argv.append(f"{f.flag}={path}")
        elif not f.flag:  # the positional MODEL: right after the command
            text = _scalar(f, value)
            if text.startswith("-"):
                raise ServiceError(400, "invalid_argument", f"model: unknown name {text!r}", name)
            argv.insert(1, text)
        else:
            argv.append(f"{f.flag}={_render(f, value)}")  # `=`: a value may start with '-'
    if op.name == "deploy_diff":
        argv += ["--diff", os.path.join(folder, "old.json"), os.path.join(folder, "new.json")]
    return [*argv, "--json"] if op.json_flag else argv


# ---- running a command -----------------------------------------------------------------------

_local = threading.local()
_parser_lock = threading.Lock()
_parsers: list[argparse.ArgumentParser] = []


def _parser() -> argparse.ArgumentParser:
    """The CLI's parser, built once: parsing leaves it as it was, so threads share it."""
    with _parser_lock:
        if not _parsers:
            _parsers.append(cli.build_parser())
        return _parsers[0]


class _ThreadStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` for a process that serves: what a worker thread writes
    while it runs a command goes to that thread's buffer; everything else to the stream this
    one replaced. (The CLI prints; this lets many commands print at once.)"""

    def __init__(self, name: str, fallback: Any) -> None:
        self._name, self.fallback = name, fallback

    def _target(self) -> Any:
        return getattr(_local, self._name, None) or self.fallback

    def write(self, s: str) -> int:
        return int(self._target().write(s))

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("a buffer has no file descriptor")


_install_lock = threading.Lock()


def _install_streams() -> None:
    with _install_lock:
        for name in ("stdout", "stderr"):
            if not isinstance(getattr(sys, name), _ThreadStream):
                setattr(sys, name, _ThreadStream(name, getattr(sys, name)))


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    _install_streams()
    out, err = io.StringIO(), io.StringIO()
    _local.stdout, _local.stderr = out, err
    try:
        yield out, err
    finally:
        _local.stdout = _local.stderr = None


@dataclass(frozen=True)
class Outcome:
    """An answer: the HTTP status and the JSON body."""

    status: int
    body: Any


def _check_text(body: Mapping[str, Any]) -> None:
    """Every string in the body (keys too, at any depth) is text a file or a command line
    can carry: JSON's ``"\\udcff"`` decodes to a lone surrogate, which no UTF-8 file holds."""
    for name, value in body.items():
        stack = [name, value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    field = name if isinstance(name, str) and name.isidentifier() else None
                    raise ServiceError(
                        400,
                        "invalid_argument",
                        f"{field or 'a field name'}: text must be valid Unicode (it holds a "
                        "lone surrogate, e.g. \\udcff)",
                        field,
                    ) from None
            elif isinstance(item, Mapping):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)


def _limit_time(op: Op, body: Mapping[str, Any], max_time_s: float | None) -> dict[str, Any]:
    """The body with the planner's ``time_limit`` at most the server's (none given: the
    server's where the CLI's default is longer)."""
    body = dict(body)
    time_limit = op.fields.get("time_limit")
    if time_limit is not None and max_time_s is not None:
        given = body.get("time_limit")
        if isinstance(given, int | float) and not isinstance(given, bool) and given > max_time_s:
            raise ServiceError(
                400,
                "invalid_argument",
                f"time_limit: at most {max_time_s:g} s on this server, got {given:g}",
                "time_limit",
                f"0 < time_limit <= {max_time_s:g}",
            )
        if given is None and (time_limit.default or 0) > max_time_s:
            body["time_limit"] = max_time_s
    return body


def run(op: Op, body: Mapping[str, Any], *, max_time_s: float | None = None) -> Outcome:
    """Run ``op`` for a request body in this thread: the command's JSON, or a ServiceError."""
    _check_text(body)
    body = _limit_time(op, body, max_time_s)
    files = None
    if op.name in ("deploy", "deploy_diff") and body.get("format", "scripts") != "json":
        files = True
    with tempfile.TemporaryDirectory(prefix="pdtp-serve-") as folder:
        argv = argv_for(op, body, folder)
        if files:
            out_dir = os.path.join(folder, "out")
            argv = [*argv, "-o", out_dir]
        with _captured() as (out, err):
            try:
                code = cli.main(argv, parser=_parser())
            except SystemExit as e:  # argparse's usage errors exit (after one line on err)
                code = e.code if isinstance(e.code, int) else cli.EXIT_USAGE
        stdout, stderr = out.getvalue(), err.getvalue()
        if code == cli.EXIT_OK and files:
            names = sorted(os.listdir(out_dir))
            texts = {}
            for name in names:
                with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                    texts[name] = f.read()
            return Outcome(200, {"format": body.get("format", "scripts"), "files": texts})
        return _outcome(op, code, stdout, _clean(stderr, folder, op), body)


def _outcome(op: Op, code: int, stdout: str, message: str, body: Mapping[str, Any]) -> Outcome:
    answer = None
    if stdout.strip():
        with contextlib.suppress(ValueError):
            answer = json.loads(stdout)
    if code == cli.EXIT_OK and answer is not None:
        return Outcome(200, answer)
    if code == cli.EXIT_INVALID and answer is not None:
        return Outcome(200 if op.exit1_ok else 422, answer)
    if code == cli.EXIT_INVALID:
        raise ServiceError(422, "invalid_pair", message, *_field_of(op, message, body))
    if code == cli.EXIT_USAGE:
        raise ServiceError(400, "invalid_argument", message, *_field_of(op, message, body))
    raise ServiceError(500, "internal", message or f"{op.name}: no answer (exit {code})")


_PREFIX = re.compile(r"^pdtp(?: [a-z-]+)?: (?:error: |invalid pair: |internal error: )?")
_SUFFIX = re.compile(r" \(see `pdtp [a-z-]+ --help`\)$")


def _clean(stderr: str, folder: str, op: Op) -> str:
    """The CLI's error line in the request's words: no prefix, fields for flags, and the
    temporary files by the fields that gave them."""
    line = " ".join(stderr.strip().splitlines()[-1:]).strip() if stderr.strip() else ""
    line = _SUFFIX.sub("", _PREFIX.sub("", line))
    for name in op.fields:
        for suffix in (".json", ""):
            line = line.replace(os.path.join(folder, name + suffix), name)
    line = line.replace(os.path.join(folder, "out"), "output").replace(folder, "request")
    flags = sorted(((f.flag, n) for n, f in op.fields.items() if f.flag), key=lambda x: -len(x[0]))
    for flag, name in flags:
        line = re.sub(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", name, line)
    return line.replace("MODEL", "model")


def _field_of(
    op: Op, message: str, body: Mapping[str, Any] | None = None
) -> tuple[str | None, list[Any] | None]:
    """The field a message is about and that field's allowed values: the field whose value
    the message quotes, else the first field it names (outside `command` quotes)."""
    for name, value in (body or {}).items():
        if isinstance(value, str) and value and f"'{value}'" in message and name in op.fields:
            return name, allowed_values(op.fields[name])
    message = re.sub(r"`[^`]*`", "", message)
    best: tuple[int, str] | None = None
    for name in op.fields:
        m = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), name)
    if best is None:
        return None, None
    name = best[1]
    return name, allowed_values(op.fields[name])


def allowed_values(f: Field) -> list[Any] | None:
    """A field's allowed values where they are a list: its choices, or the catalog's names."""
    if f.choices:
        return list(f.choices)
    if f.name in ("gpu", "connector", "model"):
        import pdtp

        if f.name == "gpu":
            return [g.name for g in pdtp.gpus()]
        if f.name == "connector":
            return [c.name for c in pdtp.connectors()]
        return [m.name for m in pdtp.models()]
    return None


# ---- operations with no CLI command of their own ---------------------------------------------

# `pareto` takes solve's fields (model, pool, workload, connector, limits) plus its targets.
_PARETO_SOLVE_FIELDS = (
    "model",
    "config",
    "gpus",
    "nodes",
    "gpu",
    "gpus_per_node",
    "connector",
    "vllm_version",
    "mode",
    "layouts",
    "isl",
    "osl",
    "ttft",
    "weight_dtype",
    "kv_dtype",
    "max_tp",
    "max_acks",
    "gpu_memory_utilization",
    "time_limit",
)
CUSTOM_OPS: dict[str, Op] = {
    "pareto": Op(
        "pareto",
        "solve",
        "Throughput per GPU against tokens/s per user (the frontier)",
        {
            **{k: v for k, v in OPS["solve"].fields.items() if k in _PARETO_SOLVE_FIELDS},
            "tpot_targets": Field(
                "tpot_targets", "", "targets", "TPOT targets in ms (default 5 ... 200 ms)"
            ),
        },
    ),
    "pairs": Op(
        "pairs",
        "check",
        "Every (prefill TP, decode TP) pair's verdict (the heatmap)",
        {
            **{
                k: v
                for k, v in OPS["check"].fields.items()
                if k in ("model", "config", "connector", "vllm_version", "max_acks")
            },
            "sizes": Field("sizes", "", "targets", "TP sizes on both axes (default 1,2,4,8)"),
        },
    ),
}


def run_custom(op: Op, body: Mapping[str, Any], *, max_time_s: float | None = None) -> Outcome:
    """``pareto`` and ``pairs``: the Python API on inputs parsed by the CLI's parser."""
    _check_text(body)
    body = _limit_time(op, body, max_time_s)
    extra_name = "tpot_targets" if op.name == "pareto" else "sizes"
    extra = body.pop(extra_name, None)
    if extra is not None and not (
        isinstance(extra, list)
        and extra
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in extra)
    ):
        raise ServiceError(
            400, "invalid_argument", f"{extra_name}: expected a list of numbers", extra_name
        )
    base = OPS[op.command]
    inner = Op(op.name, op.command, op.summary, {**op.fields})
    inner.fields.pop(extra_name)
    with tempfile.TemporaryDirectory(prefix="pdtp-serve-") as folder, _captured() as (_, err):
        try:
            if op.name == "pareto":
                return Outcome(200, _pareto(inner, base, body, extra, folder, max_time_s))
            return Outcome(200, _pairs(inner, base, body, extra, folder))
        except ServiceError:
            raise
        except SystemExit:  # argparse's own usage error, already on err
            text = _clean(err.getvalue(), folder, inner)
            raise ServiceError(
                400, "invalid_argument", text, *_field_of(inner, text, body)
            ) from None
        except cli.UsageError as e:
            message = _clean(
                cli.in_cli_words(str(e), cli.flag_names(_sub(op.command))), folder, inner
            )
            raise ServiceError(
                400, "invalid_argument", message, *_field_of(inner, message, body)
            ) from e
        except Exception as e:
            from ..errors import InfeasibleError, PdtpError

            if isinstance(e, InfeasibleError):
                body_out = {"status": "INFEASIBLE", "reason": str(e), "reasons": list(e.reasons)}
                return Outcome(422, body_out)
            if isinstance(e, PdtpError | TypeError | ValueError | OverflowError):
                text = cli.in_cli_words(str(e), cli.flag_names(_sub(op.command)))
                message = _clean(text, folder, inner)
                raise ServiceError(
                    400, "invalid_argument", message, *_field_of(inner, message, body)
                ) from None
            raise ServiceError(500, "internal", f"{type(e).__name__}: {e}") from None


def _sub(command: str) -> argparse.ArgumentParser:
    return cli._subparser(_parser(), command)


def _parsed(op: Op, body: Mapping[str, Any], folder: str) -> argparse.Namespace:
    argv = [a for a in argv_for(op, body, folder) if a != "--json"]  # nothing is printed
    sub = _sub(op.command)
    args = _parser().parse_args(argv)
    args._parser, args._flags = sub, cli.flag_names(sub)
    return args


def _pareto(
    op: Op, base: Op, body: Mapping[str, Any], targets: Any, folder: str, max_time_s: Any
) -> dict[str, Any]:
    from ..planning.pareto import pareto

    args = _parsed(op, body, folder)
    pool = cli._pool(args, "--gpus")
    pool.pop("prices", None)
    result = pareto(
        cli._solve_model(args),
        **pool,
        gpu=args.gpu,
        gpus_per_node=args.gpus_per_node,
        workload=cli._workload(args),
        tpot_ms=targets,
        connector=args.connector,
        vllm_version=args.vllm_version,
        mode=args.mode,
        layouts=args.layouts,
        max_tp=args.max_tp,
        max_acks=args.max_acks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        time_limit_s=args.time_limit,
    )
    return result.to_dict()


MAX_PAIR_SIZES = 8


def _pairs(op: Op, base: Op, body: Mapping[str, Any], sizes: Any, folder: str) -> dict[str, Any]:
    from ..catalog import resolve_model
    from ..check import check, model_shape

    sizes = [1, 2, 4, 8] if sizes is None else sizes
    if len(sizes) > MAX_PAIR_SIZES or not all(isinstance(s, int) and s >= 1 for s in sizes):
        raise ServiceError(
            400,
            "invalid_argument",
            f"sizes: 1 to {MAX_PAIR_SIZES} positive TP sizes",
            "sizes",
        )
    args = _parsed(op, body, folder)
    if bool(args.model) == bool(args.config):
        raise cli.UsageError("give --model NAME or --config PATH (one of them)")
    model = resolve_model(cli._model_arg(args))
    shape = model_shape(model)
    cells = []
    for p in sizes:
        row = []
        for d in sizes:
            r = check(
                shape,
                p,
                d,
                connector=args.connector,
                vllm_version=args.vllm_version,
                max_acks=args.max_acks,
                alternatives=0,
            )
            first = r.violations[0] if r.violations else None
            row.append(
                {
                    "prefill_tp": p,
                    "decode_tp": d,
                    "ok": r.ok,
                    "code": first.code if first else ("warning" if r.warnings else "valid"),
                    "vllm_error": first.vllm_error if first else None,
                    "message": first.message if first else "; ".join(w.message for w in r.warnings),
                }
            )
        cells.append(row)
    return {"model": model.name, "connector": args.connector, "sizes": sizes, "cells": cells}
