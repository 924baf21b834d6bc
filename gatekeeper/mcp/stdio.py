"""The stdio transport to an MCP server gatekeeper starts: newline-delimited JSON-RPC over the
child's stdin and stdout, every message bounded in size.

The SDK's `stdio_client` joins the server's output until a newline comes: a server that writes
one endless line grows the gateway's memory without limit, and re-splits the whole line on each
64 KB read (on the event loop every other server and session needs). Here a line over
`max_bytes` ends the connection with `MessageTooLarge`: that server loses its tools (the
supervisor in gatekeeper.mcp.upstream says why and reconnects with backoff), the others keep
serving.

Starting and stopping the process are the SDK's own: the child gets the SDK's short safe
environment plus its `env`, runs in its own process group, and is stopped as the MCP spec says
(stdin closed, a grace period, then the whole group terminated). POSIX only, as gatekeeper is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable

import anyio
from anyio.abc import ByteReceiveStream, ObjectSendStream
from mcp import types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import _stop_server_process, get_default_environment
from mcp.shared.message import SessionMessage


class MessageTooLarge(Exception):
    """The server wrote a message over the bound; its connection is ended."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"it wrote a message over {max_bytes / 2**20:g} MiB (max_message_mb)")


@contextlib.asynccontextmanager
async def bounded_stdio(
    command: list[str], env: dict[str, str], max_bytes: int, failing: Callable[[str], None]
) -> AsyncIterator[TransportStreams]:
    """The (read, write) streams of a session with the server `command`, started now and stopped
    when the block ends. `failing(why)` is called before the connection is ended for a message
    over `max_bytes`, so the calls it ends can say why."""
    process = await anyio.open_process(
        command, env=get_default_environment() | env, stderr=sys.stderr, start_new_session=True
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    # Unbuffered, as the SDK's: the next message is read from the pipe once the session took the last.
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with to_session:  # its end is the session's end of the connection
            try:
                await _relay_lines(stdout, max_bytes, to_session)
            except MessageTooLarge as exc:
                failing(str(exc))
                raise

    async def writer() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # it stopped reading: the session sees the end, not a hang

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read, write
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):  # the process must go, even when our caller is cancelled
            for stream in (read, write, to_session, from_session):
                stream.close()
            await _stop_server_process(process)


async def _relay_lines(
    stdout: ByteReceiveStream, max_bytes: int, to_session: ObjectSendStream[SessionMessage | Exception]
) -> None:
    """Send each line of the server's output on as a message, until the output ends (a last line
    without its newline is dropped). A line over `max_bytes` raises MessageTooLarge as soon as
    that many bytes of it have come: no more of it is held."""
    pending: list[bytes] = []  # the current line's pieces, joined once when its newline comes
    size = 0
    async for chunk in stdout:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if size + end - start > max_bytes:
                raise MessageTooLarge(max_bytes)
            pending.append(chunk[start:end])
            await to_session.send(_parse(b"".join(pending)))
            pending, size, start = [], 0, end + 1
        size += len(chunk) - start
        if size > max_bytes:
            raise MessageTooLarge(max_bytes)
        if start < len(chunk):
            pending.append(chunk[start:])


def _parse(line: bytes) -> SessionMessage | Exception:
    """One line as a message, or the error the session reports for it (a garbled line ends nothing)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc
