"""run_load in a child Python process, its results streamed back as they complete.

Why: the lab (API server, kubelets, probers, proxies) runs in the caller's event loop. A
streaming load in that same loop competes with it for one core, and on a loaded machine
the lab's probes and endpoint updates run late (issue 28). In its own process the load is
scheduled by the kernel beside the lab instead of inside it.

Protocol (JSON lines; one concept: the load, moved out of process, same semantics):
  stdin  line 1: {"spec": LoadSpec fields, "clock_zero": [monotonic, wall]}; then stdin's
         end is the `stop` event: no new requests, requests in flight finish (run_load).
         It crosses a pipe, so a worker may start one more request while it does.
  stdout {"result": request_json(...)} per request as it completes, then one
         {"done": {"not_started": n, "elapsed": s}}.
  stderr the child's traceback when it fails; the parent raises LoadProcessFailed with it.

Clock zero: time.monotonic() is CLOCK_MONOTONIC on Linux, "a nonsettable system-wide
clock" (clock_gettime(2)), so a monotonic reading taken in the parent is time 0 in the
child too, with no wall-clock jitter; the wall reading travels with it for started_at.

The child dies with its parent: on Linux it asks for SIGKILL when the parent dies
(prctl(2) PR_SET_PDEATHSIG), and the parent kills it when it is cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from drainsafe.verify.load import LoadRun, LoadSpec, ResultCallback, now, run_load
from drainsafe.verify.record import request_from_json, request_json

_PR_SET_PDEATHSIG = 1
_LINE_LIMIT = 1 << 20
"""A result's error detail can be long; asyncio's default line limit is 64 KiB."""


class LoadProcessFailed(RuntimeError):
    """The load process ended without its final line: its exit status and stderr say why."""

    def __init__(self, returncode: int | None, stderr: str) -> None:
        self.returncode = returncode
        self.stderr = stderr
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        super().__init__(f"load process exited with status {returncode}:\n{tail}")


@dataclass(frozen=True)
class _Start:
    spec: LoadSpec
    clock_zero: tuple[float, float]

    def to_json(self) -> dict[str, Any]:
        spec = asdict(self.spec)
        spec["body"] = None if self.spec.body is None else base64.b64encode(
            self.spec.body).decode()
        return {"spec": spec, "clock_zero": list(self.clock_zero)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Start:
        spec = dict(data["spec"])
        spec["body"] = None if spec["body"] is None else base64.b64decode(spec["body"])
        spec["headers"] = tuple((str(k), str(v)) for k, v in spec["headers"])
        mono, wall = data["clock_zero"]
        return cls(spec=LoadSpec(**spec), clock_zero=(float(mono), float(wall)))


async def run_load_process(
    spec: LoadSpec,
    *,
    on_result: ResultCallback | None = None,
    stop: asyncio.Event | None = None,
    clock_zero: tuple[float, float] | None = None,
) -> LoadRun:
    """run_load's contract, with the requests sent from a child process."""
    zero = clock_zero if clock_zero is not None else (now(), time.time())
    run = LoadRun(spec=spec, started_at=zero[1])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drainsafe.verify.loadproc",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, limit=_LINE_LIMIT)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    errors = asyncio.ensure_future(stderr.read())  # read always, so the pipe never fills

    async def stopper() -> None:
        if stop is not None:
            await stop.wait()
        else:
            await asyncio.Event().wait()
        stdin.close()

    stopping = asyncio.ensure_future(stopper())
    done: dict[str, Any] | None = None
    try:
        stdin.write(json.dumps(_Start(spec, zero).to_json()).encode() + b"\n")
        with contextlib.suppress(ConnectionError):  # a dead child: its stderr says why
            await stdin.drain()
        async for line in stdout:
            message = json.loads(line)
            if "result" in message:
                result = request_from_json(message["result"])
                run.results.append(result)
                if on_result is not None:
                    on_result(result)
            elif "done" in message:
                done = message["done"]
        returncode = await proc.wait()
    finally:
        stopping.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        stdin.close()
    text = (await errors).decode(errors="replace")
    if done is None or returncode != 0:
        raise LoadProcessFailed(returncode, text)
    run.not_started = int(done["not_started"])
    run.elapsed = float(done["elapsed"])
    return run


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


async def _child() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    start = _Start.from_json(json.loads(await reader.readline()))
    stop = asyncio.Event()

    async def until_stdin_ends() -> None:
        while await reader.read(4096):
            pass
        stop.set()

    out = sys.stdout

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    watcher = asyncio.ensure_future(until_stdin_ends())
    run = await run_load(start.spec, stop=stop, clock_zero=start.clock_zero,
                         on_result=lambda r: send({"result": request_json(r)}))
    watcher.cancel()
    send({"done": {"not_started": run.not_started, "elapsed": run.elapsed}})


def main() -> None:
    _die_with_parent()
    # Ctrl-C reaches the whole process group: the parent decides when the load stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_child())


if __name__ == "__main__":
    main()
