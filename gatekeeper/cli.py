"""The `gatekeeper` command: bench, serve, profiles, suite, tools."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gatekeeper.config import Settings, load_settings
from gatekeeper.errors import BackendError, ConfigError, GatekeeperError, RequestInvalid
from gatekeeper.measuring.confidence import show
from gatekeeper.measuring.runner import DEFAULT_EFFORTS, RunSettings
from gatekeeper.measuring.runner import Progress as MeasureProgress
from gatekeeper.measuring.service import MeasurementService, ModelResult, shared_note
from gatekeeper.observe import logs
from gatekeeper.observe.redact import redact, redact_url
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import ProfileStore, open_store
from gatekeeper.store.profile import Profile, check_effort
from gatekeeper.suite.loader import CATEGORIES, DEFAULT_SUITE_DIR, Suite, load_suite, suite_files, suite_hash

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure models; gate the tools they see.")
suite_app = typer.Typer(no_args_is_help=True, help="Check the benchmark suite.")
app.add_typer(suite_app, name="suite")
# soft_wrap: an error stays one line ("FILE: why") at any terminal width, as scripts grep it.
# markup=False on every console: what is printed is data (model names, paths, patterns, JSON
# paths, `pip install 'gatekeeper[redis]'`) and is shown as written; rich would read `[/x]` in a
# model name as a closing tag (a crash) and `[redis]` as a style (eaten). Styles are given as
# `Text` spans (`_error`, `_bold`), never as markup in a string.
err = Console(stderr=True, soft_wrap=True, markup=False)

if TYPE_CHECKING:
    from gatekeeper.core.gatekeeper import Gatekeeper


def _stdout() -> Console:
    """A table on a terminal fits its width; piped (a script, a file) it is never cut: rich's
    default of 80 columns there cut `model@effort` keys to "m-a@…"."""
    return Console(markup=False) if sys.stdout.isatty() else Console(width=_PIPED_WIDTH, markup=False)


_PIPED_WIDTH = 1000  # wider than any row: a table takes only the width its cells need


def _error(message: str) -> None:
    """`error: <message>` on stderr, the message shown exactly as written (credentials redacted)."""
    err.print(Text.assemble(("error:", "red"), " ", redact(message)), highlight=False)


def _bold(before: str, value: str, after: str = "") -> Text:
    return Text.assemble(before, (value, "bold"), after)


def _fail(message: str, code: int = 2) -> None:
    _error(message)
    raise typer.Exit(code)


def _settings(config: Path | None) -> Settings:
    try:
        return load_settings(config) if config else Settings()
    except GatekeeperError as exc:
        _fail(str(exc))
        raise


def _store(location: str | Path) -> ProfileStore:
    """A file path or a redis:// URL; one-shot commands read Redis directly (no listener)."""
    try:
        return open_store(location, listen=False)
    except GatekeeperError as exc:  # a Redis store without the extra, an unknown scheme: said, not a traceback
        _fail(str(exc), 1)
        raise


def _suite(path: Path) -> Suite:
    try:
        return load_suite(path)
    except GatekeeperError as exc:
        _fail(str(exc))
        raise


@app.command()
def bench(
    models: list[str] = typer.Argument(None, help="Model names as the backend knows them."),
    all_models: bool = typer.Option(False, "--all", help="Measure every model the backend lists."),
    base_url: str | None = typer.Option(None, help="OpenAI-compatible base URL (default: config upstream)."),
    api_key: str | None = typer.Option(None, envvar="GATEKEEPER_API_KEY", help="Key for the backend."),
    config: Path | None = typer.Option(None, help="gatekeeper YAML config."),
    suite: Path | None = typer.Option(None, help="Suite directory (default: config suite)."),
    store: str | None = typer.Option(None, help="Profile store: a file or redis://... (default: config store)."),
    effort: str | None = typer.Option(
        None, help=f"Effort levels, comma-separated (default: {','.join(DEFAULT_EFFORTS)}; 'default' = no field)."
    ),
    samples: int | None = typer.Option(
        None, min=1, max=500, help="At most this many runs of each test per level (default: bench.samples)."
    ),
    design: str | None = typer.Option(
        None,
        help="adaptive (draws per category, the default), whole (every test each round) or spaced "
        "(adaptive, one observation per category a round, rounds bench.spacing_s apart): bench.design.",
    ),
    spacing: float | None = typer.Option(
        None, min=0, help="Seconds from one round's end to the next under --design spaced (bench.spacing_s)."
    ),
    recommend_only: bool = typer.Option(
        False,
        "--recommend-only",
        help="Only the recommendation is wanted: explicit levels run one at a time, cheapest first, and a "
        "level is skipped once a cheaper one is certified large (no profile is stored for it).",
    ),
    seed: int | None = typer.Option(
        None, help="Replay the draws (tests and instances) of the measurement stored with this instanceSeed."
    ),
    concurrency: int | None = typer.Option(None, min=1, help="Tests in flight at once."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Run the suite against one or more models and store a profile per model@effort."""
    settings = _settings(config)
    logs.configure("warning", json=False)
    if bool(models) == all_models:
        _fail("give one or more MODEL names, or --all (not both)")
    efforts = [e.strip() for e in (effort or ",".join(DEFAULT_EFFORTS)).split(",")]
    if not all(efforts) or len(set(efforts)) != len(efforts) or any("@" in e for e in efforts):
        _fail(f"--effort: expected distinct comma-separated levels without '@', got {effort!r}")
    for level in efforts:  # a profile no request could ever be resolved to is not worth a suite run
        try:
            check_effort(level, settings.extra_efforts)
        except RequestInvalid as exc:
            _fail(f"--effort: {exc}")
    if design is not None and design not in ("adaptive", "whole", "spaced"):
        _fail(f"--design: expected adaptive, whole or spaced, got {design!r}")
    overrides = {"samples": samples, "design": design, "spacing_s": spacing}
    update = {k: v for k, v in overrides.items() if v is not None}
    if update:
        settings = settings.model_copy(update={"bench": settings.bench.model_copy(update=update)})
    service = MeasurementService(
        settings,
        _suite(suite or settings.suite),
        _store(store or settings.store),
        base_url=base_url,
        api_key=api_key,
        concurrency=concurrency,
        recommend_only=recommend_only,
    )
    results, failed = asyncio.run(_bench(service, models, all_models, efforts, seed))
    if as_json:
        json.dump({"results": [r.to_json() for r in results]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_results(results, service)
    if failed:
        raise typer.Exit(1)


async def _bench(
    service: MeasurementService, models: list[str] | None, all_models: bool, efforts: list[str], seed: int | None
) -> tuple[list[ModelResult], bool]:
    if all_models:
        try:
            models = await service.list_models()
        except BackendError as exc:
            _error(str(exc))
            return [], True
        if not models:
            _error("the backend's /models lists no models")
            return [], True
    results, failed = [], False
    with Progress(
        TextColumn("{task.description}", markup=False),  # model names are data: `m[/x]` is no tag
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        for model in models or []:
            live = MeasureProgress(model)
            budget = sum(len(t.all_steps) for t in service.suite.tests) * service.run_settings().samples
            tasks = {e: progress.add_task(f"{model}@{e}", total=budget) for e in efforts}

            advance = _advancer(progress, tasks, live, model, budget)
            try:
                result = await service.sweep(model, efforts, seed=seed, on_progress=advance, progress=live)
            except BackendError as exc:
                failed = True
                _error(f"{model}: backend failed, no profile stored: {exc}")
                results.append(ModelResult(model, error=str(exc)))
                continue
            except GatekeeperError as exc:  # the store refused the write
                _error(str(exc))
                return results, True
            for effort, task in tasks.items():  # the final figures, each level stopped when it was decided
                report = result.categories.get(effort, {})
                calls = sum(r["calls"] for r in report.values())
                progress.update(task, description=_live_line(f"{model}@{effort}", report), completed=calls, total=calls)
            for level, cheaper in result.skipped.items():
                err.print(
                    f"{model}@{level}: stopped early (--recommend-only): {cheaper} is cheaper and certified large; "
                    "no profile stored for it",
                    highlight=False,
                )
            for level, other in result.shared.items():
                err.print(
                    f"{model}@{level}: {shared_note(other)}; no calls of its own past its first round", highlight=False
                )
            for level, reason in result.inconclusive.items():
                failed = True
                _error(f"{model}@{level}: inconclusive, no profile stored: {reason}")
            results.append(result)
    return results, failed


def _advancer(
    progress: Progress, tasks: dict[str, TaskID], live: MeasureProgress, model: str, budget: int
) -> Callable[[str, str, str], None]:
    """The progress callback: after each test, the level's calls and, per category, the calls
    spent, the bound and about how many more calls it needs (as of the last round)."""

    def advance(_model: str, effort: str, _test: str) -> None:
        report = live.levels.get(effort, {})
        calls = sum(r["calls"] for r in report.values())
        more = sum(r["needed"] or 0 for r in report.values() if r["state"] == "open")
        progress.update(
            tasks[effort],
            description=_live_line(f"{model}@{effort}", report),
            completed=calls,
            total=calls + more if report else budget,
        )

    return advance


def _live_line(label: str, report: dict[str, dict[str, Any]]) -> str:
    """`m@low  instruction 31 calls >= 0.86 | json 12 calls >= 0.41, ~40 more | ...`"""
    parts = []
    for c, r in report.items():
        part = f"{c} {r['calls']} calls >= {r['bound'][0]:.2f}"
        if r["state"] == "open":
            part += f", ~{r['needed']} more" if r["needed"] is not None else ", out of reach"
        parts.append(part)
    return f"{label}  " + " | ".join(parts) if parts else label


def _print_results(results: list[ModelResult], service: MeasurementService) -> None:
    out = _stdout()
    run = service.run_settings()
    for result in results:
        if result.error or not result.profiles:
            continue
        out.print(_profile_table(result.profiles, title=result.model))
        for profile in result.profiles:
            for line in _decision(profile, run, result.categories.get(profile.reasoning_effort)):
                out.print(line, highlight=False)
        note = f" ({result.note})" if result.note else ""
        out.print(_bold(f"recommended effort for {result.model}: ", str(result.recommended), note), highlight=False)
        if result.calls_saved:
            out.print(
                f"sequential stopping saved {result.calls_saved} of {result.calls + result.calls_saved} calls",
                highlight=False,
            )
        for effort, why in result.uneven_errors.items():
            out.print(f"[yellow]warning[/yellow] {result.model}@{effort}: {why}", highlight=False)
        if result.seed is not None:
            out.print(
                f"tests and instances drawn with instanceSeed {result.seed} (replay: --seed {result.seed})",
                highlight=False,
            )


def _decision(profile: Profile, run: RunSettings, report: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Per category: the estimate, the bound the tier was decided on, the calls it spent, and what
    the bound would need to certify the next tier up ("about N more calls would decide")."""
    tier, n = profile.tier, profile.samples or 1
    report = report or {}
    above = {Tier.SMALL: Tier.MEDIUM, Tier.MEDIUM: Tier.LARGE}.get(tier, Tier.LARGE)
    needs = run.thresholds.large if above == Tier.LARGE else run.thresholds.medium
    calls = sum(r["calls"] for r in report.values())
    size = f"{calls} calls" if report else f"{n} sample{'s' * (n != 1)}"
    lines = [f"{profile.key}: certified {tier.value} at risk {run.risk:g} after {size}"]
    for c in CATEGORIES:
        mean = profile.scores.get(c, 0.0)
        low, high = (profile.score_intervals or {}).get(c, [mean, mean])
        line = f"  {c} {mean:.2f}, bound {low:.2f}"
        if c in report:
            designs = ", ".join(f"{k} {v}" for k, v in report[c]["observations"].items())
            line += f" ({report[c]['calls']} calls: {designs or 'none'})"
        if c in needs:
            threshold = needs[c]
            if low >= threshold:
                line += f" >= {threshold:.2f}"
            elif high < threshold:
                line += (
                    f" < {threshold:.2f}: certified {tier.value}; upper bound {high:.2f}: {above.value} is out of reach"
                )
            else:
                more = report[c]["needed"] if c in report else None
                line += f" < {threshold:.2f}: certified {tier.value}; " + (
                    f"about {more} more calls would decide"
                    if more
                    else f"the estimate is too close to {threshold:.2f} for more calls to decide"
                )
        lines.append(line)
    if profile.tool_budget is not None:
        lines.append(
            f"  tool budget {profile.tool_budget}: the most offered tools it chooses among, certified at risk {run.risk:g}"
        )
    return lines


def _profile_table(profiles: list[Profile], title: str | None = None, suite: Suite | None = None) -> Table:
    table = Table(title=title)
    for column in (
        "profile",
        "tier",
        "instruction",
        "json",
        "toolCalling",
        "samples",
        "tool budget",
        "tok/s",
        "avg tokens",
        "tested at",
    ):
        table.add_column(column)
    if suite is not None:
        table.add_column("valid")
    for p in profiles:
        effort = p.reasoning_effort + ("" if p.effort_applied else " (not applied)")
        intervals = p.score_intervals or {}
        row = [
            f"{p.model}@{effort}",
            p.tier.value,
            *(show(p.scores.get(c, 0.0), intervals.get(c)) for c in ("instruction", "json", "toolCalling")),
            str(p.samples or 1),
            "-" if p.tool_budget is None else str(p.tool_budget),
            f"{p.tokens_per_second:.1f}",
            f"{p.avg_completion_tokens:.0f}",
            p.tested_at,
        ]
        if suite is not None:
            row.append("yes" if p.is_valid_for(suite) else "no (stale)")
        table.add_row(*row)
    return table


@app.command()
def serve(
    config: Path | None = typer.Option(None, help="gatekeeper YAML config."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(
        1, help="Processes serving the port as one gateway (more than 1 needs a redis:// store; docs/replicas.md)."
    ),
) -> None:
    """Run the OpenAI-compatible gating proxy. SIGHUP re-reads the config (pins, tool rules ...)."""
    import uvicorn

    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.server import workers as fleet
    from gatekeeper.server.app import create_app, settle_heap

    settings = _settings(config)
    logs.configure(settings.log_level)
    try:
        fleet.check_fleet(settings, workers)
        if workers > 1 and config is None:
            raise ConfigError(f"--workers {workers}: give --config FILE (each worker reads it)")
    except GatekeeperError as exc:
        _fail(str(exc))
        raise
    if workers > 1 and config is not None:
        err.print(
            f"gatekeeper serving on http://{host}:{port}/v1 with {workers} workers -> "
            f"{redact_url(settings.upstream.base_url)}",
            highlight=False,
        )
        fleet.serve(config, host, port, workers)
        return
    try:
        gk = Gatekeeper(settings, config_path=config)
    except GatekeeperError as exc:
        _fail(str(exc))
        raise
    with gk:  # serve created it, serve closes it
        _reload_on_sighup(gk)
        err.print(
            f"gatekeeper serving on http://{host}:{port}/v1 -> {redact_url(settings.upstream.base_url)}",
            highlight=False,
        )
        served = create_app(gk)
        settle_heap()
        uvicorn.run(
            served,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            loop="auto",
            http="auto",
            timeout_graceful_shutdown=10,
            # The client's address is the socket peer's; forwarded headers are believed by
            # gatekeeper itself, from `trusted_proxies` only (server/throttle.py), never by
            # uvicorn's default trust in 127.0.0.1, so a local client cannot rotate its address.
            proxy_headers=False,
        )


def _reload_on_sighup(gk: Gatekeeper) -> None:
    """SIGHUP -> gk.reload(), in a thread: the handler must not block the server's event loop."""
    import signal
    import threading

    log = logs.get_logger(__name__)

    def reload() -> None:
        try:
            gk.reload()
        except GatekeeperError as exc:
            log.error("config_reload_refused", error=str(exc), keeping="the settings in force")

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda signum, frame: threading.Thread(target=reload, daemon=True).start())


store_app = typer.Typer(no_args_is_help=True, help="Move profiles between stores.")
app.add_typer(store_app, name="store")


@store_app.command("copy")
def store_copy(
    source: str = typer.Argument(..., help="A store file path or redis://[:password@]host:port/db."),
    target: str = typer.Argument(..., help="A store file path or redis://[:password@]host:port/db."),
) -> None:
    """Copy every profile and recommendation from SOURCE to TARGET (migration, backup)."""
    from gatekeeper.store import copy_profiles, open_store

    logs.configure("warning", json=False)
    try:
        src, dst = open_store(source, listen=False), open_store(target, listen=False)
        try:
            copied = copy_profiles(src, dst)
        finally:
            src.close()
            dst.close()
    except GatekeeperError as exc:
        _fail(str(exc), 1)
        raise
    typer.echo(f"copied {copied} profiles from {redact_url(source)} to {redact_url(target)}")


@app.command()
def profiles(
    store: str | None = typer.Option(None, help="Profile store: a file or redis://... (default: config store)."),
    config: Path | None = typer.Option(None, help="gatekeeper YAML config."),
    as_json: bool = typer.Option(False, "--json", help="Print the store as JSON."),
    proxy: str | None = typer.Option(
        None, help="A running proxy's URL: add its live drift figures (from its admin API)."
    ),
    admin_key: str | None = typer.Option(
        None, envvar="GATEKEEPER_ADMIN_KEY", help="The proxy's admin key (default: the config's)."
    ),
) -> None:
    """Show stored profiles and recommendations (and, with --proxy, live drift per pair)."""
    settings = _settings(config)
    logs.configure("warning", json=False)
    profile_store = _store(store or settings.store)
    try:
        data = profile_store.load()
    except GatekeeperError as exc:
        _fail(str(exc), 1)
        raise
    if profile_store.problem:
        _fail(f"{profile_store.location}: not a usable profile store ({profile_store.problem})", 1)
    drift = _live_drift(proxy, admin_key or settings.admin_key) if proxy else None
    if as_json:
        doc = data.to_json()
        if drift is not None:
            doc["drift"] = drift
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    try:
        current = load_suite(settings.suite)
    except GatekeeperError:
        current = None
    out = _stdout()
    out.print(_profile_table(list(data.profiles.values()), suite=current))
    for model, level in data.recommendations.items():
        out.print(f"recommended effort for {model}: {level}")
    if drift is not None:
        out.print(_drift_table(drift))


def _live_drift(proxy: str, admin_key: str | None) -> dict[str, Any]:
    """Live drift per pair from a running proxy's admin API (the figures live in the proxy)."""
    import httpx

    url = proxy.rstrip("/") + "/admin/drift"
    try:
        answer = httpx.get(url, headers={"authorization": f"Bearer {admin_key or ''}"}, timeout=10)
    except httpx.HTTPError as exc:
        _fail(f"{url}: cannot reach the proxy: {exc}", 1)
    if answer.status_code != 200:
        _fail(f"{url}: HTTP {answer.status_code}: {answer.text[:300]}", 1)
    pairs: dict[str, Any] = answer.json()["pairs"]
    return pairs


_FAULTS = ("notOffered", "invalidJson", "invalidArgs", "textCall")  # gatekeeper.drift.window.Fault


def _drift_table(pairs: dict[str, Any]) -> Table:
    table = Table(title="live drift (count in the window; evidence for everyone vs its threshold; ceiling)")
    for column in ("profile", "tier", "calls", *_FAULTS, "state"):
        table.add_column(column)
    for key, pair in pairs.items():
        # .get: a proxy older than textCall does not report it
        rates = [pair["rates"].get(fault) for fault in _FAULTS]
        cells = [
            "-"
            if r is None
            else f"{r['count']} ({r['score']}/{r['threshold']}; {r['ceiling']})"
            if r["ceiling"] is not None
            else str(r["count"])
            for r in rates
        ]
        demoted, clients = pair["demoted"], pair.get("clientsDemoted") or {}
        if demoted:
            state = f"demoted {demoted['fromTier']} -> {demoted['toTier']} for everyone: {demoted['reason']}"
        elif clients:
            one = next(iter(clients.values()))
            state = f"demoted {one['fromTier']} -> {one['toTier']} for {len(clients)} client(s): {one['reason']}"
        elif pair["drifting"]:
            state = f"drifting ({pair['source']}: not demoted)"
        else:
            state = "ok"
        table.add_row(key, f"{pair['tier']} ({pair['source']})", str(pair["window"]["calls"]), *cells, state)
    return table


@suite_app.command("validate")
def suite_validate(directory: Path = typer.Argument(DEFAULT_SUITE_DIR)) -> None:
    """Exit 0 when every test file is valid; else print FILE: why and exit 1."""
    try:
        loaded = load_suite(directory)
    except GatekeeperError as exc:
        _fail(str(exc), 1)
    counts = {c: len(loaded.by_category(c)) for c in ("instruction", "json", "toolCalling")}
    typer.echo(f"{directory}: {len(loaded.tests)} tests valid ({counts}), hash {loaded.hash}")


@suite_app.command("hash")
def suite_hash_command(directory: Path = typer.Argument(DEFAULT_SUITE_DIR)) -> None:
    """Print the suite's 8-hex hash."""
    if not directory.is_dir():
        _fail(f"{directory}: not a directory", 1)
    if not suite_files(directory):  # a suite of nothing has no hash worth printing (validate fails it too)
        _fail(f"{directory}: no *.json test files", 1)
    typer.echo(suite_hash(directory))


@app.command()
def tools(
    model: str,
    config: Path = typer.Option(..., help="gatekeeper YAML config."),
    effort: str | None = typer.Option(None, help="Reasoning effort level."),
    tools_file: Path | None = typer.Option(None, "--tools", help="JSON file with an OpenAI tools array."),
) -> None:
    """Which tools MODEL gets: its tier, and each configured tool rule allowed or hidden (and by
    which requirement); with `routing:`, where a request offering all of them is sent."""
    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.core.resolver import Resolution
    from gatekeeper.rules.requirements import PairPolicy, describe_minimums
    from gatekeeper.store.profile import profile_key

    settings = _settings(config)
    logs.configure("warning", json=False)
    gk = Gatekeeper(settings.model_copy(update={"unknown_models": "fail_closed"}))
    try:
        found = gk.lookup(model, effort)
    except RequestInvalid as exc:  # an effort outside the closed set
        _fail(f"--effort: {exc}")
        raise
    resolution = found or Resolution(settings.unknown_tier, "unmeasured", profile_key(model, effort))
    tier = resolution.tier
    names = list(dict.fromkeys([*settings.tools.required_tier, *settings.tools.requires]))
    if tools_file:
        try:
            names = [t["function"]["name"] for t in json.loads(tools_file.read_text())]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _fail(f"{tools_file}: expected a JSON array of OpenAI tools: {exc}")
    policy = PairPolicy(gk.policy, gk.requirements, gk.capability(resolution).bounds)
    out = _stdout()
    out.print(_bold(f"{model}@{effort or 'default'}: tier ", tier.value, f" ({resolution.source})"), highlight=False)
    table = Table()
    for column in ("tool", "requires", "visible"):
        table.add_column(column)
    for name in names:
        required = gk.policy.required_tier(name)
        minimums = gk.requirements.of(name)
        needs = required.value + (f"; {describe_minimums(minimums)}" if minimums else "")
        why = policy.why_hidden(tier, name)
        table.add_row(name, needs, "yes" if why is None else f"hidden: {why}")
    default = settings.tools.default_tier
    hidden = f"hidden: tier {tier.value} < {default.value}"
    table.add_row("(any other tool)", default.value, "yes" if tier.allows(default) else hidden)
    out.print(table)
    if settings.routing is not None and names:
        route = gk.route_resolved(resolution, names, measure=False)
        where = f"{route.pair} ({route.reason}, tier {route.resolution.tier.value})" if route.routed else "not routed"
        out.print(f"routing: a request offering all of these tools goes to {where}")
    gk.close()


def main() -> None:
    app()
