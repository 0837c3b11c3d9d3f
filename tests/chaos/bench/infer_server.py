"""A real node HTTP API (``runtime.http_api.HttpApi``) serving the reference model's
``/infer``, for the load tests: ``python infer_server.py PORT`` (0 picks one) prints
``PORT <n>`` once it listens and serves until killed."""

from __future__ import annotations

import asyncio
import sys

import torch
from prometheus_client import CollectorRegistry

from swarmshake.reference_node.runtime.http_api import HttpApi
from swarmshake.reference_node.training.config import TrainingConfig
from swarmshake.reference_node.training.model import FlatMLP

CONFIG = TrainingConfig(hidden=[64, 64])


async def main(port: int) -> None:
    model = FlatMLP(CONFIG)
    params = model.initial_parameters()

    async def infer(rows: list[list[float]]) -> list[list[float]]:
        with torch.no_grad():
            return model.forward(params, torch.tensor(rows, dtype=torch.float32)).tolist()

    api = HttpApi(
        host="127.0.0.1",
        port=port,
        status=lambda: {"node": "test"},
        registry=CollectorRegistry(),
        infer=infer,
        input_dim=CONFIG.input_dim,
    )
    ready = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(api.serve(group, ready))
        await ready.wait()
        print(f"PORT {api.bound_port}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
