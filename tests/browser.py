"""Debian's headless Chromium as the tests (and scripts/console_screenshot.py) start it: these
flags keep it off this machine's closed network (no background fetches, no component updates)."""

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
