"""HTTP API over a real socket: status, Prometheus metrics, validated and capped /infer."""

from __future__ import annotations

import asyncio
import contextlib
import json

import torch
from prometheus_client import CollectorRegistry, Counter

from swarmshake.reference_node.runtime.http_api import MAX_BODY_BYTES, MAX_INFER_BATCH, HttpApi
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.model import FlatMLP

CONFIG = TrainingConfig(hidden=[16], input_dim=4, output_dim=2)


async def request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    async with asyncio.timeout(5):
        data = await reader.read()  # every test request says Connection: close
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def http(method: str, path: str, body: bytes = b"") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_routes_validation_and_limits():
    model = FlatMLP(CONFIG)
    params = model.initial_parameters()
    registry = CollectorRegistry()
    steps = Counter("swarmshake_steps_committed", "Committed steps", registry=registry)
    steps.inc(7)

    async def infer(rows):
        return model.forward(params, torch.tensor(rows, dtype=torch.float32)).tolist()

    async def main():
        api = HttpApi(
            host="127.0.0.1",
            port=0,
            status=lambda: {"node": "n1", "step": 7},
            registry=registry,
            infer=infer,
            input_dim=CONFIG.input_dim,
        )
        ready = asyncio.Event()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.TaskGroup() as group:
                task = group.create_task(api.serve(group, ready))
                await ready.wait()
                port = api.bound_port

                status, headers, body = await request(port, http("GET", "/status"))
                assert status == 200 and json.loads(body) == {"node": "n1", "step": 7}

                status, headers, body = await request(port, http("GET", "/metrics"))
                assert status == 200 and headers["content-type"].startswith("text/plain")
                assert b"swarmshake_steps_committed_total 7.0" in body

                rows = [[0.1, 0.2, 0.3, 0.4], [1.0, -1.0, 0.5, 0.0]]
                status, _, body = await request(
                    port, http("POST", "/infer", json.dumps({"inputs": rows}).encode())
                )
                want = model.forward(params, torch.tensor(rows)).tolist()
                assert status == 200 and json.loads(body)["outputs"] == want

                bad = [
                    (http("POST", "/infer", b'{"inputs": [[1, 2]]}'), 400, "has 2 values"),
                    (http("POST", "/infer", b'{"inputs": []}'), 400, ""),
                    (http("POST", "/infer", b"not json"), 400, ""),
                    (http("POST", "/infer", b'{"inputs": [[1,2,3,NaN]]}'), 400, ""),
                    (
                        http(
                            "POST",
                            "/infer",
                            json.dumps({"inputs": [[0.0] * 4] * (MAX_INFER_BATCH + 1)}).encode(),
                        ),
                        400,
                        "",
                    ),
                    (http("POST", "/infer", b"x" * (MAX_BODY_BYTES + 1)), 413, "body over"),
                    (http("GET", "/infer"), 405, "takes POST"),
                    (http("GET", "/nope"), 404, "no route"),
                ]
                for raw, want_status, want_text in bad:
                    status, _, body = await request(port, raw)
                    assert status == want_status, (raw[:60], body)
                    assert want_text in json.loads(body)["error"]
                # garbage is not HTTP: the connection is closed, the server survives
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"\x00\x01garbage\r\n\r\n")
                await writer.drain()
                async with asyncio.timeout(5):
                    await reader.read()
                writer.close()
                status, _, _ = await request(port, http("GET", "/status"))
                assert status == 200
                assert api.stats.requests["/status 200"] == 2
                task.cancel()
                raise asyncio.CancelledError

    asyncio.run(main())
