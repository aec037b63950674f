"""Issue 23, `pdtp serve`: every hostile request ends in one JSON error naming the field
(4xx), never a 500, a traceback or FastAPI's bare ``{"detail": ...}``.

* Text JSON can spell but no file or command line can carry (a lone surrogate, ``\\udcff``)
  in any field of any operation, at any depth.
* Bodies nested deeper than the plan reader allows, refused before Python's recursive JSON
  reader sees them.
* A client trickling its body: 408 at the body deadline, holding no worker.
* Concurrent requests: the answers of the same requests made one at a time.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pdtp.service import create_app, ops
from pdtp.service.app import MAX_BODY_DEPTH

CLIENT = TestClient(create_app(max_time_s=5), raise_server_exceptions=False)
OPERATIONS = {**ops.OPS, **ops.CUSTOM_OPS}
POSTED = sorted(n for n in OPERATIONS if n not in ("models", "gpus"))


def error_of(r: Any) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field", "allowed"}, body
    assert "Traceback" not in r.text
    return dict(body["error"])


def post(name: str, body: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return CLIENT.post(f"/v1/{name}", content=raw, headers={"content-type": "application/json"})


@pytest.mark.parametrize("name", POSTED)
def test_a_lone_surrogate_in_any_field_is_a_400_naming_it(name):
    """JSON's ``"\\udcff"`` is a str Python cannot write to a file (the file fields) or pass
    on: it was a 500 (UnicodeEncodeError) in solve_fleet's demands, simulate's trace and
    deploy's hosts_file, and a 400 naming no field elsewhere."""
    op = OPERATIONS[name]
    required = [n for n, f in op.fields.items() if f.required]
    for field, f in op.fields.items():
        for value in ("\udcff", ["ok", "\udcff"], {"k": ["\udcff"]}):
            # The required fields hostile too: the request gets past the schema's "missing".
            body = {**dict.fromkeys(required, value), field: value}
            e = error_of(post(name, body))
            if f.kind not in ("file:json",) and not isinstance(value, str):
                # A wrong shape may be refused first (by the schema): still one 400 naming it.
                assert e["field"] in (*body, None), (name, field, e)
                continue
            assert e["field"] in body, (name, field, value, e)
            if e["code"] == "invalid_argument" and "Unicode" in e["message"]:
                assert e["message"].startswith(f"{e['field']}: "), e


def test_a_surrogate_in_a_key_is_refused_too():
    e = error_of(post("deploy", {"plan": {"\udcff": 1}}))
    assert e["field"] == "plan" and "Unicode" in e["message"]


@pytest.mark.parametrize("depth", [MAX_BODY_DEPTH + 1, 1000, 200_000])
@pytest.mark.parametrize("name", ["deploy", "solve", "replan", "pareto"])
def test_a_body_nested_too_deep_is_one_400_before_it_is_read(name, depth):
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    e = error_of(post(name, f'{{"plan": {inner}}}'.encode()))
    assert e["code"] == "invalid_json" and f"at most {MAX_BODY_DEPTH}" in e["message"], e
    # Brackets inside strings are text, not nesting.
    r = post(name, json.dumps({"model": "[" * 5000}).encode())
    assert error_of(r)["code"] != "invalid_json" or "nested" not in error_of(r)["message"]


def test_a_plan_at_the_depth_limit_is_read_by_the_plan_reader():
    """One level less than the body limit: the plan reader's own message, naming the field."""
    inner = "[" * (MAX_BODY_DEPTH - 2) + "]" * (MAX_BODY_DEPTH - 2)
    e = error_of(post("deploy", f'{{"plan": {{"model": {inner}}}}}'.encode()))
    assert e["field"] == "plan", e


def _asgi_call(app: Any, chunks: list[bytes], then_wait: bool) -> tuple[int, dict[str, Any]]:
    """POST ``chunks`` to ``app`` as a client that stops sending (``then_wait``) midway."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        queue = list(chunks)

        async def receive() -> dict[str, Any]:
            if queue:
                body = queue.pop(0)
                return {"type": "http.request", "body": body, "more_body": bool(queue) or then_wait}
            await asyncio.Event().wait()  # a client that never sends the rest
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/check",
            "raw_path": b"/v1/check",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
            "client": ("127.0.0.1", 1),
            "server": ("test", 80),
        }
        await app(scope, receive, send)

    asyncio.run(main())
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body)


def test_a_client_trickling_its_body_gets_408_at_the_body_deadline():
    app = create_app(body_timeout_s=0.2)
    status, body = _asgi_call(app, [b'{"kv_heads": 8, '], then_wait=True)
    assert status == 408 and body["error"]["code"] == "timeout", body
    assert "0.2 s" in body["error"]["message"]
    # The same body sent whole is answered.
    status, body = _asgi_call(
        app, [b'{"kv_heads": 8, ', b'"prefill_tp": 4, "decode_tp": 4}'], then_wait=False
    )
    assert status == 200, body


def _stable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items() if not k.endswith("_ms") or "solve" not in k}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


def test_concurrent_requests_answer_what_serial_requests_answer():
    requests = [
        ("check", {"model": "llama-3.1-8b", "prefill_tp": 2, "decode_tp": 4}),
        ("check", {"model": "llama-3.1-70b", "prefill_tp": 8, "decode_tp": 2}),
        ("transfer_map", {"kv_heads": 8, "prefill_tp": 2, "decode_tp": 4}),
        ("solve", {"model": "llama-3.1-8b", "gpus": 8, "gpu": "h100"}),
        ("solve", {"model": "qwen3-8b", "gpus": 4, "gpu": "mi300x", "mode": "disagg"}),
        ("solve", {"model": "llama-3.1-8b", "gpus": -1}),
        ("deploy", {"plan": {"model": "\udcff"}}),
    ]

    def answer(req: tuple[str, dict[str, Any]]) -> tuple[int, Any]:
        r = post(*req)
        return r.status_code, _stable(r.json())

    serial = [answer(r) for r in requests]
    assert {s for s, _ in serial} >= {200, 400}
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(answer, requests * 4))
    assert together == serial * 4
