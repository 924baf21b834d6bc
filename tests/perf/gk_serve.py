"""`gatekeeper serve` on a chosen ASGI server, for the server trial of docs/results/perf_compare.md.

    python tests/perf/gk_serve.py --config gatekeeper.yaml --port 9003 [--server uvicorn|granian]

uvicorn runs exactly as `gatekeeper serve` runs it (uvloop, httptools, no access log); granian
runs the same app (one worker, uvloop, HTTP/1 only) built by `from_env` in its worker process.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def app(config: str):
    from gatekeeper.config import load_settings
    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.observe import logs
    from gatekeeper.server import app as served
    from gatekeeper.server.app import create_app

    settings = load_settings(Path(config))
    logs.configure(settings.log_level)
    application = create_app(Gatekeeper(settings))
    if hasattr(served, "settle_heap"):  # as `gatekeeper serve` does (a checkout from before has none)
        served.settle_heap()
    return application


def one_write():
    """`gatekeeper serve`'s protocol (server/http_server.py; a checkout from before has none)."""
    try:
        from gatekeeper.server.http_server import HttpToolsOneWrite
    except ImportError:
        return None
    return HttpToolsOneWrite


def from_env():
    return app(os.environ["GK_PERF_CONFIG"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn")
    args = parser.parse_args()
    if args.server == "granian":
        os.environ["GK_PERF_CONFIG"] = str(Path(args.config).resolve())
        granian = str(Path(sys.executable).parent / "granian")
        os.execv(
            granian,
            [
                granian,
                "--interface",
                "asgi",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(args.port),
                "--loop",
                "uvloop",
                "--http",
                "1",
                "--no-ws",
                "--workers",
                "1",
                "--log-level",
                "warning",
                "--working-dir",
                str(Path(__file__).parent),
                "gk_serve:from_env",
            ],
        )
    import uvicorn

    uvicorn.run(
        app(args.config),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http=one_write() or "httptools",
        access_log=False,
        log_level="warning",
        proxy_headers=False,  # as `gatekeeper serve` runs it
    )


if __name__ == "__main__":
    main()
