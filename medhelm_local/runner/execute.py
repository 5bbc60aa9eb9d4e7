"""Sending a run's pending requests and committing each outcome as it arrives (write-through).

Only items without a stored outcome are sent, so re-running the same run after a crash completes it
without duplicating or losing work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.inference.client import ChatClient
from medhelm_local.prompts.build import build_request, request_hash
from medhelm_local.records import InferenceRequest
from medhelm_local.runner.progress import RunProgress
from medhelm_local.store.store import RunInfo, Store

BATCH = 256


def _pending_requests(store: Store, run: RunInfo, benchmark: str) -> Iterator[InferenceRequest]:
    spec = get_spec(benchmark)
    pending = store.pending_items(run.run_id, benchmark)
    for start in range(0, len(pending), BATCH):
        chunk = pending[start : start + BATCH]
        by_fp: dict[str, list[str]] = {}
        for iid, fp in chunk:
            by_fp.setdefault(fp, []).append(iid)
        instances = {}
        for fp, ids in by_fp.items():
            instances.update(store.get_instances(benchmark, fp, ids))
        for iid, _ in chunk:
            yield build_request(spec, instances[iid], seed=run.seed)


async def execute_run(store: Store, client: ChatClient, run: RunInfo, *, concurrency: int, max_retries: int,
                      progress: RunProgress) -> None:
    for benchmark in run.benchmarks:
        total = store.count_items(run.run_id, benchmark)
        pending = len(store.pending_items(run.run_id, benchmark))
        progress.add(benchmark, total, total - pending)
    semaphore = asyncio.Semaphore(concurrency)

    async def send(request: InferenceRequest) -> None:
        try:
            result = await client.complete(request, max_retries=max_retries)
            store.record_response(run.run_id, request, request_hash(request), result)
            progress.advance(request.benchmark, error=not result.ok)
        finally:
            semaphore.release()

    tasks: set[asyncio.Task[None]] = set()
    for benchmark in run.benchmarks:
        for request in _pending_requests(store, run, benchmark):
            await semaphore.acquire()
            task = asyncio.create_task(send(request))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
