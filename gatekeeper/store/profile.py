"""Capability profiles: what one measurement of one `model@effort` found, and how pairs are keyed.

Where profiles are kept is `gatekeeper.store`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gatekeeper.errors import RequestInvalid
from gatekeeper.observe.redact import clip
from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import Suite

DEFAULT_EFFORT = "default"
# The levels the protocols themselves define: openai-python `types/shared/reasoning_effort.py`
# (none, minimal, low, medium, high, xhigh, max; chat `reasoning_effort`, Responses
# `reasoning.effort`) and anthropic-sdk-python `types/output_config_param.py` (low ... max;
# Messages `output_config.effort`), plus `default` = no effort sent. Config adds to them
# (`extra_efforts`); nothing else names a pair, so effort names cannot mint measurements.
EFFORTS = frozenset({DEFAULT_EFFORT, "none", "minimal", "low", "medium", "high", "xhigh", "max"})
EFFORT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")  # what `extra_efforts` may add


def check_effort(effort: str | None, extra: Iterable[str] = ()) -> str:
    """The effort of a request (None -> `default`); RequestInvalid naming the allowed values when
    it is none of the protocols' levels nor one the config adds."""
    effort = effort or DEFAULT_EFFORT
    if effort in EFFORTS or effort in extra:
        return effort
    allowed = sorted(EFFORTS - {DEFAULT_EFFORT}) + sorted(set(extra) - EFFORTS)
    raise RequestInvalid(
        f"reasoning effort {clip(effort, 64)!r} is not one of {allowed} (or no effort at all: the default level)"
    )


def profile_key(model: str, effort: str | None) -> str:
    """`model@effort`; a request with no effort is keyed `model@default`.

    Model names may contain `@` (Vertex ids such as `claude-3-5-sonnet@20240620`), so a key is
    split on its last `@`; an effort containing `@` would make that ambiguous and is refused.
    """
    effort = effort or DEFAULT_EFFORT
    if "@" in effort:
        raise RequestInvalid(f"reasoning effort {effort!r} contains '@', which would make the key ambiguous")
    return f"{model}@{effort}"


def split_key(key: str) -> tuple[str, str]:
    """`model@effort` -> (model, effort), split on the last `@`; no `@` means the default effort."""
    model, sep, effort = key.rpartition("@")
    return (model, effort) if sep else (key, DEFAULT_EFFORT)


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class TestResult(_Camel):
    __test__ = False  # not a pytest class

    name: str
    category: str
    score: float


class Profile(_Camel):
    """What one benchmark run measured for one `model@effort`."""

    model: str
    provider: str
    tier: Tier
    scores: dict[str, float]
    tokens_per_second: float
    tested_at: str
    benchmark_version: int
    tests_hash: str
    test_results: list[TestResult] = Field(default_factory=list)
    reasoning_effort: str = DEFAULT_EFFORT
    avg_completion_tokens: float = 0.0
    # False when the backend refused the reasoning_effort field and the suite ran without it.
    effort_applied: bool = True
    duration_s: float = 0.0
    # Confidence (absent in the seed's format): samples run, per category the lower and upper
    # bounds at bench.risk (measuring/confidence.py), and the seed the randomised tests were drawn
    # from (replays the measurement exactly).
    samples: int | None = None
    score_intervals: dict[str, list[float]] | None = None
    instance_seed: int | None = None
    # The largest number of offered tools at which choosing the right one is certified at the
    # tier's toolCalling threshold (`toolBudget`; absent: not measured, no budget applies).
    tool_budget: int | None = None
    # Per category, the failed attempts (transport, rate limit, server error) retried before an
    # answer came (`retries`; absent: none). A model's own failure (its output did not parse) is
    # never retried: it is a failed answer.
    retries: dict[str, int] | None = None

    def lower_bound(self, category: str) -> float | None:
        """The bound the tier was decided on for `category`: the lower end of its stored interval
        (a one-sided bound at the level `bench.risk` states). None when the profile stores no
        interval (the seed's one-sample format): a requirement judged on bounds is then unmet."""
        interval = (self.score_intervals or {}).get(category)
        return interval[0] if interval else None

    @property
    def key(self) -> str:
        return profile_key(self.model, self.reasoning_effort)

    def is_valid_for(self, suite: Suite) -> bool:
        """A profile counts only if measured by this benchmark version on these exact test files."""
        return self.benchmark_version == suite.version and self.tests_hash == suite.hash

    def to_json(self) -> dict[str, Any]:
        # The optional confidence fields are left out when unset, so a one-sample profile of a
        # fixed suite is written in exactly the seed's format.
        unset = {
            k
            for k in ("samples", "score_intervals", "instance_seed", "tool_budget", "retries")
            if getattr(self, k) is None
        }
        return self.model_dump(mode="json", by_alias=True, exclude=unset)
