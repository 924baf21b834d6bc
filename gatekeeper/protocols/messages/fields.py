"""Every field of a Messages request (`POST /v1/messages`, `/v1/messages/count_tokens`) gatekeeper
knows, and how it treats each: the gate's allowlists (the table language is
protocols/schema.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Re-exported: Messages' gate and answers (and tests) read the fixed names with the rest of its tables.
from gatekeeper.protocols.builtin_tools import MESSAGES_BUILTIN_NAMES as MESSAGES_BUILTIN_NAMES
from gatekeeper.protocols.builtin_tools import (
    MESSAGES_BUILTIN_TOOLS,
    MESSAGES_CACHED,
    MESSAGES_CITATIONS_ON,
    MESSAGES_CLIENT_TOOL,
)
from gatekeeper.protocols.schema import (
    ANSWER_DATA,
    CACHE_CONTROL,
    CALL_INPUT,
    FORWARD,
    GATED,
    OTHER_MODELS,
    SCHEMA,
    TYPE_ONLY,
    Fields,
    How,
    Obj,
    Refused,
    Typed,
    offered_in,
)

# -- Messages: POST /v1/messages and /v1/messages/count_tokens --------------------------------

_JSON_OUTPUT = Typed({"json_schema": {"type": FORWARD, "schema": SCHEMA}})
_TOKENS: Fields = {"type": FORWARD, "value": FORWARD}  # {"type": "input_tokens", "value": 1000}, ...
_CONTEXT_EDITS = Typed(
    {
        "clear_tool_uses_20250919": {
            "type": FORWARD,
            "clear_at_least": Typed({"input_tokens": _TOKENS}),
            "clear_tool_inputs": FORWARD,
            "exclude_tools": FORWARD,
            "keep": Typed({"tool_uses": _TOKENS}),
            "trigger": Typed({"input_tokens": _TOKENS, "tool_uses": _TOKENS}),
        },
        "clear_thinking_20251015": {"type": FORWARD, "keep": Typed({"thinking_turns": _TOKENS, "all": TYPE_ONLY})},
        "compact_20260112": {
            "type": FORWARD,
            "instructions": FORWARD,
            "pause_after_compaction": FORWARD,
            "trigger": Typed({"input_tokens": _TOKENS}),
        },
    }
)
_BLOCK_BINDING = Obj({"prefix_mismatch_behavior": FORWARD})
_THINKING = Typed(
    {
        "enabled": {"type": FORWARD, "budget_tokens": FORWARD, "display": FORWARD, "block_binding": _BLOCK_BINDING},
        "adaptive": {"type": FORWARD, "display": FORWARD, "block_binding": _BLOCK_BINDING},
        "disabled": TYPE_ONLY,
        "between_tools": TYPE_ONLY,
    },
    how=GATED,  # the effort (budget)
)
_OUTPUT_CONFIG = Obj(
    {
        "effort": FORWARD,
        "format": _JSON_OUTPUT,
        "task_budget": Typed({"tokens": {"type": FORWARD, "total": FORWARD, "remaining": FORWARD}}),
    },
    how=GATED,  # the effort
)
# Content blocks that other blocks carry too (a tool result's content, a document's source).
_CITATION_LOCATIONS = Typed(
    {
        "char_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_char_index", "start_char_index")
        },
        "page_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_page_number", "start_page_number")
        },
        "content_block_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_block_index", "start_block_index")
        },
        "web_search_result_location": {k: FORWARD for k in ("type", "cited_text", "encrypted_index", "title", "url")},
        "search_result_location": {
            k: FORWARD
            for k in (
                "type",
                "cited_text",
                "end_block_index",
                "search_result_index",
                "source",
                "start_block_index",
                "title",
            )
        },
    }
)
_TEXT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": CACHE_CONTROL,
    "text": FORWARD,
    "citations": _CITATION_LOCATIONS,
}
_BASE64: Fields = {"type": FORWARD, "data": FORWARD, "media_type": FORWARD}
_URL: Fields = {"type": FORWARD, "url": FORWARD}
_FILE: Fields = {"type": FORWARD, "file_id": FORWARD}
_IMAGE_BLOCK: Fields = {
    "type": GATED,
    "cache_control": CACHE_CONTROL,
    "source": Typed({"base64": _BASE64, "url": _URL, "file": _FILE}),
    "transformations": Obj({"oversized_image": FORWARD}),
}
_DOCUMENT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": CACHE_CONTROL,
    "citations": MESSAGES_CITATIONS_ON,
    "context": FORWARD,
    "title": FORWARD,
    "source": Typed(
        {
            "base64": _BASE64,
            "text": _BASE64,
            "url": _URL,
            "file": _FILE,
            "content": {"type": FORWARD, "content": Typed({"text": _TEXT_BLOCK, "image": _IMAGE_BLOCK})},
        }
    ),
}
_SEARCH_RESULT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": CACHE_CONTROL,
    "citations": MESSAGES_CITATIONS_ON,
    "content": Typed({"text": _TEXT_BLOCK}),
    "source": FORWARD,
    "title": FORWARD,
}
_TOOL_REFERENCE_BLOCK: Fields = {"type": FORWARD, "cache_control": CACHE_CONTROL, "tool_name": FORWARD}
_BROWSER_STATE_BLOCK: Fields = {
    "type": FORWARD,
    "cache_control": CACHE_CONTROL,
    "tabs": Obj({"active": FORWARD, "tab_id": FORWARD, "title": FORWARD, "url": FORWARD}),
    "state_changes": Typed(
        {
            "tab_opened": {"type": FORWARD, "tab_id": FORWARD},
            "download_started": {"type": FORWARD, "download_id": FORWARD, "url": FORWARD},
            "download_completed": {k: FORWARD for k in ("type", "download_id", "path", "size_bytes", "url")},
            "download_failed": {k: FORWARD for k in ("type", "download_id", "error", "url")},
        }
    ),
}
# A client tool's result: a string, or these blocks.
_TOOL_RESULT_CONTENT = Typed(
    {
        "text": _TEXT_BLOCK,
        "image": _IMAGE_BLOCK,
        "search_result": _SEARCH_RESULT_BLOCK,
        "document": _DOCUMENT_BLOCK,
        "tool_reference": _TOOL_REFERENCE_BLOCK,
        "browser_state": _BROWSER_STATE_BLOCK,
    }
)
_CALLED_BY = Typed(  # which tool's code made the call (programmatic tool calling)
    {
        "direct": TYPE_ONLY,
        "code_execution_20250825": {"type": FORWARD, "tool_id": FORWARD},
        "code_execution_20260120": {"type": FORWARD, "tool_id": FORWARD},
    }
)
_ERROR_CODE: Fields = {"type": FORWARD, "error_code": FORWARD}
_ERROR_MESSAGE: Fields = {"type": FORWARD, "error_code": FORWARD, "error_message": FORWARD}
_EXECUTION_OUTPUT = Typed({"code_execution_output": _FILE})
_SERVER_RESULTS: Mapping[str, How] = {  # a server tool's result, sent back: by block type
    "web_search_tool_result": Typed(
        {
            "web_search_tool_result_error": _ERROR_CODE,
            "web_search_result": {k: FORWARD for k in ("type", "encrypted_content", "page_age", "title", "url")},
        }
    ),
    "web_fetch_tool_result": Typed(
        {
            "web_fetch_tool_result_error": _ERROR_CODE,
            "web_fetch_result": {
                "type": FORWARD,
                "retrieved_at": FORWARD,
                "url": FORWARD,
                "content": Typed({"document": _DOCUMENT_BLOCK}),
            },
        }
    ),
    "advisor_tool_result": Typed(
        {
            "advisor_tool_result_error": _ERROR_CODE,
            "advisor_result": {"type": FORWARD, "stop_reason": FORWARD, "text": FORWARD},
            "advisor_redacted_result": {"type": FORWARD, "stop_reason": FORWARD, "encrypted_content": FORWARD},
        }
    ),
    "code_execution_tool_result": Typed(
        {
            "code_execution_tool_result_error": _ERROR_CODE,
            "code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "stdout")},
                "content": _EXECUTION_OUTPUT,
            },
            "encrypted_code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "encrypted_stdout")},
                "content": _EXECUTION_OUTPUT,
            },
        }
    ),
    "bash_code_execution_tool_result": Typed(
        {
            "bash_code_execution_tool_result_error": _ERROR_CODE,
            "bash_code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "stdout")},
                "content": Typed({"bash_code_execution_output": _FILE}),
            },
        }
    ),
    "text_editor_code_execution_tool_result": Typed(
        {
            "text_editor_code_execution_tool_result_error": _ERROR_MESSAGE,
            "text_editor_code_execution_view_result": {
                k: FORWARD for k in ("type", "content", "file_type", "num_lines", "start_line", "total_lines")
            },
            "text_editor_code_execution_create_result": {"type": FORWARD, "is_file_update": FORWARD},
            "text_editor_code_execution_str_replace_result": {
                k: FORWARD for k in ("type", "lines", "new_lines", "new_start", "old_lines", "old_start")
            },
        }
    ),
    "tool_search_tool_result": Typed(
        {
            "tool_search_tool_result_error": _ERROR_MESSAGE,
            "tool_search_tool_search_result": {
                "type": FORWARD,
                "tool_references": Typed({"tool_reference": _TOOL_REFERENCE_BLOCK}),
            },
        }
    ),
}
_TOOL_REFERENCES = Typed(  # what a tool_removal block removes
    {
        "tool_reference": {"type": FORWARD, "name": FORWARD},
        "mcp_tool_reference": {"type": FORWARD, "name": FORWARD, "server_name": FORWARD},
        "mcp_toolset_reference": {"type": FORWARD, "server_name": FORWARD},
    }
)

_MESSAGES_COMMON: Fields = {
    "model": GATED,
    "messages": GATED,  # each message: MESSAGES_MESSAGE, its blocks MESSAGES_CONTENT_BLOCK
    "system": GATED,  # a string, or text blocks (MESSAGES_CONTENT_BLOCK["text"])
    "tools": GATED,
    "tool_choice": GATED,
    "mcp_servers": GATED,
    "thinking": _THINKING,
    "output_config": _OUTPUT_CONFIG,
    "cache_control": CACHE_CONTROL,
    "compaction": Typed({"summarize": {"type": FORWARD, "instructions": FORWARD}}),
    "context_management": Obj({"edits": _CONTEXT_EDITS}),
    "speed": FORWARD,
    "user_profile_id": FORWARD,
    "workspace_id": FORWARD,
    "billing_policy": Typed({"billing_policy": {"type": FORWARD, "bill_to": FORWARD}}),
    "output_format": _JSON_OUTPUT,  # structured outputs (beta)
}
MESSAGES_REQUEST: Fields = {
    **_MESSAGES_COMMON,
    "max_tokens": FORWARD,
    "stream": GATED,
    "metadata": Obj({"user_id": FORWARD}),
    "stop_sequences": FORWARD,
    "temperature": FORWARD,
    "top_p": FORWARD,
    "top_k": FORWARD,
    # an id, or an id and the skills to load in it
    "container": Obj(
        {
            "id": FORWARD,
            "skills": Typed(
                {kind: {"type": FORWARD, "skill_id": FORWARD, "version": FORWARD} for kind in ("anthropic", "custom")}
            ),
        }
    ),
    "diagnostics": Obj({"previous_message_id": FORWARD}),
    "inference_geo": FORWARD,
    "service_tier": FORWARD,
    "thread": Typed({"create": TYPE_ONLY, "continue": {"type": FORWARD, "previous_message_id": FORWARD}}),
    "fallback_credit_token": Obj({"mode": FORWARD, "token": FORWARD}),
    "fallbacks": OTHER_MODELS,
}
MESSAGES_COUNT_TOKENS: Fields = _MESSAGES_COMMON
MESSAGES_MESSAGE: Mapping[str, Fields] = {  # by role
    "user": {"role": FORWARD, "content": GATED},
    "assistant": {"role": FORWARD, "content": GATED},
    # A mid-conversation system message (beta): its own output_config would change the effort
    # of the turn from the one the tier was decided for.
    "system": {
        "role": FORWARD,
        "content": GATED,
        "clear_at": FORWARD,
        "output_config": Refused("a per-turn output_config changes the effort the tier was decided for"),
    },
}
# By type; "custom" also stands for a tool without one. The built-ins, and the fixed name each
# carries (MESSAGES_BUILTIN_NAMES), are in builtin_tools.py, which chat reads too.
MESSAGES_TOOL: Mapping[str, Fields] = {
    "custom": {
        **MESSAGES_CLIENT_TOOL,
        "description": FORWARD,
        "input_schema": SCHEMA,
        "eager_input_streaming": FORWARD,
    },
    "mcp_toolset": {
        **MESSAGES_CACHED,
        "mcp_server_name": GATED,
        "configs": GATED,
        "default_config": GATED,
        "tools": GATED,
    },
    **MESSAGES_BUILTIN_TOOLS,
}
# The member tools of each toolset: the keys its `configs` may have, and the names the model calls
# them by (anthropic-python types/beta/beta_{computer,browser}_toolset_configs_param.py: "Unknown
# keys are rejected: the field set is this toolset version's complete member set").
_COMPUTER_MEMBERS = frozenset(
    {
        *("cursor_position", "double_click", "hold_key", "key", "left_click", "left_click_drag"),
        *("left_mouse_down", "left_mouse_up", "middle_click", "mouse_move", "right_click", "screenshot"),
        *("scroll", "triple_click", "type", "wait", "zoom"),
    }
)
_BROWSER_MEMBERS = frozenset(
    {
        *("close_tab", "double_click", "file_upload", "find", "form_input", "get_page_text", "hold_key"),
        *("hover", "javascript_exec", "key", "left_click", "left_click_drag", "left_mouse_down"),
        *("left_mouse_up", "list_tabs", "middle_click", "mouse_move", "navigate", "new_tab", "read_console"),
        *("read_network", "read_page", "right_click", "screenshot", "scroll", "scroll_to", "switch_tab"),
        *("triple_click", "type", "wait", "zoom"),
    }
)
MESSAGES_TOOLSET_MEMBERS: Mapping[str, frozenset[str]] = {
    "computer_toolset_20260801": _COMPUTER_MEMBERS,
    "browser_toolset_20260801": _BROWSER_MEMBERS,
}
# One member's config (beta_browser_navigate_config_param.py, ...): `enabled` is read by the gate.
MESSAGES_MEMBER_CONFIG: Fields = {"enabled": GATED, "defer_loading": FORWARD}
MESSAGES_TOOL_CHOICE: Mapping[str, Fields] = {
    "auto": {"type": GATED, "disable_parallel_tool_use": FORWARD},
    "any": {"type": GATED, "disable_parallel_tool_use": FORWARD},
    "tool": {"type": GATED, "name": GATED, "disable_parallel_tool_use": FORWARD},
    "none": {"type": GATED},
}
MESSAGES_MCP_SERVER: Fields = {
    "type": FORWARD,
    "name": GATED,
    "url": FORWARD,
    "authorization_token": FORWARD,
    "tool_configuration": GATED,
}
MESSAGES_MCP_TOOL_CONFIGURATION: Fields = {"allowed_tools": GATED, "enabled": GATED}
MESSAGES_MCP_TOOL_CONFIG: Fields = {"enabled": GATED, "defer_loading": FORWARD}
# An mcp_toolset's (or mcp_tool_listing block's) pinned `tools`: the server's tools by name.
MESSAGES_LISTED_MCP_TOOL: Fields = {
    "name": GATED,
    "description": FORWARD,
    "input_schema": SCHEMA,
    "annotations": ANSWER_DATA,  # the server's hints about the tool (read-only, ...), sent back as listed
}
_RESULT: Fields = {**MESSAGES_CACHED, "tool_use_id": FORWARD}
MESSAGES_CONTENT_BLOCK: Mapping[str, Fields] = {  # by type
    "text": _TEXT_BLOCK,
    "image": _IMAGE_BLOCK,
    "document": _DOCUMENT_BLOCK,
    "search_result": _SEARCH_RESULT_BLOCK,
    "thinking": {"type": GATED, "thinking": FORWARD, "signature": FORWARD},
    "redacted_thinking": {"type": GATED, "data": FORWARD},
    # Earlier calls and results: history, not offers of a tool.
    "tool_use": {
        **MESSAGES_CACHED,
        "id": FORWARD,
        "input": CALL_INPUT,
        "name": FORWARD,
        "caller": _CALLED_BY,
        "toolset_name": FORWARD,
    },
    "server_tool_use": {**MESSAGES_CACHED, "id": FORWARD, "input": CALL_INPUT, "name": FORWARD, "caller": _CALLED_BY},
    "mcp_tool_use": {**MESSAGES_CACHED, "id": FORWARD, "input": CALL_INPUT, "name": FORWARD, "server_name": FORWARD},
    "tool_result": {**_RESULT, "content": _TOOL_RESULT_CONTENT, "is_error": FORWARD, "toolset_name": FORWARD},
    "mcp_tool_result": {**_RESULT, "content": Typed({"text": _TEXT_BLOCK}), "is_error": FORWARD},
    **{
        kind: {**_RESULT, "content": content, **({"caller": _CALLED_BY} if "web_" in kind else {})}
        for kind, content in _SERVER_RESULTS.items()
    },
    "container_upload": {**MESSAGES_CACHED, "file_id": FORWARD},
    "fallback": {"type": GATED, "from": Obj({"model": FORWARD}), "to": Obj({"model": FORWARD}), "trigger": ANSWER_DATA},
    # Blocks that change the offered tools: gated like `tools`.
    "tool_addition": {**MESSAGES_CACHED, "tool": GATED},
    "tool_removal": {**MESSAGES_CACHED, "tool": _TOOL_REFERENCES},  # removing a tool never offers one
    "mcp_tool_listing": {"type": GATED, "mcp_server_name": GATED, "tools": GATED},
    "compaction": {
        **MESSAGES_CACHED,
        "content": FORWARD,
        "encrypted_content": FORWARD,
        "signature": FORWARD,
        "tool_changes": GATED,  # tool_addition / tool_removal entries
    },
}


# What can offer tools: top-level fields, and the types of the content blocks that carry them. A
# request with none of these has nothing to gate (`carriers`).
TOOL_CARRIERS = frozenset({"tools", "tool_choice", "mcp_servers", "fallbacks"})
_CARRYING_BLOCKS = frozenset({"tool_addition", "mcp_tool_listing", "compaction"})


def carriers(body: dict[str, Any]) -> list[str]:
    """The fields of `body` that offer (or could offer) tools. Empty: nothing to gate."""
    found = offered_in(body, TOOL_CARRIERS)
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in _CARRYING_BLOCKS for b in content
        ):
            found.append("messages")
            break
    return found
