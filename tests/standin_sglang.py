"""A stand-in for ``python -m sglang.launch_server`` in the SGLang loopback end-to-end test
(tests/test_sglang_e2e.py; a ``sglang`` package on ``PYTHONPATH`` whose ``launch_server``
runs this file).

It reads the launch line pdtp wrote with the flags SGLang defines for it (an unknown flag is
an error, as in SGLang's argparse) and serves what SGLang's P/D router asks of an instance:
``/health``, ``/health_generate``, ``/get_server_info``, ``/get_model_info`` (and
``/model_info``), ``/v1/models``, and the request routes ``/generate``, ``/v1/completions``,
``/v1/chat/completions``.

Without ``--disaggregation-mode`` (an aggregated instance) it serves both phases itself.
The KV hand-over is SGLang's in outline. A prefill instance runs the bootstrap server on
``--disaggregation-bootstrap-port`` (SGLang's ``CommonKVBootstrapServer``: ``GET /route`` with
all ranks ``-1`` answers the prefill's parallel sizes, ``/health``) and, when a request
carrying ``bootstrap_room`` reaches it, keeps that room's "KV". A decode instance takes
``bootstrap_host`` / ``bootstrap_port`` / ``bootstrap_room`` from the request as SGLang's
decode does, asks that bootstrap server for the prefill's sizes and then for the room's KV
(``GET /kv?room=R``: the stand-in of SGLang's transfer, which dials the rank address the
bootstrap server gives), waiting for the prefill leg to arrive: so a request only completes
when the router sent both legs with the same room and the prefill's real bootstrap address.
Every request is appended to ``$RECORD/<port>.jsonl`` (role, path, body).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

# How long a decode leg waits for its prefill leg (polls of 0.1 s): a bound, not a timing.
KV_WAIT_POLLS = 600


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--attn-dp-size", type=int, default=None)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--ep-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--disaggregation-mode", choices=("null", "prefill", "decode"), default="null")
    p.add_argument("--disaggregation-transfer-backend", default="mooncake")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-ib-device", default=None)
    return p.parse_args(argv)


def fetch(url: str) -> tuple[int, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as r:
            return int(r.status), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


class Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def reply(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    args = parse(sys.argv[1:])
    role = {"null": "aggregated"}.get(args.disaggregation_mode, args.disaggregation_mode)
    dp = args.attn_dp_size or (args.dp_size if args.enable_dp_attention else 1)
    engine = f"{role}-{args.port}"
    record = os.path.join(os.environ["RECORD"], f"{args.port}.jsonl")
    rooms: dict[int, str] = {}  # prefill: the rooms whose KV is ready
    lock = threading.Lock()
    if args.node_rank > 0:  # a later node of a multi-node instance serves no API
        threading.Event().wait()

    info = {
        "model_path": args.model_path,
        "tp_size": args.tp_size,
        "dp_size": dp,
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": args.disaggregation_transfer_backend,
        "disaggregation_bootstrap_port": args.disaggregation_bootstrap_port,
        "internal_states": [{"last_gen_throughput": 0.0}],
    }

    class Bootstrap(Handler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/health":
                self.reply({})
            elif url.path == "/route" and all(
                q.get(k) == "-1"
                for k in ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
            ):
                self.reply(
                    {"attn_tp_size": args.tp_size // dp, "dp_size": dp, "pp_size": args.pp_size}
                )
            elif url.path == "/kv" and "room" in q:
                with lock:
                    kv = rooms.get(int(q["room"]))
                if kv is None:
                    self.reply({"error": f"no prefill for room {q['room']} yet"}, 404)
                else:
                    self.reply({"engine": engine, "kv": kv})
            else:
                self.reply({"error": "not found"}, 404)

    class Api(Handler):
        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.reply({})
            elif self.path == "/get_server_info":
                self.reply(info)
            elif self.path in ("/get_model_info", "/model_info"):
                self.reply({"model_path": args.model_path, "is_generation": True})
            elif self.path == "/v1/models":
                self.reply({"object": "list", "data": [{"id": args.model_path}]})
            else:
                self.reply({"error": "not found"}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with lock, open(record, "a", encoding="utf-8") as f:
                f.write(json.dumps({"role": role, "path": self.path, "body": body}) + "\n")
            if self.path not in ("/generate", "/v1/completions", "/v1/chat/completions"):
                self.reply({"error": "not found"}, 404)
                return
            if role == "aggregated":  # both phases here: no room, no KV to fetch
                if "bootstrap_room" in body:
                    self.reply({"error": "stand-in: a bootstrap room for an aggregated one"}, 400)
                else:
                    self.answer(f"served by {engine} alone")
                return
            if "bootstrap_room" not in body:
                self.reply({"error": "stand-in: a P/D instance needs bootstrap_room"}, 400)
                return
            room = int(body["bootstrap_room"])
            if role == "prefill":  # the prompt's KV, ready for the decode that asks
                with lock:
                    rooms[room] = f"kv of {body.get('text') or body.get('prompt')!r}"
                self.answer("")
                return
            where = f"http://{body['bootstrap_host']}:{body['bootstrap_port']}"
            status, sizes = fetch(
                f"{where}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1"
                "&target_pp_rank=-1"
            )
            if status != 200:
                self.reply({"error": f"stand-in: bootstrap {where}: {status} {sizes}"}, 500)
                return
            for _ in range(KV_WAIT_POLLS):
                status, got = fetch(f"{where}/kv?room={room}")
                if status == 200:
                    break
                threading.Event().wait(0.1)
            else:
                self.reply({"error": f"stand-in: no KV for room {room} from {where}"}, 500)
                return
            self.answer(
                f"served by {engine} with {got['kv']} from {got['engine']} (prefill attention "
                f"TP {sizes['attn_tp_size']}) room {room}"
            )

        def answer(self, text: str) -> None:
            if self.path == "/generate":
                self.reply({"text": text, "meta_info": {"id": engine, "finish_reason": "length"}})
            else:
                self.reply(
                    {
                        "id": engine,
                        "object": "text_completion",
                        "model": args.model_path,
                        "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    }
                )

    if role == "prefill":
        boot = ThreadingHTTPServer((args.host, args.disaggregation_bootstrap_port), Bootstrap)
        threading.Thread(target=boot.serve_forever, daemon=True).start()
    ThreadingHTTPServer((args.host, args.port), Api).serve_forever()


if __name__ == "__main__":
    main()
