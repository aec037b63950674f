"""The one reader of a plan's JSON: :meth:`pdtp.Plan.from_dict` (and ``from_json``).

A plan file is input like any argument: every field is checked before anything is built
from it, and a plan vLLM would refuse — a P/D pair the connector's rules reject, a TP size the
model's heads do not divide, a KV role the connector does not have, MoRIIO on NVIDIA GPUs, a
GPU given to two instances, an instance listed twice — is refused naming the field. What
``Plan.to_dict`` writes reads back as an equal plan (same placement); a plan written by hand
may leave out what it does not know (the predicted numbers read as 0, ``status`` ``"GIVEN"``).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._validate import short_repr
from ..errors import ArgumentTypeError, InvalidArgumentError, PdtpError, UnknownNameError
from ..layout import Layout

if TYPE_CHECKING:
    from .._model import Model
    from .plan import Plan

# What `Plan.to_dict` writes that is derived from the rest (read, checked, not stored), and
# what `pdtp solve --json` adds.
DERIVED = (
    "gpus_used",
    "bottleneck",
    "output_tokens_per_dollar",
    "vllm_commands",
    "launch_note",
    "quantization",  # follows from model_spec (Plan.quantization)
)
ROLES = ("prefill", "decode", "aggregated")
# Bounds shared with the planners: instance counts, node sizes, GPU counts.
MAX_INSTANCES = 1 << 24
MAX_GPUS_PER_NODE = 1 << 10
MAX_GPUS = 1 << 40
MAX_TEXT = 1 << 16


def bad(path: str, what: str, value: Any) -> InvalidArgumentError:
    return InvalidArgumentError(f"plan[{path!r}] must be {what}, got {short_repr(value)}")


def text(d: Mapping[str, Any], key: str, default: Any = ..., *, none: bool = False) -> Any:
    if key not in d or (d[key] is None and not none and default is not ...):
        if default is ...:
            raise InvalidArgumentError(f"plan is missing {key!r} (`pdtp solve --json` writes it)")
        return default
    v = d[key]
    if v is None and none:
        return None
    if not isinstance(v, str) or len(v) > MAX_TEXT or "\0" in v:
        raise ArgumentTypeError(
            f"plan[{key!r}] must be a string{' or null' if none else ''}, got {short_repr(v)}"
        )
    return v


def integer(path: str, v: Any, minimum: int, maximum: int) -> int:
    if type(v) is int and minimum <= v <= maximum:  # the common case, without an ABC check
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        else:
            raise ArgumentTypeError(
                f"plan[{path}] must be an integer in [{minimum}, {maximum}], got {short_repr(v)}"
            )
    if not minimum <= int(v) <= maximum:
        raise InvalidArgumentError(
            f"plan[{path}] must be an integer in [{minimum}, {maximum}], got {short_repr(v)}"
        )
    return int(v)


def number(path: str, v: Any, *, none: bool = False, positive: bool = False) -> Any:
    if v is None and none:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ArgumentTypeError(
            f"plan[{path}] must be a number{' or null' if none else ''}, got {short_repr(v)}"
        )
    f = float(v)
    if not (math.isfinite(f) and (f > 0 if positive else f >= 0)):
        raise InvalidArgumentError(
            f"plan[{path}] must be a finite number {'> 0' if positive else '>= 0'}, got "
            f"{short_repr(v)}"
        )
    return f


def strings(path: str, v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list | tuple) or not all(
        isinstance(x, str) and len(x) <= MAX_TEXT for x in v
    ):
        raise ArgumentTypeError(f"plan[{path!r}] must be a list of strings, got {short_repr(v)}")
    return tuple(v)


def launch_name(key: str, v: Any) -> None:
    """A name a launch line passes to ``vllm serve``: quoting keeps it inert in a shell, but
    a leading ``-`` would still read as an option."""
    if v is not None and (not v.strip() or v.startswith("-")):
        raise InvalidArgumentError(
            f"plan[{key!r}] must be an HF id, a path or a name not starting with '-', got "
            f"{short_repr(v)}"
        )


def catalog_model(name: str) -> Model | None:
    """The catalog model of a name or HF id, without asking the Hub (reading a plan file
    never goes to the network)."""
    from .. import catalog

    index = catalog._lookup(catalog._model_index(), name)
    return None if index is None else catalog._catalog_model(index)


def model_of(d: Mapping[str, Any], given: Any) -> Model:
    from .._model import Model

    if given is not None:
        from ..catalog import resolve_model

        return resolve_model(given)
    spec = d.get("model_spec")
    if spec is not None:
        if not isinstance(spec, Mapping):
            raise ArgumentTypeError(
                f"plan['model_spec'] must be a model's dict (Model.to_dict()), got "
                f"{short_repr(spec)}"
            )
        try:
            return Model.from_dict(spec)
        except PdtpError as e:
            raise InvalidArgumentError(f"plan['model_spec']: {e}") from None
    for key in ("model", "model_id"):
        name = text(d, key, None)
        if name is not None:
            found = catalog_model(name)
            if found is not None:
                return found
    raise UnknownNameError(
        f"plan names model {short_repr(d.get('model') or d.get('model_id'))}, which is not "
        "in pdtp's catalog, and has no 'model_spec' (Plan.to_dict() writes the model's shape "
        "there); or pass model= to Plan.from_dict"
    )


def gpus_of(name: str) -> tuple[Any, ...]:
    """The catalog GPUs of ``"mi300x"`` or of a two-type plan's ``"mi300x+mi355x"``."""
    from ..catalog import gpu

    out = []
    for part in name.split("+"):
        try:
            out.append(gpu(part))
        except UnknownNameError as e:
            raise UnknownNameError(f"plan['gpu']: {e}") from None
    return tuple(out)


def side_of(role: str, v: Any, gpu_names: Sequence[str]) -> Any:
    from .plan import Side

    if v is None:
        return None
    where = f"{role!r}"
    if not isinstance(v, Mapping):
        raise ArgumentTypeError(
            f"plan[{where}] must be a dict with 'tp' and 'instances', got {short_repr(v)}"
        )
    allowed = {"tp", "instances", "gpus", "layout", "pp", "dp", "ep", "gpu"}
    unknown = sorted(map(str, set(v) - allowed))
    if unknown:
        raise InvalidArgumentError(
            f"plan[{where}] has unknown field(s) {unknown}; allowed: {', '.join(sorted(allowed))}"
        )
    for k in ("tp", "instances"):
        if k not in v:
            raise InvalidArgumentError(f"plan[{where}] is missing {k!r}")
    from .._validate import MAX_TP

    tp = integer(f"{where}]['tp'", v["tp"], 1, MAX_TP)
    n = integer(f"{where}]['instances'", v["instances"], 0, MAX_INSTANCES)
    parts = {
        "pp": integer(f"{where}]['pp'", v.get("pp", 1), 1, MAX_TP),
        "dp": integer(f"{where}]['dp'", v.get("dp", 1), 1, MAX_TP),
    }
    ep = v.get("ep", False)
    if not isinstance(ep, bool):
        raise ArgumentTypeError(f"plan[{where}]['ep'] must be true or false, got {short_repr(ep)}")
    layout = Layout(tp, parts["pp"], parts["dp"], ep)
    if v.get("layout") is not None:
        named = Layout.of(v["layout"], f"plan[{where}]['layout']")
        given = {k: v[k] for k in ("tp", "pp", "dp", "ep") if k in v}
        if any(getattr(named, k) != x for k, x in given.items()):
            raise InvalidArgumentError(
                f"plan[{where}]['layout'] is {named}, but its fields say {layout}"
            )
        layout = named
    side = Side.of(layout, n, None)
    if v.get("gpus") is not None and integer(f"{where}]['gpus'", v["gpus"], 0, MAX_GPUS) != (
        side.gpus
    ):
        raise InvalidArgumentError(
            f"plan[{where}]['gpus'] is {v['gpus']}, but {n} instance(s) of {layout} use {side.gpus}"
        )
    gpu = v.get("gpu")
    if gpu is not None:
        if not isinstance(gpu, str):
            raise ArgumentTypeError(f"plan[{where}]['gpu'] must be a string, got {short_repr(gpu)}")
        canonical = gpus_of(gpu)[0].name if "+" not in gpu else gpu
        if canonical not in gpu_names:
            raise InvalidArgumentError(
                f"plan[{where}]['gpu'] is {gpu!r}, not the plan's GPU type "
                f"({' or '.join(gpu_names)})"
            )
        gpu = canonical
    return Side.of(layout, n, gpu)


def placement_of(
    rows: Any, sides: Mapping[str, Any], gpu_names: Sequence[str], node_size: int
) -> tuple[Any, ...]:
    from .plan import Placement

    if not isinstance(rows, list):
        raise ArgumentTypeError(
            f"plan['placement'] must be a list of {{role, index, node, devices}}, got "
            f"{short_repr(rows)}"
        )
    out = []
    seen: set[tuple[str, int]] = set()
    busy: dict[tuple[int, int], str] = {}
    for i, r in enumerate(rows):
        where = f"'placement'][{i}"
        if not isinstance(r, Mapping):
            raise ArgumentTypeError(f"plan[{where}] must be a dict, got {short_repr(r)}")
        unknown = sorted(map(str, set(r) - {"role", "index", "node", "nodes", "devices", "gpu"}))
        if unknown:
            raise InvalidArgumentError(f"plan[{where}] has unknown field(s) {unknown}")
        role = r.get("role")
        if not isinstance(role, str) or role not in sides:
            raise InvalidArgumentError(
                f"plan[{where}]['role'] must be one of the plan's roles ({', '.join(sides)}), "
                f"got {short_repr(r.get('role'))}"
            )
        side = sides[role]
        index = integer(f"{where}]['index'", r.get("index"), 0, MAX_INSTANCES)
        if index >= side.instances:
            raise InvalidArgumentError(
                f"plan[{where}]: {role} {index} does not exist (the plan has {side.instances} "
                f"{role} instance(s), numbered from 0)"
            )
        if (role, index) in seen:
            raise InvalidArgumentError(f"plan[{where}]: {role} {index} is listed twice")
        seen.add((role, index))
        node = integer(f"{where}]['node'", r.get("node"), 0, MAX_GPUS)
        nodes_v = r.get("nodes", [node])
        if not isinstance(nodes_v, list) or not nodes_v:
            raise ArgumentTypeError(
                f"plan[{where}]['nodes'] must be a list of node numbers, got {short_repr(nodes_v)}"
            )
        nodes = tuple(integer(f"{where}]['nodes'", x, 0, MAX_GPUS) for x in nodes_v)
        if nodes[0] != node or len(set(nodes)) != len(nodes):
            raise InvalidArgumentError(
                f"plan[{where}]['nodes'] must be distinct nodes starting with 'node' ({node}), "
                f"got {list(nodes)}"
            )
        devs_v = r.get("devices")
        if not isinstance(devs_v, list):
            raise ArgumentTypeError(
                f"plan[{where}]['devices'] must be a list of device numbers, got "
                f"{short_repr(devs_v)}"
            )
        devices = tuple(integer(f"{where}]['devices'", x, 0, node_size - 1) for x in devs_v)
        per = side.gpus_per_instance
        if (
            per % len(nodes)
            or len(devices) != per // len(nodes)
            or len(set(devices)) != len(devices)
        ):
            raise InvalidArgumentError(
                f"plan[{where}]: {role} {index} ({side.layout}, {per} GPUs) on {len(nodes)} "
                f"node(s) needs {per // len(nodes) if per % len(nodes) == 0 else '?'} distinct "
                f"devices per node, got {list(devices)}"
            )
        gpu = r.get("gpu", side.gpu or gpu_names[0])
        want = side.gpu or (gpu_names[0] if len(gpu_names) == 1 else None)
        if not isinstance(gpu, str) or (want is not None and gpu != want) or gpu not in gpu_names:
            raise InvalidArgumentError(
                f"plan[{where}]['gpu'] must be {want or ' or '.join(gpu_names)!r} (its side's "
                f"GPU type), got {short_repr(gpu)}"
            )
        for n in nodes:
            for dev in devices:
                other = busy.get((n, dev))
                if other is not None:
                    raise InvalidArgumentError(
                        f"plan[{where}]: GPU {dev} of node {n} is given to {other} and to "
                        f"{role} {index}"
                    )
                busy[(n, dev)] = f"{role} {index}"
        out.append(Placement(role, index, node, devices, gpu, nodes))
    missing = [
        f"{role} {i}"
        for role, s in sides.items()
        for i in range(s.instances)
        if (role, i) not in seen
    ]
    if missing and out:
        raise InvalidArgumentError(
            f"plan['placement'] does not place {', '.join(missing[:4])}"
            f"{' …' if len(missing) > 4 else ''}"
        )
    out.sort(key=lambda q: (ROLES.index(q.role), q.instance))
    return tuple(out)


def rules_of(model: Model, connector: Any, sides: Mapping[str, Any]) -> None:
    """The connector's rules and the model's load rules, as ``check`` applies them."""
    from ..violations import layout_rules, load_rules

    key = connector.key
    if "aggregated" in sides:
        broken = load_rules(model, sides["aggregated"].layout, "aggregated", key)
        what = f"aggregated {sides['aggregated'].layout}"
        field = "'aggregated'"
    else:
        p, d = sides["prefill"].layout, sides["decode"].layout
        broken, _ = layout_rules(model, p, d, key, None)
        what = f"P {p} / D {d}"
        side = broken[0].side if broken else ""
        field = f"{side!r}" if side in ("prefill", "decode") else "'prefill'] / plan['decode'"
    if broken:
        v = broken[0]
        raise InvalidArgumentError(
            f"plan[{field}]: {connector.label} rejects {what} for {model.name}: "
            f"{v.message or v.hint} [{v.code}] (`pdtp check` says why)"
        )


def plan_from_dict(data: Any, model: Any = None, rules: bool = True) -> Plan:
    from .._model import KV_DTYPE_BYTES
    from ..connectors import NO_GPU_CONNECTOR, gpu_violation, resolve_connector
    from ..perf import DEFAULT_UTILIZATION
    from ..violations import CheckWarning
    from ..workload import resolve_workload
    from .plan import Alternative, Plan

    if not isinstance(data, Mapping):
        raise ArgumentTypeError(
            f"a plan must be a dict (`pdtp solve --json`'s output), got {type(data).__name__}"
        )
    from .._validate import argument_problem

    # Every string valid Unicode (the core and the launch lines take them), at most
    # MAX_ARGUMENT_DEPTH deep: one message, before any field is read.
    problem = argument_problem("plan", data)
    if problem is not None:
        raise problem
    fields = set(Plan.__dataclass_fields__) - {"placer"}
    allowed = fields | {"placement", *DERIVED}
    unknown = sorted(short_repr(k, 40) for k in data if k not in allowed)
    if unknown:
        raise InvalidArgumentError(
            f"plan has unknown field(s) {', '.join(unknown[:6])}; a plan is what `pdtp solve "
            "--json` (Plan.to_dict()) writes"
        )
    d = data
    m = model_of(d, model)
    kv_dtype = text(d, "kv_dtype", m.kv_dtype)
    if kv_dtype not in KV_DTYPE_BYTES:
        raise bad("kv_dtype", f"one of {sorted(KV_DTYPE_BYTES)}", kv_dtype)
    if kv_dtype != m.kv_dtype:
        m = m.with_dtypes(kv_dtype=kv_dtype)
    name = text(d, "model", m.name)
    if model is None and name != m.name and catalog_model(name) != m:
        raise InvalidArgumentError(
            f"plan['model'] is {short_repr(name)}, but its model_spec is {m.name!r}"
        )
    model_id = text(d, "model_id", m.serve_ref or m.hf_id or m.name)
    launch_name("model_id", model_id)
    served = text(d, "served_model_name", None, none=True)
    launch_name("served_model_name", served)

    gpu_text = text(d, "gpu")
    gpu_types = gpus_of(gpu_text)
    gpu_names = tuple(g.name for g in gpu_types)
    gpu = "+".join(gpu_names)

    # The connector and its release: "moriio@0.25.0" (a key) names the release too.
    conn_text = text(d, "connector", NO_GPU_CONNECTOR)
    conn_name, _, key_version = conn_text.partition("@")
    version = text(d, "vllm_version", None, none=True) or key_version or None
    if key_version and version != key_version:
        raise InvalidArgumentError(
            f"plan['connector'] names vLLM {key_version}, but 'vllm_version' is {version}"
        )
    mode = d.get("mode")  # follows from the connector: "moriio" is READ, "moriio-write" WRITE
    try:
        conn = resolve_connector(conn_name, version)
    except UnknownNameError as e:
        raise UnknownNameError(f"plan['connector']: {e}") from None
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"plan['vllm_version']: {e}") from None
    if mode is not None and mode != conn.mode:
        raise bad(
            "mode",
            f"{conn.mode!r} for connector {conn.name!r} (MoRIIO WRITE mode is connector "
            "'moriio-write')"
            if conn.mode
            else f"null for connector {conn.name!r}",
            mode,
        )
    for key, want in (
        ("kv_connector", conn.kv_connector),
        ("prefill_role", conn.prefill_role),
        ("decode_role", conn.decode_role),
    ):
        got = d.get(key)
        if got not in (None, "", want):
            raise bad(key, f"{want!r} ({conn.name}'s)", got)

    sides = {r: side_of(r, d.get(r), gpu_names) for r in ROLES}
    serving = text(d, "serving", "agg" if sides["aggregated"] is not None else "disagg")
    if serving == "agg":
        if sides["aggregated"] is None or sides["prefill"] or sides["decode"]:
            raise InvalidArgumentError(
                "plan['serving'] is 'agg': give 'aggregated' (and no 'prefill'/'decode')"
            )
    elif serving == "disagg":
        if sides["prefill"] is None or sides["decode"] is None or sides["aggregated"]:
            raise InvalidArgumentError(
                "plan['serving'] is 'disagg': give 'prefill' and 'decode' (and no 'aggregated')"
            )
    else:
        raise bad("serving", "'disagg' or 'agg'", serving)
    present = {r: s for r, s in sides.items() if s is not None}
    if len(gpu_names) > 1 and any(s.gpu is None for s in present.values()):
        raise InvalidArgumentError(
            f"plan['gpu'] names two GPU types ({gpu}): each side must name its 'gpu'"
        )
    if rules and serving == "disagg":
        # A connector whose worker cannot start on a side's GPUs (MoRIIO off AMD).
        nvidia = [g.name for g in gpu_types if gpu_violation(conn, g.vendor) is not None]
        if nvidia:
            raise InvalidArgumentError(
                f"plan['connector'] is {conn.name}, which vLLM runs only on AMD GPUs (MoRIIO "
                f"needs AMD's MoRI; workers fail at start on CUDA), but plan['gpu'] is "
                f"{', '.join(nvidia)}: use connector 'nixl'"
            )
    if rules:
        rules_of(m, conn, present)

    per_node = integer(
        "'gpus_per_node'", d.get("gpus_per_node", gpu_types[0].gpus_per_node), 1, MAX_GPUS_PER_NODE
    )
    env = text(d, "visible_devices_env", gpu_types[0].visible_devices_env)
    if env != gpu_types[0].visible_devices_env:
        raise bad("visible_devices_env", f"{gpu_types[0].visible_devices_env!r} on {gpu}", env)
    gmu = number("'gpu_memory_utilization'", d.get("gpu_memory_utilization", DEFAULT_UTILIZATION))
    if not 0 < gmu <= 1:
        raise bad("gpu_memory_utilization", "in (0, 1]", gmu)
    fractions = d.get("memory_fractions")
    if fractions is not None:
        if not isinstance(fractions, dict) or not fractions:
            raise bad("memory_fractions", "an object of role: fraction, or null", fractions)
        checked = {}
        for role, f in fractions.items():
            if role not in ("prefill", "decode", "aggregated"):
                raise bad("memory_fractions", "keys prefill, decode or aggregated", role)
            checked[role] = number(f"'memory_fractions.{role}'", f)
            if not 0 < checked[role] <= 1:
                raise bad(f"memory_fractions.{role}", "in (0, 1]", f)
        fractions = checked
    used = sum(s.gpus for s in present.values())
    gpus = integer("'gpus'", d.get("gpus", used), 0, MAX_GPUS)
    if gpus < used:
        raise InvalidArgumentError(f"plan['gpus'] is {gpus}, but its instances use {used} GPUs")
    if d.get("gpus_used") is not None and d["gpus_used"] != used:
        raise InvalidArgumentError(
            f"plan['gpus_used'] is {short_repr(d['gpus_used'])}, but its instances use {used}"
        )
    # Devices are numbered within a node: a two-type pool's nodes may differ in size.
    biggest = max([per_node, *(g.gpus_per_node for g in gpu_types)])
    rows = d.get("placement")
    placed = () if rows is None else placement_of(rows, present, gpu_names, biggest)

    try:
        workload = resolve_workload(d.get("workload"))
    except PdtpError as e:
        raise InvalidArgumentError(f"plan['workload']: {e}") from None

    alt = d.get("alternative")
    if alt is not None:
        if not isinstance(alt, Mapping) or set(alt) - {
            "serving",
            "requests_per_s",
            "gpus_used",
            "summary",
            "cost_per_hour",
        }:
            raise bad("alternative", "null or {serving, requests_per_s, gpus_used, summary}", alt)
        alt = Alternative(
            serving=text(alt, "serving"),
            requests_per_s=number("'alternative']['requests_per_s'", alt.get("requests_per_s")),
            gpus_used=integer("'alternative']['gpus_used'", alt.get("gpus_used"), 0, MAX_GPUS),
            summary=text(alt, "summary"),
            cost_per_hour=number(
                "'alternative']['cost_per_hour'", alt.get("cost_per_hour"), none=True
            ),
        )
    warnings = d.get("warnings") or []
    if not isinstance(warnings, list) or not all(
        isinstance(w, Mapping)
        and {"code", "message"} <= set(w) <= {"code", "message", "consequence"}
        and (w.get("consequence") is None or isinstance(w.get("consequence"), str))
        for w in warnings
    ):
        raise bad("warnings", "a list of {code, message, consequence}", warnings)
    percentile = number("'slo_percentile'", d.get("slo_percentile"), none=True)
    if percentile is not None and not 0 < percentile < 1:
        raise bad("slo_percentile", "null or in (0, 1)", percentile)
    concurrency = d.get("concurrency")
    if concurrency is not None:
        concurrency = integer("'concurrency'", concurrency, 1, MAX_GPUS)
    serve_error = text(d, "serve_error", None, none=True)
    given = "requests_per_s" not in d  # written by hand: nothing predicted

    def predicted(key: str) -> float:
        return 0.0 if given and key not in d else number(f"{key!r}", d.get(key))

    rows_t = placed
    plan = Plan(
        model=m.name,
        model_id=model_id,
        gpu=gpu,
        connector=conn.name,
        connector_default=text(d, "connector_default", None, none=True),
        workload=workload,
        gpus=gpus,
        prefill=sides["prefill"],
        decode=sides["decode"],
        aggregated=sides["aggregated"],
        serving=serving,
        concurrency=concurrency,
        requests_per_s=predicted("requests_per_s"),
        output_tokens_per_s=predicted("output_tokens_per_s"),
        ttft_ms=predicted("ttft_ms"),
        tpot_ms=predicted("tpot_ms"),
        decode_batch=integer("'decode_batch'", d.get("decode_batch", 0), 0, MAX_GPUS),
        prefill_capacity_rps=predicted("prefill_capacity_rps"),
        decode_capacity_rps=predicted("decode_capacity_rps"),
        status=text(d, "status", "GIVEN"),
        method=text(d, "method", "given"),
        proof=text(d, "proof", None, none=True),
        solve_ms=predicted("solve_ms"),
        gpus_per_node=per_node,
        gpu_memory_utilization=gmu,
        memory_fractions=fractions,
        kv_dtype=kv_dtype,
        visible_devices_env=env,
        kv_connector=conn.kv_connector,
        prefill_role=conn.prefill_role,
        decode_role=conn.decode_role,
        rejected=strings("rejected", d.get("rejected")),
        warnings=tuple(
            CheckWarning(str(w["code"]), str(w["message"]), w.get("consequence") or None)
            for w in warnings
        ),
        gap=number("'gap'", d.get("gap", 0.0), none=True),
        objective=text(d, "objective", "throughput"),
        cost_per_hour=number("'cost_per_hour'", d.get("cost_per_hour"), none=True),
        # A plan that names no release is launched with the one deploy is given (its rules
        # were checked at the newest release pdtp covers).
        vllm_version=conn.vllm_version if version else None,
        mode=conn.mode,
        pool=text(d, "pool", f"{gpus} x {gpu}"),
        notes=strings("notes", d.get("notes")),
        slo_basis=text(d, "slo_basis", "mean"),
        constants_note=text(d, "constants_note", ""),
        slo_percentile=percentile,
        analytic_requests_per_s=number(
            "'analytic_requests_per_s'", d.get("analytic_requests_per_s"), none=True
        ),
        alternative=alt,
        model_spec=m,
        served_model_name=served,
        serve_error=serve_error,
        placer=(lambda: rows_t) if rows_t else None,
    )
    # Derived, so checked like gpus_used: the --quantization its model implies, nothing else.
    if "quantization" in d and d["quantization"] != plan.quantization:
        want = "null" if plan.quantization is None else repr(plan.quantization)
        raise bad("quantization", f"{want} (what its model_spec implies)", d["quantization"])
    return plan


def plan_from_json(source: Any, model: Any = None) -> Plan:
    """A plan from JSON text (or bytes), or from the path of a JSON file."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if isinstance(source, bytes | bytearray):
        source = bytes(source).decode("utf-8", errors="replace")
    if not isinstance(source, str):
        raise ArgumentTypeError(
            f"Plan.from_json takes JSON text or a file path, got {type(source).__name__}"
        )
    if not source.lstrip().startswith("{"):
        from .._io import read_capped
        from .._model import MAX_CONFIG_BYTES

        if len(source) > 4096 or "\0" in source:  # no path is this long (PATH_MAX)
            raise InvalidArgumentError(
                f"Plan.from_json: {short_repr(source)} is neither a JSON object nor a file path"
            )
        # The capped reader: a device or folder is refused, a FIFO never waited on past
        # its writer, a file read to the cap whatever size it reports.
        raw = read_capped(source, limit=MAX_CONFIG_BYTES, what="plan file")
        source = raw.decode("utf-8", errors="replace")
    from .._io import loads_json

    return plan_from_dict(loads_json(source, "plan"), model)
