"""gatekeeper inside a LiteLLM proxy, as a pre-call hook.

LiteLLM's `config.yaml`:

    litellm_settings:
      callbacks: adapters.litellm_hook.proxy_handler_instance

and `GATEKEEPER_CONFIG=/path/to/gatekeeper.yaml` in the proxy's environment. On every chat
completion that carries tools, the hook resolves the tier of `data["model"]` (the model name
the client sent) at `data["reasoning_effort"]` and applies `gatekeeper.gating.gate_request` to
the request through the core's `Gatekeeper.agate`: the same semantics as gatekeeper's own proxy.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import structlog
from litellm.integrations.custom_logger import CustomLogger

from gatekeeper.core import Gatekeeper, NotMeasured
from gatekeeper.errors import ConfigError, GatekeeperError
from gatekeeper.gating import RequestInvalid, ToolChoiceBlocked

log = structlog.get_logger("gatekeeper.litellm_hook")

CONFIG_ENV = "GATEKEEPER_CONFIG"
# Chat Completions only: other call types carry tools in other shapes (or none).
_CHAT_CALLS = frozenset({"completion", "acompletion"})


class GatekeeperHook(CustomLogger):
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
    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str) -> dict:
        if call_type not in _CHAT_CALLS or not (data.get("tools") or data.get("functions")):
            return data  # nothing to gate; and no measurement started for tool-less traffic
        model = data.get("model")
        if not isinstance(model, str) or not model:
            return data  # LiteLLM rejects it itself
        effort = data.get("reasoning_effort")
        effort = effort if isinstance(effort, str) else None
        try:
            resolution, gated = await self.gk.agate(data, model, effort)
        except NotMeasured as exc:
            raise _http_error(503, str(exc), "model_not_measured") from None
        except RequestInvalid as exc:
            raise _http_error(400, str(exc), "invalid_tools") from None
        except ToolChoiceBlocked as exc:
            log.info("litellm_request_blocked", model=model, effort=effort or "default", tier=exc.tier.value,
                     tool=exc.tool)
            raise _http_error(400, str(exc), "tool_not_allowed") from None
        log.info("litellm_request_gated", model=model, effort=effort or "default", tier=resolution.tier.value,
                 source=resolution.source, tools_kept=gated.kept, tools_hidden=gated.hidden)
        return data


def _http_error(status: int, message: str, code: str) -> Exception:
    """FastAPI's HTTPException (what LiteLLM's proxy turns into an OpenAI-shaped error with this status)."""
    try:
        from fastapi import HTTPException  # always present in a LiteLLM proxy; not a gatekeeper dependency
    except ImportError:
        return GatekeeperError(message)
    detail = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return HTTPException(status_code=status, detail=detail)


proxy_handler_instance = GatekeeperHook()
