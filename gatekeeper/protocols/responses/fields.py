"""Every field of a Responses request (`POST /v1/responses`) gatekeeper knows, and how it treats
each: the gate's allowlists (the table language is protocols/schema.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.protocols.builtin_tools import RESPONSES_BUILTIN_TOOLS, RESPONSES_SHELL_ENVIRONMENT
from gatekeeper.protocols.schema import (
    ANSWER_DATA,
    CALL_INPUT,
    FORWARD,
    GATED,
    MODERATION,
    PLAIN_MAP,
    PROGRAMS,
    SCHEMA,
    STORED_PROMPT,
    TYPE_ONLY,
    Fields,
    Obj,
    OneOf,
    Typed,
    offered_in,
)
from gatekeeper.rules.tools import BUILTIN_FAMILIES

# -- Responses: POST /v1/responses -------------------------------------------------------------

_RESPONSES_CACHE_BREAKPOINT = Obj({"mode": FORWARD, "ttl": FORWARD})
_INPUT_TEXT: Fields = {"type": FORWARD, "text": FORWARD, "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT}
_INPUT_IMAGE: Fields = {
    "type": FORWARD,
    "detail": FORWARD,
    "file_id": FORWARD,
    "image_url": FORWARD,
    "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT,
}
_INPUT_FILE: Fields = {
    "type": FORWARD,
    **{k: FORWARD for k in ("detail", "file_data", "file_id", "file_url", "filename")},
    "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT,
}
_INPUT_PARTS = Typed({"input_text": _INPUT_TEXT, "input_image": _INPUT_IMAGE, "input_file": _INPUT_FILE})
_ANNOTATIONS = Typed(
    {
        "file_citation": {k: FORWARD for k in ("type", "file_id", "filename", "index")},
        "url_citation": {k: FORWARD for k in ("type", "end_index", "start_index", "title", "url")},
        "container_file_citation": {
            k: FORWARD for k in ("type", "container_id", "end_index", "file_id", "filename", "start_index")
        },
        "file_path": {k: FORWARD for k in ("type", "file_id", "index")},
    }
)
_TOKEN: Fields = {"bytes": FORWARD, "logprob": FORWARD, "token": FORWARD}
_OUTPUT_TEXT: Fields = {
    "type": FORWARD,
    "text": FORWARD,
    "annotations": _ANNOTATIONS,
    "logprobs": Obj({**_TOKEN, "top_logprobs": Obj(_TOKEN)}),
}
# A message's content: what a client sends, and earlier answers' text sent back.
_MESSAGE_PARTS = Typed(
    {**_INPUT_PARTS.tables, "output_text": _OUTPUT_TEXT, "refusal": {"type": FORWARD, "refusal": FORWARD}}
)
_TEXT_FORMAT = Typed(
    {
        "text": TYPE_ONLY,
        "json_object": TYPE_ONLY,
        "json_schema": {k: FORWARD for k in ("type", "name", "description", "strict")} | {"schema": SCHEMA},
    }
)
_REASONING_TEXT = Typed({"reasoning_text": {"type": FORWARD, "text": FORWARD}})
_SUMMARY_TEXT = Typed({"summary_text": {"type": FORWARD, "text": FORWARD}})
_CALLER = Typed({"direct": TYPE_ONLY, "program": {"type": FORWARD, "caller_id": FORWARD}})
_APPROVAL_FILTER = Obj({"read_only": FORWARD, "tool_names": FORWARD})
_COMPUTER_ACTIONS = Typed(
    {
        "click": {k: FORWARD for k in ("type", "button", "keys", "x", "y")},
        "double_click": {k: FORWARD for k in ("type", "keys", "x", "y")},
        "drag": {"type": FORWARD, "keys": FORWARD, "path": Obj({"x": FORWARD, "y": FORWARD})},
        "keypress": {"type": FORWARD, "keys": FORWARD},
        "move": {k: FORWARD for k in ("type", "keys", "x", "y")},
        "screenshot": TYPE_ONLY,
        "scroll": {k: FORWARD for k in ("type", "keys", "scroll_x", "scroll_y", "x", "y")},
        "type": {"type": FORWARD, "text": FORWARD},
        "wait": TYPE_ONLY,
    }
)
_SAFETY_CHECK = Obj({"id": FORWARD, "code": FORWARD, "message": FORWARD})
_URL_SOURCE: Fields = {"type": FORWARD, "url": FORWARD}
_WEB_SEARCH_ACTION = Typed(
    {
        "search": {"type": FORWARD, "queries": FORWARD, "query": FORWARD, "sources": Typed({"url": _URL_SOURCE})},
        "open_page": _URL_SOURCE,
        "find_in_page": {"type": FORWARD, "pattern": FORWARD, "url": FORWARD},
    }
)
_MCP_ERROR: Fields = {"type": FORWARD, "code": FORWARD, "message": FORWARD}
_PATCH_OPERATION = Typed(
    {
        "create_file": {"type": FORWARD, "diff": FORWARD, "path": FORWARD},
        "update_file": {"type": FORWARD, "diff": FORWARD, "path": FORWARD},
        "delete_file": {"type": FORWARD, "path": FORWARD},
    }
)

RESPONSES_REQUEST: Fields = {
    "model": GATED,
    "input": GATED,  # each item: RESPONSES_INPUT_ITEM
    "tools": GATED,
    "tool_choice": GATED,
    "parallel_tool_calls": GATED,
    "reasoning": Obj(  # the effort
        {k: FORWARD for k in ("effort", "summary", "generate_summary", "context", "mode")}, how=GATED
    ),
    "stream": GATED,
    "prompt": STORED_PROMPT,
    "access_programs": PROGRAMS,
    "background": FORWARD,
    "background_options": Obj({"completion_window": FORWARD, "continuation_id": FORWARD}),
    "context_management": Obj({"type": FORWARD, "compact_threshold": FORWARD}),
    "conversation": Obj({"id": FORWARD}),  # or the id alone
    "image": Obj({"context_compression": FORWARD}),
    # What the answer also carries (data of its items, never a call): a closed set.
    "include": OneOf(
        frozenset(
            {
                "file_search_call.results",
                "web_search_call.results",
                "web_search_call.action.sources",
                "message.input_image.image_url",
                "computer_call_output.output.image_url",
                "code_interpreter_call.outputs",
                "reasoning.encrypted_content",
                "message.output_text.logprobs",
            }
        )
    ),
    "instructions": FORWARD,
    "max_output_tokens": FORWARD,
    "max_tool_calls": FORWARD,
    "metadata": PLAIN_MAP,
    "moderation": MODERATION,
    "previous_response_id": FORWARD,
    "prompt_cache_key": FORWARD,
    "prompt_cache_options": Obj({k: FORWARD for k in ("mode", "ttl", "prewarm", "comparison_response_id")}),
    "prompt_cache_retention": FORWARD,
    "safety_identifier": FORWARD,
    "service_tier": FORWARD,
    "store": FORWARD,
    "stream_options": Obj({"include_obfuscation": FORWARD}),
    "temperature": FORWARD,
    "text": Obj({"format": _TEXT_FORMAT, "verbosity": FORWARD}),
    "top_logprobs": FORWARD,
    "top_p": FORWARD,
    "truncation": FORWARD,
    "user": FORWARD,
    "client_metadata": PLAIN_MAP,  # sent by Codex (a map of strings)
}
_CALLERS: Fields = {"allowed_callers": FORWARD, "defer_loading": FORWARD}
_RESPONSES_FUNCTION: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "parameters": SCHEMA,
    "strict": FORWARD,
    "output_schema": SCHEMA,
    "async": FORWARD,
    **_CALLERS,
}
_RESPONSES_CUSTOM: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "format": Typed({"text": TYPE_ONLY, "grammar": {"type": FORWARD, "definition": FORWARD, "syntax": FORWARD}}),
    "async": FORWARD,
    **_CALLERS,
}
RESPONSES_TOOL: Mapping[str, Fields] = {  # by type; the built-ins (builtin_tools.py) have no `name`
    "function": _RESPONSES_FUNCTION,
    "custom": _RESPONSES_CUSTOM,
    "namespace": {"type": GATED, "name": GATED, "description": FORWARD, "tools": GATED},
    "mcp": {
        "type": GATED,
        "server_label": GATED,
        "allowed_tools": GATED,
        "server_url": FORWARD,
        "connector_id": FORWARD,
        "authorization": FORWARD,
        "headers": PLAIN_MAP,
        "require_approval": Obj({"always": _APPROVAL_FILTER, "never": _APPROVAL_FILTER}),  # or a word
        "server_description": FORWARD,
        "tunnel_id": FORWARD,
        **_CALLERS,
    },
    **RESPONSES_BUILTIN_TOOLS,
}
# Inside a `namespace` tool (and a tool_search_output's namespaces): function and custom tools.
RESPONSES_NAMESPACE_TOOL: Mapping[str, Fields] = {"function": _RESPONSES_FUNCTION, "custom": _RESPONSES_CUSTOM}
# `mcp.allowed_tools` in its object form (a filter).
RESPONSES_MCP_FILTER: Fields = {"tool_names": GATED, "read_only": GATED}
RESPONSES_TOOL_CHOICE: Mapping[str, Fields] = {  # the object forms, by type
    "allowed_tools": {"type": GATED, "mode": GATED, "tools": GATED},
    "function": {"type": GATED, "name": GATED, "namespace": GATED},
    "custom": {"type": GATED, "name": GATED, "namespace": GATED},
    "mcp": {"type": GATED, "server_label": GATED, "name": GATED},
    # A built-in by its type (the SDK lists file_search, web_search_preview, computer_use, ...).
    **{kind: {"type": GATED} for kind in BUILTIN_FAMILIES},
}
_ID: Fields = {"type": GATED, "id": FORWARD}
_STATUS: Fields = {"status": FORWARD}
RESPONSES_INPUT_ITEM: Mapping[str, Fields] = {  # by type (a message may omit it)
    "message": {**_ID, "role": FORWARD, "content": _MESSAGE_PARTS, "phase": FORWARD, **_STATUS},
    # Items that offer tools: gated like `tools`.
    "additional_tools": {**_ID, "role": FORWARD, "tools": GATED},
    "tool_search_output": {**_ID, "call_id": FORWARD, "execution": FORWARD, "tools": GATED, **_STATUS},
    "mcp_list_tools": {**_ID, "server_label": GATED, "tools": GATED, "error": FORWARD},
    # Earlier calls and their outputs: history, not offers of a tool.
    # (arguments and custom inputs are strings; outputs a string or an array of input parts)
    "function_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("arguments", "async", "call_id", "name", "namespace")},
        "caller": _CALLER,
    },
    "function_call_output": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("call_id", "name", "namespace")},
        "caller": _CALLER,
        "output": _INPUT_PARTS,
    },
    "custom_tool_call": {
        **_ID,
        **{k: FORWARD for k in ("async", "call_id", "input", "name", "namespace")},
        "caller": _CALLER,
    },
    "custom_tool_call_output": {**_ID, "call_id": FORWARD, "caller": _CALLER, "output": _INPUT_PARTS},
    "file_search_call": {
        **_ID,
        **_STATUS,
        "queries": FORWARD,
        "results": Obj({k: FORWARD for k in ("file_id", "filename", "score", "text")} | {"attributes": PLAIN_MAP}),
    },
    "computer_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "action": _COMPUTER_ACTIONS,
        "actions": _COMPUTER_ACTIONS,
        "pending_safety_checks": _SAFETY_CHECK,
    },
    "computer_call_output": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "acknowledged_safety_checks": _SAFETY_CHECK,
        "output": Typed({"computer_screenshot": {"type": FORWARD, "file_id": FORWARD, "image_url": FORWARD}}),
    },
    "web_search_call": {**_ID, **_STATUS, "action": _WEB_SEARCH_ACTION},
    "tool_search_call": {**_ID, **_STATUS, "arguments": CALL_INPUT, "call_id": FORWARD, "execution": FORWARD},
    "configuration_update": {
        **_ID,
        "reasoning": Obj({"effort": FORWARD}),
        "text": Obj({"format": Typed({k: _TEXT_FORMAT.tables[k] for k in ("text", "json_schema")})}),
    },
    "reasoning": {
        **_ID,
        **_STATUS,
        "content": _REASONING_TEXT,
        "encrypted_content": FORWARD,
        "summary": _SUMMARY_TEXT,
    },
    "compaction": {**_ID, "encrypted_content": FORWARD},
    "compaction_trigger": _ID,
    "image_generation_call": {
        **_ID,
        **_STATUS,
        **{
            k: FORWARD for k in ("action", "background", "output_format", "quality", "result", "revised_prompt", "size")
        },
        "error": Obj(
            {
                **{k: FORWARD for k in ("type", "code", "message", "param")},
                "moderation_details": Obj({"categories": FORWARD, "moderation_stage": FORWARD}),
            }
        ),
        "svg_usage": Obj(
            {k: FORWARD for k in ("input_tokens", "model", "output_tokens", "reasoning_tokens", "total_tokens")}
        ),
    },
    "code_interpreter_call": {
        **_ID,
        **_STATUS,
        "code": FORWARD,
        "container_id": FORWARD,
        "outputs": Typed({"logs": {"type": FORWARD, "logs": FORWARD}, "image": _URL_SOURCE}),
    },
    "local_shell_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "action": Typed(
            {
                "exec": {
                    **{k: FORWARD for k in ("type", "command", "timeout_ms", "user", "working_directory")},
                    "env": PLAIN_MAP,
                }
            }
        ),
    },
    "local_shell_call_output": {**_ID, **_STATUS, "output": FORWARD},
    "shell_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "caller": _CALLER,
        "action": Obj({"commands": FORWARD, "max_output_length": FORWARD, "timeout_ms": FORWARD}),
        "environment": Typed({k: RESPONSES_SHELL_ENVIRONMENT.tables[k] for k in ("local", "container_reference")}),
    },
    "shell_call_output": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "caller": _CALLER,
        "max_output_length": FORWARD,
        "output": Obj(
            {
                "stdout": FORWARD,
                "stderr": FORWARD,
                "outcome": Typed({"timeout": TYPE_ONLY, "exit": {"type": FORWARD, "exit_code": FORWARD}}),
            }
        ),
    },
    "apply_patch_call": {**_ID, **_STATUS, "call_id": FORWARD, "caller": _CALLER, "operation": _PATCH_OPERATION},
    "apply_patch_call_output": {**_ID, **_STATUS, "call_id": FORWARD, "caller": _CALLER, "output": FORWARD},
    "mcp_approval_request": {**_ID, "arguments": FORWARD, "name": FORWARD, "server_label": FORWARD},
    "mcp_approval_response": {**_ID, "approval_request_id": FORWARD, "approve": FORWARD, "reason": FORWARD},
    "mcp_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("approval_request_id", "arguments", "name", "output", "server_label")},
        "error": Typed(
            {
                "mcp_protocol_error": _MCP_ERROR,
                "http_error": _MCP_ERROR,
                "mcp_tool_execution_error": {"type": FORWARD, "content": ANSWER_DATA},
            }
        ),
    },
    "item_reference": _ID,
    "program": {**_ID, "call_id": FORWARD, "code": FORWARD, "fingerprint": FORWARD},
    "program_output": {**_ID, **_STATUS, "call_id": FORWARD, "result": FORWARD},
}
# A tool_search_output's `tools`: namespaces (RESPONSES_TOOL's namespace), or any top-level tool.
# An mcp_list_tools item's `tools`: the server's tools, each gated as `server_label.name`.
RESPONSES_LISTED_MCP_TOOL: Fields = {
    "name": GATED,
    "input_schema": SCHEMA,
    "annotations": ANSWER_DATA,  # the server's hints about the tool (read-only, ...), sent back as listed
    "description": FORWARD,
}


# What can offer tools: top-level fields, and the types of the `input` items that carry them. A
# request with none of these has nothing to gate (`carriers`).
TOOL_CARRIERS = frozenset({"tools", "tool_choice", "prompt", "access_programs"})
_CARRYING_ITEMS = frozenset({"additional_tools", "tool_search_output", "mcp_list_tools"})


def carriers(body: dict[str, Any]) -> list[str]:
    """The fields of `body` that offer (or could offer) tools. Empty: nothing to gate."""
    found = offered_in(body, TOOL_CARRIERS)
    items = body.get("input")
    if isinstance(items, list) and any(isinstance(i, dict) and i.get("type") in _CARRYING_ITEMS for i in items):
        found.append("input")
    return found
