"""The notes agent of agent_via_proxy.py, gated in-process with ToolRegistry (no proxy).

The tools are typed functions registered on a ToolRegistry: their schemas come from the
signatures and docstrings, their required tiers from the config (or the decorator). Each turn
the agent lists the tools for its model's tier, and every tool call goes through
`registry.call`, which refuses a tool the model may not see and checks the arguments.

    python examples/agent_in_process.py --base-url http://127.0.0.1:8080/v1 --model my-model

--base-url is the model backend (the agent talks to it directly, and gatekeeper measures it
there); options can also come from OPENAI_BASE_URL, GATEKEEPER_MODEL, OPENAI_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import openai

from gatekeeper import Gatekeeper, ToolArgumentsInvalid, ToolNotAllowed, ToolRegistry, load_settings
from gatekeeper.observe.logs import configure as configure_logs

TASK = "Save a note called groceries that says 'milk, eggs', then tell me which notes exist."
CONFIG = Path(__file__).with_name("gatekeeper.yaml")


def notes_registry(gk: Gatekeeper, folder: Path) -> ToolRegistry:
    registry = ToolRegistry(gk)

    def path_of(name: str) -> Path:
        return folder / (Path(name).name + ".txt")  # no way out of the folder

    @registry.tool
    def list_notes() -> str:
        """List the names of all notes."""
        return json.dumps(sorted(p.stem for p in folder.glob("*.txt")))

    @registry.tool
    def read_note(name: str) -> str:
        """Read one note.

        Args:
            name: The note's name.
        """
        return path_of(name).read_text(encoding="utf-8") if path_of(name).exists() else f"no note called {name!r}"

    @registry.tool  # requires medium: the config's "write_*" rule
    def write_note(name: str, text: str) -> str:
        """Create or replace a note.

        Args:
            name: The note's name.
            text: The note's text.
        """
        path_of(name).write_text(text, encoding="utf-8")
        return f"saved note {name!r}"

    @registry.tool(required_tier="large")  # stated here, whatever the config says
    def delete_note(name: str) -> str:
        """Delete a note.

        Args:
            name: The note's name.
        """
        path_of(name).unlink(missing_ok=True)
        return f"deleted note {name!r}"

    return registry


def assistant_message(message: Any) -> dict:
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        turn["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return turn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", nargs="?", default=TASK)
    parser.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
        help="the model backend (default: %(default)s)",
    )
    parser.add_argument("--model", default=os.environ.get("GATEKEEPER_MODEL", "local-model"))
    parser.add_argument("--effort", default=None, help="reasoning effort to request (part of the profile key)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--config", type=Path, default=CONFIG, help="gatekeeper config (default: %(default)s)")
    parser.add_argument("--notes-dir", type=Path, default=None, help="where notes live (default: a temp folder)")
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args()

    configure_logs("warning", json=False)
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=1, timeout=120)
    try:
        client.models.list()  # is anything there? (before gatekeeper starts measuring it)
    except openai.APIConnectionError:
        print(
            f"error: nothing is listening at {args.base_url}; start your model server first "
            "(e.g. llama-server --port 8080) or pass --base-url",
            file=sys.stderr,
        )
        return 2
    except openai.APIStatusError:
        pass  # some servers have no /models; the chat calls below will tell
    settings = load_settings(args.config)
    # Measure the backend this agent actually talks to.
    upstream = settings.upstream.model_copy(update={"base_url": args.base_url.rstrip("/")})
    settings = settings.model_copy(update={"upstream": upstream})
    gk = Gatekeeper(settings)
    try:
        return run(args, gk, client)
    finally:
        gk.close()


def run(args: argparse.Namespace, gk: Gatekeeper, client: openai.OpenAI) -> int:
    folder = args.notes_dir or Path(tempfile.mkdtemp(prefix="notes-"))
    folder.mkdir(parents=True, exist_ok=True)
    registry = notes_registry(gk, folder)
    extra = {"reasoning_effort": args.effort} if args.effort else {}
    resolution = gk.resolve(args.model, args.effort)
    print(f"[gatekeeper] tier {resolution.tier.value} ({resolution.source})", file=sys.stderr)
    messages: list[dict] = [
        {"role": "system", "content": "You manage the user's notes with the tools you have. Be brief."},
        {"role": "user", "content": args.task},
    ]
    for _ in range(args.max_steps):
        # Listed every turn: a background measurement may have raised (or lowered) the tier.
        tools = registry.list_for_llm(args.model, effort=args.effort)
        try:
            completion = client.chat.completions.create(model=args.model, messages=messages, tools=tools, **extra)
        except openai.APIConnectionError:
            print(
                f"error: nothing is listening at {args.base_url}; start your model server first "
                "(e.g. llama-server --port 8080) or pass --base-url",
                file=sys.stderr,
            )
            return 2
        except openai.APIStatusError as exc:
            print(f"error: {args.base_url} answered {exc.status_code}: {exc.message}", file=sys.stderr)
            return 1
        message = completion.choices[0].message
        messages.append(assistant_message(message))
        if not message.tool_calls:
            print(message.content or "")
            return 0
        for call in message.tool_calls:
            try:
                result = str(registry.call(args.model, call.function.name, call.function.arguments, effort=args.effort))
            except (ToolNotAllowed, ToolArgumentsInvalid) as exc:
                result = f"error: {exc}"  # the model reads why, and can correct itself
            print(f"[tool] {call.function.name}({call.function.arguments}) -> {result}", file=sys.stderr)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print(f"error: no final answer after {args.max_steps} steps", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
