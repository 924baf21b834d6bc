"""One exception hierarchy for the whole library.

    GatekeeperError
    ├── SuiteError                  a suite file is missing, malformed or invalid
    ├── ConfigError                 the config file is invalid (names the key path)
    ├── StoreError                  a store cannot be used or written
    │   └── WriteFenced             a write under a lease lost meanwhile
    ├── MeasurementFailed           a measurement could not start or land (retry_in_s)
    ├── BackendError                the model backend failed: not a verdict on the model
    │   └── InconclusiveMeasurement answers that say nothing about the model
    ├── LocalModelError             the bundled local model could not be served
    ├── NotMeasured                 unknown_models: reject, and no valid profile       -> 503
    ├── RequestInvalid (ValueError) a request's fields cannot be gated                 -> 400
    │   └── ToolBudgetExceeded      tools.budget: refuse, more tools than the budget   -> 400
    ├── AnswerInvalid (ValueError)  an upstream answer cannot be read with certainty   -> 502
    │   └── AnswerIncomplete        a stream ended before its end marker
    ├── ToolChoiceBlocked (ValueError)  tool_choice forces a tool the tier hides       -> 400
    ├── ToolNotAllowed              an in-process call of a tool the tier hides
    ├── ToolArgumentsInvalid        an in-process call's arguments break the tool's schema
    └── ProxyError                  an HTTP answer the proxy gives (status, code, headers)
        └── CredentialConflict      two headers carry different credentials          -> 400

The statuses are the proxy's (server/app.py `HANDLERS`: one handler per class, looked up along
the raised class's MRO); any other error is a 500 there. tests/core/test_api.py keeps the tree
whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.observe.redact import CLIENT_TEXT_LIMIT, MESSAGE_LIMIT, clip

if TYPE_CHECKING:
    from gatekeeper.rules.tiers import Tier


class GatekeeperError(Exception):
    """Base class of every error gatekeeper raises on purpose.

    Messages quote what clients and upstreams sent (model and tool names, fields, answers) and
    end up in error bodies and log lines: they are capped at `message_limit` characters, with
    control characters escaped, whatever the raising code put in them.
    """

    message_limit: int | None = MESSAGE_LIMIT

    def __init__(self, *args: object) -> None:
        if self.message_limit is not None and args and isinstance(args[0], str):
            args = (clip(args[0], self.message_limit), *args[1:])
        super().__init__(*args)


class SuiteError(GatekeeperError):
    """A suite file is missing, malformed or invalid; the message starts with the file."""

    message_limit = None  # the operator's own files: every problem is reported whole


class ConfigError(GatekeeperError):
    """The config file is invalid; the message names the key path."""

    message_limit = None
    detail: str | None = None  # the problem without the file's path: what the admin API may show

    @classmethod
    def in_file(cls, path: object, problem: str, shown: str | None = None) -> ConfigError:
        """`path: problem`; `detail` is `shown`, or `problem` when it names nothing internal."""
        error = cls(f"{path}: {problem}")
        error.detail = shown if shown is not None else problem
        return error


class StoreError(GatekeeperError):
    """The profile store cannot be written without destroying a file that is not a store."""

    # What an HTTP API tells its caller: where the store lives and what is wrong with it are the log's.
    shown = "the profile store cannot be changed now, nothing was changed (the log says why)"


class WriteFenced(StoreError):
    """A write fenced by a measurement lease that was lost meanwhile: a newer measurement owns the result."""


class MeasurementFailed(GatekeeperError):
    """A measurement could not start or land (backing off, coordination unavailable, lease lost);
    `retry_in_s` is how long before the pair is tried again."""

    def __init__(self, message: str, retry_in_s: float = 0.0) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s


class BackendError(GatekeeperError):
    """The model backend failed (after retries): not a verdict on the model."""


class InconclusiveMeasurement(BackendError):
    """A measurement whose answers say nothing about the model (almost all empty, cut at the token
    limit): nothing is stored and it is retried later like a backend failure."""


class LocalModelError(GatekeeperError):
    """The bundled local model could not be assembled, or its server did not come up."""


class NotMeasured(GatekeeperError):
    """`unknown_models: reject` and the pair has no valid profile yet."""


class RequestInvalid(GatekeeperError, ValueError):
    """A request's tool fields are malformed or cannot be gated; the message says what is wrong."""


class ToolBudgetExceeded(RequestInvalid):
    """`tools.budget: refuse` and the request offers more tools than its pair's budget."""

    def __init__(self, offered: int, budget: int, pair: str) -> None:
        super().__init__(
            f"the request offers {offered} tools after tier filtering; {clip(pair, CLIENT_TEXT_LIMIT)} is "
            f"certified for at most {budget} (tools.budget: refuse): offer fewer tools"
        )
        self.offered, self.budget = offered, budget


class AnswerInvalid(GatekeeperError, ValueError):
    """An upstream answer (plain or streamed) cannot be read with certainty: it never passes raw."""


class AnswerIncomplete(AnswerInvalid):
    """An upstream stream ended before its protocol's end marker (chat: `[DONE]`)."""


class ToolChoiceBlocked(GatekeeperError, ValueError):
    """`tool_choice` forces a tool the model's tier does not allow."""

    def __init__(self, tool: str, required: Tier, tier: Tier, source: str = "") -> None:
        tool = clip(tool, CLIENT_TEXT_LIMIT)  # the client's name: logged as `blocked_choice` too
        super().__init__(
            f"tool_choice forces tool {tool!r}, which requires tier {required.value!r}; "
            f"this model's tier is {tier.value!r}"
        )
        self.tool, self.required, self.tier, self.source = tool, required, tier, source


class ToolNotAllowed(GatekeeperError):
    """A tool call was refused because the model's tier does not allow that tool."""


class ToolArgumentsInvalid(GatekeeperError):
    """A tool call's arguments do not match the tool's schema."""


class ProxyError(GatekeeperError):
    """An HTTP answer the proxy gives instead of the upstream's: one type, mapped to the client
    protocol's error shape by the app's exception handler (endpoints raise, never build bodies)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.kind, self.headers = status, code, kind, headers or {}
        self.message: str = self.args[0]  # as capped by GatekeeperError


class CredentialConflict(ProxyError):
    """The request carries different credentials in two headers: refused, whichever is real."""

    def __init__(self, headers: list[str]) -> None:
        super().__init__(
            400,
            f"the request carries different credentials in {' and '.join(headers)}: send one credential "
            "(the same value in every header that carries it)",
            "conflicting_credentials",
        )
