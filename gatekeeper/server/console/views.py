"""What the console pages show, computed from the core: plain data for the templates.

Nothing here decides a tier: the source and tier of a row are what the core's own `lookup`
answers (pins, valid profiles, drift demotions), so the console always shows what the proxy
applies. Geometry for the SVG charts is computed here too, so templates only place numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gatekeeper.config import Settings, pinned_tier
from gatekeeper.core.resolver import Resolution
from gatekeeper.core.route_choice import Need
from gatekeeper.measuring.runner import EFFORT_COST, Progress
from gatekeeper.observe import logs
from gatekeeper.observe.redact import address_forms, scrub
from gatekeeper.rules.requirements import PairPolicy, describe_minimums
from gatekeeper.rules.tiers import Thresholds, Tier
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, profile_key, split_key
from gatekeeper.suite.loader import CATEGORIES

log = logs.get_logger(__name__)

if TYPE_CHECKING:
    from gatekeeper.core.gatekeeper import Gatekeeper

ALL_EFFORTS = "*"  # the effort column of a pin on every effort of a model

BAR_WIDTH = 150  # px for a score of 1.0


@dataclass(frozen=True)
class Bar:
    """One category score drawn against its tier thresholds (all in px from the left)."""

    category: str
    score: float
    width: float
    level: str  # the highest tier this category alone allows: small | medium | large
    ticks: list[tuple[str, float, float]]  # (tier, threshold, x)
    interval: tuple[float, float] | None  # (x low, x high) when several samples were taken
    interval_scores: tuple[float, float] | None


@dataclass
class Row:
    key: str
    model: str
    effort: str
    tier: str
    source: str
    profile: Profile | None = None
    valid: bool | None = None
    bars: list[Bar] = field(default_factory=list)
    samples: int = 1
    progress: Progress | None = None


def effort_order(effort: str) -> tuple[int, str]:
    """`default` first, then known levels cheapest first, then the rest by name."""
    if effort == DEFAULT_EFFORT:
        return (-1, "")
    if effort in EFFORT_COST:
        return (EFFORT_COST.index(effort), "")
    return (len(EFFORT_COST), effort)


def score_bars(profile: Profile, thresholds: Thresholds) -> list[Bar]:
    intervals = _intervals(profile)
    bars = []
    for category in CATEGORIES:
        score = float(profile.scores.get(category, 0.0))
        ticks = [
            (tier, needs[category], round(needs[category] * BAR_WIDTH, 1))
            for tier, needs in (("medium", thresholds.medium), ("large", thresholds.large))
            if category in needs
        ]
        level = "small"
        if score >= thresholds.medium.get(category, 0.0):
            level = "medium"
            if score >= thresholds.large.get(category, 0.0):
                level = "large"
        span = intervals.get(category)
        bars.append(
            Bar(
                category,
                score,
                round(score * BAR_WIDTH, 1),
                level,
                ticks,
                (round(span[0] * BAR_WIDTH, 1), round(span[1] * BAR_WIDTH, 1)) if span else None,
                span,
            )
        )
    return bars


def _intervals(profile: Profile) -> dict[str, tuple[float, float]]:
    """`scoreIntervals` when the profile has several samples (optional fields, absent = one sample)."""
    if samples_of(profile) < 2:
        return {}
    raw: Any = getattr(profile, "score_intervals", None) or {}
    found = {}
    for category, span in dict(raw).items():
        try:
            low, high = (min(max(float(v), 0.0), 1.0) for v in span)
        except (TypeError, ValueError):
            continue  # a malformed interval is not drawn; the score still is
        found[str(category)] = (low, high)
    return found


def samples_of(profile: Profile) -> int:
    samples = getattr(profile, "samples", None)
    return samples if isinstance(samples, int) and samples > 0 else 1


def rows(gk: Gatekeeper) -> list[Row]:
    """Every `model@effort` the console knows of: stored profiles, pins and measurements under way."""
    data = gk.store.load()
    running = {p.key: p for p in gk.progress()}
    keys = set(data.profiles) | {k for k, p in running.items() if p.finished is None}
    keys |= {k for k in gk.settings.pins if "@" in k}
    found = []
    for key in keys:
        model, effort = split_key(key)
        row = _row(gk, model, effort, data.profiles.get(key), running.get(key))
        found.append(row)
    # A pin on a whole model with nothing stored yet still gets a row: it decides that model's tier.
    models = {r.model for r in found}
    for pinned, tier in gk.settings.pins.items():
        if "@" not in pinned and pinned not in models:
            found.append(
                Row(key=pinned, model=pinned, effort=ALL_EFFORTS, tier=pinned_tier(tier).value, source="pinned")
            )
    found.sort(key=lambda r: (r.model, effort_order(r.effort)))
    return found


def _row(gk: Gatekeeper, model: str, effort: str, profile: Profile | None, progress: Progress | None) -> Row:
    resolution = gk.lookup(model, effort)
    if resolution is not None:
        tier, source = resolution.tier.value, resolution.source
    else:
        # What the proxy applies to it now: the unmeasured tier, while measuring or until it is.
        tier = gk.settings.unknown_tier.value
        source = "pending" if progress is not None and progress.finished is None else "unmeasured"
    row = Row(
        key=profile_key(model, effort),
        model=model,
        effort=effort,
        tier=tier,
        source=source,
        profile=profile,
        progress=progress,
    )
    if profile is not None:
        row.valid = profile.is_valid_for(gk.suite)
        row.bars = score_bars(profile, gk.settings.bench.thresholds)
        row.samples = samples_of(profile)
    return row


# -- the model page ------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRule:
    rule: str  # a tool name, a shell-style pattern, or "any other tool"
    required: str
    sees: dict[str, bool]  # effort -> whether that effort's tier allows it
    minimums: str = ""  # its category minimums (tools.requires), "json >= 0.9"
    why: dict[str, str] = field(default_factory=dict)  # effort -> the requirement that hides it


@dataclass(frozen=True)
class RoutingRow:
    """Where a request at one effort of the model goes when its tools need a tier (routing:)."""

    effort: str
    goes: dict[str, str]  # needed tier -> "model@effort (reason)", "as asked", or "hidden"


@dataclass
class ModelPage:
    model: str
    rows: list[Row]
    recommended: str | None
    tests: list[tuple[str, str, dict[str, float]]]  # (test, category, effort -> score)
    tools: list[ToolRule]
    pins: list[tuple[str, str]]
    chart: dict[str, Any] | None
    live: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (effort, drift figures)
    routing: list[RoutingRow] | None = None  # None: no routing: section


def model_page(gk: Gatekeeper, model: str) -> ModelPage | None:
    """Everything about one model, all its efforts; None when the console knows nothing of it."""
    model_rows = [r for r in rows(gk) if r.model == model]
    if not model_rows:
        return None
    recommended = gk.store.load().recommendations.get(model)
    measured = [r for r in model_rows if r.profile is not None]
    suite_order = {t.name: i for i, t in enumerate(gk.suite.tests)}
    tests: dict[str, tuple[str, dict[str, float]]] = {}
    for row in measured:
        assert row.profile is not None
        for result in row.profile.test_results:
            tests.setdefault(result.name, (result.category, {}))[1][row.effort] = result.score
    ordered = sorted(tests.items(), key=lambda item: (suite_order.get(item[0], len(suite_order)), item[0]))
    pins = [
        (k, pinned_tier(t).value)
        for k, t in gk.settings.pins.items()
        if k == model or ("@" in k and split_key(k)[0] == model)
    ]
    return ModelPage(
        model=model,
        rows=model_rows,
        recommended=recommended,
        tests=[(name, category, scores) for name, (category, scores) in ordered],
        tools=tool_rules(gk, model_rows),
        pins=pins,
        chart=sweep_chart(measured, recommended),
        live=live_traffic(gk, model_rows),
        routing=routing_table(gk, model_rows),
    )


def live_traffic(gk: Gatekeeper, model_rows: list[Row]) -> list[tuple[str, dict[str, Any]]]:
    """What the drift monitor saw of each effort in live traffic: window, fault rates, demotion."""
    drift = getattr(gk, "drift", None)
    if drift is None:
        return []
    try:
        report: dict[str, dict[str, Any]] = drift.report()
    except Exception:  # the page still shows the profiles; the log says why
        log.exception("console_drift_report_failed")
        return []
    return [(row.effort, report[row.key]) for row in model_rows if row.key in report]


def _resolution(gk: Gatekeeper, row: Row) -> Resolution:
    found = gk.lookup(row.model, row.effort) if row.effort != ALL_EFFORTS else None
    return found or Resolution(Tier(row.tier), "unmeasured", row.key)


def tool_rules(gk: Gatekeeper, model_rows: list[Row]) -> list[ToolRule]:
    """Each rule of the configured tool policy (tiers and category minimums), and which efforts
    of the model see it; a hidden one says which requirement hides it."""
    tools = gk.settings.tools
    names = list(dict.fromkeys([*tools.required_tier, *tools.requires]))
    policies = {r.effort: (Tier(r.tier), PairPolicy(gk.policy, gk.requirements, _bounds(gk, r))) for r in model_rows}
    listed = []
    for name in names:
        why = {effort: policy.why_hidden(tier, name) or "" for effort, (tier, policy) in policies.items()}
        listed.append(
            ToolRule(
                name,
                gk.policy.required_tier(name).value,
                {effort: not reason for effort, reason in why.items()},
                describe_minimums(gk.requirements.of(name)),
                why,
            )
        )
    default = tools.default_tier
    sees = {r.effort: Tier(r.tier).allows(default) for r in model_rows}
    why = {r.effort: f"tier {r.tier} < {default.value}" for r in model_rows if not sees[r.effort]}
    listed.append(ToolRule("any other tool", default.value, sees, why=why))
    return listed


def _bounds(gk: Gatekeeper, row: Row) -> dict[str, float]:
    return dict(gk.capability(_resolution(gk, row)).bounds) if gk.requirements else {}


def routing_table(gk: Gatekeeper, model_rows: list[Row]) -> list[RoutingRow] | None:
    """For each effort of the model, where routing sends a request whose tools need medium or
    large (no lazy measurement is started by looking)."""
    if gk.settings.routing is None:
        return None
    table = []
    for row in model_rows:
        if row.effort == ALL_EFFORTS:
            continue
        goes = {}
        for tier in (Tier.MEDIUM, Tier.LARGE):
            route = gk.route_need(_resolution(gk, row), Need(tier), measure=False)
            stays = "as asked" if Tier(row.tier).allows(tier) else "hidden"
            goes[tier.value] = f"{route.pair} ({route.reason})" if route.routed else stays
        table.append(RoutingRow(row.effort, goes))
    return table


# Chart geometry (px). The viewBox is fixed; the SVG scales with the page.
_CHART_W, _CHART_H = 640, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 64, 24, 40


def sweep_chart(measured: list[Row], recommended: str | None) -> dict[str, Any] | None:
    """Score per category (lines, left axis 0..1) and average completion tokens (bars, right
    axis) by effort level, cheapest first; the recommended level is a highlighted column."""
    if not measured:
        return None
    levels = sorted(measured, key=lambda r: effort_order(r.effort))
    plot_w, plot_h = _CHART_W - _LEFT - _RIGHT, _CHART_H - _TOP - _BOTTOM
    step = plot_w / len(levels)
    bar_w = min(step * 0.4, 44.0)
    max_tokens = max((r.profile.avg_completion_tokens for r in levels if r.profile), default=0.0) or 1.0

    def x(i: int) -> float:
        return round(_LEFT + step * (i + 0.5), 1)

    def y(score: float) -> float:
        return round(_TOP + plot_h * (1 - score), 1)

    columns = []
    for i, row in enumerate(levels):
        assert row.profile is not None
        tokens = row.profile.avg_completion_tokens
        height = round(plot_h * tokens / max_tokens, 1)
        columns.append(
            {
                "effort": row.effort,
                "x": x(i),
                "tier": row.profile.tier.value,
                "tokens": tokens,
                "bar_x": round(x(i) - bar_w / 2, 1),
                "bar_w": round(bar_w, 1),
                "bar_y": round(_TOP + plot_h - height, 1),
                "bar_h": height,
                "band_x": round(_LEFT + step * i, 1),
                "band_w": round(step, 1),
                "recommended": row.effort == recommended,
            }
        )
    lines = []
    for category in CATEGORIES:
        points = [
            (x(i), y(float(r.profile.scores.get(category, 0.0))), float(r.profile.scores.get(category, 0.0)))
            for i, r in enumerate(levels)
            if r.profile is not None
        ]
        lines.append({"category": category, "points": points, "path": " ".join(f"{px},{py}" for px, py, _ in points)})
    grid = [{"value": v, "y": y(v)} for v in (0.0, 0.25, 0.5, 0.75, 1.0)]
    token_ticks = [{"value": round(max_tokens * f, 1), "y": y(f)} for f in (0.0, 0.5, 1.0)]
    return {
        "width": _CHART_W,
        "height": _CHART_H,
        "left": _LEFT,
        "right": _CHART_W - _RIGHT,
        "top": _TOP,
        "bottom": _TOP + plot_h,
        "columns": columns,
        "lines": lines,
        "grid": grid,
        "token_ticks": token_ticks,
    }


def private_values(settings: Settings) -> tuple[bytes, ...]:
    """What a measurement's error may quote that the console's reader may not see (the log line
    `measurement_failed` does): where each upstream and the store live, the operator's keys."""
    store = str(settings.store)
    found = [*address_forms(settings.upstream.base_url), settings.upstream.api_key or "", store]
    for route in settings.models:
        found += [*address_forms(route.api_base or ""), route.api_key or ""]
    if "://" in store:
        found += [*address_forms(store), urlsplit(store).password or ""]
    # Longest first, so a value is never half-replaced through a shorter one it contains.
    return tuple(v.encode() for v in sorted({v for v in found if len(v) >= 8}, key=len, reverse=True))


def progress_json(progress: Progress, private: tuple[bytes, ...] = ()) -> dict[str, Any]:
    """A measurement's progress; its error without any of `private` (`private_values`)."""
    state = "running" if progress.finished is None else ("failed" if progress.error else "done")
    return {
        "key": progress.key,
        "answered": progress.answered,
        "total": progress.total,
        "state": state,
        "error": scrub(progress.error.encode(), private).decode() if progress.error else progress.error,
        "tier": progress.tier,
        "started": progress.started,
        "finished": progress.finished,
    }
