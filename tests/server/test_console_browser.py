"""The admin console in a real browser: Debian's headless Chromium driven by Playwright.

Set-up (scripts/setup.sh) installs the `chromium` package and the `playwright` Python package;
Playwright's own browser download is never used (`executable_path`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from answers import no_tool_calls, perfect, wrong_distractor
from browser import CHROMIUM, FLAGS
from conftest import running_proxy, settings_for
from scripted import ScriptedServer, SuiteScript, ThreadedServer
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, Suite

playwright = pytest.importorskip("playwright.sync_api", reason="run scripts/setup.sh (installs playwright)")
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright  # noqa: E402

KEY = "browser-test-key-5d1e"
WAIT_MS = 30_000  # generous: two shared cores; expect() polls and returns as soon as it holds
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup.sh test (installs Debian's chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        yield browser
        browser.close()


@dataclass
class Upstream:
    """Scripted answers per model; `hold` makes one model's calls wait after N answers."""

    script: SuiteScript
    behaviours: dict[str, Callable] = field(default_factory=dict)
    hold_model: str | None = None
    hold_after: int = 0
    answered: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    def respond(self, body: dict) -> dict:
        test, step = self.script.locate(body)
        if body["model"] == self.hold_model:
            self.answered += 1
            if self.answered > self.hold_after:
                # Blocks the scripted server itself: no later call is answered until released.
                self.release.wait(timeout=60)
        return self.behaviours[body["model"]](test, step)


@dataclass
class Console:
    url: str
    gk: Gatekeeper
    upstream: Upstream


@pytest.fixture
def console(store_path: Path) -> Iterator[Console]:
    """A proxy whose console knows `strong` (perfect: large) and `weak@low` (no tool calls: small)."""
    upstream = Upstream(SuiteScript(DEFAULT_SUITE_DIR), {"strong": perfect, "weak": no_tool_calls})
    with ScriptedServer(upstream.respond) as server:
        settings = settings_for(server.base_url, store_path, admin_key=KEY, pins={"weak@high": "medium"})
        with running_proxy(settings) as proxy:
            proxy.gk.measure("strong").result(timeout=30)
            proxy.gk.measure("weak", "low").result(timeout=30)
            yield Console(proxy.url, proxy.gk, upstream)
            upstream.release.set()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(WAIT_MS)
    yield context
    context.close()


def sign_in(page: Page, console: Console) -> None:
    page.goto(console.url + "/admin/")
    expect(page).to_have_url(console.url + "/admin/login")
    page.fill("#key", KEY)
    page.click("button[type=submit]")
    expect(page).to_have_url(console.url + "/admin/")


def row(page: Page, key: str):
    return page.locator(f'tr[data-key="{key}"]')


def test_signs_in_and_sees_the_measured_tiers_and_scores(context: BrowserContext, console: Console) -> None:
    page = context.new_page()
    sign_in(page, console)
    for key, tier in (("strong@default", "large"), ("weak@low", "small")):
        profile = console.gk.store.get(key)
        assert profile is not None and profile.tier.value == tier
        expect(row(page, key).locator("td.tier")).to_have_text(tier)
        expect(row(page, key).locator("td.source")).to_have_text("measured")
        expect(row(page, key).locator("td.valid")).to_have_text("valid")
        for category, score in profile.scores.items():
            expect(row(page, key).locator(f'.score[data-category="{category}"]')).to_have_text(f"{score:.2f}")
    expect(row(page, "weak@high").locator("td.source")).to_have_text("pinned")
    # The key is in no page, no URL; the session cookie is HttpOnly and SameSite=Strict.
    assert KEY not in page.content() and KEY not in page.url
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/admin"
    assert KEY not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # out of reach of any script


def test_the_model_page_shows_tests_sweep_tools_and_pins(
    context: BrowserContext, console: Console, default_suite: Suite
) -> None:
    page = context.new_page()
    sign_in(page, console)
    row(page, "weak@low").get_by_role("link", name="weak").click()
    expect(page).to_have_url(re.compile(r"/admin/model\?name=weak$"))
    expect(page.locator("#model-name")).to_have_text("weak")
    expect(page.locator("#sweep-chart")).to_be_visible()
    expect(page.locator("table.tests tbody tr")).to_have_count(len(default_suite.tests))
    expect(page.locator('tr[data-test="integer_argument"] td[data-effort="low"]')).to_have_text("0.00")
    expect(page.locator("code.pin")).to_have_text("weak@high: medium")
    # weak@low is small: it does not see execute_command (large) nor write_* (medium) ...
    tools = page.locator("table.tools")
    # (a hidden cell says which requirement hides the tool)
    expect(tools.locator('tr[data-rule="execute_command"] td').nth(2)).to_have_text("hidden tier small < large")
    expect(tools.locator('tr[data-rule="write_*"] td').nth(2)).to_have_text("hidden tier small < medium")
    expect(tools.locator('tr[data-rule="any other tool"] td').nth(2)).to_have_text("sees")
    # ... and weak@high, pinned to medium, sees write_*.
    expect(tools.locator('tr[data-rule="write_*"] td').nth(3)).to_have_text("sees")


def test_a_remeasurement_shows_live_progress_and_its_result(
    context: BrowserContext, console: Console, default_suite: Suite
) -> None:
    page = context.new_page()
    sign_in(page, console)
    expect(row(page, "strong@default").locator("td.tier")).to_have_text("large")
    # The model got worse (a distractor id in its chains), and its answers stop after 5 calls.
    upstream = console.upstream
    upstream.behaviours["strong"] = wrong_distractor
    upstream.hold_model, upstream.hold_after, upstream.answered = "strong", 5, 0
    # The progress counts against the most calls the measurement may make: every sample allowed.
    calls = sum(len(t.all_steps) for t in default_suite.tests) * console.gk.settings.bench.samples
    row(page, "strong@default").get_by_role("button", name="Re-measure").click()
    status = row(page, "strong@default").locator(".progress-text")
    expect(status).to_have_text(f"measuring: 5 / {calls} calls")
    upstream.release.set()
    # It finishes: the page reloads itself with the new profile.
    expect(row(page, "strong@default").locator("td.tier")).to_have_text("medium")
    expect(row(page, "strong@default").locator("td.source")).to_have_text("measured")
    assert console.gk.store.get("strong@default").tier.value == "medium"


def test_a_failed_remeasurement_says_why_and_keeps_the_profile(context: BrowserContext, console: Console) -> None:
    page = context.new_page()
    sign_in(page, console)
    console.upstream.behaviours["strong"] = lambda test, step: {"status": 500, "error": "upstream exploded"}
    row(page, "strong@default").get_by_role("button", name="Re-measure").click()
    status = row(page, "strong@default").locator(".status.failed")
    expect(status).to_contain_text("measurement failed")
    expect(status).to_contain_text("500")
    expect(row(page, "strong@default").locator("td.tier")).to_have_text("large")
    assert console.gk.store.get("strong@default").tier.value == "large"


def test_invalidating_a_profile_removes_it(context: BrowserContext, console: Console) -> None:
    page = context.new_page()
    sign_in(page, console)
    expect(row(page, "weak@low")).to_have_count(1)
    row(page, "weak@low").get_by_role("button", name="Invalidate").click()
    expect(row(page, "weak@low")).to_have_count(0)
    assert console.gk.store.get("weak@low") is None
    expect(row(page, "strong@default")).to_have_count(1)


def test_without_the_key_everything_is_refused(context: BrowserContext, console: Console) -> None:
    page = context.new_page()
    for path in ("/admin/", "/admin/model?name=strong"):
        page.goto(console.url + path)
        expect(page).to_have_url(console.url + "/admin/login")
        assert "strong" not in page.content()
    for path in ("/admin/progress.json", "/admin/assets/console.js"):
        assert page.goto(console.url + path).status == 401
    status = page.evaluate(
        """async (url) => (await fetch(url, {method: "POST",
        headers: {"content-type": "application/x-www-form-urlencoded"}, body: "key=strong%40default"})).status""",
        console.url + "/admin/actions/invalidate",
    )
    assert status == 401
    page.goto(console.url + "/admin/login")
    page.fill("#key", "a-wrong-key")
    page.click("button[type=submit]")
    expect(page.locator("#signin-error")).to_have_text("Wrong admin key.")
    assert context.cookies() == []
    assert console.gk.store.get("strong@default") is not None


def _attacker(target: str) -> Starlette:
    """A page on another origin that posts the console's invalidate form as soon as it loads."""
    html = f"""<!doctype html><form id="f" method="post" action="{target}/admin/actions/invalidate">
    <input name="key" value="strong@default"><input name="csrf" value="guessed"></form>
    <script>document.getElementById("f").submit()</script>"""
    return Starlette(routes=[Route("/", lambda request: HTMLResponse(html))])


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])  # another site; same site, another port
def test_a_signed_in_admin_visiting_another_origin_cannot_be_made_to_act(
    context: BrowserContext, console: Console, host: str
) -> None:
    page = context.new_page()
    sign_in(page, console)
    with ThreadedServer(_attacker(console.url)) as evil:
        with page.expect_response(lambda r: r.url.endswith("/admin/actions/invalidate")) as answer:
            page.goto(f"http://{host}:{evil.port}/")
        # Another site: the Strict cookie is not sent (401). Same site: Origin and token fail (403).
        assert answer.value.status == (401 if host == "localhost" else 403)
    assert console.gk.store.get("strong@default") is not None
