"""The `gatekeeper` command: bench, serve, profiles, suite, tools."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

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
from gatekeeper.observe.redact import clip, redact, redact_url
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore, ProfileStore, StoreData, open_store
from gatekeeper.store.profile import Profile, check_effort
from gatekeeper.suite.loader import CATEGORIES, DEFAULT_SUITE_DIR, Suite, load_suite, suite_files, suite_hash

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure models; gate the tools they see.")
suite_app = typer.Typer(no_args_is_help=True, help="Check the benchmark suite.")
app.add_typer(suite_app, name="suite")
# soft_wrap: an error stays one line ("FILE: why") at any terminal width, as scripts grep it.
# markup=False on every console: what is printed is data (model names, paths, patterns, JSON
# paths, `pip install 'gatekeeper[redis]'`) and is shown as written; rich would read `[/x]` in a
# model name as a closing tag (a crash) and `[redis]` as a style (eaten). emoji=False likewise:
# rich turns `:robot:` in `ft:gpt-4o-mini:acme:robot:9o1eNlSa` into an emoji (markup=False does
# not stop it); highlight=False: no part of a name is coloured as if it were a number or a URL.
# Styles are given as `Text` spans (`_error`, `_bold`), never as markup in a string; data is
# passed through `_shown` (control characters escaped).
err = Console(stderr=True, soft_wrap=True, markup=False, emoji=False, highlight=False)

if TYPE_CHECKING:
    from gatekeeper.core.gatekeeper import Gatekeeper


def _stdout() -> Console:
    """A table on a terminal fits its width; piped (a script, a file) it is never cut: rich's
    default of 80 columns there cut `model@effort` keys to "m-a@…"."""
    width = None if sys.stdout.isatty() else _PIPED_WIDTH
    return Console(width=width, markup=False, emoji=False, highlight=False)


_PIPED_WIDTH = 1000  # wider than any row: a table takes only the width its cells need
# What is printed comes from the operator's own store, config and backend: shown whole, the cap
# only stops a runaway value (clip's own default, 256, would cut a long path or error).
_SHOWN_LIMIT = 10_000


def _shown(text: object) -> str:
    """`text` as the terminal may show it: control characters escaped visibly (`\\u001b`), where
    rich would drop `\\r` and BEL silently and let ESC (a colour, a cursor move) through."""
    return clip(text, _SHOWN_LIMIT)


def _shown_url(url: str) -> str:
    """`url` for a message, without its credentials: redact_url, and for a URL too malformed to
    parse (`redis://:p[/x]@host`), whose password may hold the `/` that redact's pattern stops
    at, everything between `://` and the last `@` hidden."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        try:
            urlsplit(url)
        except ValueError:
            return _shown(f"{scheme}://***@{rest.rpartition('@')[2]}")
    return _shown(redact_url(url))


def _error(message: str) -> None:
    """`error: <message>` on stderr, the message shown exactly as written (credentials redacted)."""
    err.print(Text.assemble(("error:", "red"), " ", _shown(redact(message))))


def _bold(before: str, value: str, after: str = "") -> Text:
    return Text.assemble(_shown(before), (_shown(value), "bold"), _shown(after))


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
    except ValueError as exc:  # a URL the Redis client cannot parse (`redis://h:9[/x]/0`: "Invalid IPv6 URL")
        _fail(f"{_shown_url(str(location))}: not a usable store location: {exc}", 1)
        raise


def _load(profile_store: ProfileStore) -> StoreData:
    """The store's profiles; a store that cannot be read (Redis down, a file that is not a store)
    is an error, never an empty store that would read as "nothing measured"."""
    try:
        data = profile_store.load()
    except GatekeeperError as exc:
        _fail(str(exc), 1)
        raise
    if profile_store.problem:
        _fail(f"{profile_store.location}: not a usable profile store ({profile_store.problem})", 1)
    return data


def _missing_file(profile_store: ProfileStore) -> bool:
    """A file store whose file does not exist (nothing measured there yet, or a mistyped path)."""
    return isinstance(profile_store, JsonFileStore) and not profile_store.path.exists()


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
    _check_url(base_url or settings.upstream.base_url, "--base-url" if base_url else "upstream.base_url")
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


def _check_url(url: str, option: str) -> None:
    """Fail with `option URL: not a valid URL` before any work, not with httpx's traceback later."""
    import httpx

    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        _fail(f"{option} {_shown_url(url)}: not a valid URL: {exc}")


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
            tasks = {e: progress.add_task(_shown(f"{model}@{e}"), total=budget) for e in efforts}

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
                    _shown(
                        f"{model}@{level}: stopped early (--recommend-only): {cheaper} is cheaper and certified "
                        "large; no profile stored for it"
                    )
                )
            for level, other in result.shared.items():
                err.print(_shown(f"{model}@{level}: {shared_note(other)}; no calls of its own past its first round"))
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
    return _shown(f"{label}  " + " | ".join(parts) if parts else label)


def _print_results(results: list[ModelResult], service: MeasurementService) -> None:
    out = _stdout()
    run = service.run_settings()
    for result in results:
        if result.error or not result.profiles:
            continue
        out.print(_profile_table(result.profiles, title=result.model))
        for profile in result.profiles:
            for line in _decision(profile, run, result.categories.get(profile.reasoning_effort)):
                out.print(_shown(line))
        note = f" ({result.note})" if result.note else ""
        if result.recommended is None:  # runner.recommend: `default` sends no effort, so is never recommended
            out.print(_shown(f"no effort recommended for {result.model}: no explicit level was measured"))
        else:
            out.print(_bold(f"recommended effort for {result.model}: ", result.recommended, note))
        if result.calls_saved:
            out.print(f"sequential stopping saved {result.calls_saved} of {result.calls + result.calls_saved} calls")
        for effort, why in result.uneven_errors.items():
            out.print(Text.assemble(("warning", "yellow"), _shown(f" {result.model}@{effort}: {why}")))
        if result.seed is not None:
            out.print(f"tests and instances drawn with instanceSeed {result.seed} (replay: --seed {result.seed})")


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
                    f"about {more} more call{'s' * (more != 1)} would decide"
                    if more
                    else f"the estimate is too close to {threshold:.2f} for more calls to decide"
                )
        lines.append(line)
        if cut := (report.get(c) or {}).get("cut"):
            lines.append(f"    answers cut short, scored as failed: {_cut_tests(cut)}")
    if profile.tool_budget is not None:
        lines.append(
            f"  tool budget {profile.tool_budget}: the most offered tools it chooses among, certified at risk {run.risk:g}"
        )
    return lines


_CUT_REASONS = {
    "length": "past its token bound",
    "timeout": "past its time bound",
    "context_exceeded": "past the context",
}


def _cut_tests(cut: dict[str, dict[str, int]]) -> str:
    """`json_nested 3 past its token bound, tool_chain 1 past its time bound`"""
    return ", ".join(
        f"{test} {n} {_CUT_REASONS.get(reason, reason)}"
        for test, reasons in cut.items()
        for reason, n in reasons.items()
    )


def _profile_table(profiles: list[Profile], title: str | None = None, suite: Suite | None = None) -> Table:
    table = Table(title=None if title is None else _shown(title))
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
        table.add_row(*map(_shown, row))
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
    from gatekeeper.server import upstream
    from gatekeeper.server import workers as fleet
    from gatekeeper.server.app import create_app, settle_heap
    from gatekeeper.server.http_server import HttpToolsOneWrite

    settings = _settings(config)
    logs.configure(settings.log_level)
    try:
        fleet.check_fleet(settings, workers)
        upstream.env_proxy(settings.upstream.base_url)  # one it cannot use: refused before the start line
        if workers > 1 and config is None:
            raise ConfigError(f"--workers {workers}: give --config FILE (each worker reads it)")
    except GatekeeperError as exc:
        _fail(str(exc))
        raise
    _check_listen(host, port)
    if workers > 1 and config is not None:
        err.print(
            _shown(f"gatekeeper serving on {_listen_url(host, port)} with {workers} workers -> ")
            + _shown_url(settings.upstream.base_url)
        )
        fleet.serve(config, host, port, workers, settings)
        return
    try:
        gk = Gatekeeper(settings, config_path=config)
    except GatekeeperError as exc:
        _fail(str(exc))
        raise
    with gk, _StopAsked() as stop:  # serve created gk, serve closes it
        _reload_on_sighup(gk)
        err.print(
            _shown(f"gatekeeper serving on {_listen_url(host, port)} -> ") + _shown_url(settings.upstream.base_url)
        )
        served = create_app(gk)
        settle_heap()
        server = uvicorn.Server(
            uvicorn.Config(
                served,
                host=host,
                port=port,
                log_level="warning",
                access_log=False,
                loop="auto",
                http=HttpToolsOneWrite,  # uvicorn's httptools protocol, one write per plain answer
                timeout_graceful_shutdown=10,
                # The client's address is the socket peer's; forwarded headers are believed by
                # gatekeeper itself, from `trusted_proxies` only (server/throttle.py), never by
                # uvicorn's default trust in 127.0.0.1, so a local client cannot rotate its address.
                proxy_headers=False,
            )
        )
        if stop.hand_over(server):
            server.run()
        if not server.started and not stop.asked:  # uvicorn said why (the port taken, ...)
            raise typer.Exit(3)


class _StopAsked:
    """Ctrl-C (SIGINT) while `serve` starts, before uvicorn's own handler is in place: remembered
    and made a clean stop, never a KeyboardInterrupt raised wherever the main thread happens to
    be. A finalizer running then (start-up ends with a full collection) would swallow it and the
    server would start and never stop; a lock held then would stay held."""

    def __init__(self) -> None:
        self.asked = False
        self._server: Any = None
        self._previous: Any = None

    def __enter__(self) -> _StopAsked:
        import signal

        self._previous = signal.signal(signal.SIGINT, self._ask)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        signal.signal(signal.SIGINT, self._previous)

    def _ask(self, signum: int, frame: Any) -> None:
        self.asked = True
        if self._server is not None:  # uvicorn checks it once started, before it serves
            self._server.should_exit = True

    def hand_over(self, server: Any) -> bool:
        """Let `server` take the stop from here; False when it was asked for already."""
        self._server = server
        return not self.asked


def _check_listen(host: str, port: int) -> None:
    """Fail with `--host H --port P: cannot listen: why` before the start line, not with uvicorn's
    log line after it (which names no address for an unknown host, nor under --workers)."""
    import socket

    if not 1 <= port <= 65535:  # the socket takes 99999 as 99999 % 65536: it would listen on 34463
        _fail(f"--port must be 1 to 65535, got {port}")

    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn binds it
    try:
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        _fail(f"--host {host} --port {port}: cannot listen: {exc.strerror or exc}")


def _listen_url(host: str, port: int) -> str:
    """The URL clients use: an IPv6 address in brackets (`http://[::1]:8000/v1`)."""
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"


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
    from gatekeeper.store import copy_profiles

    logs.configure("warning", json=False)
    src = _store(source)
    try:
        if _missing_file(src):  # a mistyped SOURCE would copy nothing into a new, empty TARGET
            _fail(f"{source}: no such store file", 1)
        dst = _store(target)
        try:
            if _same_store(src, dst):
                _fail(f"{_shown_url(source)} and {_shown_url(target)} are the same store: nothing to copy", 1)
            copied = copy_profiles(src, dst)
        finally:
            dst.close()
    except GatekeeperError as exc:
        _fail(str(exc), 1)
        raise
    except OSError as exc:  # a TARGET under a file, in a directory not writable, its lock not acquired
        _fail(f"{_shown_url(target)}: cannot write: {exc.strerror or exc}", 1)
        raise
    finally:
        src.close()
    typer.echo(f"copied {copied} profiles from {_shown_url(source)} to {_shown_url(target)}")


def _same_store(a: ProfileStore, b: ProfileStore) -> bool:
    if isinstance(a, JsonFileStore) and isinstance(b, JsonFileStore):
        return a.path.resolve() == b.path.resolve()
    return a.location == b.location


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
    data = _load(profile_store)
    if _missing_file(profile_store):
        err.print(_shown(f"note: {profile_store.location}: no such store file yet (nothing measured there)"))
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
        out.print(_shown(f"recommended effort for {model}: {level}"))
    if drift is not None:
        out.print(_drift_table(drift))


def _live_drift(proxy: str, admin_key: str | None) -> dict[str, Any]:
    """Live drift per pair from a running proxy's admin API (the figures live in the proxy)."""
    import httpx

    url = proxy.rstrip("/") + "/admin/drift"
    shown = _shown_url(url)
    if not admin_key:  # the admin API is mounted only with a key, and always asks for it
        _fail(
            f"--proxy {_shown_url(proxy)}: the proxy's admin API needs its admin key: give --admin-key, "
            "GATEKEEPER_ADMIN_KEY or admin_key in --config",
            1,
        )
    elif not (admin_key.isascii() and admin_key.isprintable()):  # never shown: it is a secret
        _fail(
            "the admin key: only printable ASCII characters can go in an HTTP header: check --admin-key, "
            "GATEKEEPER_ADMIN_KEY or admin_key in --config",
            1,
        )
    try:
        answer = httpx.get(url, headers={"authorization": f"Bearer {admin_key}"}, timeout=10)
    except httpx.InvalidURL as exc:  # not an HTTPError: a URL httpx cannot parse (`http://h:99999[/x]`)
        _fail(f"--proxy {_shown_url(proxy)}: not a valid URL: {exc}", 1)
        raise
    except httpx.UnsupportedProtocol:  # `127.0.0.1:8000`: no http:// in front, nothing was reached
        _fail(f"--proxy {_shown_url(proxy)}: not a valid URL: give http://HOST:PORT or https://HOST:PORT", 1)
        raise
    except httpx.HTTPError as exc:
        _fail(f"{shown}: cannot reach the proxy: {exc}", 1)
        raise
    if answer.status_code != 200:
        _fail(f"{shown}: HTTP {answer.status_code}: {answer.text[:300]}", 1)
    try:
        pairs: dict[str, Any] = answer.json()["pairs"]
    except (ValueError, KeyError, TypeError) as exc:  # something else answers there: not gatekeeper's admin API
        _fail(f"{shown}: not a gatekeeper admin API answer (expected a JSON object with 'pairs'): {exc!r}", 1)
        raise
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
        row = [key, f"{pair['tier']} ({pair['source']})", str(pair["window"]["calls"]), *cells, state]
        table.add_row(*map(_shown, row))
    return table


@suite_app.command("validate")
def suite_validate(directory: Path = typer.Argument(DEFAULT_SUITE_DIR)) -> None:
    """Exit 0 when every test file is valid; else print FILE: why and exit 1."""
    try:
        loaded = load_suite(directory)
    except GatekeeperError as exc:
        _fail(str(exc), 1)
    counts = {c: len(loaded.by_category(c)) for c in ("instruction", "json", "toolCalling")}
    typer.echo(_shown(f"{directory}: {len(loaded.tests)} tests valid ({counts}), hash {loaded.hash}"))


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
    names = _tool_names(tools_file) if tools_file else None
    profile_store = _store(settings.store)
    _load(profile_store)  # a store it cannot read would make every model "unmeasured"
    try:
        gk = Gatekeeper(settings.model_copy(update={"unknown_models": "fail_closed"}), store=profile_store)
    except GatekeeperError as exc:  # the config's suite is missing or invalid
        profile_store.close()
        _fail(str(exc))
        raise
    try:
        found = gk.lookup(model, effort)
    except RequestInvalid as exc:  # an effort outside the closed set
        _fail(f"--effort: {exc}")
        raise
    resolution = found or Resolution(settings.unknown_tier, "unmeasured", profile_key(model, effort))
    tier = resolution.tier
    rules = settings.tools
    if names is None:
        names = list(dict.fromkeys([*rules.required_tier, *rules.requires]))
    policy = PairPolicy(gk.policy, gk.requirements, gk.capability(resolution).bounds)
    out = _stdout()
    out.print(_bold(f"{model}@{effort or 'default'}: tier ", tier.value, f" ({resolution.source})"))
    table = Table()
    for column in ("tool", "requires", "visible"):
        table.add_column(column)
    for name in names:
        if tools_file is None and any(c in name for c in "*?["):
            # A pattern rule's row shows the rule's own figures: looked up as a tool name, its text
            # would not match itself (`tool[ab]*` matches `toola`, not `tool[ab]*`).
            required = rules.required_tier.get(name, rules.default_tier)
            minimums = {str(c): m for c, m in rules.requires.get(name, {}).items()}
            why = policy.why_not(tier, required, minimums)
        else:
            required, minimums = gk.policy.required_tier(name), gk.requirements.of(name)
            why = policy.why_hidden(tier, name)
        needs = required.value + (f"; {describe_minimums(minimums)}" if minimums else "")
        table.add_row(*map(_shown, (name, needs, "yes" if why is None else f"hidden: {why}")))
    default = rules.default_tier
    hidden = f"hidden: tier {tier.value} < {default.value}"
    table.add_row("(any other tool)", default.value, "yes" if tier.allows(default) else hidden)
    out.print(table)
    if settings.routing is not None and names:
        route = gk.route_resolved(resolution, names, measure=False)
        where = f"{route.pair} ({route.reason}, tier {route.resolution.tier.value})" if route.routed else "not routed"
        out.print(_shown(f"routing: a request offering all of these tools goes to {where}"))
    gk.close()
    profile_store.close()


def _tool_names(tools_file: Path) -> list[str]:
    """The names in a JSON array of OpenAI tools (`[{"type": "function", "function": {"name": ...}}]`)."""
    try:
        doc = json.loads(tools_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"{tools_file}: expected a JSON array of OpenAI tools: {exc}")
        raise
    if not isinstance(doc, list):
        _fail(f"{tools_file}: expected a JSON array of OpenAI tools, got {type(doc).__name__}")
    names: list[str] = []
    for i, tool in enumerate(doc):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict):
            _fail(f"{tools_file}: [{i}]: expected an object with 'function': {{'name': ...}}")
        elif not isinstance(name, str) or not name:
            _fail(f"{tools_file}: [{i}].function.name: expected a tool name (a string), got {name!r}")
        else:
            names.append(name)
    return names


def main() -> None:
    app()
