"""One MCP server behind the gateway, kept connected: started (stdio) or reached (Streamable HTTP),
initialized, its tools listed, watched, and reconnected with backoff when it fails.

A server that crashes, hangs, answers garbage or lists a tool twice loses its own tools (its
`error` says why) and is retried; the gateway keeps serving the others. Every call to it has a
deadline (`timeout_s` of its config). What it was given to reach it (its `headers`, `env`, the
secrets of its `url`) is scrubbed from every error it relays: a server that echoes its credential
must not show it to a client that never had it.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED

from gatekeeper.config import McpServer
from gatekeeper.mcp.bounded_http import AnswerTooLarge, BoundedTransport
from gatekeeper.mcp.names import unusable
from gatekeeper.mcp.stdio import bounded_stdio
from gatekeeper.observe import logs
from gatekeeper.observe.redact import address_forms

log = logs.get_logger(__name__)

# A dead connection is noticed at once when its stream ends (a stdio server that exits); a hung
# one by a ping this often, which must answer within the server's timeout_s.
HEALTH_INTERVAL_S = 10.0
# The least time a stdio server is given to start and answer initialize.
START_S = 30.0
# Reconnection backoff: doubles from the first delay up to the last; a connection that served
# its listing resets it.
BACKOFF_S = (0.5, 30.0)
# A server's tools/list_changed is answered by listing it again, at most once per this pause: a
# server that says so after every listing (10,000 tools a time) made the gateway parse its
# listing back to back, on the loop every other server and session needs.
RELIST_PAUSE_S = 1.0
T = TypeVar("T")  # an item of a relayed list
# Bounds on what one listing may hold: a server that pages forever is misbehaving.
MAX_PAGES = 100
MAX_TOOLS = 10_000


class ServerUnavailable(Exception):
    """The server cannot take the call now (down, reconnecting, or it did not answer in time)."""


class Misbehaving(Exception):
    """The server answered something the gateway cannot trust (its tools are withdrawn)."""


class NotStarted(ServerUnavailable):
    """A stdio server's command cannot be started (its message names the command's path)."""


class Upstream:
    """A configured MCP server and its current connection. `run()` supervises it until cancelled."""

    def __init__(self, label: str, config: McpServer, changed: Callable[[], None]) -> None:
        """`changed()` is called (on the event loop) whenever the tools this server offers change."""
        self.label, self.config = label, config
        self._changed = changed
        self._secrets = _secrets(config)
        self.session: ClientSession | None = None
        self.tools: dict[str, types.Tool] = {}  # by the server's own tool name, in its order
        self.skipped: dict[str, str] = {}  # tools not offered: name -> why
        # Each offered tool's definition as a digest: a session shown one definition is not
        # served another under the same name (gatekeeper.mcp.gateway).
        self.fingerprints: dict[str, str] = {}
        self._listed: dict[str, types.Tool] = {}  # the last listing, kept across reconnections
        self.error: str | None = "not connected yet"  # why it is down, as the log and console show it
        self.reason: str | None = self.error  # the same as a client may read it (no address, path or words)
        self.connects = 0
        self.connected_since: float | None = None
        self._relist = anyio.Event()
        self._ending: str | None = None  # why the transport is ending the connection, while it does
        self._lists_tools = True

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command is not None else "http"

    @property
    def where(self) -> str:
        """Where it is, for the operator's log: its command, or its URL's scheme and host (the
        path and query may hold a key: hosted servers put one there)."""
        if self.config.command is not None:
            return self.config.command[0]
        parts = urlsplit(self.config.url or "")
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")

    # -- supervision -------------------------------------------------------------------------

    async def run(self) -> None:
        delay = BACKOFF_S[0]
        while True:
            try:
                await self._serve()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # noqa: BLE001 - whatever failed, only this server's tools go
                self._down(_describe(exc), _kind(exc))
            else:
                self._down("the connection ended", "the connection ended")
            if self.connected_since is not None:
                delay = BACKOFF_S[0]  # it served; a new failure starts the backoff again
            self.connected_since = None
            log.warning("mcp_server_down", server=self.label, at=self.where, error=self.error, retry_in_s=delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])

    def scrub(self, text: str) -> str:
        """`text` without any secret this server was configured with (each replaced by `***`)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _failing(self, why: str) -> None:
        """The transport is ending the connection for `why`: its tools go now, and the calls it
        ends say why."""
        self._ending = why
        self._down(why, why)

    def _down(self, error: str, reason: str) -> None:
        """Down for `error` (logged, on the console); `reason` is what a client is told."""
        was_up = self.session is not None or bool(self.tools)
        self.session, self.error, self.reason = None, self.scrub(error), self.scrub(reason)
        self.tools, self.skipped = {}, {}
        if was_up:
            self._changed()

    async def _serve(self) -> None:
        timeout = self.config.timeout_s
        self._ending = None
        async with self._connect() as (read, write), anyio.create_task_group() as tg:
            ended = anyio.Event()
            # The transport's stream is relayed so that its end (a stdio server that exited) is
            # seen at once, not at the next ping.
            send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

            async def relay() -> None:
                async with send:
                    async for item in read:
                        await send.send(item)
                ended.set()
                self._relist.set()  # wakes the supervisor below

            tg.start_soon(relay)
            # No session-wide read timeout: every request here has its own deadline, and one
            # would cut initialize short of START_S.
            async with ClientSession(receive, write, message_handler=self._on_message) as session:
                # A stdio server's first answer also waits for it to start (an interpreter's
                # imports, npx fetching its package), which timeout_s does not bound: under load a
                # server with a short timeout_s never came up.
                starting = max(timeout, START_S) if self.transport == "stdio" else timeout
                with anyio.fail_after(starting):
                    initialized = await session.initialize()
                self.connects += 1
                # A server of resources or prompts only has no tools/list to ask ("Method not
                # found" marked it down): its tools are none.
                self._lists_tools = initialized.capabilities.tools is not None
                await self._list(session)
                self.session, self.error, self.reason = session, None, None
                self.connected_since = time.monotonic()
                log.info("mcp_server_up", server=self.label, tools=len(self.tools), skipped=self.skipped or None)
                self._changed()
                while not ended.is_set():
                    with anyio.move_on_after(HEALTH_INTERVAL_S):
                        await self._relist.wait()
                    if ended.is_set():
                        break
                    if self._relist.is_set():
                        self._relist = anyio.Event()
                        await self._list(session)
                        self._changed()
                        await anyio.sleep(RELIST_PAUSE_S)  # what comes meanwhile is one listing, next
                    else:
                        with anyio.fail_after(timeout):
                            await session.send_ping()
            tg.cancel_scope.cancel()

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[Any, Any]]:
        max_bytes = int(self.config.max_message_mb * 2**20)
        if self.config.command is not None:
            command = self.config.command[0]
            if shutil.which(command) is None:  # the spawn's own error does not name the file
                raise NotStarted(f"cannot start {command!r}: no such executable")
            async with bounded_stdio(self.config.command, self.config.env, max_bytes, self._failing) as streams:
                yield streams
            return
        assert self.config.url is not None
        timeout = httpx2.Timeout(self.config.timeout_s, read=max(self.config.timeout_s, 300.0))
        # The SDK's client (create_mcp_http_client) with each answer bounded (gatekeeper.mcp.bounded_http).
        headers = dict(self.config.headers)
        http = httpx2.AsyncClient(headers=headers, timeout=timeout, transport=BoundedTransport(max_bytes, headers))
        async with (
            http as client,
            streamable_http_client(self.config.url, http_client=client, max_sse_event_size=max_bytes) as streams,
        ):
            yield streams

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            log.warning("mcp_server_garbage", server=self.label, error=self.scrub(_describe(message)))
        elif isinstance(message, types.ToolListChangedNotification):
            self._relist.set()  # listed again by the supervisor, not in the reader's task

    async def _list(self, session: ClientSession) -> None:
        """Every page of the server's tools; a listing that cannot be trusted raises Misbehaving."""
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            if not self._lists_tools:
                break
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            with anyio.fail_after(self.config.timeout_s):
                page = await session.list_tools(params=params)
            for tool in page.tools:
                if tool.name in tools:
                    raise Misbehaving(f"it listed the tool {tool.name!r} twice")
                tools[tool.name] = tool
            if len(tools) > MAX_TOOLS:
                raise Misbehaving(f"it listed more than {MAX_TOOLS} tools")
            cursor = page.next_cursor
            if cursor is None:
                break
            if cursor in seen:
                raise Misbehaving(f"its tools/list pages loop (cursor {cursor[:40]!r} came back)")
            seen.add(cursor)
        else:
            raise Misbehaving(f"its tools/list has more than {MAX_PAGES} pages")
        self.skipped = {name: why for name in tools if (why := unusable(self.label, name)) is not None}
        kept = {name: tool for name, tool in tools.items() if name not in self.skipped}
        fingerprints = {name: fingerprint(tool) for name, tool in kept.items()}
        for name, was in self.fingerprints.items():
            if fingerprints.get(name, was) != was:  # a "rug pull": the same name, another tool
                changed = _differences(self._listed[name], kept[name])
                log.warning("mcp_tool_changed", server=self.label, tool=name, changed=changed)
        self.tools, self.fingerprints, self._listed = kept, fingerprints, kept

    # -- calls -------------------------------------------------------------------------------

    def _live(self) -> ClientSession:
        if self.session is None:
            # Why it is down (a URL, a command's path, a connection's words) is the log's and the
            # console's (`mcp_server_down`, `error`), not the client's.
            raise ServerUnavailable(f"MCP server {self.label!r} is unavailable: {self.reason}")
        return self.session

    async def _deadline(self, what: str, call: Awaitable[Any]) -> Any:
        try:
            with anyio.fail_after(self.config.timeout_s):
                return await call
        except TimeoutError:
            raise ServerUnavailable(
                f"MCP server {self.label!r} did not answer {what} within {self.config.timeout_s:g} s"
            ) from None
        except MCPError as exc:  # the server's own JSON-RPC error: relayed, without our secrets
            if exc.code == CONNECTION_CLOSED and self._ending is not None:
                raise ServerUnavailable(f"MCP server {self.label!r} failed {what}: {self._ending}") from None
            said = _transport_words(exc.message)
            if said is not None:  # the SDK's words, quoting what the server sent: logged, said in ours
                log.warning("mcp_server_failed", server=self.label, what=what, error=self.scrub(exc.message))
                raise MCPError(exc.code, said) from None
            raise MCPError(exc.code, self.scrub(exc.message), self._scrub_data(exc.data)) from None
        except Exception as exc:  # noqa: BLE001 - a broken transport or a garbled answer: say which
            # The client is told what kind of failure it was; its words (an address, a path) are logged.
            log.warning("mcp_server_failed", server=self.label, what=what, error=self.scrub(_describe(exc)))
            raise ServerUnavailable(f"MCP server {self.label!r} failed {what}: {_kind(exc)}") from None

    def _scrub_data(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.scrub(data)
        if isinstance(data, list):
            return [self._scrub_data(item) for item in data]
        if isinstance(data, dict):
            return {key: self._scrub_data(value) for key, value in data.items()}
        return data

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, progress: ProgressFnT | None
    ) -> types.CallToolResult:
        session = self._live()
        timeout = self.config.timeout_s
        result: types.CallToolResult = await self._deadline(
            f"tools/call {name!r}", session.call_tool(name, arguments, timeout, progress_callback=progress)
        )
        if result.is_error:  # a tool's error is an error too: its text may echo a credential
            content = [
                item.model_copy(update={"text": self.scrub(item.text)}) if isinstance(item, types.TextContent) else item
                for item in result.content
            ]
            result = result.model_copy(update={"content": content})
        return result

    async def list_resources(self) -> list[types.Resource]:
        session = self._live()
        return await self._every_page("resources/list", session.list_resources, lambda page: page.resources)

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        session = self._live()
        return await self._every_page(
            "resources/templates/list", session.list_resource_templates, lambda page: page.resource_templates
        )

    async def _every_page(
        self, method: str, fetch: Callable[..., Awaitable[Any]], items: Callable[[Any], list[T]]
    ) -> list[T]:
        """What a relayed list returns over its pages, each within the deadline (at most MAX_PAGES)."""
        found: list[T] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await self._deadline(method, fetch(params=params))
            found += items(page)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        result: types.ReadResourceResult = await self._deadline("resources/read", self._live().read_resource(uri))
        return result

    async def list_prompts(self) -> list[types.Prompt]:
        session = self._live()
        return await self._every_page("prompts/list", session.list_prompts, lambda page: page.prompts)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        result: types.GetPromptResult = await self._deadline("prompts/get", self._live().get_prompt(name, arguments))
        return result

    async def complete(
        self,
        ref: types.ResourceTemplateReference | types.PromptReference,
        argument: dict[str, str],
        context: dict[str, str] | None,
    ) -> types.CompleteResult:
        result: types.CompleteResult = await self._deadline(
            "completion/complete", self._live().complete(ref, argument, context)
        )
        return result

    def status(self) -> dict[str, Any]:
        """What the console and logs show about this server."""
        return {
            "label": self.label,
            "transport": self.transport,
            "up": self.session is not None,
            "error": self.error,
            "tools": list(self.tools),
            "skipped": dict(self.skipped),
            "connects": self.connects,
        }


# Shorter values are placeholders (EMPTY, none) more often than secrets, and replacing them
# would mangle the error's own words (the proxy's rule for the operator's upstream key).
_MIN_SECRET = 8
_CREDENTIAL_NAME = re.compile(r"key|token|secret|pass|pwd|auth|credential|cookie|session|private|sig", re.IGNORECASE)
_PATH_SECRET = 16  # a path segment this long is a key more likely than a word (`mcp`, `v1`, `sse`)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def _secrets(config: McpServer) -> tuple[str, ...]:
    """What a server was given that no client may read back: its header values (and the token
    after a scheme: `Bearer <token>`), the values of its env variables named like a credential
    (`GITHUB_TOKEN`, `API_KEY`; not `NODE_ENV: production`, which would mangle every message
    with that word), its URL (whole, its origin and `host:port` however an error spells them, its
    password, its query values, and its long path segments: hosted servers put the key in the
    path, `/s/<key>/mcp`), and its command's files (the program, a script) with the folders they
    are in: a traceback in an error names them."""
    found: list[str] = []
    if config.command is not None:
        files = [Path(arg).absolute() for arg in config.command if "/" in arg and Path(arg).is_file()]
        found += [str(path) for file in files for path in (file, file.parent)]
    for value in config.headers.values():
        found += [value, value.partition(" ")[2]]
    found += [value for name, value in config.env.items() if _CREDENTIAL_NAME.search(name)]
    if config.url is not None:
        parts = urlsplit(config.url)
        found += [config.url, *address_forms(config.url), parts.password or ""]
        found += [value for _, value in parse_qsl(parts.query)]
        found += [segment for segment in parts.path.split("/") if len(segment) >= _PATH_SECRET]
    # Longest first, so a value is never half-replaced through a shorter one it contains.
    return tuple(sorted({s for s in found if len(s) >= _MIN_SECRET}, key=len, reverse=True))


def fingerprint(tool: types.Tool) -> str:
    """A digest of everything a client is shown of a tool (description, schemas, annotations, ...)."""
    return hashlib.sha256(tool.model_dump_json(by_alias=True, exclude_none=True).encode()).hexdigest()[:32]


def _differences(was: types.Tool, now: types.Tool) -> list[str]:
    before, after = was.model_dump(by_alias=True, exclude_none=True), now.model_dump(by_alias=True, exclude_none=True)
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def _kind(exc: BaseException) -> str:
    """What a client may be told of a failure: our own words for what the server did (a listing
    it cannot be trusted with, an answer over the bound, no answer in time), else its kind only:
    a connection's or a spawn's words name addresses and paths."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _kind(exc.exceptions[0])
    if isinstance(exc, NotStarted):
        return "its command cannot be started"
    if isinstance(exc, (Misbehaving, AnswerTooLarge)):
        return str(exc)
    if isinstance(exc, MCPError):  # the SDK's words for what the transport met: any URL in them goes
        return _transport_words(exc.message) or _URL.sub("***", exc.message)[:300]
    described = _describe(exc)
    return described if described == "it did not answer in time" else type(exc).__name__


# What the SDK's HTTP transport says of an answer that is no JSON-RPC message, by how its words
# begin: they quote the answer (a parse error shows part of the body: a path, a token's tail), a
# redirect's target (another address) or the content type the server chose. A client is told ours.
_TRANSPORT_WORDS = {
    "Failed to parse JSON response": "its answer was not a JSON-RPC message",
    "Failed to parse SSE message": "its event stream carried something not a JSON-RPC message",
    "Redirect to ": "it answered with a redirect, which is not followed",
    "Unexpected content type": "its answer had an unexpected content type",
    "SSE stream failed": "its event stream failed",
}


# Words of the bounds on an answer (gatekeeper.mcp.bounded_http's, httpx2's on an event): said as they are.
_BOUND_WORDS = ("it answered over", "it sent a compressed answer", "Server-sent event exceeded the")


def _transport_words(message: str) -> str | None:
    """Our words for an error the SDK's transport made up, or None (the server's own error)."""
    for theirs, ours in _TRANSPORT_WORDS.items():
        if message.startswith(theirs):
            detail = message.removeprefix(theirs).lstrip(": ")
            return f"{ours}: {detail}" if detail.startswith(_BOUND_WORDS) else ours
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        # A timeout inside the SDK's task group may come with what it caused (a cancelled read,
        # a closed stream): the timeout is the cause, whichever the group lists first.
        if exc.subgroup(lambda e: isinstance(e, TimeoutError)) is not None:
            return "it did not answer in time"
        if len(exc.exceptions) == 1:
            return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__
