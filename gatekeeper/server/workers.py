"""`gatekeeper serve --workers N`: N processes on one port that behave as one gateway.

uvicorn's supervisor binds the port once and starts N worker processes that accept on it; each
builds its own `Gatekeeper` from the config file (`app`, the factory uvicorn imports). What makes
them one gateway is what they share, so N > 1 is refused unless the store shares it all:

| shared by the workers       | through                                                         |
| --------------------------- | --------------------------------------------------------------- |
| profiles, invalidations     | the store (Redis: one hash, pub/sub events to every mirror)      |
| one measurement per pair    | the store's leases (`lazy.lease_ttl_s`), backoff and caps        |
| drift demotions             | the store's demotion board (`{gatekeeper}:demotions`)            |
| drift evidence              | the same board: each worker publishes the calls it judged (fault and argument shape) |
| console sign-outs, wrong-key throttle | the store (`sessions`, `wrong_keys`)                   |
| config reload               | SIGHUP to the supervisor, or `POST /admin/reload` on any worker: every worker is replaced, one at a time, by one that read the config again |
| metrics                     | prometheus_client's multiprocess mode: `/metrics` on any worker sums them all |

A file store shares profiles and leases between processes but not demotions nor the wrong-key
throttle: refused with N > 1 (run one worker, or `store: redis://...`). Not shared: each worker's
local caches (its mirror of the profiles, the memos of tool lists).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from gatekeeper.config import Settings, load_settings
from gatekeeper.errors import ConfigError, SuiteError
from gatekeeper.observe import logs
from gatekeeper.store.schemes import scheme_of

CONFIG_ENV = "GATEKEEPER_WORKER_CONFIG"  # the config file every worker reads (set by `serve`)
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multiprocess mode
_READY_S = 60  # how long a replacement worker may take to start serving before a reload gives up

log = logs.get_logger(__name__)


def max_workers() -> int:
    """The most workers `serve` starts: 4 per core (more only queue for the cores, each taking a
    full process's memory and its own upstream pool)."""
    return 4 * (os.cpu_count() or 1)


def check_fleet(settings: Settings, workers: int) -> None:
    """Refuse N > 1 workers on a store that cannot make them one gateway (ConfigError says why)."""
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if workers > max_workers():
        raise ConfigError(
            f"--workers {workers}: at most {max_workers()} on this machine ({os.cpu_count() or 1} cores, 4 per core)"
        )
    scheme = scheme_of(str(settings.store))
    if workers > 1 and not (scheme is not None and scheme.shared and scheme.demotions is not None):
        raise ConfigError(
            f"--workers {workers}: store {str(settings.store)[:200]!r} is not shared by processes "
            "(drift demotions and the wrong-key throttle would stay per worker): use "
            "store: redis://host:port/db (docs/replicas.md), or one worker"
        )


def serve(config: Path, host: str, port: int, workers: int, settings: Settings | None = None) -> None:
    """Run `workers` processes on `host:port` under uvicorn's supervisor until SIGINT/SIGTERM."""
    import uvicorn

    from gatekeeper.server.http_server import HttpToolsOneWrite

    settings = settings or load_settings(config)

    os.environ[CONFIG_ENV] = str(config.resolve())
    # Each run its own directory: counters of an earlier run must not be summed into this one's.
    os.environ[METRICS_ENV] = metrics_dir = tempfile.mkdtemp(prefix="gatekeeper-metrics-")
    try:
        uvicorn.run(
            "gatekeeper.server.workers:app",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            http=HttpToolsOneWrite,  # as one worker
            # A worker that stops (a reload replaces it, SIGTERM) first finishes its requests, as
            # one worker does: the longest a request may wait for a measurement and then for the
            # upstream's silence (an answer streaming past that is cut).
            timeout_graceful_shutdown=int(settings.wait_timeout_s + settings.upstream.timeout_s) + 1,
            timeout_worker_healthcheck=_READY_S,
            proxy_headers=False,  # as one worker: forwarded headers are gatekeeper's to believe (server/throttle.py)
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def app() -> Starlette:
    """One worker's app (uvicorn's factory): a Gatekeeper from the shared config file, closed when
    the worker stops; `POST /admin/reload` replaces every worker (`reload_fleet`)."""
    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.server.app import create_app, settle_heap

    path = os.environ[CONFIG_ENV]
    settings = load_settings(path)
    logs.configure(settings.log_level)
    gk = Gatekeeper(settings, config_path=path)
    served = create_app(gk)
    served.state.reload = reload_fleet
    inner = served.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        try:
            async with inner(application):
                log.info("worker_started", pid=os.getpid())
                yield
        finally:
            gk.close()
            if os.environ.get(METRICS_ENV):  # its live gauges (an MCP server up) leave the fleet's values
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    served.router.lifespan_context = lifespan
    settle_heap()
    return served


def reload_fleet() -> None:
    """Check the config as a new worker would load it, its suite included (a bad one raises
    ConfigError and nothing changes), then ask the supervisor to replace every worker, one at a
    time (uvicorn's SIGHUP: each replacement reads the config and serves before the worker it
    replaces stops)."""
    from gatekeeper.suite.loader import load_suite

    path = os.environ[CONFIG_ENV]
    settings = load_settings(path)
    try:
        load_suite(settings.suite)
    except SuiteError as exc:
        raise ConfigError.in_file(path, f"suite: {exc}", "suite: cannot be loaded") from None
    os.kill(os.getppid(), signal.SIGHUP)
    log.info("fleet_reload_requested", supervisor=os.getppid())
