"""The one place that knows how to measure a model: backends, settings, run, save, recommend.

`gatekeeper bench`, the core's lazy path (proxy and in-process API) and the admin API's
"benchmark now" all go through `MeasurementService`, so a profile means the same thing
whichever front end caused it, and every path saves the recommendation.

Backends come from a factory (`model -> Backend`); tests inject one returning a
`MockBackend`, as httpx tests inject a `MockTransport`, and need neither HTTP nor sleeps.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.config import Settings
from gatekeeper.errors import InconclusiveMeasurement
from gatekeeper.measuring.backends import Backend, LiteLLMBackend, OpenAIBackend, RequestSettings
from gatekeeper.measuring.budget import with_budgets
from gatekeeper.measuring.runner import DEFAULT_EFFORTS, Progress, ProgressFn, RunSettings, recommend, sweep
from gatekeeper.observe import logs, metrics, telemetry
from gatekeeper.store import Lease, ProfileStore, WriteFenced
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile
from gatekeeper.suite.loader import Suite

log = logs.get_logger(__name__)

BackendFactory = Callable[[str], Backend]  # model name -> a backend that answers for it


@dataclass
class ModelResult:
    """What measuring one model produced (what `bench --json` prints per model)."""

    model: str
    profiles: list[Profile] = field(default_factory=list)
    recommended: str | None = None
    effort_ignored: bool = False
    inconclusive: dict[str, str] = field(default_factory=dict)  # effort -> why nothing was stored
    skipped: dict[str, str] = field(default_factory=dict)  # effort -> the cheaper level certified large
    categories: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # effort -> Level.report
    calls: int = 0
    calls_saved: int = 0
    seed: int | None = None
    error: str | None = None
    uneven_errors: dict[str, str] = field(default_factory=dict)  # effort -> how retries fell on categories
    shared: dict[str, str] = field(default_factory=dict)  # effort -> the level whose evidence it took

    @property
    def note(self) -> str | None:
        """What the recommendation means when the levels could not be told apart."""
        if self.effort_ignored:
            return (
                "no level's scores or completion tokens differed from the others' (Friedman's test at 5%): "
                "the backend appears to ignore reasoning_effort, so the levels made no difference"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "model": self.model,
            "profiles": [p.to_json() for p in self.profiles],
            "recommendedEffort": self.recommended,
        }
        if self.effort_ignored:
            doc["effortIgnored"] = True
            doc["note"] = self.note
        if self.inconclusive:
            doc["inconclusive"] = self.inconclusive
        if self.skipped:
            doc["skipped"] = {
                e: f"not measured to the end: {cheaper} is cheaper and certified large"
                for e, cheaper in self.skipped.items()
            }
        if self.shared:
            doc["shared"] = {e: shared_note(other) for e, other in self.shared.items()}
        if self.categories:
            doc["categories"] = self.categories
        if self.uneven_errors:
            doc["unevenErrors"] = self.uneven_errors
        if self.seed is not None:
            doc["instanceSeed"] = self.seed
        doc["calls"], doc["callsSaved"] = self.calls, self.calls_saved
        if self.error:
            doc["error"] = self.error
        return doc


def shared_note(other: str) -> str:
    """Why a level's profile is `other`'s evidence (StopReason.SHARED)."""
    return (
        f"the backend did not apply reasoning_effort (each request was sent again without it): "
        f"the requests {other} sends, so {other}'s measurement stands for it"
    )


class MeasurementService:
    """Measures `model@effort` pairs with the configured backends and settings, and saves them."""

    def __init__(
        self,
        settings: Settings,
        suite: Suite,
        store: ProfileStore,
        backend_factory: BackendFactory | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int | None = None,
        recommend_only: bool = False,
    ) -> None:
        """`base_url` / `api_key` replace the upstream's for every model (the CLI's operator flags);
        without them a model with a litellm route uses it and any other the configured upstream.
        `recommend_only`: a sweep stops a level once a cheaper level is certified large (the
        recommendation cannot be that level any more) and stores no profile for it."""
        self.settings = settings
        self.suite = suite
        self.store = store
        self._factory = backend_factory or self._configured_backend
        self._base_url = base_url
        self._api_key = api_key
        self._concurrency = concurrency
        self._recommend_only = recommend_only

    # -- settings and backends ---------------------------------------------------------------

    def request_settings(self) -> RequestSettings:
        bench = self.settings.bench
        return RequestSettings(
            temperature=bench.temperature,
            max_tokens=bench.max_tokens,
            timeout_s=bench.timeout_s,
            max_retries=bench.max_retries,
            min_tokens_per_s=bench.min_tokens_per_s,
        )

    def run_settings(self) -> RunSettings:
        bench = self.settings.bench
        return RunSettings(
            concurrency=self._concurrency or bench.concurrency,
            system_prompt=bench.system_prompt,
            thresholds=bench.thresholds,
            samples=bench.samples,
            risk=bench.risk,
            design=bench.design,
            spacing_s=bench.spacing_s,
            recommend_only=self._recommend_only,
        )

    def backend_for(self, model: str) -> Backend:
        return self._factory(model)

    def _configured_backend(self, model: str) -> Backend:
        request = self.request_settings()
        route = self.settings.model_route(model)
        if route is not None and self._base_url is None:
            return LiteLLMBackend(route.litellm_model, route.api_key, route.api_base, request)
        # Measurements always use the operator's key (config or CLI), never a client's.
        return OpenAIBackend(
            self._base_url or self.settings.upstream.base_url, self._api_key or self.settings.upstream.api_key, request
        )

    async def list_models(self) -> list[str]:
        """The models the upstream lists at `/models` (BackendError when it cannot)."""
        backend = self.backend_for("")
        try:
            return await backend.list_models()
        finally:
            await backend.aclose()

    # -- measuring ---------------------------------------------------------------------------

    async def measure(
        self,
        model: str,
        effort: str | None = None,
        *,
        seed: int | None = None,
        progress: Progress | None = None,
        lease: Lease | None = None,
    ) -> Profile:
        """Measure one pair (the lazy path) and save it, fenced by `lease` when given. Raises
        BackendError, InconclusiveMeasurement when the answers say nothing about the model (nothing
        saved), or WriteFenced when the lease was lost meanwhile."""
        effort = effort or DEFAULT_EFFORT
        result = await self._run(model, [effort], None, seed, progress, lease)
        if effort in result.inconclusive:
            raise InconclusiveMeasurement(f"{model}@{effort}: inconclusive: {result.inconclusive[effort]}")
        (profile,) = result.profiles
        return profile

    async def sweep(
        self,
        model: str,
        efforts: list[str] | None = None,
        *,
        on_progress: ProgressFn | None = None,
        seed: int | None = None,
        progress: Progress | None = None,
    ) -> ModelResult:
        """Measure a model at several effort levels (default: `DEFAULT_EFFORTS`) and save every
        conclusive level and the recommendation. Raises BackendError when the backend fails.
        `progress` is updated live (calls, and per level and category what `Level.report` says)."""
        return await self._run(model, list(efforts or DEFAULT_EFFORTS), on_progress, seed, progress)

    async def _run(
        self,
        model: str,
        efforts: list[str],
        on_progress: ProgressFn | None,
        seed: int | None,
        progress: Progress | None = None,
        lease: Lease | None = None,
    ) -> ModelResult:
        """A measurement under its OpenTelemetry span (`measure {model}`: what it found per level)."""
        with telemetry.span("measure", model, efforts=efforts) as span:
            if seed is None:
                # Fresh on every measurement, randomised tests or not: the adaptive design draws
                # tests from it, so a fixed seed would make "at most bench.risk" a fixed outcome
                # for a deterministic model, and a wrong result repeat on every re-measurement.
                seed = secrets.randbelow(2**31)
            log.info("measurement_started", model=model, efforts=efforts, seed=seed)
            started = time.perf_counter()
            backend = self.backend_for(model)
            try:
                measured = await sweep(
                    backend, model, self.suite, efforts, self.run_settings(), on_progress, seed, progress
                )
                if self.settings.bench.tool_budget:
                    measured.profiles[:] = await with_budgets(
                        backend, measured.profiles, self.settings, seed, measured.shared
                    )
            except BaseException:
                metrics.BENCHMARKS.labels(outcome="failed").inc()
                raise
            finally:
                await backend.aclose()
            result = ModelResult(
                model,
                measured.profiles,
                effort_ignored=measured.effort_ignored,
                inconclusive=measured.inconclusive,
                skipped=measured.skipped,
                categories=measured.reports,
                calls=measured.calls,
                calls_saved=measured.calls_saved,
                seed=seed,
                uneven_errors=measured.uneven_errors,
                shared=measured.shared,
            )
            if measured.profiles:
                result.recommended = self._save(model, measured.profiles, lease)
            if measured.inconclusive:
                metrics.BENCHMARKS.labels(outcome="inconclusive").inc(len(measured.inconclusive))
            if measured.profiles:
                metrics.BENCHMARKS.labels(outcome="ok").inc(len(measured.profiles))
                metrics.BENCHMARK_SECONDS.observe(time.perf_counter() - started)
            _record(span, efforts, result)
            return result

    def _save(self, model: str, profiles: list[Profile], lease: Lease | None = None) -> str | None:
        """Save the profiles and the model's recommendation over every valid level now known.

        With a `lease` (the lazy path's) the write is fenced: WriteFenced when the lease was lost."""
        new = {p.reasoning_effort for p in profiles}
        known = [
            p
            for p in self.store.load().profiles.values()
            if p.model == model and p.reasoning_effort not in new and p.is_valid_for(self.suite)
        ]
        best = recommend(known + profiles)
        if not self.store.save(profiles, {model: best} if best else None, lease=lease):
            raise WriteFenced(f"{model}: lease lost while measuring; a newer measurement owns the result")
        return best


def _record(span: telemetry.Span, efforts: list[str], result: ModelResult) -> None:
    """What a measurement found, on its span: calls, and per level the tier, scores and bounds."""
    span.set("gatekeeper.calls", result.calls)
    for profile in result.profiles:
        prefix = "gatekeeper" if len(efforts) == 1 else f"gatekeeper.{profile.reasoning_effort}"
        span.set(f"{prefix}.tier", profile.tier.value)
        for category, score in profile.scores.items():
            span.set(f"{prefix}.score.{category}", score)
            span.set(f"{prefix}.bound.{category}", profile.lower_bound(category))
