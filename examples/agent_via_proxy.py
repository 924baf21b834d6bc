"""An agent that reaches its model through the gatekeeper proxy.

The agent offers every tool it has; the proxy hides the ones the model's tier may not use, so
this code needs no gating of its own. Tool calls run here, locally, on a notes folder.

    gatekeeper serve --config examples/gatekeeper.yaml          # in another terminal
    python examples/agent_via_proxy.py --model my-model "Save a note called todo saying: buy milk"

Options can also come from the environment: GATEKEEPER_URL, GATEKEEPER_MODEL, OPENAI_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

TASK = "Save a note called groceries that says 'milk, eggs', then tell me which notes exist."


def notes_tools(folder: Path) -> tuple[list[dict], dict[str, Callable[..., str]]]:
    """The agent's tools: OpenAI schemas and the local functions that run them."""

    def path_of(name: str) -> Path:
        return folder / (Path(name).name + ".txt")  # no way out of the folder

    def list_notes() -> str:
        return json.dumps(sorted(p.stem for p in folder.glob("*.txt")))

    def read_note(name: str) -> str:
        return path_of(name).read_text(encoding="utf-8") if path_of(name).exists() else f"no note called {name!r}"

    def write_note(name: str, text: str) -> str:
        path_of(name).write_text(text, encoding="utf-8")
        return f"saved note {name!r}"

    def delete_note(name: str) -> str:
        path_of(name).unlink(missing_ok=True)
        return f"deleted note {name!r}"

    def schema(tool: str, description: str, /, **params: str) -> dict:
        properties = {p: {"type": "string", "description": d} for p, d in params.items()}
        return {
            "type": "function",
            "function": {
                "name": tool,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": list(params),
                    "additionalProperties": False,
                },
            },
        }

    tools = [
        schema("list_notes", "List the names of all notes."),
        schema("read_note", "Read one note.", name="The note's name."),
        schema("write_note", "Create or replace a note.", name="The note's name.", text="The note's text."),
        schema("delete_note", "Delete a note.", name="The note's name."),
    ]
    handlers = {"list_notes": list_notes, "read_note": read_note, "write_note": write_note, "delete_note": delete_note}
    return tools, handlers


def run_tool(handlers: dict[str, Callable[..., str]], name: str, arguments: str) -> str:
    if name not in handlers:
        return f"error: there is no tool called {name!r}"
    try:
        return handlers[name](**json.loads(arguments or "{}"))
    except (ValueError, TypeError) as exc:
        return f"error: bad arguments for {name}: {exc}"


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
        default=os.environ.get("GATEKEEPER_URL", "http://127.0.0.1:8000/v1"),
        help="the gatekeeper proxy (default: %(default)s)",
    )
    parser.add_argument("--model", default=os.environ.get("GATEKEEPER_MODEL", "local-model"))
    parser.add_argument("--effort", default=None, help="reasoning effort to request (part of the profile key)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--notes-dir", type=Path, default=None, help="where notes live (default: a temp folder)")
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args()

    folder = args.notes_dir or Path(tempfile.mkdtemp(prefix="notes-"))
    folder.mkdir(parents=True, exist_ok=True)
    tools, handlers = notes_tools(folder)
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=1, timeout=120)
    extra = {"reasoning_effort": args.effort} if args.effort else {}
    messages: list[dict] = [
        {"role": "system", "content": "You manage the user's notes with the tools you have. Be brief."},
        {"role": "user", "content": args.task},
    ]
    for step in range(1, args.max_steps + 1):
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=args.model, messages=messages, tools=tools, **extra
            )
        except openai.APIConnectionError:
            print(
                f"error: nothing is listening at {args.base_url}; start the proxy first:\n"
                "  gatekeeper serve --config examples/gatekeeper.yaml",
                file=sys.stderr,
            )
            return 2
        except openai.APIStatusError as exc:
            print(f"error: {args.base_url} answered {exc.status_code}: {exc.message}", file=sys.stderr)
            return 1
        if step == 1:
            print(
                f"[gatekeeper] tier {raw.headers.get('x-gatekeeper-tier', '?')} "
                f"({raw.headers.get('x-gatekeeper-profile', '?')})",
                file=sys.stderr,
            )
        message = raw.parse().choices[0].message
        messages.append(assistant_message(message))
        if not message.tool_calls:
            print(message.content or "")
            return 0
        for call in message.tool_calls:
            result = run_tool(handlers, call.function.name, call.function.arguments)
            print(f"[tool] {call.function.name}({call.function.arguments}) -> {result}", file=sys.stderr)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print(f"error: no final answer after {args.max_steps} steps", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
