"""`gated`: put gatekeeper in front of an agent runtime's own tool listing.

    list_for_llm = gated(gk, runtime.list_for_llm)     # or, on your own function:

    @gated(gk)
    async def list_for_llm(model: str, effort: str | None = None) -> list[dict]: ...

The wrapped callable returns the same list minus the tools the model's tier may not see. The
model is the argument named `model` (else the first positional argument), the effort the one
named `effort`. Tier resolution and the tool rules are the `Gatekeeper` core's.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable, TypeVar

from gatekeeper.core import Gatekeeper
from gatekeeper.gating import tool_name
from gatekeeper.tiers import Tier

F = TypeVar("F", bound=Callable[..., Any])


def gated(gk: Gatekeeper, fn: F | None = None, *, name_of: Callable[[Any], str] | None = None,
          model_arg: str = "model", effort_arg: str = "effort") -> Any:
    """Wrap `fn` (sync or async, returning a list of tools) so it returns only the allowed tools.

    Tools may be OpenAI schemas (`{"type": "function", "function": {"name": ...}}`), legacy
    function dicts (`{"name": ...}`) or objects with a `name` attribute; pass `name_of` for
    anything else. Usable as `gated(gk, fn)`, `@gated(gk)` or `@gated(gk, name_of=...)`.
    """
    if fn is None:
        return functools.partial(gated, gk, name_of=name_of, model_arg=model_arg, effort_arg=effort_arg)
    name = name_of or default_tool_name
    locate = _argument_finder(fn, model_arg, effort_arg)

    def keep(tier: Tier, tools: Iterable[Any] | None) -> list[Any] | None:
        if tools is None:
            return None
        return [t for t in tools if gk.policy.allows(tier, name(t))]

    if _is_async(fn):
        @functools.wraps(fn)
        async def gated_async(*args: Any, **kwargs: Any) -> Any:
            model, effort = locate(args, kwargs)
            tools = await fn(*args, **kwargs)
            return keep((await gk.aresolve(model, effort)).tier, tools)

        return gated_async

    @functools.wraps(fn)
    def gated_sync(*args: Any, **kwargs: Any) -> Any:
        model, effort = locate(args, kwargs)
        tools = fn(*args, **kwargs)
        # Under fail_closed this never blocks: an unmeasured model gets unknown_tier at once.
        return keep(gk.resolve(model, effort).tier, tools)

    return gated_sync


def default_tool_name(tool: Any) -> str:
    """The name of an OpenAI tool schema, a legacy function dict, or an object with `.name`."""
    if isinstance(tool, dict):
        if "function" in tool:
            return tool_name(tool, "tool")
        if isinstance(tool.get("name"), str):
            return tool["name"]
    elif isinstance(getattr(tool, "name", None), str):
        return tool.name
    raise TypeError(f"cannot tell the name of tool {tool!r}: pass name_of= to gated()")


def _argument_finder(fn: Callable, model_arg: str, effort_arg: str) -> Callable[[tuple, dict], tuple[str, str | None]]:
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none
        signature = None

    def locate(args: tuple, kwargs: dict) -> tuple[str, str | None]:
        named = dict(kwargs)
        if signature is not None:
            try:
                named = signature.bind_partial(*args, **kwargs).arguments | named
            except TypeError:
                pass  # let fn itself report the bad call
        model = named.get(model_arg)
        if model is None and args and model_arg not in named:
            model = args[0]
        if not isinstance(model, str) or not model:
            raise TypeError(f"gated {getattr(fn, '__qualname__', fn)!r}: cannot find the model name; pass it as "
                            f"{model_arg}= or as the first argument")
        effort = named.get(effort_arg)
        return model, effort if isinstance(effort, str) else None

    return locate


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
