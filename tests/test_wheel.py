"""The wheel built from this checkout works in a fresh virtualenv, away from the checkout.

Offline by design: the wheel is built with the running environment's setuptools
(`--no-build-isolation`), and the fresh venv gets gatekeeper's declared dependencies, and only
those (the transitive closure of the wheel's `Requires-Dist`), linked from the running
environment's site-packages. A module the code imports but the wheel does not declare is
therefore missing there, as it would be for a user. The installed `gatekeeper` command then
measures a model behind a scripted upstream with the suite shipped inside the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import answers
import httpx
import pytest
from conftest import ROOT, make_profile, seed_store, tool, wait_serving
from packaging.requirements import Requirement
from scripted import ScriptedServer, SuiteScript, free_port

from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import suite_hash

# What a wheel build reads: everything else in the checkout (tests, .venv, build/) stays out.
SOURCES = ("pyproject.toml", "README.md", "gatekeeper", "adapters", "benchmarks")


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions `requirements` need, transitively (markers and extras applied)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(Requirement(r), frozenset({""})) for r in requirements]
    while todo:
        requirement, extras = todo.pop()
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in extras):
            continue
        dist = metadata.distribution(requirement.name)  # PackageNotFoundError: the env lacks a dependency
        assert dist.version in requirement.specifier or not requirement.specifier, (
            f"{requirement} is not met by the installed {dist.version}"
        )
        name = dist.metadata["Name"].lower()
        if name in found and not requirement.extras:
            continue
        found[name] = dist
        wanted = frozenset({""} | requirement.extras)
        todo += [(Requirement(r), wanted) for r in dist.requires or []]
    return list(found.values())


def _link_dependencies(requirements: list[str], into: Path) -> None:
    """Symlink each needed distribution's top-level files (packages, modules, .dist-info) into `into`."""
    into.mkdir()
    for dist in _closure(requirements):
        site = Path(str(dist.locate_file("")))
        for entry in {Path(str(f)).parts[0] for f in dist.files or []}:
            if entry == ".." or entry.startswith("__editable__") or (into / entry).exists():
                continue  # scripts outside site-packages; a namespace dir shared by two distributions
            if (site / entry).exists():
                (into / entry).symlink_to(site / entry)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("build")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        work / "dist",
        source,
        env=_clean_env(),
    )
    (built,) = (work / "dist").glob("gatekeeper-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel: Path) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    env = work / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", env)
    python = env / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    with zipfile.ZipFile(wheel) as archive:
        wheel_metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(wheel_metadata).decode().splitlines()
    requirements = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    _link_dependencies(requirements, work / "deps")
    # A site dir of its own (not a plain path), so the dependencies' own .pth files still run.
    (site / "gatekeeper-test-deps.pth").write_text(f"import site; site.addsitedir({str(work / 'deps')!r})\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        wheel,
        env=_clean_env(),
    )
    return env


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing pointing at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}


def test_the_wheel_holds_every_file_of_the_package(wheel):
    """Modules, the suite, the adapters and package data (the console's templates and assets)."""
    package = ROOT / "gatekeeper"
    expected = {
        "gatekeeper/" + (Path(folder) / name).relative_to(package).as_posix()
        for folder, _, files in os.walk(package, followlinks=True)  # into adapters/, benchmarks/
        for name in files
        if "__pycache__" not in folder and not name.endswith(".pyc")
    }
    assert "gatekeeper/benchmarks/10_instruction_sentence.json" in expected
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("gatekeeper/")}
        top_level = {n.split("/")[0] for n in archive.namelist() if ".dist-info/" not in n}
    assert sorted(expected - shipped) == []
    assert top_level == {"gatekeeper"}


def test_the_wheel_ships_the_suite_the_adapters_and_no_top_level_adapters(venv, tmp_path):
    probe = """
import importlib.util, json, sys
import gatekeeper, gatekeeper.adapters.openai_sdk, gatekeeper.adapters.litellm_hook
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite, suite_hash
print(json.dumps({
    "gatekeeper": gatekeeper.__file__,
    "adapters": gatekeeper.adapters.openai_sdk.__file__,
    "top_level_adapters": importlib.util.find_spec("adapters") is not None,
    "suite": str(DEFAULT_SUITE_DIR), "tests": len(load_suite(DEFAULT_SUITE_DIR).tests),
    "hash": suite_hash(DEFAULT_SUITE_DIR),
    "exports": sorted(n for n in gatekeeper.__all__ if not hasattr(gatekeeper, n)),
}))
"""
    found = json.loads(_run(venv / "bin" / "python", "-c", probe, cwd=tmp_path, env=_clean_env()))
    installed = str(venv.resolve())
    assert found["gatekeeper"].startswith(installed) and found["adapters"].startswith(installed)
    assert found["suite"].startswith(installed)
    assert not found["top_level_adapters"]
    assert found["tests"] == len(list((ROOT / "benchmarks").glob("*.json")))
    assert found["hash"] == suite_hash(ROOT / "benchmarks")
    assert found["exports"] == []
    assert (Path(found["gatekeeper"]).parent / "py.typed").is_file()


def test_the_installed_command_measures_a_model_with_the_shipped_suite(venv, tmp_path, default_suite):
    store = tmp_path / "models_profile.json"
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as upstream:
        out = _run(
            venv / "bin" / "gatekeeper",
            "bench",
            "scripted",
            "--base-url",
            upstream.base_url,
            "--api-key",
            "upstream-key",
            "--store",
            store,
            "--effort",
            "default",
            "--json",
            cwd=tmp_path,
            env=_clean_env(),
        )
    (result,) = json.loads(out)["results"]
    (profile,) = result["profiles"]
    assert profile["tier"] == "large" and profile["testsHash"] == suite_hash(ROOT / "benchmarks")
    assert json.loads(store.read_text())["profiles"]["scripted@default"]["tier"] == "large"
    assert upstream.requests, "the measurement went through the scripted upstream"


def test_the_installed_command_without_extras_helps_and_serves_the_proxy(venv, tmp_path, default_suite):
    """`pip install gatekeeper` alone: `--help` works and `serve` gates a request (no redis, mcp,
    otel or local model in this venv: only the wheel's own dependencies)."""
    missing = _run(
        venv / "bin" / "python",
        "-c",
        "import importlib.util as u; print([m for m in ('redis', 'mcp', 'opentelemetry', 'llama_cpp') if u.find_spec(m)])",
        env=_clean_env(),
    )
    assert missing.strip() == "[]"
    assert "serve" in _run(venv / "bin" / "gatekeeper", "--help", cwd=tmp_path, env=_clean_env())
    store = tmp_path / "models_profile.json"
    seed_store(store, make_profile("m", Tier.SMALL, default_suite))
    with ScriptedServer() as upstream:
        config = tmp_path / "gatekeeper.yaml"
        config.write_text(
            f"upstream:\n  base_url: {upstream.base_url}\nstore: {store}\n"
            "tools:\n  required_tier:\n    execute_command: large\n"
        )
        port = free_port()
        command = [venv / "bin" / "gatekeeper", "serve", "--config", config, "--port", str(port)]
        process = subprocess.Popen([str(c) for c in command], cwd=tmp_path, env=_clean_env(), stderr=subprocess.PIPE)
        try:
            wait_serving(f"http://127.0.0.1:{port}/healthz", process)
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={
                    "model": "m",
                    "messages": [{"role": "user", "content": "hi"}],
                    "tools": [tool("read_file"), tool("execute_command")],
                },
                timeout=30,
            )
        finally:
            process.terminate()
            process.communicate(timeout=20)
    assert answer.status_code == 200 and answer.headers["x-gatekeeper-tier"] == "small"
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]
