"""One effort per request (issue 32), as properties of each protocol's codec, its translation to
chat and routing's rewrite: for any request built from the members the published types let set
the effort, the effort the gate uses (`codec.parse(...).effort`, what `core/admit.py` resolves the
tier at) is the one every effort-setting member of what is sent implies, or the request is refused
with a RequestInvalid; natively, translated to chat, and rewritten by routing for any target.

Each test's oracle is written here from the protocols' documentation, not from the codec:
  * chat: `reasoning_effort`; vLLM's `chat_template_kwargs.reasoning_effort`, and
    `enable_thinking` / `thinking` false (no reasoning: effort `none`);
  * Messages: `output_config.effort`; a manual thinking budget (< 4096 low, < 16384 medium, else
    high); disabled thinking (no reasoning: an effort of its own, alone the `default` level);
  * Responses: `reasoning.effort`, and `configuration_update` input items, each in effect "until
    another configuration update replaces it": an upstream that honours them runs at the last
    one's, one that ignores them at `reasoning.effort`; what is sent must read the same to both.
Derandomized, with an explicit example for each case the issue names.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols.chat.codec import CODEC as CHAT
from gatekeeper.protocols.messages import translate as messages_to_chat
from gatekeeper.protocols.messages.codec import CODEC as MESSAGES
from gatekeeper.protocols.reroute import effort_targets, rerouted
from gatekeeper.protocols.responses import translate as responses_to_chat
from gatekeeper.protocols.responses.codec import CODEC as RESPONSES
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

# openai-python types/shared/reasoning_effort.py; anthropic-sdk-python types/output_config_param.py
OPENAI_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]
ANTHROPIC_EFFORTS = ["low", "medium", "high", "xhigh", "max"]
OFF = "<no reasoning>"  # disabled thinking: alone the default level, beside an effort a contradiction
POLICY = ToolPolicy({})
PROPERTY = settings(max_examples=400, deadline=None, derandomize=True)
HI = [{"role": "user", "content": "hi"}]


def one(implied: set[str]) -> str | None:
    """The effort a set of agreeing members implies (None: the default level)."""
    (effort,) = implied or {None}
    return None if effort == OFF else effort


def refused(codec: Any, body: dict[str, Any]) -> bool:
    try:
        codec.parse(body)
    except RequestInvalid:
        return True
    return False


# -- chat -----------------------------------------------------------------------------------------


@st.composite
def chat_bodies(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": HI}
    if draw(st.booleans()):
        body["reasoning_effort"] = draw(st.sampled_from(OPENAI_EFFORTS))
    kwargs: dict[str, Any] = {}
    for key in ("enable_thinking", "thinking"):
        if draw(st.booleans()):
            kwargs[key] = draw(st.booleans())
    if draw(st.booleans()):
        kwargs["reasoning_effort"] = draw(st.sampled_from(OPENAI_EFFORTS))
    if kwargs or draw(st.booleans()):
        body["chat_template_kwargs"] = kwargs
    return body


def chat_implied(body: dict[str, Any]) -> set[str]:
    kwargs = body.get("chat_template_kwargs") or {}
    implied = {v for v in (body.get("reasoning_effort"), kwargs.get("reasoning_effort")) if v is not None}
    if kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False:
        implied.add("none")
    return implied


@PROPERTY
@given(chat_bodies())
@example(
    {"model": "m", "messages": HI, "reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "low"}}
)
@example({"model": "m", "messages": HI, "reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}})
@example({"model": "m", "messages": HI, "chat_template_kwargs": {"thinking": False}})
def test_chat_runs_at_the_effort_it_is_gated_at(body):
    implied = chat_implied(body)
    if len(implied) > 1:
        assert refused(CHAT, body)
        return
    assert CHAT.parse(body).effort == one(implied)
    for target in [*effort_targets("chat"), "default"]:
        out = rerouted(CHAT, body, "m", target)
        if out is not None:
            assert chat_implied(out) == ({target} if target != "default" else set())


# -- Messages -------------------------------------------------------------------------------------

THINKING = st.one_of(
    st.builds(lambda n: {"type": "enabled", "budget_tokens": n}, st.integers(1024, 40000)),
    st.sampled_from([{"type": "disabled"}, {"type": "adaptive"}]),
)


@st.composite
def messages_bodies(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 64000, "messages": HI}
    if draw(st.booleans()):
        body["output_config"] = {"effort": draw(st.sampled_from(ANTHROPIC_EFFORTS))}
    if draw(st.booleans()):
        body["thinking"] = draw(THINKING)
    return body


def budget_effort(budget: int) -> str:
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def messages_implied(body: dict[str, Any]) -> set[str]:
    implied = set()
    if "effort" in (body.get("output_config") or {}):
        implied.add(body["output_config"]["effort"])
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        implied.add(budget_effort(thinking["budget_tokens"]))
    elif thinking.get("type") == "disabled":
        implied.add(OFF)
    return implied


ISSUE_BUDGET = {"model": "m", "max_tokens": 64000, "messages": HI, "output_config": {"effort": "high"}}


@PROPERTY
@given(messages_bodies())
@example(ISSUE_BUDGET | {"thinking": {"type": "enabled", "budget_tokens": 1024}})
@example(ISSUE_BUDGET | {"thinking": {"type": "disabled"}})
@example(ISSUE_BUDGET | {"thinking": {"type": "enabled", "budget_tokens": 16384}})
@example(ISSUE_BUDGET | {"output_config": {"effort": "medium"}, "thinking": {"type": "enabled", "budget_tokens": 4095}})
@example(ISSUE_BUDGET | {"output_config": {"effort": "max"}, "thinking": {"type": "enabled", "budget_tokens": 1024}})
def test_messages_runs_at_the_effort_it_is_gated_at(body):
    implied = messages_implied(body)
    if len(implied) > 1:
        assert refused(MESSAGES, body)
        return
    effort = MESSAGES.parse(body).effort
    assert effort == one(implied)
    MESSAGES.gate(body, Tier.SMALL, POLICY)
    assert messages_to_chat.to_chat(body).get("reasoning_effort") == effort
    for target in [*effort_targets("messages"), "default"]:
        out = rerouted(MESSAGES, body, "m", target)
        if out is not None:
            assert one(messages_implied(out)) == (None if target == "default" else target)
            assert len(messages_implied(out)) <= 1


# -- Responses ------------------------------------------------------------------------------------

ITEMS = st.one_of(
    st.just({"role": "user", "content": "hi"}),
    st.builds(lambda e: {"type": "configuration_update", "reasoning": {"effort": e}}, st.sampled_from(OPENAI_EFFORTS)),
    st.just({"type": "configuration_update", "text": {"format": {"type": "text"}}}),  # sets no effort
)


@st.composite
def responses_bodies(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "input": draw(st.lists(ITEMS, max_size=5))}
    if draw(st.booleans()):
        body["reasoning"] = {"effort": draw(st.sampled_from(OPENAI_EFFORTS)), "summary": "auto"}
    store = draw(st.sampled_from([False, False, True, None]))  # None: absent, which stores
    if store is not None:
        body["store"] = store
    return body


def stores_an_update(body: dict[str, Any]) -> bool:
    """An effort update the upstream would keep for later requests (which cannot be seen there)."""
    return body.get("store") is not False and any("reasoning" in i for i in body["input"])


def honoured(body: dict[str, Any]) -> str | None:
    """The effort of an upstream that applies configuration_update items: the last one's."""
    updates = [i["reasoning"]["effort"] for i in body["input"] if "reasoning" in i]
    return updates[-1] if updates else ignored(body)


def ignored(body: dict[str, Any]) -> str | None:
    """The effort of an upstream (or translation) that reads only the request-level field."""
    return (body.get("reasoning") or {}).get("effort")


def update(effort: str) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": effort}}


STATELESS = {"model": "m", "store": False}


@PROPERTY
@given(responses_bodies())
@example(
    STATELESS | {"input": [{"role": "user", "content": "hi"}, update("minimal")], "reasoning": {"effort": "xhigh"}}
)
@example(STATELESS | {"input": [update("high"), {"role": "user", "content": "hi"}], "reasoning": {"effort": "low"}})
@example(STATELESS | {"input": [update("high"), update("low")], "reasoning": {"effort": "high"}})
@example(STATELESS | {"input": [update("low")]})
@example({"model": "m", "input": [update("minimal")], "reasoning": {"effort": "xhigh"}})  # stored: refused
def test_responses_runs_at_the_effort_it_is_gated_at(body):
    if stores_an_update(body):
        assert refused(RESPONSES, body)
        return
    effort = RESPONSES.parse(body).effort
    assert effort == honoured(body)
    for target in [*effort_targets("responses"), "default"]:
        out = rerouted(RESPONSES, body, "m", target)
        if out is not None:
            RESPONSES.gate(out, Tier.SMALL, POLICY)
            assert honoured(out) == ignored(out) == (None if target == "default" else target)
    RESPONSES.gate(body, Tier.SMALL, POLICY)
    assert honoured(body) == ignored(body) == effort  # natively: one effort, whoever reads it
    try:
        chat = responses_to_chat.to_chat(body)
    except RequestInvalid:  # an update carrying a text format: no chat equivalent
        assert any("text" in i for i in body["input"])
    else:
        assert chat.get("reasoning_effort") == effort


@pytest.mark.parametrize(
    "reasoning",
    [{}, {"effort": None}, {"effort": ""}, {"effort": 3}, "high"],
    ids=["empty", "null", "blank", "int", "str"],
)
def test_a_configuration_update_that_says_no_effort_is_refused(reasoning):
    # Back to the baseline, or unchanged? An upstream may read either: refused, never guessed.
    body = STATELESS | {"input": [{"type": "configuration_update", "reasoning": reasoning}]}
    with pytest.raises(RequestInvalid, match=r"input\[0\]\.reasoning"):
        RESPONSES.parse(body | {"reasoning": {"effort": "high"}})


@pytest.mark.parametrize("kept", [{}, {"store": True}, {"store": False, "conversation": "conv_1"}])
def test_an_update_the_upstream_would_keep_is_refused(kept):
    # A request chained to it later (previous_response_id, the conversation) would run at the
    # stored update's effort, where gatekeeper sees only that request's own fields.
    body = {"model": "m", "input": [update("minimal")], "reasoning": {"effort": "xhigh"}} | kept
    with pytest.raises(RequestInvalid, match=r"'input\[0\]' .* needs 'store': false"):
        RESPONSES.parse(body)
