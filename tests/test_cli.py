"""The `gatekeeper` command: suite, profiles, tools, serve (as a real process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import openai
from conftest import ROOT, make_profile, seed_store, wait_serving
from scripted import ScriptedServer, free_port

from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import suite_hash


def gk(*args: str, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", os.environ | {"COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args], capture_output=True, text=True, timeout=60, **kwargs
    )


def test_suite_validate_accepts_the_default_suite():
    done = gk("suite", "validate", str(ROOT / "benchmarks"))
    assert done.returncode == 0, done.stderr
    assert suite_hash(ROOT / "benchmarks") in done.stdout


def test_suite_validate_names_the_bad_file_and_why(tmp_path):
    (tmp_path / "10_ok.json").write_text(
        json.dumps({"name": "a", "category": "json", "prompt": "p", "checks": [{"type": "json_valid"}]})
    )
    (tmp_path / "20_bad.json").write_text(
        json.dumps({"name": "b", "category": "json", "prompt": "p", "checks": [{"type": "telepathy"}]})
    )
    done = gk("suite", "validate", str(tmp_path))
    assert done.returncode == 1
    assert "20_bad.json" in done.stderr and "telepathy" in done.stderr


def test_suite_hash_prints_eight_hex_chars():
    done = gk("suite", "hash", str(ROOT / "benchmarks"))
    assert done.returncode == 0 and done.stdout.strip() == suite_hash(ROOT / "benchmarks")
    assert len(done.stdout.strip()) == 8


def test_suite_hash_of_a_folder_without_tests_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a test")
    done = gk("suite", "hash", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert "no *.json test files" in done.stderr


def test_profiles_json_prints_the_store(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    done = gk("profiles", "--store", str(store), "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["profiles"]["m@default"]["tier"] == "medium"
    table = gk("profiles", "--store", str(store))
    assert "m@default" in table.stdout and "medium" in table.stdout


def test_profiles_refuses_a_file_that_is_not_a_store_and_leaves_it_alone(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("root:x:0:0:root:/root:/bin/bash\n")
    done = gk("profiles", "--store", str(other))
    assert done.returncode == 1 and "not a usable profile store" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_tools_command_lists_what_a_model_gets(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    config = tmp_path / "gk.yaml"
    config.write_text(f"store: {store}\ntools:\n  required_tier:\n    execute_command: large\n    write_file: medium\n")
    done = gk("tools", "m", "--config", str(config))
    assert done.returncode == 0, done.stderr
    lines = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.count("│") >= 3}
    assert "hidden" in lines["execute_command"] and "yes" in lines["write_file"]


def test_serve_runs_a_real_proxy_process_and_stops_cleanly(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.SMALL, default_suite))
    with ScriptedServer() as upstream:
        config = tmp_path / "gk.yaml"
        config.write_text(
            f"upstream:\n  base_url: {upstream.base_url}\nstore: {store}\n"
            "tools:\n  required_tier:\n    execute_command: large\n"
        )
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_serving(f"http://127.0.0.1:{port}/healthz", proc, timeout_s=20)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
            raw = client.chat.completions.with_raw_response.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=[
                    {"type": "function", "function": {"name": n, "parameters": {}}}
                    for n in ("read_file", "execute_command")
                ],
            )
            assert raw.headers["x-gatekeeper-tier"] == "small"
            assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    request_lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    logged = next(line for line in request_lines if line.get("event") == "request")
    assert logged["tools_hidden"] == ["execute_command"] and logged["tier"] == "small"
    assert {"request_id", "model", "effort", "source", "upstream_status", "latency_ms"} <= set(logged)


def test_serve_rejects_a_bad_config_at_start(tmp_path):
    config = tmp_path / "gk.yaml"
    config.write_text("unknown_models: sometimes\n")
    done = gk("serve", "--config", str(config), env=os.environ | {"NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode != 0 and "unknown_models" in done.stderr


def test_bench_and_tools_refuse_an_effort_outside_the_closed_set(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\nupstream: {{base_url: "http://127.0.0.1:9/v1"}}\n')
    for args in (["bench", "m", "--effort", "low,e5"], ["tools", "m", "--effort", "e5"]):
        done = gk(*args, "--config", str(config))
        assert done.returncode != 0 and "--effort" in done.stderr and "'e5'" in done.stderr, done.stderr
    assert not (tmp_path / "p.json").exists()  # nothing was measured


# -- what the CLI prints is shown as written (issue 43): rich markup is never read from data --------

BRACKETED = "evil[/x]model[bold]"


def refusing_backend():
    """A backend that answers every call 401 (the bench fails at once, no retries)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def refuse(request):
        return JSONResponse({"error": {"message": "no key [/nope]", "type": "auth"}}, status_code=401)

    from scripted import ThreadedServer

    return ThreadedServer(Starlette(routes=[Route("/v1/{path:path}", refuse, methods=["GET", "POST"])]))


def test_bench_prints_a_bracketed_model_name_as_written_and_does_not_crash(tmp_path):
    with refusing_backend() as backend:
        done = gk(
            "bench",
            BRACKETED,
            "--effort",
            "default",
            "--base-url",
            f"http://127.0.0.1:{backend.port}/v1",
            "--store",
            str(tmp_path / "p.json"),
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr
    assert f"error: {BRACKETED}: backend failed" in done.stderr
    assert "no key [/nope]" in done.stderr  # the backend's own words, brackets and all


def test_the_redis_extra_hint_prints_the_extra_in_brackets(tmp_path):
    # The redis client hidden, as in an install without the extra.
    config = tmp_path / "gatekeeper.yaml"
    config.write_text('store: "redis://127.0.0.1:9/0"\nupstream: {base_url: "http://127.0.0.1:9/v1"}\n')
    for command in (["profiles", "--store", "redis://127.0.0.1:9/0"], ["serve", "--config", str(config)]):
        script = (
            f"import sys; sys.modules['redis'] = None; sys.argv = ['gatekeeper', *{command!r}]; "
            "from gatekeeper.cli import main; main()"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "error: store: a Redis store needs the redis extra: pip install 'gatekeeper[redis]'" in done.stderr, (
            command,
            done.stderr,
        )
        assert "Traceback" not in done.stderr


def test_tools_and_profiles_show_bracketed_names_paths_and_patterns_as_written(tmp_path, default_suite):
    folder = tmp_path / "[red]store[b]"
    folder.mkdir()
    store = folder / "p.json"
    seed_store(store, make_profile(BRACKETED, Tier.MEDIUM, default_suite))
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(
        f'store: "{store}"\nupstream: {{base_url: "http://127.0.0.1:9/v1"}}\n'
        'tools:\n  required_tier:\n    "write_[a-z]*": large\n    "[/i]odd": small\n'
    )
    done = gk("tools", BRACKETED, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert f"{BRACKETED}@default: tier medium (measured)" in done.stdout
    assert "write_[a-z]*" in done.stdout and "[/i]odd" in done.stdout
    listed = gk("profiles", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    assert f"{BRACKETED}@default" in listed.stdout
    missing = gk("suite", "validate", str(folder / "[/nope]"))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "[red]store[b]" in missing.stderr and "[/nope]" in missing.stderr, missing.stderr
