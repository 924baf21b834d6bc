"""A Backend for core tests that needs neither HTTP nor sleeps (as httpx tests use MockTransport).

It answers the suite's prompts with a scripted behaviour (tests/answers.py), counts calls per
model, and can hold every answer until the test releases them, so a test decides (`release()`) when a
measurement is "still running" without timing anything.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

import answers
from scripted import SuiteScript, budget_reply

from gatekeeper.errors import BackendError
from gatekeeper.measuring.backends import Completion, parse_message
from gatekeeper.suite.loader import Suite


class FakeBackends:
    """`factory` is what `Gatekeeper(backend_factory=...)` takes."""

    def __init__(
        self, suite: Suite, behaviour: answers.Behaviour = answers.perfect, *, held: bool = False, fail: bool = False
    ) -> None:
        self.script = SuiteScript(suite)
        self.behaviour = behaviour
        self._held = held
        self._gate: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fail = fail
        self.calls: Counter[str] = Counter()  # model -> completions asked
        self.first_steps: Counter[str] = Counter()  # model -> tests started (step 0 asked)
        self.tests = len(suite.tests)
        self.active: set[str] = set()  # models with a completion in progress
        self.peak_models = 0  # most models measured at the same time
        self._lock = threading.Lock()

    def release(self) -> None:
        """Let held answers (and every later one) through."""
        with self._lock:
            self._held = False
            loop, gate = self._loop, self._gate
        if loop is not None and gate is not None:
            loop.call_soon_threadsafe(gate.set)

    async def _wait_for_release(self) -> None:
        with self._lock:
            if not self._held:
                return
            if self._gate is None:
                self._gate, self._loop = asyncio.Event(), asyncio.get_running_loop()
            gate = self._gate
        await gate.wait()

    def factory(self, model: str) -> _FakeBackend:
        return _FakeBackend(self)

    def suite_runs(self, model: str) -> float:
        return self.first_steps[model] / self.tests


class _FakeBackend:
    provider = "fake"

    def __init__(self, owner: FakeBackends) -> None:
        self.owner = owner

    async def complete(
        self, model: str, messages: list[dict], tools: list[dict], effort: str | None, need: int | None = None
    ) -> Completion:
        owner = self.owner
        with owner._lock:
            owner.calls[model] += 1
            owner.active.add(model)
            owner.peak_models = max(owner.peak_models, len(owner.active))
        try:
            await owner._wait_for_release()
            if owner.fail:
                raise BackendError(f"{model}: scripted failure")
            reply = budget_reply(messages)
            if reply is None:
                test, step = owner.script.locate({"messages": messages})
                if step == 0:
                    with owner._lock:
                        owner.first_steps[model] += 1
                reply = owner.behaviour(test, step)
        finally:
            with owner._lock:
                owner.active.discard(model)
        calls = [
            {"id": f"call_{i}", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for i, c in enumerate(reply.get("tool_calls") or [])
        ]
        return Completion(parse_message({"content": reply.get("content"), "tool_calls": calls}), 7, 0.01, True)

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass
