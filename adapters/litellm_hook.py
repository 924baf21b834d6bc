"""gatekeeper inside a LiteLLM proxy, as a pre-call hook.

LiteLLM's `config.yaml`:

    litellm_settings:
      callbacks: gatekeeper.adapters.litellm_hook.proxy_handler_instance

and `GATEKEEPER_CONFIG=/path/to/gatekeeper.yaml` in the proxy's environment. On every request
that carries tools, the hook resolves the tier of `data["model"]` (the model name the client
sent) at the request's effort and gates the tools with the codec of the call's protocol, the same
semantics as gatekeeper's own proxy:
  * `completion` / `acompletion` (`/chat/completions`): Chat Completions, effort `reasoning_effort`;
  * `responses` / `aresponses` (`/v1/responses`): the Responses API, effort `reasoning.effort`;
  * `anthropic_messages` / `aanthropic_messages` (`/v1/messages`): the Messages API, effort
    `output_config.effort` or the thinking budget's mapping.
Any other call type that carries a tool field (`tools`, `tool_choice`, `functions`, `mcp_servers`)
is refused with a 400: gatekeeper cannot tell how it carries tools, so it never passes ungated.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import structlog
from litellm.integrations.custom_logger import CustomLogger

from gatekeeper import (
    ConfigError,
    Gatekeeper,
    GatekeeperError,
    NotMeasured,
    RequestInvalid,
    ToolChoiceBlocked,
    agate_body,
    tool_carriers,
    unlisted_fields,
)

log = structlog.get_logger("gatekeeper.litellm_hook")

CONFIG_ENV = "GATEKEEPER_CONFIG"
# LiteLLM call type -> the protocol its requests speak.
_PROTOCOLS = {
    "completion": "chat",
    "acompletion": "chat",
    "responses": "responses",
    "aresponses": "responses",
    "anthropic_messages": "messages",
    "aanthropic_messages": "messages",
}
_TOOL_FIELDS = ("tools", "tool_choice", "functions", "function_call", "mcp_servers", "prompt")
# Request keys with which LiteLLM's router sends the call to other models when the asked one
# fails (a request's own lists replace the configured ones): the tools were gated for the asked
# model's tier only.
# `router_settings_override` carries the same lists (LiteLLM's proxy applies it from the request
# body), and `user_config` a router of the client's own, its model list and fallbacks (LiteLLM bans
# it from request bodies, unless its admin lets clients send credentials).
_REROUTING = (
    "fallbacks",
    "context_window_fallbacks",
    "content_policy_fallbacks",
    "router_settings_override",
    "user_config",
)


class GatekeeperHook(CustomLogger):  # type: ignore[misc]  # litellm is not type-checked (pyproject)
    """Removes from each chat request the tools its model's tier may not see.

    Built with a `Gatekeeper`, or lazily from the YAML file named by `$GATEKEEPER_CONFIG` on the
    first request (so importing this module needs no configuration).
    """

    def __init__(self, gk: Gatekeeper | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gk = gk
        self._lock = threading.Lock()

    @property
    def gk(self) -> Gatekeeper:
        if self._gk is None:
            with self._lock:
                if self._gk is None:
                    path = os.environ.get(CONFIG_ENV)
                    if not path:
                        raise ConfigError(f"{CONFIG_ENV} is not set: point it at a gatekeeper YAML config")
                    self._gk = Gatekeeper.from_config(path)
                    log.info("litellm_hook_configured", config=path)
        return self._gk

    # LiteLLM calls this hook only if the class itself defines it: a subclass must define it again.
    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        protocol = _PROTOCOLS.get(str(getattr(call_type, "value", call_type)))
        # Tool fields, tool-carrying items and `extra_body` (LiteLLM merges it into the provider
        # request); a call type gatekeeper does not gate is judged by its tool fields alone.
        carried = [k for k in _TOOL_FIELDS if data.get(k) is not None]
        if protocol is not None:
            carried = list(dict.fromkeys(tool_carriers(protocol, data) + carried))
        if not carried:
            return data  # nothing to gate; and no measurement started for tool-less traffic
        if protocol is None:
            raise _http_error(
                400,
                f"gatekeeper cannot gate the tools of LiteLLM call type {call_type!r} "
                f"(fields {', '.join(carried)}); it gates chat, responses and anthropic_messages",
                "call_type_not_gated",
            )
        model = data.get("model")
        if not isinstance(model, str) or not model:
            # Refused, not passed on: what LiteLLM makes of it (a list of models?) was never gated.
            raise _http_error(400, "'model' must be a non-empty string on a request with tools", "invalid_tools")
        rerouting = [k for k in _REROUTING if data.get(k)]
        if rerouting:
            raise _http_error(
                400,
                f"{', '.join(rerouting)} with tools refused: LiteLLM would send tools gated for {model[:256]!r} "
                "to another model, whose tier may not admit them",
                "fallbacks_not_gated",
            )
        try:
            # LiteLLM's own keys (its bookkeeping, its request options) are not request fields;
            # `extra_body` (which LiteLLM merges into the provider's request) is checked.
            # `metadata` is LiteLLM's too (its proxy fills it with the caller's key, headers,
            # ...: litellm_pre_call_utils.py `get_metadata_variable_name`), not the protocol's
            # map of strings. Any other key is a request field, checked like the proxy checks
            # it: LiteLLM sends every key it does not own on to the provider
            # (litellm/utils.py `add_provider_specific_params_to_optional_params`), so a
            # top-level `mcp_servers` on a chat call reached an Anthropic model ungated.
            foreign = {k for k in unlisted_fields(protocol, data) if _litellm_owned(k)} | {"metadata", "extra_body"}
            resolution, gated = await agate_body(self.gk, protocol, data, foreign)
        except NotMeasured as exc:
            raise _http_error(503, str(exc), "model_not_measured") from None
        except RequestInvalid as exc:
            raise _http_error(400, str(exc), "invalid_tools") from None
        except ToolChoiceBlocked as exc:
            log.info("litellm_request_blocked", model=model, protocol=protocol, tier=exc.tier.value, tool=exc.tool)
            raise _http_error(400, str(exc), "tool_not_allowed") from None
        log.info(
            "litellm_request_gated",
            model=model,
            protocol=protocol,
            key=resolution.key,
            tier=resolution.tier.value,
            source=resolution.source,
            tools_kept=gated.kept,
            tools_hidden=gated.hidden,
        )
        return data


def _litellm_owned(key: str) -> bool:
    """A key LiteLLM keeps for itself (its own options and bookkeeping), never sent to the provider."""
    from litellm.types.utils import is_litellm_owned_kwarg

    return key in _PROXY_KEYS or bool(is_litellm_owned_kwarg(key))


# What LiteLLM's proxy adds to a request's data besides the kwargs litellm owns (its auth object).
_PROXY_KEYS = frozenset({"user_api_key_dict"})


def _http_error(status: int, message: str, code: str) -> Exception:
    """FastAPI's HTTPException (what LiteLLM's proxy turns into an OpenAI-shaped error with this status)."""
    try:
        from fastapi import HTTPException  # always present in a LiteLLM proxy; not a gatekeeper dependency
    except ImportError:
        return GatekeeperError(message)
    detail = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return HTTPException(status_code=status, detail=detail)


proxy_handler_instance = GatekeeperHook()
