"""Locust users for load under chaos: each posts ``/infer`` batches to the nodes.

Run only by ``chaos/bench/load.py`` in a process of its own (Locust gevent-patches
the standard library when imported, which must never happen inside the harness).
Configuration comes from the environment the parent sets:

- ``SWARMSHAKE_LOAD_TARGETS``: comma-separated ``node=base URL`` pairs (validated by
  the parent);
- ``SWARMSHAKE_LOAD_RECORDS``: the JSONL file every request is appended to
  (``reports.load_model.RequestRecord``);
- ``SWARMSHAKE_LOAD_INPUT_DIM`` / ``SWARMSHAKE_LOAD_BATCH``: the request's shape;
- ``SWARMSHAKE_LOAD_RATE``: requests per second per user (a ceiling: bounds the load
  and the record file).

A request's ``t_mono`` is the host's monotonic clock at its start, the clock the
run's events use, so the parent can place it in the fault window it was sent in.
"""

from __future__ import annotations

import json
import os
import random
import time

from locust import FastHttpUser, constant_throughput, events, task

TARGETS = [
    tuple(pair.split("=", 1))
    for pair in os.environ.get("SWARMSHAKE_LOAD_TARGETS", "").split(",")
    if pair
]
RECORDS_PATH = os.environ.get("SWARMSHAKE_LOAD_RECORDS", "requests.jsonl")
INPUT_DIM = int(os.environ.get("SWARMSHAKE_LOAD_INPUT_DIM", "32"))
BATCH = int(os.environ.get("SWARMSHAKE_LOAD_BATCH", "4"))
RATE_PER_USER = float(os.environ.get("SWARMSHAKE_LOAD_RATE", "10"))
REQUEST_TIMEOUT_S = 5.0  # a node that stopped answering costs a user this much per request

_records = open(RECORDS_PATH, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives with the process


@events.request.add_listener
def _record(request_type, name, response_time, response_length, response, context, exception, **_):  # noqa: ANN001
    ok = exception is None
    status = getattr(response, "status_code", 0) or 0
    line = {
        "t_mono": time.monotonic() - (response_time or 0.0) / 1000.0,
        "node": name,
        "latency_ms": float(response_time or 0.0),
        "ok": ok,
        "status": int(status),
        "error": "" if ok else (f"HTTP {status}" if status else type(exception).__name__),
    }
    _records.write(json.dumps(line) + "\n")


class InferUser(FastHttpUser):
    """Posts one ``/infer`` batch at a time to a random node, at most RATE per second."""

    wait_time = constant_throughput(RATE_PER_USER)
    network_timeout = REQUEST_TIMEOUT_S
    connection_timeout = REQUEST_TIMEOUT_S

    @task
    def infer(self) -> None:
        node, base_url = random.choice(TARGETS)
        rows = [[random.uniform(-1.0, 1.0) for _ in range(INPUT_DIM)] for _ in range(BATCH)]
        with self.client.post(
            f"{base_url}/infer",
            json={"inputs": rows},
            name=node,
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                # Keep the transport error itself (its type names the failure) when there is one.
                response.failure(response.error or f"HTTP {response.status_code}")
