"""The ASGI app: ``POST /v1/<operation>`` for each CLI command, ``/metrics``, the web page.

Every answer is JSON. Input mistakes are 400 with ``{"error": {"code", "message", "field",
"allowed"}}`` (413 for a body over the size limit, 408 for one that does not arrive in time,
401 without the token); a request that is well formed but has no answer (no plan fits, an
invalid pair for ``transfer_map``) is 422 with the CLI's JSON for it; a computation over the
time limit is 504. A bug in pdtp is a 500 with one line, never a traceback. The planners run
in a thread pool, off the event loop.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import logging
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal, Union

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, create_model
from pydantic import Field as PydanticField

from .. import __version__
from .._io import MAX_JSON_DEPTH, json_depth
from . import API_VERSION
from . import ops as ops_mod
from .metrics import DemandWatcher, ReplicaMetrics
from .ops import CUSTOM_OPS, OPS, Field, Op, Outcome, ServiceError

log = logging.getLogger("pdtp.serve")

PREFIX = f"/v{API_VERSION}"


@dataclass(frozen=True)
class Settings:
    """What ``pdtp serve``'s flags set."""

    token: str | None = None  # bearer token every /v1 call and /metrics must carry
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0  # a client's whole request body must arrive within this
    max_time_s: float = 60.0  # a computation's wall-clock limit (planners' time limits too)
    workers: int = 4  # computations at once
    max_pending: int = 256  # computations running or waiting; more are refused (503)
    prometheus_url: str | None = None  # where the demand query runs
    demand_query: str | None = None  # PromQL for the demand in req/s
    target: Mapping[str, Any] = field(default_factory=dict)  # size_for fields (no demand)
    interval_s: float = 30.0


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    allowed: list[Any] | str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


def _annotation(f: Field) -> Any:
    kind = f.kind
    if kind == "bool":
        return bool
    if kind == "int":
        return int
    if kind == "float":
        return float
    if kind == "slo":
        return Union[float, Literal["none"]]
    if kind == "layout":
        return Union[int, str]
    if kind == "choice":
        return Literal[f.choices]
    if kind == "pool":
        return Union[int, str, dict[str, int]]
    if kind == "nodes":
        return Union[str, list[int], dict[str, list[int]]]
    if kind == "keyvalues":
        return Union[str, dict[str, float]]
    if kind == "list":
        return Union[str, list[str]]
    if kind == "targets":
        return list[float]
    if kind == "file:json":
        return dict[str, Any]
    if kind == "file:demands":
        return Union[str, list[dict[str, Any]]]
    if kind == "file:lines":
        return Union[str, list[str]]
    return str


def request_model(op: Op) -> type[BaseModel]:
    """The request schema of ``op``: its CLI flags, with the CLI's help and defaults."""
    fields: dict[str, Any] = {}
    for name, f in op.fields.items():
        where = f"`{f.flag}`" if f.flag else "the positional argument"
        text = f"{f.help} (CLI: {where}" + (
            f"; default {f.default!r})" if f.default is not None else ")"
        )
        annotation = _annotation(f)
        if f.required:
            fields[name] = (annotation, PydanticField(description=text))
        else:
            fields[name] = (annotation | None, PydanticField(default=None, description=text))
    model: type[BaseModel] = create_model(
        f"{''.join(p.title() for p in op.name.split('_'))}Request",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    return model


def _error(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    allowed: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ServiceError(status, code, message, field, allowed).to_dict()
    return JSONResponse(body, status_code=status, headers=headers)


# A body's nesting: the plan and config files it carries are read with MAX_JSON_DEPTH, one
# level inside the body's object.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 1


class _BodyLimit:
    """Refuses a request body over ``limit`` bytes (413) before the app reads it, one
    nested past :data:`MAX_BODY_DEPTH` (400), and one that does not arrive within
    ``timeout_s`` (408: a client trickling bytes holds no worker, and not for long)."""

    def __init__(self, app: Any, limit: int, timeout_s: float = 30.0) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if scope.get("method") == "POST" and not headers.get(b"content-type", b"").startswith(
            b"application/json"
        ):
            # Every body is JSON: `curl -d '{...}'` (form-encoded by default) works as it reads.
            headers[b"content-type"] = b"application/json"
            scope = {**scope, "headers": list(headers.items())}
        too_big = declared is not None and declared.isdigit() and int(declared) > self.limit
        chunks: list[bytes] = []
        size = 0
        more = not too_big
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                response = _error(
                    408,
                    "timeout",
                    f"the request body did not arrive within {self.timeout_s:g} s",
                    None,
                    f"the whole body within {self.timeout_s:g} s",
                    {"Connection": "close"},
                )
                await response(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                too_big = True
                break
            chunks.append(chunk)
            more = message.get("more_body", False)
        if too_big:
            response = _error(
                413,
                "too_large",
                f"request body over {self.limit} bytes",
                None,
                f"at most {self.limit} bytes",
            )
            await response(scope, receive, send)
            return
        body = b"".join(chunks)
        if body.count(b"[") + body.count(b"{") > MAX_BODY_DEPTH:
            deepest = json_depth(body.decode("utf-8", "replace"))
            if deepest > MAX_BODY_DEPTH:
                # Python's JSON reader recurses: refused before it reads (a 400 of ours, not
                # FastAPI's bare "error parsing the body" or a RecursionError).
                response = _error(
                    400,
                    "invalid_json",
                    f"the body is nested {deepest} levels deep: at most {MAX_BODY_DEPTH}",
                    None,
                    f"at most {MAX_BODY_DEPTH} levels of nesting",
                )
                await response(scope, receive, send)
                return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def build_app(settings: Settings) -> Any:
    """The FastAPI app for ``settings``."""
    metrics = ReplicaMetrics()
    executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="pdtp-serve")
    pending = threading.BoundedSemaphore(settings.max_pending)
    watcher: DemandWatcher | None = None

    def plan_for(demand: float) -> tuple[str, Mapping[str, Any]]:
        outcome = ops_mod.run(
            OPS["size_for"], {**settings.target, "demand": demand}, max_time_s=settings.max_time_s
        )
        if outcome.status != 200:
            raise ValueError(outcome.body.get("reason", "no plan"))
        return str(outcome.body["model"]), outcome.body

    if settings.prometheus_url and settings.demand_query:
        watcher = DemandWatcher(
            settings.prometheus_url,
            settings.demand_query,
            plan_for,
            metrics,
            model=str(settings.target.get("model") or "model"),
            interval_s=settings.interval_s,
        )

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        if watcher is not None:
            watcher.start()
        try:
            yield
        finally:
            if watcher is not None:
                watcher.stop()
            executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="pdtp",
        version=API_VERSION,
        summary="Valid, throughput-optimal prefill/decode splits for vLLM, over HTTP/JSON",
        description=(
            "Each operation is a `pdtp` CLI command: its fields are the command's flags "
            "(`--max-tp` is `max_tp`), its answer what `pdtp COMMAND --json` prints. File "
            "flags take the file's content. Errors: `{error: {code, message, field, allowed}}`."
            f" pdtp {__version__}."
        ),
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=None,  # Swagger UI's assets come from a CDN; the schema is the document
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.metrics, app.state.settings, app.state.watcher = metrics, settings, watcher

    async def compute(fn: Any, *args: Any) -> Outcome:
        if not pending.acquire(blocking=False):
            raise ServiceError(503, "busy", f"more than {settings.max_pending} requests at once")
        try:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(executor, fn, *args)
            # The planners stop on their own time limit (capped at max_time_s); this bounds
            # the rest (queueing, simulation) — a late computation ends in its worker.
            grace = min(5.0, settings.max_time_s)  # a planner overruns its limit a little
            return await asyncio.wait_for(future, timeout=settings.max_time_s + grace)
        except asyncio.TimeoutError:
            raise ServiceError(
                504,
                "timeout",
                f"no answer within {settings.max_time_s:g} s",
                "time_limit",
            ) from None
        finally:
            pending.release()

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse(e.to_dict(), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        op = getattr(request.state, "op", None)
        first = e.errors()[0] if e.errors() else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        name = loc[0] if loc else None
        f = op.fields.get(name) if op is not None and name else None
        if first.get("type") == "extra_forbidden" and op is not None:
            return _error(
                400, "unknown_field", f"{op.name} has no field {name!r}", name, sorted(op.fields)
            )
        if first.get("type") == "json_invalid":
            return _error(400, "invalid_json", f"the body is not JSON: {first.get('msg')}")
        if first.get("type") == "missing" and name is None:
            return _error(400, "invalid_json", "the body is empty: expected a JSON object")
        if first.get("type") == "missing":
            return _error(400, "missing_field", f"{name} is required", name)
        message = (
            f"{name}: {first.get('msg', 'invalid value')}"
            if name
            else str(first.get("msg", "the body must be a JSON object"))
        )
        allowed = ops_mod.allowed_values(f) if f is not None else None
        return _error(400, "invalid_argument", message, name, allowed)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.error("pdtp serve: internal error: %s: %s", type(e).__name__, e)
        return _error(500, "internal", f"internal error: {type(e).__name__} (a bug in pdtp)")

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Response:
        path = request.url.path
        guarded = path.startswith(PREFIX) and path != f"{PREFIX}/openapi.json"
        if settings.token and (guarded or path == "/metrics"):
            given = request.headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), settings.token.encode()
            ):
                return _error(
                    401,
                    "unauthorized",
                    "a bearer token is required",
                    None,
                    None,
                    {"WWW-Authenticate": "Bearer"},
                )
        response: Response = await call_next(request)
        return response

    responses: dict[int | str, dict[str, Any]] = {
        400: {"model": ErrorBody, "description": "a field is wrong (which, and its values)"},
        401: {"model": ErrorBody, "description": "no or wrong bearer token"},
        413: {"model": ErrorBody, "description": "the body is over the size limit"},
        422: {
            "description": "no answer for these inputs: the CLI's INFEASIBLE JSON, or an "
            "invalid pair's error"
        },
        504: {"model": ErrorBody, "description": "over the time limit"},
    }

    def add_operation(op: Op, runner: Any) -> None:
        model = request_model(op)
        command = "" if op.name in CUSTOM_OPS else f"`pdtp {op.command} --json`"

        async def endpoint(request: Request, body: Any) -> JSONResponse:
            raw = json.loads(await request.body())  # the values as sent (no coercion)
            outcome = await compute(lambda: runner(op, raw, max_time_s=settings.max_time_s))
            return JSONResponse(outcome.body, status_code=outcome.status)

        endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
                ),
                inspect.Parameter(
                    "body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=model
                ),
            ]
        )
        endpoint.__name__ = op.name
        described = (
            f"{op.summary}. The answer is what {command} prints." if command else (f"{op.summary}.")
        )
        app.post(
            f"{PREFIX}/{op.name}",
            summary=op.summary,
            description=described,
            responses=responses,
            dependencies=[],
        )(endpoint)

    @app.middleware("http")
    async def remember_op(request: Request, call_next: Any) -> Response:
        name = request.url.path.removeprefix(f"{PREFIX}/")
        request.state.op = (
            OPS.get(name) or CUSTOM_OPS.get(name) or (DEMAND_OP if name == "demand" else None)
        )
        response: Response = await call_next(request)
        return response

    for name, op in OPS.items():
        if name not in ("models", "gpus"):
            add_operation(op, ops_mod.run)
    for op in CUSTOM_OPS.values():
        add_operation(op, ops_mod.run_custom)

    for name in ("models", "gpus"):

        def catalog(name: str = name) -> Any:
            async def endpoint() -> JSONResponse:
                outcome = await compute(lambda: ops_mod.run(OPS[name], {}))
                return JSONResponse(outcome.body, status_code=outcome.status)

            endpoint.__name__ = name
            return endpoint

        app.get(f"{PREFIX}/{name}", summary=OPS[name].summary, responses=responses)(catalog())

    @app.get(f"{PREFIX}/connectors", summary="The KV connectors (the `connector` field's values)")
    def connectors() -> list[dict[str, str]]:
        import pdtp

        return [{"name": c.name, "label": c.label} for c in pdtp.connectors()]

    # ---- replica metrics ----------------------------------------------------------------

    demand_model = request_model(DEMAND_OP)

    async def demand(request: Request, body: Any) -> JSONResponse:
        raw = json.loads(await request.body())
        op = OPS["replan"] if raw.get("current") is not None else OPS["size_for"]
        # Fields of the other operation are refused, not dropped (as run() refuses any).
        outcome = await compute(lambda: ops_mod.run(op, raw, max_time_s=settings.max_time_s))
        plan = outcome.body.get("plan", outcome.body) if outcome.status == 200 else None
        model = str(raw.get("model") or (raw.get("current") or {}).get("model") or "model")
        if plan is None:
            metrics.failed(model, "plan")
            return JSONResponse(outcome.body, status_code=outcome.status)
        replicas = metrics.update(str(plan["model"]), plan, float(raw["demand"]))
        answer = {"model": plan["model"], "demand": raw["demand"], "replicas": replicas}
        return JSONResponse({**answer, "answer": outcome.body})

    demand.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
            ),
            inspect.Parameter(
                "body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=demand_model
            ),
        ]
    )
    app.post(
        f"{PREFIX}/demand",
        summary=DEMAND_OP.summary,
        responses=responses,
        description=(
            "Size a plan for `demand` (req/s): `size_for`'s fields, or `current` (a plan) and "
            "`replan`'s fields; publish its replicas on /metrics. The answer: `replicas` per "
            "role and `answer`, what `size_for`/`replan` returned."
        ),
    )(demand)

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get(f"{PREFIX}/health", summary="Liveness, versions, the demand watcher's state")
    def health() -> dict[str, Any]:
        return {
            "ok": True,
            "pdtp": __version__,
            "api": API_VERSION,
            "watcher": None if watcher is None else {"last_error": watcher.last_error},
        }

    # ---- the web page ---------------------------------------------------------------------

    static = os.path.join(os.fspath(str(resources.files("pdtp.service"))), "static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(os.path.join(static, "index.html"), media_type="text/html")

    app.mount("/static", StaticFiles(directory=static), name="static")
    app.add_middleware(  # outermost: before auth
        _BodyLimit, limit=settings.max_body_bytes, timeout_s=settings.body_timeout_s
    )
    return app


def _demand_op() -> Op:
    fields = {**OPS["size_for"].fields}
    for name, f in OPS["replan"].fields.items():
        fields.setdefault(name, replace(f, required=False))  # `current` picks replan
    fields["demand"] = OPS["size_for"].fields["demand"]
    return Op("demand", "size-for", "Publish the replicas a demand needs", fields)


DEMAND_OP = _demand_op()
