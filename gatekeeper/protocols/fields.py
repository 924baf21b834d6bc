"""Every request field each codec knows, per protocol and endpoint: the gate's allowlists.

A field a codec forwards is one listed here, as one of:
  * FORWARD: relayed as sent (it cannot carry a tool or redirect the request);
  * GATED: read by the codec, which gates the tools in it (or decides the tier with it);
  * Refused(why): known, and refused with a 400 that says why (it could bring what the gate
    cannot see: a stored prompt's tools, substitute models, ...).
Anything else is unknown: refused with a 400 naming it (`upstream.unknown_fields: refuse`, the
default) or dropped and logged (`drop`). The same holds inside a tool, a tool choice, an input
item (Responses `input`, chat `messages`, Messages content blocks) and the other objects listed
below, each table keyed by the object's `type` (or role).

The lists follow the published request types (openai-python `types/chat/completion_create_params.py`,
`types/responses/response_create_params.py`, anthropic-python `types/beta/message_create_params.py`
and the tool, choice and item types they use); tests/protocols/test_fields.py compares them with
the installed SDKs, so a field the SDKs grow shows up as a failing test, not as a hole. A few
fields real OpenAI-compatible servers take (vLLM, llama.cpp) are listed where noted. To support a
new field: add it here with how it is treated, and, if GATED, gate it in the codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper import logs
from gatekeeper.errors import RequestInvalid
from gatekeeper.gating import BUILTIN_FAMILIES

FORWARD = "forward"
GATED = "gated"


@dataclass(frozen=True)
class Refused:
    why: str


How = str | Refused
Fields = Mapping[str, How]

_STORED_PROMPT = Refused("a stored prompt template may bring tools gatekeeper cannot see")
_OTHER_MODELS = Refused("it names substitute models the tier was not decided for")
_PROGRAMS = Refused("access programs may grant capabilities gatekeeper cannot see")

# -- Chat Completions: POST /v1/chat/completions ----------------------------------------------

CHAT_REQUEST: Fields = {
    "model": GATED,
    "messages": GATED,  # each message: CHAT_MESSAGE
    "tools": GATED,
    "tool_choice": GATED,
    "functions": GATED,  # legacy
    "function_call": GATED,  # legacy
    "parallel_tool_calls": GATED,
    "reasoning_effort": GATED,  # the effort
    "stream": GATED,
    "stream_options": FORWARD,
    "audio": FORWARD,
    "frequency_penalty": FORWARD,
    "logit_bias": FORWARD,
    "logprobs": FORWARD,
    "max_completion_tokens": FORWARD,
    "max_tokens": FORWARD,
    "metadata": FORWARD,
    "modalities": FORWARD,
    "moderation": FORWARD,
    "n": FORWARD,
    "prediction": FORWARD,
    "presence_penalty": FORWARD,
    "prompt_cache_key": FORWARD,
    "prompt_cache_options": FORWARD,
    "prompt_cache_retention": FORWARD,
    "response_format": FORWARD,
    "safety_identifier": FORWARD,
    "seed": FORWARD,
    "service_tier": FORWARD,
    "stop": FORWARD,
    "store": FORWARD,
    "temperature": FORWARD,
    "top_logprobs": FORWARD,
    "top_p": FORWARD,
    "user": FORWARD,
    "verbosity": FORWARD,
    "web_search_options": GATED,  # turns on the search models' built-in web search
    # OpenAI-compatible servers (vLLM, llama.cpp): sampling knobs, and template variables.
    "top_k": FORWARD,
    "min_p": FORWARD,
    "repetition_penalty": FORWARD,
    "chat_template_kwargs": GATED,  # CHAT_TEMPLATE_KWARGS: a variable could render tools
}
# Template variables that switch reasoning on or off (Qwen3, DeepSeek, gpt-oss templates).
CHAT_TEMPLATE_KWARGS: Fields = {"enable_thinking": FORWARD, "thinking": FORWARD, "reasoning_effort": FORWARD}
_CHAT_SPEAKER: Fields = {"role": FORWARD, "content": FORWARD, "name": FORWARD}
CHAT_MESSAGE: Mapping[str, Fields] = {  # by role
    "developer": _CHAT_SPEAKER,
    "system": _CHAT_SPEAKER,
    "user": _CHAT_SPEAKER,
    "assistant": {
        **_CHAT_SPEAKER,
        "audio": FORWARD,
        "function_call": FORWARD,  # earlier calls: history, not an offer of a tool
        "refusal": FORWARD,
        "tool_calls": FORWARD,
        "reasoning_content": FORWARD,  # DeepSeek-style reasoning sent back (vLLM, llama.cpp)
    },
    "tool": {"role": FORWARD, "content": FORWARD, "tool_call_id": FORWARD},
    "function": _CHAT_SPEAKER,
}
CHAT_FUNCTION: Fields = {"name": GATED, "description": FORWARD, "parameters": FORWARD, "strict": FORWARD}
CHAT_CUSTOM: Fields = {"name": GATED, "description": FORWARD, "format": FORWARD}
CHAT_TOOL: Mapping[str, Fields] = {  # by type
    "function": {"type": GATED, "function": GATED},
    "custom": {"type": GATED, "custom": GATED},
}
CHAT_LEGACY_FUNCTION: Fields = {"name": GATED, "description": FORWARD, "parameters": FORWARD}
CHAT_TOOL_CHOICE: Mapping[str, Fields] = {  # the object forms, by type
    "function": {"type": GATED, "function": GATED},  # function: {"name"}
    "custom": {"type": GATED, "custom": GATED},  # custom: {"name"}
    "allowed_tools": {"type": GATED, "allowed_tools": GATED},  # {"mode", "tools"}
}
CHAT_NAMED: Fields = {"name": GATED}
CHAT_ALLOWED_TOOLS: Fields = {"mode": GATED, "tools": GATED}

# -- Responses: POST /v1/responses -------------------------------------------------------------

RESPONSES_REQUEST: Fields = {
    "model": GATED,
    "input": GATED,  # each item: RESPONSES_INPUT_ITEM
    "tools": GATED,
    "tool_choice": GATED,
    "parallel_tool_calls": GATED,
    "reasoning": GATED,  # the effort
    "stream": GATED,
    "prompt": _STORED_PROMPT,
    "access_programs": _PROGRAMS,
    "background": FORWARD,
    "background_options": FORWARD,
    "context_management": FORWARD,
    "conversation": FORWARD,
    "image": FORWARD,
    "include": FORWARD,
    "instructions": FORWARD,
    "max_output_tokens": FORWARD,
    "max_tool_calls": FORWARD,
    "metadata": FORWARD,
    "moderation": FORWARD,
    "previous_response_id": FORWARD,
    "prompt_cache_key": FORWARD,
    "prompt_cache_options": FORWARD,
    "prompt_cache_retention": FORWARD,
    "safety_identifier": FORWARD,
    "service_tier": FORWARD,
    "store": FORWARD,
    "stream_options": FORWARD,
    "temperature": FORWARD,
    "text": FORWARD,
    "top_logprobs": FORWARD,
    "top_p": FORWARD,
    "truncation": FORWARD,
    "user": FORWARD,
    "client_metadata": FORWARD,  # sent by Codex
}
_CALLERS = {"allowed_callers": FORWARD, "defer_loading": FORWARD}
_RESPONSES_FUNCTION: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "parameters": FORWARD,
    "strict": FORWARD,
    "output_schema": FORWARD,
    "async": FORWARD,
    **_CALLERS,
}
_RESPONSES_CUSTOM: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "format": FORWARD,
    "async": FORWARD,
    **_CALLERS,
}
_WEB_SEARCH: Fields = {
    "type": GATED,
    "external_web_access": FORWARD,
    "filters": FORWARD,
    "search_context_size": FORWARD,
    "user_location": FORWARD,
}
_WEB_SEARCH_PREVIEW: Fields = {
    "type": GATED,
    "search_content_types": FORWARD,
    "search_context_size": FORWARD,
    "user_location": FORWARD,
}
RESPONSES_TOOL: Mapping[str, Fields] = {  # by type; built-ins have no `name`: a name is unknown
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
        "headers": FORWARD,
        "require_approval": FORWARD,
        "server_description": FORWARD,
        "tunnel_id": FORWARD,
        **_CALLERS,
    },
    "web_search": _WEB_SEARCH,
    "web_search_2025_08_26": _WEB_SEARCH,
    "web_search_preview": _WEB_SEARCH_PREVIEW,
    "web_search_preview_2025_03_11": _WEB_SEARCH_PREVIEW,
    "file_search": {
        "type": GATED,
        "vector_store_ids": FORWARD,
        "filters": FORWARD,
        "max_num_results": FORWARD,
        "ranking_options": FORWARD,
    },
    "computer": {"type": GATED},
    "computer_use_preview": {
        "type": GATED,
        "display_height": FORWARD,
        "display_width": FORWARD,
        "environment": FORWARD,
    },
    "code_interpreter": {"type": GATED, "container": FORWARD, "allowed_callers": FORWARD},
    "programmatic_tool_calling": {"type": GATED},
    "image_generation": {
        "type": GATED,
        **{
            k: FORWARD
            for k in (
                "action",
                "background",
                "complexity",
                "frame_count",
                "frame_duration_ms",
                "input_fidelity",
                "input_image_mask",
                "model",
                "moderation",
                "output_compression",
                "output_format",
                "partial_images",
                "quality",
                "size",
                "svg",
            )
        },
    },
    "local_shell": {"type": GATED},
    "shell": {"type": GATED, "environment": FORWARD, "allowed_callers": FORWARD},
    "apply_patch": {"type": GATED, "allowed_callers": FORWARD},
    "tool_search": {"type": GATED, "description": FORWARD, "execution": FORWARD, "parameters": FORWARD},
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
_ID = {"type": GATED, "id": FORWARD}
_STATUS = {"status": FORWARD}
RESPONSES_INPUT_ITEM: Mapping[str, Fields] = {  # by type (a message may omit it)
    "message": {**_ID, "role": FORWARD, "content": FORWARD, "phase": FORWARD, **_STATUS},
    # Items that offer tools: gated like `tools`.
    "additional_tools": {**_ID, "role": FORWARD, "tools": GATED},
    "tool_search_output": {**_ID, "call_id": FORWARD, "execution": FORWARD, "tools": GATED, **_STATUS},
    "mcp_list_tools": {**_ID, "server_label": GATED, "tools": GATED, "error": FORWARD},
    # Earlier calls and their outputs: history, not offers of a tool.
    "function_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("arguments", "async", "call_id", "caller", "name", "namespace")},
    },
    "function_call_output": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("call_id", "caller", "name", "namespace", "output")},
    },
    "custom_tool_call": {**_ID, **{k: FORWARD for k in ("async", "call_id", "caller", "input", "name", "namespace")}},
    "custom_tool_call_output": {**_ID, **{k: FORWARD for k in ("call_id", "caller", "output")}},
    "file_search_call": {**_ID, **_STATUS, "queries": FORWARD, "results": FORWARD},
    "computer_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("action", "actions", "call_id", "pending_safety_checks")},
    },
    "computer_call_output": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("acknowledged_safety_checks", "call_id", "output")},
    },
    "web_search_call": {**_ID, **_STATUS, "action": FORWARD},
    "tool_search_call": {**_ID, **_STATUS, "arguments": FORWARD, "call_id": FORWARD, "execution": FORWARD},
    "configuration_update": {**_ID, "reasoning": FORWARD, "text": FORWARD},
    "reasoning": {**_ID, **_STATUS, "content": FORWARD, "encrypted_content": FORWARD, "summary": FORWARD},
    "compaction": {**_ID, "encrypted_content": FORWARD},
    "compaction_trigger": _ID,
    "image_generation_call": {
        **_ID,
        **_STATUS,
        **{
            k: FORWARD
            for k in (
                "action",
                "background",
                "error",
                "output_format",
                "quality",
                "result",
                "revised_prompt",
                "size",
                "svg_usage",
            )
        },
    },
    "code_interpreter_call": {**_ID, **_STATUS, "code": FORWARD, "container_id": FORWARD, "outputs": FORWARD},
    "local_shell_call": {**_ID, **_STATUS, "action": FORWARD, "call_id": FORWARD},
    "local_shell_call_output": {**_ID, **_STATUS, "output": FORWARD},
    "shell_call": {**_ID, **_STATUS, **{k: FORWARD for k in ("action", "call_id", "caller", "environment")}},
    "shell_call_output": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("call_id", "caller", "max_output_length", "output")},
    },
    "apply_patch_call": {**_ID, **_STATUS, **{k: FORWARD for k in ("call_id", "caller", "operation")}},
    "apply_patch_call_output": {**_ID, **_STATUS, **{k: FORWARD for k in ("call_id", "caller", "output")}},
    "mcp_approval_request": {**_ID, "arguments": FORWARD, "name": FORWARD, "server_label": FORWARD},
    "mcp_approval_response": {**_ID, "approval_request_id": FORWARD, "approve": FORWARD, "reason": FORWARD},
    "mcp_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("approval_request_id", "arguments", "error", "name", "output", "server_label")},
    },
    "item_reference": _ID,
    "program": {**_ID, "call_id": FORWARD, "code": FORWARD, "fingerprint": FORWARD},
    "program_output": {**_ID, **_STATUS, "call_id": FORWARD, "result": FORWARD},
}
# A tool_search_output's `tools`: namespaces (RESPONSES_TOOL's namespace), or any top-level tool.
# An mcp_list_tools item's `tools`: the server's tools, each gated as `server_label.name`.
RESPONSES_LISTED_MCP_TOOL: Fields = {
    "name": GATED,
    "input_schema": FORWARD,
    "annotations": FORWARD,
    "description": FORWARD,
}

# -- Messages: POST /v1/messages and /v1/messages/count_tokens --------------------------------

_MESSAGES_COMMON: Fields = {
    "model": GATED,
    "messages": GATED,  # each message: MESSAGES_MESSAGE, its blocks MESSAGES_CONTENT_BLOCK
    "system": GATED,  # a string, or text blocks (MESSAGES_CONTENT_BLOCK["text"])
    "tools": GATED,
    "tool_choice": GATED,
    "mcp_servers": GATED,
    "thinking": GATED,  # the effort (budget)
    "output_config": GATED,  # the effort
    "cache_control": FORWARD,
    "compaction": FORWARD,
    "context_management": FORWARD,
    "speed": FORWARD,
    "user_profile_id": FORWARD,
    "workspace_id": FORWARD,
    "billing_policy": FORWARD,
    "output_format": FORWARD,  # structured outputs (beta)
}
MESSAGES_REQUEST: Fields = {
    **_MESSAGES_COMMON,
    "max_tokens": FORWARD,
    "stream": GATED,
    "metadata": FORWARD,
    "stop_sequences": FORWARD,
    "temperature": FORWARD,
    "top_p": FORWARD,
    "top_k": FORWARD,
    "container": FORWARD,
    "diagnostics": FORWARD,
    "inference_geo": FORWARD,
    "service_tier": FORWARD,
    "thread": FORWARD,
    "fallback_credit_token": FORWARD,
    "fallbacks": _OTHER_MODELS,
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
_CACHE = {"type": GATED, "cache_control": FORWARD}
_TOOL_COMMON: Fields = {
    **_CACHE,
    "name": GATED,
    "allowed_callers": FORWARD,
    "defer_loading": FORWARD,
    "strict": FORWARD,
}
_CLIENT_BUILTIN: Fields = {**_TOOL_COMMON, "input_examples": FORWARD}
_COMPUTER: Fields = {
    **_CLIENT_BUILTIN,
    "display_height_px": FORWARD,
    "display_width_px": FORWARD,
    "display_number": FORWARD,
}
_FETCH_OR_SEARCH: Fields = {
    **_TOOL_COMMON,
    "allowed_domains": FORWARD,
    "blocked_domains": FORWARD,
    "max_uses": FORWARD,
}
_SEARCH: Fields = {**_FETCH_OR_SEARCH, "user_location": FORWARD}
_FETCH: Fields = {
    **_FETCH_OR_SEARCH,
    "citations": FORWARD,
    "max_content_tokens": FORWARD,
    "url_sources": FORWARD,
}
_TOOLSET: Fields = {**_CACHE, "configs": GATED}
MESSAGES_TOOL: Mapping[str, Fields] = {  # by type; "custom" also stands for a tool without one
    "custom": {
        **_CLIENT_BUILTIN,
        "description": FORWARD,
        "input_schema": FORWARD,
        "eager_input_streaming": FORWARD,
    },
    "mcp_toolset": {
        **_CACHE,
        "mcp_server_name": GATED,
        "configs": GATED,
        "default_config": GATED,
        "tools": GATED,
    },
    "bash_20241022": _CLIENT_BUILTIN,
    "bash_20250124": _CLIENT_BUILTIN,
    "memory_20250818": _CLIENT_BUILTIN,
    "text_editor_20241022": _CLIENT_BUILTIN,
    "text_editor_20250124": _CLIENT_BUILTIN,
    "text_editor_20250429": _CLIENT_BUILTIN,
    "text_editor_20250728": {**_CLIENT_BUILTIN, "max_characters": FORWARD},
    "computer_20241022": _COMPUTER,
    "computer_20250124": _COMPUTER,
    "computer_20251124": {**_COMPUTER, "enable_zoom": FORWARD},
    "computer_toolset_20260801": _TOOLSET,
    "browser_toolset_20260801": _TOOLSET,
    "code_execution_20250522": _TOOL_COMMON,
    "code_execution_20250825": _TOOL_COMMON,
    "code_execution_20260120": _TOOL_COMMON,
    "code_execution_20260521": _TOOL_COMMON,
    "web_search_20250305": _SEARCH,
    "web_search_20260209": _SEARCH,
    "web_search_20260318": {**_SEARCH, "response_inclusion": FORWARD},
    "web_fetch_20250910": _FETCH,
    "web_fetch_20260209": _FETCH,
    "web_fetch_20260309": {**_FETCH, "use_cache": FORWARD},
    "web_fetch_20260318": {**_FETCH, "use_cache": FORWARD, "response_inclusion": FORWARD},
    "tool_search_tool_bm25": _TOOL_COMMON,
    "tool_search_tool_bm25_20251119": _TOOL_COMMON,
    "tool_search_tool_regex": _TOOL_COMMON,
    "tool_search_tool_regex_20251119": _TOOL_COMMON,
    # The advisor is a model the main one consults for advice (text); it is gated as a built-in.
    "advisor_20260301": {
        **_TOOL_COMMON,
        "caching": FORWARD,
        "max_tokens": FORWARD,
        "max_uses": FORWARD,
        "model": FORWARD,
    },
}
# The one `name` each typed Messages tool must carry (the API fixes it: the model calls it by
# that name); a typed tool with another name is refused, never gated by the name it gives.
# Toolsets carry no name.
MESSAGES_BUILTIN_NAMES: Mapping[str, str] = {
    "bash_20241022": "bash",
    "bash_20250124": "bash",
    "memory_20250818": "memory",
    "text_editor_20241022": "str_replace_editor",
    "text_editor_20250124": "str_replace_editor",
    "text_editor_20250429": "str_replace_based_edit_tool",
    "text_editor_20250728": "str_replace_based_edit_tool",
    "computer_20241022": "computer",
    "computer_20250124": "computer",
    "computer_20251124": "computer",
    "code_execution_20250522": "code_execution",
    "code_execution_20250825": "code_execution",
    "code_execution_20260120": "code_execution",
    "code_execution_20260521": "code_execution",
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260309": "web_fetch",
    "web_fetch_20260318": "web_fetch",
    "tool_search_tool_bm25": "tool_search_tool_bm25",
    "tool_search_tool_bm25_20251119": "tool_search_tool_bm25",
    "tool_search_tool_regex": "tool_search_tool_regex",
    "tool_search_tool_regex_20251119": "tool_search_tool_regex",
    "advisor_20260301": "advisor",
}
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
    "input_schema": FORWARD,
    "annotations": FORWARD,
}
_RESULT = {**_CACHE, "tool_use_id": FORWARD, "content": FORWARD}
MESSAGES_CONTENT_BLOCK: Mapping[str, Fields] = {  # by type
    "text": {**_CACHE, "text": FORWARD, "citations": FORWARD},
    "image": {**_CACHE, "source": FORWARD, "transformations": FORWARD},
    "document": {**_CACHE, "source": FORWARD, "citations": FORWARD, "context": FORWARD, "title": FORWARD},
    "search_result": {**_CACHE, "source": FORWARD, "citations": FORWARD, "content": FORWARD, "title": FORWARD},
    "thinking": {"type": GATED, "thinking": FORWARD, "signature": FORWARD},
    "redacted_thinking": {"type": GATED, "data": FORWARD},
    # Earlier calls and results: history, not offers of a tool.
    "tool_use": {
        **_CACHE,
        "id": FORWARD,
        "input": FORWARD,
        "name": FORWARD,
        "caller": FORWARD,
        "toolset_name": FORWARD,
    },
    "server_tool_use": {**_CACHE, "id": FORWARD, "input": FORWARD, "name": FORWARD, "caller": FORWARD},
    "mcp_tool_use": {**_CACHE, "id": FORWARD, "input": FORWARD, "name": FORWARD, "server_name": FORWARD},
    "tool_result": {**_RESULT, "is_error": FORWARD, "toolset_name": FORWARD},
    "mcp_tool_result": {**_RESULT, "is_error": FORWARD},
    "web_search_tool_result": {**_RESULT, "caller": FORWARD},
    "web_fetch_tool_result": {**_RESULT, "caller": FORWARD},
    "advisor_tool_result": _RESULT,
    "code_execution_tool_result": _RESULT,
    "bash_code_execution_tool_result": _RESULT,
    "text_editor_code_execution_tool_result": _RESULT,
    "tool_search_tool_result": _RESULT,
    "container_upload": {**_CACHE, "file_id": FORWARD},
    "fallback": {"type": GATED, "from": FORWARD, "to": FORWARD, "trigger": FORWARD},
    # Blocks that change the offered tools: gated like `tools`.
    "tool_addition": {**_CACHE, "tool": GATED},
    "tool_removal": {**_CACHE, "tool": FORWARD},  # removing a tool never offers one
    "mcp_tool_listing": {"type": GATED, "mcp_server_name": GATED, "tools": GATED},
    "compaction": {
        **_CACHE,
        "content": FORWARD,
        "encrypted_content": FORWARD,
        "signature": FORWARD,
        "tool_changes": GATED,  # tool_addition / tool_removal entries
    },
}

# -- tool-free endpoints, forwarded as they are: POST /v1/completions and /v1/embeddings -------
# An allowlist too (openai-python types/completion_create_params.py, embedding_create_params.py,
# and the sampling knobs of OpenAI-compatible servers): a denylist of tool fields let
# `extra_body`, `messages` or a `Tools` ride through to an SDK-style upstream (LiteLLM) that
# merges them into a chat call.
COMPLETIONS_REQUEST: Fields = {
    key: FORWARD
    for key in (
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "top_k",
        "min_p",
        "repetition_penalty",
    )
}
EMBEDDINGS_REQUEST: Fields = {key: FORWARD for key in ("model", "input", "dimensions", "encoding_format", "user")}
PASSTHROUGH_TABLES: Mapping[str, Fields] = {
    "/v1/completions": COMPLETIONS_REQUEST,
    "/v1/embeddings": EMBEDDINGS_REQUEST,
}

# The top-level table of each protocol's main endpoint.
REQUEST_TABLES: Mapping[str, Fields] = {
    "chat": CHAT_REQUEST,
    "responses": RESPONSES_REQUEST,
    "messages": MESSAGES_REQUEST,
}

# What can offer tools, per protocol: top-level fields, and the types of the items
# (Responses `input`) or content blocks (Messages) that carry them. A request with none of these
# has nothing to gate (`carriers`).
TOOL_CARRIERS: Mapping[str, frozenset[str]] = {
    "chat": frozenset(
        {"tools", "tool_choice", "functions", "function_call", "web_search_options", "chat_template_kwargs"}
    ),
    "responses": frozenset({"tools", "tool_choice", "prompt", "access_programs"}),
    "messages": frozenset({"tools", "tool_choice", "mcp_servers", "fallbacks"}),
}
_CARRYING_ITEMS = frozenset({"additional_tools", "tool_search_output", "mcp_list_tools"})
_CARRYING_BLOCKS = frozenset({"tool_addition", "mcp_tool_listing", "compaction"})


def carriers(protocol: str, body: dict[str, Any]) -> list[str]:
    """The fields of `body` that offer (or could offer) tools, `extra_body` (which SDK-style
    upstreams such as LiteLLM merge into the request) included. Empty: nothing to gate."""
    carriers = TOOL_CARRIERS[protocol]
    found = [k for k, v in body.items() if (k in carriers and v is not None) or (k == "extra_body" and v)]
    items = body.get("input") if protocol == "responses" else None
    if isinstance(items, list) and any(isinstance(i, dict) and i.get("type") in _CARRYING_ITEMS for i in items):
        found.append("input")
    if protocol == "messages" and isinstance(body.get("messages"), list):
        for message in body["messages"]:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") in _CARRYING_BLOCKS for b in content
            ):
                found.append("messages")
                break
    return found


# Every name some table refuses (a fast pre-filter for `check`).
_REFUSABLE = frozenset(
    key
    for table in (RESPONSES_REQUEST, MESSAGES_REQUEST, *MESSAGES_MESSAGE.values())
    for key, how in table.items()
    if isinstance(how, Refused)
)

# -- the check ---------------------------------------------------------------------------------

_log = logs.get_logger("gatekeeper")
_SHOWN = 64  # characters of a client's field name shown in an error or log line


def shown(key: str) -> str:
    """A client's key as errors and logs show it (capped)."""
    return key if len(key) <= _SHOWN else key[:_SHOWN] + "..."


def check(obj: dict[str, Any], fields: Fields, where: str, unknown: str) -> None:
    """Refuse what `fields` refuses; refuse (`unknown == "refuse"`) or drop in place (`"drop"`,
    logged) every key of `obj` it does not list. `where` is the object's path ("" at the top,
    else e.g. "tools[2]"), used to name the field in errors."""
    # Set operations first: this runs on every message, tool and item of every request.
    extra = () if obj.keys() <= fields.keys() else [k for k in obj if k not in fields]
    for key in extra:
        path = f"{where}.{shown(key)}" if where else f"'{shown(key)}'"
        if unknown == "drop":
            del obj[key]
            _log.warning("request_field_dropped", field=path.strip("'"))
            continue
        raise RequestInvalid(
            f"{path} is not a field gatekeeper knows here, so it is refused "
            "(upstream.unknown_fields: refuse); see gatekeeper/protocols/fields.py"
        )
    for key in obj.keys() & _REFUSABLE if not _REFUSABLE.isdisjoint(obj) else ():
        how = fields.get(key)
        if isinstance(how, Refused) and obj[key] is not None:
            path = f"{where}.{key}" if where else f"'{key}'"
            raise RequestInvalid(f"{path} is refused: {how.why}")


def check_typed(obj: Any, tables: Mapping[str, Fields], where: str, unknown: str, default: str | None = None) -> str:
    """`check` an object against the table of its `type` (`default` when it has none); returns
    the type. An object of a type not in `tables` is refused whatever the mode: dropping it
    would change what the request means."""
    if not isinstance(obj, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(obj).__name__}")
    kind = obj.get("type", default)
    if not isinstance(kind, str) or kind not in tables:
        named = shown(kind) if isinstance(kind, str) else kind
        raise RequestInvalid(
            f"{where}.type {named!r} is not a type gatekeeper knows here (expected one of {sorted(tables)})"
        )
    check(obj, tables[kind], where, unknown)
    return kind


def check_extra_body(extra: Any, fields: Fields, unknown: str) -> None:
    """An SDK's `extra_body` (merged into the request on the wire by the SDK, and by
    SDK-style upstreams such as LiteLLM): only fields relayed as is may ride in it; a field the
    codec gates must be passed as itself, and an unknown one is refused (or dropped)."""
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise RequestInvalid(f"'extra_body' must be an object, got {type(extra).__name__}")
    for key in list(extra):
        how = fields.get(key)
        if how == GATED or isinstance(how, Refused):
            raise RequestInvalid(
                f"'extra_body.{shown(key)}' cannot be gated there: pass it as a request field of its own"
            )
    check(extra, {k: FORWARD for k, how in fields.items() if how == FORWARD}, "extra_body", unknown)
