"""Model backends behind one protocol: OpenAI-compatible over httpx, and litellm for the rest."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import httpx

from gatekeeper.errors import BackendError
from gatekeeper.observe import logs
from gatekeeper.observe.redact import redact, redact_url
from gatekeeper.types import Answer, ToolCall, strip_reasoning

log = logs.get_logger(__name__)

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RequestSettings:
    """How benchmark requests are made: as repeatable as the backend allows."""

    temperature: float | None = 0.0
    max_tokens: int | None = 512
    timeout_s: float = 120.0
    max_retries: int = 6  # config.BenchSettings.max_retries says why
    backoff_s: float = 0.5
    min_tokens_per_s: float = 2.0  # the slowest generation a bounded call waits for (CallBound)
    # What a bounded call may spend before its first token: the prompt read, queued behind others.
    prompt_allowance_s: float = 30.0


# Efforts at which a model answers without thinking first: its calls get the answer's bound only.
_NOT_THINKING = (None, "none")


@dataclass(frozen=True)
class CallBound:
    """What one benchmark call may spend, from what its test needs: completion tokens (None: no
    limit sent) and seconds (retries included). An answer that runs past either is a failed
    answer (`Answer.cut`), never a stalled measurement.

    A call that may think first (an explicit reasoning level) gets `bench.max_tokens`, the room
    an operator sized for thinking; without thinking, the test's own need, under that ceiling.
    The seconds follow from the tokens at the slowest rate waited for, plus the prompt's allowance,
    under `bench.timeout_s`."""

    tokens: int | None
    seconds: float

    @classmethod
    def of(cls, need: int | None, effort: str | None, settings: RequestSettings) -> CallBound:
        if need is None:
            return cls(settings.max_tokens, math.inf)
        ceiling = settings.max_tokens
        tokens = ceiling if effort not in _NOT_THINKING else min(need, ceiling or need)
        seconds = settings.prompt_allowance_s + (tokens or need) / settings.min_tokens_per_s
        return cls(tokens, min(seconds, settings.timeout_s * (settings.max_retries + 1)))


async def together(calls: Iterable[Awaitable[T]]) -> list[T]:
    """The calls' results, run concurrently. On the first failure the others are cancelled and
    awaited before it is raised: no call outlives a failed measurement (and its closed backend)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


# Characters a completion token may stand for, when the server reports no usage: generous (English
# runs ~4 a token, code and JSON fewer, a run of spaces can be one token), so an answer is judged
# past its bound only when no tokenizer could have written it within the bound.
_CHARS_PER_TOKEN = 16


def _past_tokens(completion: Completion, tokens: int | None) -> bool:
    """The answer is longer than the bound's tokens allow, whatever the server says it finished
    on: a server that ignores `max_tokens` (llama-cpp-python's tool path does) answers at length
    and says `stop`. Its reported usage decides; without usage (0), its text, judged generously."""
    if tokens is None:
        return False
    if completion.completion_tokens:
        return completion.completion_tokens > tokens
    answer = completion.answer
    written = len(answer.content) + sum(len(c.name) + len(c.arguments) for c in answer.tool_calls)
    return written > _CHARS_PER_TOKEN * tokens


class _Attempts:
    """What one call's attempts have met: the error of the last one while the call waits to try
    again (None while an attempt is in flight, or before any failed)."""

    __slots__ = ("failing",)

    def __init__(self) -> None:
        self.failing: str | None = None


async def _bounded(
    model: str,
    sent: str | None,
    bound: CallBound,
    call: Callable[[], Awaitable[Completion]],
    attempts: _Attempts | None = None,
) -> Completion:
    """`call` within the bound's seconds; past them, a failed answer (finish_reason `timeout`),
    unless the bound ran out while the call waited to retry a failed attempt (`attempts`): the
    backend failed, not the model, and that is a BackendError (a dead or erroring server must
    never be measured as a weak model). An answer past the bound's tokens is cut there
    (finish_reason `length`), as if the server had stopped it: scoring, the tool budget and
    inconclusive-detection read it as any cut answer. The log line names the test (bound by the
    runner in structlog's context) and the effort."""
    effort = sent or "default"  # the level that sends no effort field (store.profile.DEFAULT_EFFORT)
    if bound.seconds == math.inf:
        completion = await call()
    else:
        try:
            completion = await asyncio.wait_for(call(), bound.seconds)
        except TimeoutError:
            if attempts is not None and attempts.failing is not None:
                raise BackendError(
                    f"{attempts.failing} (still failing when the call's bound of {bound.seconds:g}s ran out)"
                ) from None
            log.warning(
                "answer_over_bound", model=model, effort=effort, bound="seconds", seconds=round(bound.seconds, 1)
            )
            return Completion(Answer("", (), "timeout"), 0, bound.seconds, effort_applied=True)
    said = completion.answer.finish_reason
    if said != "length" and _past_tokens(completion, bound.tokens):
        completion = replace(completion, answer=replace(completion.answer, finish_reason="length"))
    if completion.answer.finish_reason == "length":
        log.warning(
            "answer_over_bound",
            model=model,
            effort=effort,
            bound="tokens",
            tokens=bound.tokens,
            spent=completion.completion_tokens or None,
            finish_reason=said,  # what the server said: `stop` on an answer it did not stop
        )
    return completion


# How OpenAI-compatible servers (OpenAI, vLLM, llama.cpp) say a prompt is longer than the context.
_CONTEXT_EXCEEDED = re.compile(r"maximum context length|context_length_exceeded", re.IGNORECASE)

# How servers say the model's own output did not parse (a tool call it wrote malformed, or, on the
# next step, that call's arguments replayed as history). The model failed that answer: retrying
# would resample it until the model got lucky and store the model above what an agent sees.
#   llama.cpp  HTTP 500 "Failed to parse input at pos 395: <|tool_call_start|>..." (common/chat
#              parser; ggml-org/llama.cpp#20761, #23838), and "Failed to parse tool call
#              arguments as JSON" for a malformed call replayed as history (#25510)
#   Ollama     HTTP 500 "error parsing tool call: raw='...', err=invalid character ..." (#12884, #17638)
#   LM Studio  "Failed to parse tool call: Unexpected end of content" (lmstudio-bug-tracker #942, #1528)
#   vLLM       HTTP 400 with the tool parser's json.JSONDecodeError, "Invalid \escape: line 1
#              column 2271 (char 2270)": Python's "<why>: line L column C" form
_MODEL_OUTPUT_UNPARSED = re.compile(
    r"Failed to parse input at pos \d+"
    r"|Failed to parse tool call"
    r"|error parsing tool call"
    r"|(?:Expecting [^:\n]{1,40}|Invalid \\+escape|Invalid control character at|Unterminated string starting at"
    r"|Extra data): line \d+ column \d+",
    re.IGNORECASE,
)
UNPARSED = "unparsed"  # Answer.finish_reason of an answer the server could not parse: a failed answer


@dataclass(frozen=True)
class Completion:
    answer: Answer
    completion_tokens: int
    seconds: float
    effort_applied: bool
    retries: int = 0  # failed attempts before this answer (a category's count is reported)


class Backend(Protocol):
    """Something that answers chat completions for the benchmark runner."""

    provider: str

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        need: int | None = None,
    ) -> Completion:
        """One call; `need`: the longest answer the test needs (tokens), which bounds the call
        (`CallBound`); None: bounded by the settings alone."""
        ...

    async def list_models(self) -> list[str]: ...

    async def aclose(self) -> None: ...


_SECRET_MIN = 8  # characters of a credential worth scrubbing (shorter ones are placeholders: EMPTY)


def _scrubbed(text: str, secrets: tuple[str, ...]) -> str:
    """`text` (an upstream's error body, an exception's message) without the operator's
    credentials: an upstream that quotes the key it was sent (`Incorrect API key provided:
    Bearer sk-...`) put it in every measurement_failed log line. Scrubbed before it is cut, so
    no prefix of a key is left either."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _secrets(*credentials: str | None) -> tuple[str, ...]:
    return tuple(c for c in credentials if c and len(c) >= _SECRET_MIN)


class _Retry(Exception):
    """A failure worth another attempt (rate limit, server error, connection trouble)."""


class _EffortRejected(Exception):
    """The backend refused the `reasoning_effort` field."""


async def _with_retries(
    what: str, settings: RequestSettings, attempt: Callable[[], Awaitable[Completion]], attempts: _Attempts
) -> Completion:
    for n in range(settings.max_retries + 1):
        attempts.failing = None
        try:
            completion = await attempt()
            return replace(completion, retries=n) if n else completion
        except _Retry as exc:
            if n == settings.max_retries:
                raise BackendError(f"{what}: giving up after {n + 1} attempts: {exc}") from None
            attempts.failing = f"{what}: {n + 1} failed attempts, the last: {exc}"
            delay = settings.backoff_s * 2**n * (0.5 + random.random())
            log.warning("backend_retry", what=what, attempt=n + 1, error=str(exc), delay_s=round(delay, 2))
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    effort: str | None,
    settings: RequestSettings,
    max_tokens: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if tools:
        # Some servers (llama.cpp's among them) ignore `tools` unless `tool_choice` is set.
        body["tools"] = tools
        body["tool_choice"] = "auto"
    if effort is not None:
        body["reasoning_effort"] = effort
    return body


def parse_message(message: dict[str, Any], finish_reason: str | None = None) -> Answer:
    """An OpenAI assistant message -> Answer (arguments kept as the raw JSON string).

    Reasoning is not the answer: `reasoning_content` / `reasoning` fields are not read, and
    `<think>` blocks in the content are removed (see `strip_reasoning`), as the seed system does.
    """
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(ToolCall(id=call.get("id") or f"call_{i}", name=function.get("name") or "", arguments=arguments))
    content = message.get("content")
    return Answer(
        content=strip_reasoning(content if isinstance(content, str) else ""),
        tool_calls=tuple(calls),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )


class _Retrying:
    """What both real backends share: each call bounded by its test (CallBound), retried on
    transient errors, and asked again without the effort field when the backend rejects it.
    A subclass says how one attempt is made (`_once`) and how the backend is named in errors."""

    settings: RequestSettings

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        need: int | None = None,
    ) -> Completion:
        bound = CallBound.of(need, effort, self.settings)
        attempts = _Attempts()
        return await _bounded(
            model,
            effort,
            bound,
            lambda: self._complete(model, messages, tools, effort, bound.tokens, attempts),
            attempts,
        )

    async def _complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        tokens: int | None,
        attempts: _Attempts,
    ) -> Completion:
        what = self._named(model)
        try:
            return await _with_retries(
                what, self.settings, lambda: self._once(model, messages, tools, effort, tokens), attempts
            )
        except _EffortRejected:
            log.warning("effort_rejected", model=model, effort=effort)
            completion = await _with_retries(
                what, self.settings, lambda: self._once(model, messages, tools, None, tokens), attempts
            )
            return replace(completion, effort_applied=False)

    def _named(self, model: str) -> str:
        raise NotImplementedError

    async def _once(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        tokens: int | None,
    ) -> Completion:
        raise NotImplementedError


class OpenAIBackend(_Retrying):
    """Any server that speaks OpenAI Chat Completions at `base_url` (llama.cpp, vLLM, OpenAI ...)."""

    provider = "openai-compatible"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        settings: RequestSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: httpx's (a MockTransport in a simulation: the real client, no socket)."""
        self.settings = settings or RequestSettings()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._shown = redact_url(self.base_url)  # what messages say: never the URL's credentials
        self._secrets = _secrets(api_key, httpx.URL(self.base_url).password)
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=self.settings.timeout_s, transport=transport
        )

    def _named(self, model: str) -> str:
        return f"{self._shown} model {model!r}"

    async def _once(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        tokens: int | None,
    ) -> Completion:
        body = _body(model, messages, tools, effort, self.settings, tokens)
        started = time.perf_counter()
        try:
            response = await self._client.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise _Retry(f"timed out after {self.settings.timeout_s}s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise _Retry(f"connection failed: {type(exc).__name__}: {_scrubbed(str(exc), self._secrets)}") from None
        seconds = time.perf_counter() - started
        if response.status_code >= 400 and _MODEL_OUTPUT_UNPARSED.search(response.text):
            log.info(
                "model_output_unparsed", model=model, status=response.status_code, detail=self._excerpt(response, 200)
            )
            return Completion(Answer("", (), UNPARSED), 0, seconds, effort_applied=True)
        if response.status_code in RETRY_STATUSES:
            raise _Retry(f"HTTP {response.status_code}: {self._excerpt(response, 200)}")
        if response.status_code >= 400:
            if effort is not None and response.status_code in (400, 422) and "reasoning" in response.text.lower():
                raise _EffortRejected()
            if response.status_code == 400 and _CONTEXT_EXCEEDED.search(response.text):
                # The conversation no longer fits the model's context: the model cannot do this
                # test, which is a failed answer, not a broken backend (nor a token budget spent thinking:
                # not `length`, which can make a sample inconclusive).
                log.warning("context_exceeded", model=model, detail=self._excerpt(response, 200))
                return Completion(Answer("", (), "context_exceeded"), 0, seconds, effort_applied=True)
            raise BackendError(
                f"{self._shown} model {model!r}: HTTP {response.status_code}: {self._excerpt(response, 300)}"
            )
        try:
            doc = response.json()
            choice = doc["choices"][0]
            answer = parse_message(choice["message"], choice.get("finish_reason"))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retry(f"malformed response ({type(exc).__name__}: {exc}): {self._excerpt(response, 200)}") from None
        tokens = int(((doc.get("usage") or {}).get("completion_tokens")) or 0)
        return Completion(answer, tokens, seconds, effort_applied=True)

    async def list_models(self) -> list[str]:
        try:
            response = await self._client.get("/models")
            response.raise_for_status()
            return [m["id"] for m in response.json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise BackendError(
                f"{self._shown}/models: cannot list models: {_scrubbed(str(exc), self._secrets)}"
            ) from None

    def _excerpt(self, response: httpx.Response, limit: int) -> str:
        return _scrubbed(response.text, self._secrets)[:limit]

    async def aclose(self) -> None:
        await self._client.aclose()


class LiteLLMBackend(_Retrying):
    """Providers that are not OpenAI-compatible (`anthropic/...`, `ollama/...`), through litellm."""

    provider = "litellm"

    def __init__(
        self,
        litellm_model: str,
        api_key: str | None = None,
        api_base: str | None = None,
        settings: RequestSettings | None = None,
    ) -> None:
        self.litellm_model = litellm_model
        self.api_key = api_key
        self.api_base = api_base
        self.settings = settings or RequestSettings()

    def _named(self, model: str) -> str:
        return f"litellm {self.litellm_model!r}"

    async def _once(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        tokens: int | None,
    ) -> Completion:
        import litellm  # heavy: imported only when a litellm route is used

        errors = litellm.exceptions  # the names litellm re-exports, where they are defined

        body = _body(self.litellm_model, messages, tools, effort, self.settings, tokens)
        extra = {k: v for k, v in (("api_key", self.api_key), ("api_base", self.api_base)) if v}
        started = time.perf_counter()
        try:
            try:
                response = await litellm.acompletion(**body, **extra, timeout=self.settings.timeout_s, num_retries=0)
            except Exception as exc:  # whichever class litellm maps it to: the words say whose failure it is
                if not _MODEL_OUTPUT_UNPARSED.search(str(exc)):
                    raise
                log.info("model_output_unparsed", model=self.litellm_model, detail=self._shown(exc)[:200])
                return Completion(Answer("", (), UNPARSED), 0, time.perf_counter() - started, effort_applied=True)
        except (
            errors.RateLimitError,
            errors.APIConnectionError,
            errors.Timeout,
            errors.InternalServerError,
            errors.ServiceUnavailableError,
        ) as exc:
            raise _Retry(f"{type(exc).__name__}: {self._shown(exc)}") from None
        except (errors.BadRequestError, errors.UnsupportedParamsError) as exc:
            if effort is not None and "reasoning" in str(exc).lower():
                raise _EffortRejected() from None
            raise BackendError(f"litellm {self.litellm_model!r}: {type(exc).__name__}: {self._shown(exc)}") from None
        except errors.APIError as exc:
            raise BackendError(f"litellm {self.litellm_model!r}: {type(exc).__name__}: {self._shown(exc)}") from None
        seconds = time.perf_counter() - started
        doc = response.model_dump()
        choice = doc["choices"][0]
        answer = parse_message(choice["message"], choice.get("finish_reason"))
        tokens = int(((doc.get("usage") or {}).get("completion_tokens")) or 0)
        return Completion(answer, tokens, seconds, effort_applied=True)

    def _shown(self, exc: Exception) -> str:
        """An error's message without the route's key (a provider may quote the key it got)."""
        return redact(_scrubbed(str(exc), _secrets(self.api_key)))

    async def list_models(self) -> list[str]:
        return [self.litellm_model]

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class BackendRequest:
    """One benchmark call as a MockBackend's handler sees it."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    effort: str | None
    need: int | None = None


Handler = Callable[[BackendRequest], "Answer | Completion"]


class MockBackend:
    """A backend answered by a plain function, for tests (the idea of httpx's MockTransport).

    Inject it through the measurement service's backend factory: core and service tests then need
    neither HTTP nor sleeps. A handler returning an Answer gets 7 completion tokens per call.
    """

    provider = "mock"

    def __init__(self, handler: Handler, models: list[str] | None = None) -> None:
        self.handler = handler
        self.models = models or []
        self.requests: list[BackendRequest] = []
        self.closed = False

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        effort: str | None,
        need: int | None = None,
    ) -> Completion:
        request = BackendRequest(model, [dict(m) for m in messages], tools, effort, need)
        self.requests.append(request)
        result = self.handler(request)
        if isinstance(result, Completion):
            return result
        return Completion(result, completion_tokens=7, seconds=0.01, effort_applied=True)

    async def list_models(self) -> list[str]:
        return list(self.models)

    async def aclose(self) -> None:
        self.closed = True
