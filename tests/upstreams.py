"""Fake upstreams that speak the Responses API and the Anthropic Messages API natively (as well
as chat, through ScriptedServer): real HTTP servers whose answers tests choose.

`responder(body)` returns `{"content": str | None, "tool_calls": [{"name", "arguments"}]}` (as for
ScriptedServer) and may add `"items"`: raw Responses output items / Messages content blocks
appended as they are (an `mcp_call`, a `server_tool_use` ...), or `"raw": bytes` (with an optional
`"media_type"`) to answer exactly those bytes (a hostile upstream). Every body received is recorded in
`requests` (chat), `responses_requests` and `messages_requests`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from scripted import Responder, ScriptedServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def _sse(kind: str, doc: dict[str, Any], newline: str = "\n") -> bytes:
    return f"event: {kind}{newline}data: {json.dumps(doc)}{newline}{newline}".encode()


def _arguments(call: dict[str, Any]) -> str:
    return call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])


class NativeServer(ScriptedServer):
    """Chat (ScriptedServer), `/v1/responses`, `/v1/messages` and `/v1/messages/count_tokens`."""

    def __init__(self, responder: Responder | None = None, *, newline: str = "\n") -> None:
        super().__init__(responder)
        self.newline = newline  # "\r\n" frames the streams with CRLF, as the SSE spec allows
        self.responses_requests: list[dict[str, Any]] = []
        self.messages_requests: list[dict[str, Any]] = []
        self.count_requests: list[dict[str, Any]] = []
        self._server.config.app.router.routes += [
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
        ]

    # -- Responses -------------------------------------------------------------------------

    def received(self) -> list[dict[str, Any]]:
        """Every model request body it received, whatever its path."""
        return self.requests + self.responses_requests + self.messages_requests

    def _output(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if reply.get("content"):
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex[:8]}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply["content"], "annotations": []}],
                }
            )
        for call in reply.get("tool_calls") or []:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:8]}",
                    "call_id": f"call_{uuid.uuid4().hex[:8]}",
                    "name": call["name"],
                    "arguments": _arguments(call),
                    "status": "completed",
                }
            )
        return output + list(reply.get("items") or [])

    @staticmethod
    def _response(
        body: dict[str, Any], output: list[dict[str, Any]], status: str = "completed", response_id: str = "resp_native"
    ) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "response",
            "created_at": 0,
            "status": status,
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "error": None,
            "incomplete_details": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 7,
                "total_tokens": 17,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    async def _responses(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.responses_requests.append(body)
        self.headers.append(dict(request.headers))
        reply = self.responder(body)
        if "raw" in reply:
            return Response(reply["raw"], media_type=reply.get("media_type", "application/json"))
        if "status" in reply:
            return JSONResponse(
                {"error": {"message": reply["error"], "type": "scripted_error", "code": None}},
                status_code=reply["status"],
            )
        output = self._output(reply)
        # Each answer its own id, as a real upstream's: LangGraph merges messages that share one.
        response_id = f"resp_{uuid.uuid4().hex[:8]}"
        if body.get("stream"):
            return StreamingResponse(self._responses_stream(body, output, response_id), media_type="text/event-stream")
        return JSONResponse(self._response(body, output, response_id=response_id))

    async def _responses_stream(
        self, body: dict[str, Any], output: list[dict[str, Any]], response_id: str
    ) -> AsyncIterator[bytes]:
        sequence = 0

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            sequence += 1
            return _sse(kind, {"type": kind, "sequence_number": sequence - 1, **fields}, self.newline)

        yield event("response.created", response=self._response(body, [], "in_progress", response_id))
        yield event("response.in_progress", response=self._response(body, [], "in_progress", response_id))
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item=item | {"content": [], "status": "in_progress"},
                )
                yield event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
                for i in range(0, len(text), 5):
                    yield event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=text[i : i + 5],
                        logprobs=[],
                    )
                yield event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                yield event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=item["content"][0],
                )
            elif item["type"] == "function_call":
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item=item | {"arguments": "", "status": "in_progress"},
                )
                arguments = item["arguments"]
                for i in range(0, len(arguments), 4):
                    yield event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=arguments[i : i + 4],
                    )
                yield event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=arguments,
                    name=item["name"],
                )
            else:
                yield event("response.output_item.added", output_index=index, item=item)
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=self._response(body, output, response_id=response_id))

    # -- Messages --------------------------------------------------------------------------

    def _content(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        for call in reply.get("tool_calls") or []:
            arguments = call["arguments"] if isinstance(call["arguments"], dict) else json.loads(call["arguments"])
            content.append(
                {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:8]}", "name": call["name"], "input": arguments}
            )
        return content + list(reply.get("items") or [])

    async def _messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.messages_requests.append(body)
        self.headers.append(dict(request.headers))
        reply = self.responder(body)
        if "raw" in reply:
            return Response(reply["raw"], media_type=reply.get("media_type", "application/json"))
        if "status" in reply:
            return JSONResponse(
                {"type": "error", "error": {"type": "invalid_request_error", "message": reply["error"]}},
                status_code=reply["status"],
            )
        content = self._content(reply)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        message_id = f"msg_{uuid.uuid4().hex[:8]}"
        if body.get("stream"):
            return StreamingResponse(
                self._messages_stream(body, content, stop, message_id), media_type="text/event-stream"
            )
        return JSONResponse(
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 7},
            }
        )

    async def _messages_stream(
        self, body: dict[str, Any], content: list[dict[str, Any]], stop: str, message_id: str
    ) -> AsyncIterator[bytes]:
        def event(kind: str, **fields: Any) -> bytes:
            return _sse(kind, {"type": kind, **fields}, self.newline)

        yield event(
            "message_start",
            message={
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 0},
            },
        )
        yield event("ping")
        for index, block in enumerate(content):
            if block["type"] == "text":
                yield event("content_block_start", index=index, content_block={"type": "text", "text": ""})
                text = block["text"]
                for i in range(0, len(text), 5):
                    yield event(
                        "content_block_delta", index=index, delta={"type": "text_delta", "text": text[i : i + 5]}
                    )
            elif block["type"] == "tool_use":
                yield event("content_block_start", index=index, content_block=block | {"input": {}})
                arguments = json.dumps(block["input"])
                for i in range(0, len(arguments), 4):
                    yield event(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": arguments[i : i + 4]},
                    )
            else:
                yield event("content_block_start", index=index, content_block=block)
            yield event("content_block_stop", index=index)
        yield event("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 7})
        yield event("message_stop")

    async def _count_tokens(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.count_requests.append(body)
        return JSONResponse({"input_tokens": 10 + 5 * len(body.get("tools") or [])})
