#!/usr/bin/env python3
"""The HTTP router ``pdtp deploy`` puts in front of aggregated vLLM instances.

vLLM's wheel ships no router for plain data-parallel replicas (vllm-router is a separate
project), so an aggregated deployment's scripts carry this file as ``router.py``: Python's
standard library only (it runs on a node without pdtp, offline), a reverse proxy that sends
each request to the backend with the fewest requests in flight (ties: round robin) and streams
the answer back byte for byte (server-sent events pass through). A backend that refuses the
connection is skipped for ``--retry-after`` seconds; when every backend refuses, the client gets
503. Requests are forwarded with ``Connection: close``, so each response ends with its
connection; bodies are read by ``Content-Length`` (vLLM's OpenAI clients send it).

    python3 router.py --port 10001 --backend 10.0.0.1:8100 --backend 10.0.0.2:8100

This module must stay self-contained: ``pdtp deploy`` copies its source verbatim.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time

MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
_HOP_HEADERS = {b"connection", b"keep-alive", b"proxy-connection", b"upgrade"}


class Router:
    def __init__(self, backends: list[tuple[str, int]], retry_after_s: float = 5.0) -> None:
        if not backends:
            raise ValueError("at least one --backend HOST:PORT is needed")
        self.backends = backends
        self.in_flight = dict.fromkeys(backends, 0)
        self.down_until = dict.fromkeys(backends, 0.0)
        self.retry_after_s = retry_after_s
        self._turn = itertools.count()

    def order(self) -> list[tuple[str, int]]:
        """Backends to try, best first: up before down, fewest in flight, then round robin."""
        start = next(self._turn) % len(self.backends)
        rotated = self.backends[start:] + self.backends[:start]
        now = time.monotonic()
        return sorted(rotated, key=lambda b: (self.down_until[b] > now, self.in_flight[b]))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        try:
            lines = head[:-4].split(b"\r\n")
            headers = [tuple(x.strip() for x in line.split(b":", 1)) for line in lines[1:]]
            fields = {k.lower(): v for k, v in headers}
            if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
                await _reply(writer, 411, b"send Content-Length (chunked bodies not routed)")
                return
            length = int(fields.get(b"content-length", b"0") or 0)
            if not 0 <= length <= MAX_BODY:
                await _reply(writer, 413, b"body too large")
                return
            body = await reader.readexactly(length) if length else b""
        except (ValueError, asyncio.IncompleteReadError, ConnectionError):
            await _reply(writer, 400, b"bad request")
            return
        kept = [k + b": " + v for k, v in headers if k.lower() not in _HOP_HEADERS]
        request = b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body
        for backend in self.order():
            try:
                up_reader, up_writer = await asyncio.open_connection(*backend)
            except OSError:
                self.down_until[backend] = time.monotonic() + self.retry_after_s
                continue
            self.down_until[backend] = 0.0
            self.in_flight[backend] += 1
            try:
                up_writer.write(request)
                await up_writer.drain()
                while chunk := await up_reader.read(65536):
                    writer.write(chunk)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                self.in_flight[backend] -= 1
                up_writer.close()
                writer.close()
            return
        await _reply(writer, 503, b"no backend accepted the connection")


async def _reply(writer: asyncio.StreamWriter, status: int, text: bytes) -> None:
    reason = {400: "Bad Request", 411: "Length Required", 413: "Payload Too Large"}
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'Service Unavailable')}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(text)}\r\nConnection: close\r\n\r\n"
    )
    try:
        writer.write(head.encode() + text)
        await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def backend(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def serve(host: str, port: int, router: Router) -> None:
    server = await asyncio.start_server(router.handle, host, port, limit=MAX_HEAD)
    names = ", ".join(f"{h}:{p}" for h, p in router.backends)
    print(f"router on {host}:{port} -> {names}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="least-loaded HTTP router for vLLM instances")
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", type=backend, action="append", required=True)
    ap.add_argument("--retry-after", type=float, default=5.0, metavar="SECONDS")
    args = ap.parse_args(argv)
    try:
        asyncio.run(serve(args.host, args.port, Router(args.backend, args.retry_after)))
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"router: cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
