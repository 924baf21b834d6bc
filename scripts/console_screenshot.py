#!/usr/bin/env python
"""Screenshot the admin console on a profile store (how docs/console.png is made).

    .venv/bin/python scripts/console_screenshot.py --store models_profile.json \
        --model gemma-3-270m --out docs/console.png

Serves the console over the given store (no upstream is called: nothing is measured), signs in
with a one-off key in Debian's headless Chromium and saves the model's page (or, without
--model, the list of profiles).
"""

from __future__ import annotations

import argparse
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import uvicorn
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # how the tests start Chromium
from browser import CHROMIUM, FLAGS

from gatekeeper.config import Settings, load_settings
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.server.app import create_app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, type=Path, help="the profile store to show")
    parser.add_argument("--config", type=Path, help="a config for the tool policy, pins and suite")
    parser.add_argument("--model", help="the model whose page to take (default: the list)")
    parser.add_argument("--out", type=Path, default=Path("docs/console.png"))
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args()

    key = secrets.token_urlsafe(16)
    base = load_settings(args.config) if args.config else Settings()
    settings = base.model_copy(update={"store": str(args.store), "admin_key": key})
    gk = Gatekeeper(settings)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(gk), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/admin/"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": args.width, "height": 800}, device_scale_factor=1)
            page.goto(url)
            page.fill("#key", key)
            page.click("button[type=submit]")
            page.wait_for_url(url)
            if args.model:
                page.goto(f"{url}model?name={quote(args.model, safe='')}")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    print(f"saved {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
