"""One verify run: optional lifecycle watch, the load, and the record that joins them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from drainsafe.verify.load import LoadSpec, ResultCallback, run_load
from drainsafe.verify.record import EventCallback, LifecycleEvent, Record


@dataclass(frozen=True)
class WatchSpec:
    namespace: str
    selector: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    linger: float = 0.0
    """Seconds to keep watching after the load ends (to see late exits and deletions)."""


async def verify(spec: LoadSpec, *, watch: WatchSpec | None = None,
                 on_result: ResultCallback | None = None,
                 on_event: EventCallback | None = None,
                 stop: asyncio.Event | None = None) -> Record:
    if watch is None:
        run = await run_load(spec, on_result=on_result, stop=stop)
        return Record.from_run(run)

    from drainsafe.kube.client import KubeClient
    from drainsafe.verify.watch import LifecycleWatch

    clock_zero = (time.monotonic(), time.time())
    events: list[LifecycleEvent] = []
    async with KubeClient.from_kubeconfig(watch.kubeconfig, watch.context) as client:
        watcher = LifecycleWatch(client, watch.namespace, watch.selector, clock_zero, on_event)
        await watcher.start()
        try:
            run = await run_load(spec, on_result=on_result, stop=stop, clock_zero=clock_zero)
            if watch.linger > 0:
                await asyncio.sleep(watch.linger)
        finally:
            await watcher.stop()
            events = watcher.events
    return Record.from_run(run, events)
