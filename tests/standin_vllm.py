"""A stand-in for ``vllm serve`` in the loopback end-to-end test (tests/test_deploy_e2e.py).

It reads the launch line as vLLM does (``serve MODEL --port P --kv-transfer-config JSON``,
``--headless``), serves vLLM's OpenAI endpoints on ``--port`` (``/health``, ``/v1/models``,
``/v1/completions``, ``/v1/chat/completions``) and, under MoRIIO, registers with the proxy as
vLLM 0.33.0's connector does (``moriio_heartbeat.py``: a ZMQ DEALER to
``tcp://proxy_ip:proxy_ping_port`` sending one msgpack payload every ``PING_INTERVAL`` seconds:
``type`` P/D, ``http_address``, ``zmq_address``, ``dp_size``, ``tp_size``, ``transfer_mode``).

A prefill-side request (``kv_transfer_params.do_remote_decode``) answers with the KV-transfer
parameters a producer returns; a decode-side request (``do_remote_prefill``) answers the
completion, naming the engine it took the KV cache from. Every request is appended to
``$RECORD/<port>.jsonl`` (role, path, headers, body) for the test to read. Needs msgpack and
pyzmq only under MoRIIO (the proxy's own packages).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PING_INTERVAL = 3  # MoRIIOConstants.PING_INTERVAL in vLLM 0.33.0


def option(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def heartbeat(config: dict[str, Any], port: int, tp: int, dp: int) -> None:
    import msgpack
    import zmq

    extra = config["kv_connector_extra_config"]
    read = extra.get("read_mode", os.environ.get("VLLM_MORIIO_CONNECTOR_READ_MODE", "false"))
    host = extra.get("host_ip") or os.environ.get("VLLM_HOST_IP", "127.0.0.1")
    payload = {
        "type": "P" if config["kv_role"] == "kv_producer" else "D",
        "http_address": f"{host}:{extra['http_port']}",
        "zmq_address": f"host:{host},handshake:{extra['handshake_port']},"
        f"notify:{extra['notify_port']}",
        "dp_size": dp,
        "tp_size": tp,
        "transfer_mode": "READ" if str(read).lower() == "true" else "WRITE",
    }
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{extra['proxy_ip']}:{extra['proxy_ping_port']}")
    while True:
        sock.send(msgpack.dumps(payload))
        time.sleep(PING_INTERVAL)


def main() -> None:
    argv = sys.argv[1:]
    assert argv[0] == "serve", argv
    model = argv[1]
    port = int(option(argv, "--port", "8000") or 8000)
    tp = int(option(argv, "--tensor-parallel-size", "1") or 1)
    dp = int(option(argv, "--data-parallel-size", "1") or 1)
    served = option(argv, "--served-model-name", model)
    raw = option(argv, "--kv-transfer-config")
    config = json.loads(raw) if raw else None
    role = "aggregated" if config is None else config["kv_role"]
    record = os.path.join(os.environ["RECORD"], f"{port}.jsonl")
    if "--headless" in argv:  # a headless DP/PP part serves no API
        while True:
            time.sleep(3600)
    if config is not None and config["kv_connector"] == "MoRIIOConnector":
        threading.Thread(target=heartbeat, args=(config, port, tp, dp), daemon=True).start()
    engine = f"engine-{port}"
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, body: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply({})
            elif self.path == "/v1/models":
                self.reply({"object": "list", "data": [{"id": served, "object": "model"}]})
            else:
                self.reply({"error": "not found"}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with lock, open(record, "a", encoding="utf-8") as f:
                seen = {
                    "role": role,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                }
                f.write(json.dumps(seen) + "\n")
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self.reply({"error": "not found"}, 404)
                return
            if body.get("model") != served:
                self.reply({"error": f"model {body.get('model')!r} is not served"}, 404)
                return
            params = body.get("kv_transfer_params") or {}
            if params.get("do_remote_decode"):  # the prefill leg: hand over the KV cache
                # What vLLM's producers return (NixlConnector.request_finished): the decode
                # side's parameters, which NIXL's proxy forwards as they are.
                out = {
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_engine_id": engine,
                    "remote_block_ids": [0, 1],
                    "remote_host": "127.0.0.1",
                    "remote_port": port,
                    "tp_size": tp,
                }
                if "transfer_id" in params:
                    out["transfer_id"] = params["transfer_id"]
                self.reply({"id": "p", "choices": [{"text": ""}], "kv_transfer_params": out})
                return
            source = params.get("remote_engine_id") if params.get("do_remote_prefill") else None
            text = f"served by {role} {engine}" + (f" with KV from {source}" if source else "")
            self.reply(
                {
                    "id": "cmpl-standin",
                    "object": "text_completion",
                    "model": served,
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                }
            )

    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
