"""uvicorn's httptools protocol with one write per plain answer.

uvicorn writes an answer's head when the app sends `http.response.start` and its body when the
app sends `http.response.body`: two writes, so a client is woken twice for one answer (its head,
then its body). Here the head waits for the body's first write of the same loop turn and goes
out with it; an answer whose body is not sent in that turn (a stream waiting for its first
event) gets its head written alone when the turn ends, so no client waits on a held head. What
is written, and in what order, is uvicorn's own: only the number of writes changes.

Measured with `tests/perf/trial.py` (docs/results/perf_compare.md, 2026-12-07): the chat path's
p50 at one connection fell by about 0.02 ms.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _HeadHeld:
    """A cycle's transport from its answer's start on: the first write (the head) is held until
    the next write, which carries it, or until `flush`; every later write passes through."""

    __slots__ = ("_head", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head: bytes | None = b""  # b"": the head is still to come; None: written

    def write(self, data: bytes) -> None:
        head = self._head
        if head is None:
            self._transport.write(data)
        elif head:
            self._head = None
            self._transport.writelines((head, data))
        else:
            self._head = data

    def flush(self) -> None:
        """Write a head still held (the body did not follow in the same loop turn)."""
        head, self._head = self._head, None
        if head and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...: the transport's
        return getattr(self._transport, name)


class _Cycle(RequestResponseCycle):
    async def send(self, message: Any) -> None:
        if message["type"] != "http.response.start" or self.response_started:
            await super().send(message)
            return
        held = _HeadHeld(self.transport)
        self.transport = held  # type: ignore[assignment]
        asyncio.get_running_loop().call_soon(held.flush)
        await super().send(message)


class HttpToolsOneWrite(HttpToolsProtocol):
    """`gatekeeper serve`'s HTTP protocol (uvicorn's `http=`): uvicorn's httptools protocol whose
    request cycles write a plain answer's head and body in one write."""

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        # A new cycle's task is created but has not run yet: from its first step it uses _Cycle.send.
        if self.cycle is not before and type(self.cycle) is RequestResponseCycle:
            self.cycle.__class__ = _Cycle
