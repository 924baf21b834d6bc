"""Every fenced snippet of the README and the documentation site (docs/, not docs/notes/), run or
checked against the real thing, and the generated reference pages kept fresh.

By the fence's language: `python` is executed (http://127.0.0.1:8000 is a real proxy in front of a
scripted upstream; the working directory holds a `gatekeeper.yaml`; a `print(...)  # text` line
must print that text); `yaml` is loaded by the real config loader; `json` is parsed, and a suite
test is loaded by the real suite loader; `bash` lines of the `gatekeeper` CLI are parsed by its
typer app (and the offline commands run), `curl` lines are matched against the proxy's routes;
`text` is a CLI synopsis checked against the CLI's options, or a tree checked against the files;
`http` is a recorded wire capture.
A snippet another test runs says so (`<!-- docs: run-by tests/FILE -->`, and that test reads the
page); the few that cannot run here say why (`<!-- docs: not-run (...) -->`) and are listed below.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import io
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
import typer.main
import yaml
from conftest import ROOT, running_proxy, settings_for
from scripted import ScriptedServer
from starlette.routing import Match
from typer.testing import CliRunner

from gatekeeper import Gatekeeper, Settings, load_settings, load_suite
from gatekeeper.cli import app as cli_app
from gatekeeper.server.app import create_app

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts)]
FENCE = re.compile(r"^( *)```(\w*)\s*$")
MARK = re.compile(r"<!-- docs: (not-run|run-by) ?(.*?) -->")
# The snippets that run nowhere, each for a reason it states; keep this short.
NOT_RUN = {
    ("README.md", "./demo.sh"),  # installs and runs the whole project: what CI runs
    ("docs/mcp.md", "# Claude Code"),  # the claude and codex CLIs' own commands, with their accounts
    ("docs/mcp.md", "from agents import Agent, Runner"),  # imports checked; tests/mcp/test_agents_through_gateway.py
    ("docs/local-model-notes.md", ". .venv/bin/activate"),  # a probe of the local model: minutes, a report
}
OFFLINE_COMMANDS = {"tools", "profiles", "suite"}


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    lang: str
    code: str
    mark: tuple[str, str] | None

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def read_snippets(path: Path) -> list[Snippet]:
    found: list[Snippet] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        mark = MARK.search(before)
        found.append(Snippet(str(path.relative_to(ROOT)), i + 1, lang, code, mark.groups() if mark else None))
        i = end + 1
    return found


SNIPPETS = [snippet for page in PAGES for snippet in read_snippets(page)]


def of(lang: str, mark: str | None = None) -> list[Snippet]:
    return [s for s in SNIPPETS if s.lang == lang and (s.mark or (None,))[0] == mark]


# -- marks ---------------------------------------------------------------------------------


def test_every_snippet_has_a_language():
    assert [str(s) for s in SNIPPETS if not s.lang] == []


def test_the_snippets_not_run_are_few_and_listed():
    marked = [(s.page, s.code) for s in SNIPPETS if s.mark and s.mark[0] == "not-run"]
    assert len(marked) == len(NOT_RUN)
    for page, start in NOT_RUN:
        assert any(p == page and code.startswith(start) for p, code in marked), f"{page}: {start!r} is not marked"
    assert all(s.mark[1].startswith("(") for s in SNIPPETS if s.mark and s.mark[0] == "not-run"), "say why"


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.mark and s.mark[0] == "run-by"], ids=str)
def test_a_snippet_run_elsewhere_is_read_by_that_test(snippet):
    test_file = ROOT / snippet.mark[1]
    assert test_file.is_file(), f"{snippet}: no test {snippet.mark[1]}"
    source = test_file.read_text()
    assert snippet.page in source, f"{snippet.mark[1]} does not read {snippet.page}"
    first = snippet.code.splitlines()[0]
    assert first in source, f"{snippet.mark[1]} does not look for the snippet starting {first!r}"


def test_python_not_run_still_compiles_and_imports():
    for snippet in of("python", "not-run"):
        # a top-level `async with`, as a notebook runs it: compiled with that flag, then its imports
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(snippet.code, str(snippet), "exec", flags=flags)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                assert all(hasattr(module, alias.name) for alias in node.names), f"{snippet}: {node.module}"


# -- python --------------------------------------------------------------------------------

CONFIG = """\
upstream: {{base_url: "{upstream}"}}
store: {store}
pins: {{"my-model": medium, "some-model": large}}
tools:
  required_tier: {{execute_command: large, "write_*": medium}}
"""


def expected_prints(code: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^print\(.*\)  # (.+)$", code, re.M)]


@pytest.mark.parametrize("snippet", of("python"), ids=str)
def test_python_snippet_runs(snippet, tmp_path, monkeypatch):
    with ScriptedServer() as upstream:
        store = tmp_path / "models_profile.json"
        (tmp_path / "gatekeeper.yaml").write_text(CONFIG.format(upstream=upstream.base_url, store=store))
        settings = settings_for(upstream.base_url, store, lazy={"allow": []})  # nothing measured behind it
        with running_proxy(settings) as proxy:
            monkeypatch.chdir(tmp_path)
            code = snippet.code.replace("http://127.0.0.1:8000", proxy.url)
            compiled = compile(code, str(snippet), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                result = eval(compiled, {"__name__": "__docs__"})
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
        offered = [t["function"]["name"] for body in upstream.requests for t in body.get("tools", [])]
    assert "execute_command" not in offered, f"{snippet}: a hidden tool reached the upstream"
    printed = out.getvalue().splitlines()
    for want in expected_prints(snippet.code):
        assert want in printed, f"{snippet}: printed {printed}, the snippet says {want!r}"


# -- yaml ----------------------------------------------------------------------------------


@pytest.mark.parametrize("snippet", of("yaml"), ids=str)
def test_yaml_snippet_loads(snippet, tmp_path, monkeypatch):
    raw = yaml.safe_load(snippet.code)
    if "litellm_settings" in raw:  # LiteLLM's own config: its callback must be ours, importable
        module, _, name = raw["litellm_settings"]["callbacks"].rpartition(".")
        assert hasattr(importlib.import_module(module), name)
        return
    for var in re.findall(r"\$\{(\w+)\}", snippet.code):
        monkeypatch.setenv(var, "a-value-of-32-characters-0123456")
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(snippet.code)
    assert isinstance(load_settings(path), Settings)


# -- json ----------------------------------------------------------------------------------


@pytest.mark.parametrize("snippet", of("json"), ids=str)
def test_json_snippet_parses_and_a_suite_test_loads(snippet, tmp_path):
    data = json.loads(snippet.code)
    if "checks" in data or "steps" in data:
        (tmp_path / "01_test.json").write_text(snippet.code)
        assert [t.name for t in load_suite(tmp_path).tests] == [data["name"]]


# -- bash and text: the CLI and the admin API -----------------------------------------------

ROOT_COMMAND = typer.main.get_command(cli_app)


def resolve(args: list[str]) -> tuple[Any, list[str], list[str]]:
    """The CLI command `args` names, its path, and the arguments left for it (typer's own click
    objects, read by duck typing: typer ships its copy of click)."""
    command, path = ROOT_COMMAND, []
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        sub = command.get_command(command.context_class(command), args[0])
        assert sub is not None, f"no command {' '.join([*path, args[0]])}"
        command, path, args = sub, [*path, args[0]], args[1:]
    return command, path, args


def shell_lines(code: str) -> list[str]:
    joined = code.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """A CLI command run in process configures structlog to print to the stream pytest captures
    for this test and closes afterwards: later tests must not log into that closed file."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.parametrize("snippet", of("bash"), ids=str)
def test_shell_snippet_matches_the_cli_and_the_routes(snippet, tmp_path):
    gk = Gatekeeper(Settings(admin_key="k" * 32, store=tmp_path / "store.json"))
    try:
        routes = create_app(gk).routes
    finally:
        gk.close()
    for line in shell_lines(snippet.code):
        words = shlex.split(line)
        if words[0] == "gatekeeper":
            command, path, args = resolve(words[1:])
            command.make_context(" ".join(["gatekeeper", *path]), list(args))  # raises on a bad option
            if path[0] in OFFLINE_COMMANDS:
                result = CliRunner().invoke(cli_app, words[1:], catch_exceptions=False)
                assert result.exit_code == 0, f"{snippet}: {line}: {result.output}"
        elif words[0] == "curl":
            method = words[words.index("-X") + 1] if "-X" in words else "GET"
            url = next(w for w in words[1:] if w.startswith(("localhost", "http")))
            scope = {"type": "http", "path": "/" + url.split("/", 1)[1], "method": method}
            assert any(route.matches(scope)[0] == Match.FULL for route in routes), f"{snippet}: {line}"
        else:
            pytest.fail(f"{snippet}: {line!r} is neither the CLI nor curl: run it here or mark it")


def synopsis_commands(code: str) -> list[str]:
    return [line for line in code.replace("\n ", " ").splitlines() if line.startswith("gatekeeper ")]


@pytest.mark.parametrize("snippet", of("text"), ids=str)
def test_text_snippet_is_true(snippet):
    lines = synopsis_commands(re.sub(r"\n\s+\[", " [", snippet.code))
    if lines:  # a synopsis: every command and option it names exists
        for line in lines:
            words = line.split("#")[0].split()
            command, path, _ = resolve([w for w in words[1:] if re.fullmatch(r"[a-z]+", w)][:2])
            spelled = {opt for param in command.params for opt in param.opts}
            for option in re.findall(r"--[a-z-]+", line.split("#")[0]):
                assert option in spelled, f"{snippet}: gatekeeper {' '.join(path)} has no {option}"
        return
    top = [line.split()[0] for line in snippet.code.splitlines() if line and not line[0].isspace()]
    for entry in (part for name in top for part in name.split(",") if part):
        assert (ROOT / entry).exists(), f"{snippet}: {entry} is not in the repository"


@pytest.mark.parametrize("snippet", of("http"), ids=str)
def test_http_snippet_is_a_recorded_exchange(snippet):
    """A wire capture (what a server sent) is output, not code: it is an HTTP message as sent."""
    assert re.match(r"HTTP/1\.1 \d{3} ", snippet.code) or re.match(r"(GET|POST|DELETE) /", snippet.code)


# -- the generated reference pages ---------------------------------------------------------


def test_the_reference_pages_are_what_the_code_generates():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    gen_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_docs)
    for path, text in gen_docs.pages().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run python scripts/gen_docs.py"


def test_the_readme_stays_short():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    assert not re.search(r"gatekeeper/\w+\.py|gatekeeper/\w+/", readme), "internal module names belong in docs/"


def test_every_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES[1:]:
        relative = page.relative_to(DOCS).as_posix()
        assert relative in nav, f"{relative} is not in mkdocs.yml's nav"
    assert "notes/" in nav.split("exclude_docs:")[1].split("\n")[1], "docs/notes/ must stay out of the build"
