"""Scripted model behaviours for the scripted OpenAI-compatible test server.

A behaviour is a function `(test, step_index) -> message`, where the message is
the assistant turn a model would give at that step of that test:
`{"content": str | None, "tool_calls": [{"name": str, "arguments": dict}]}`.

`perfect` answers every test of `benchmarks/`, of the seed suite and of
`tests/fixtures/seed_format_suite/` so that every check passes; the degraded
behaviours are `perfect` with one known, realistic flaw each.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from gatekeeper.measuring.budget import answer_key
from gatekeeper.suite.loader import BenchTest

Message = dict[str, Any]
Behaviour = Callable[[BenchTest, int], Message]


def _say(content: str) -> Message:
    return {"content": content, "tool_calls": []}


def _call(tool: str, /, **arguments: Any) -> Message:
    return {"content": None, "tool_calls": [{"name": tool, "arguments": arguments}]}


def _calls(*calls: tuple[str, dict[str, Any]]) -> Message:
    """Several structured calls in one answer (parallel calls)."""
    return {"content": None, "tool_calls": [{"name": name, "arguments": arguments} for name, arguments in calls]}


def _json(value: Any) -> Message:
    return _say(json.dumps(value, ensure_ascii=False))


# Test name -> the perfect message at each step.
PERFECT: dict[str, list[Message]] = {
    # --- benchmarks/ (the project's default suite) ---
    "sentence_seven_words": [_say("The old boat drifted down the river.")],
    "json_inventory_selection": [_json({"low_stock": ["washers", "nuts", "rivets"], "total": 550})],
    "tool_chain_distractor_ids": [
        _call("find_customer", name="Anna Berg"),
        _call("get_open_invoices", customer_id="CUS-40371"),
    ],
    # --- the seed suite (/work/shared/seed-suite) ---
    "frase_8_parole": [_say("Il cielo di questa sera sembra molto blu.")],
    "lista_vincoli_negativi": [_say("verde\ngiallo\nblu")],
    "json_prodotti": [
        _json(
            {
                "economici": [
                    {"nome": "matita", "prezzo": 1},
                    {"nome": "penna", "prezzo": 2},
                    {"nome": "quaderno", "prezzo": 5},
                ],
                "spesa_totale": 56,
            }
        )
    ],
    "json_annidato": [
        _json(
            {
                "host": "api.example.com",
                "port": 8080,
                "ssl": True,
                "endpoints": [
                    {"path": "/auth", "method": "POST", "requires_auth": False},
                    {"path": "/users", "method": "GET", "requires_auth": True},
                ],
            }
        )
    ],
    "catena_tool_distrattori": [
        _call("find_user", name="Maria Rossi"),
        _call("get_orders", user_id="USR-7431"),
    ],
    "trappola_astensione": [_say("Il tool get_weather restituisce le condizioni meteo di una città.")],
    "tool_write_append": [
        _call("write_file", path="server.log", content="[BOOT] Server avviato\n"),
        _call("write_file", path="server.log", content="[READY] In ascolto su porta 8080\n", append=True),
    ],
    # --- tests/fixtures/seed_format_suite ---
    "tre_righe_minuscole": [_say("l'onda arriva piano\nogni onda porta sale\nun'onda torna al largo")],
    "json_ricetta": [_json({"leggeri": ["lievito", "sale"], "peso_totale": 971, "senza_glutine": False})],
    "catena_meteo_risposta": [
        _call("get_weather", city="Torino"),
        _say("A Torino c'è pioggia, con 11 gradi."),
    ],
    "porta_intera": [_call("open_port", port=8443, tcp=False)],
}

_FRUITS = ["pear", "mango", "plum", "kiwi", "lemon", "grape", "apple", "cherry"]
_FILLER = ["quiet", "little", "boat", "drifted", "slowly", "toward", "the", "old"]

# Randomised tests (benchmarks/ files with `vars`): test name -> the perfect message at each
# step, computed from the instance's drawn values (`test.bindings`).
PERFECT_RANDOM: dict[str, list[Callable[[dict[str, Any]], Message]]] = {
    "fruit_list_negative_constraints": [
        lambda v: _say("\n".join([f for f in _FRUITS if f != v["banned"]][: v["n"]])),
    ],
    "lowercase_no_punctuation": [lambda v: _say(v["secret"])],
    "three_line_layout": [lambda v: _say(f"{v['top']}\n{v['n']}\n{v['bottom']}")],
    "one_word_answer": [lambda v: _say(v["b"])],
    "json_nested_extraction": [
        lambda v: _json(
            {
                "name": v["db"],
                "version": v["version"],
                "replicas": v["replicas"],
                "backups": True,
                "encryption": False,
                "users": [
                    {"name": v["admin"], "roles": ["read", "write"]},
                    {"name": v["reader"], "roles": ["read"]},
                ],
            }
        )
    ],
    "json_strict_types": [
        lambda v: _json(
            {"count": v["count"], "ratio": v["ratio"], "enabled": True, "label": v["label"], "tags": [], "parent": None}
        )
    ],
    "json_string_escaping": [
        lambda v: _json({"speaker": v["speaker"], "quote": f'She said "{v["said"]}" to the plan.'})
    ],
    "abstention_named_tool": [lambda v: _say("The delete_file tool permanently deletes the file at a given path.")],
    "write_then_append": [
        lambda v: _call("write_file", path=f"{v['file']}.txt", content=f"{v['one']} entry\n"),
        lambda v: _call("write_file", path=f"{v['file']}.txt", content=f"{v['two']} entry\n", append=True),
    ],
    "similar_tools_choice": [
        lambda v: _call("get_user_by_email", email=f"{v['user']}@example.com"),
        lambda v: _call("search_files", query=f"{v['setting']}_limit"),
    ],
    "argument_escaping": [lambda v: _call("save_note", title=v["title"], body=f'say "{v["word"]}"\n{v["last"]}')],
    "integer_argument": [lambda v: _call("scale_service", service=v["service"], replicas=v["n"])],
    "sentence_counted_random": [
        lambda v: _say(" ".join([v["first"], *_FILLER[: v["n"] - 2], v["last"]]) + "."),
    ],
    "made_up_word_repeated": [lambda v: _say(" ".join([v["w"]] * v["k"]))],
    "json_inventory_random": [
        lambda v: _json(
            {"low_stock": [v["low1"], v["low2"], v["low3"]], "total": v["s1"] + v["s2"] + v["s3"] + v["h1"] + v["h2"]}
        ),
    ],
    "tool_chain_random_ids": [
        lambda v: _call("find_customer", name=f"{v['first']} {v['last']}"),
        lambda v: _call("get_open_invoices", customer_id=f"CUS-{v['n']}"),
    ],
    "no_fitting_tool": [
        lambda v: _say(f"Sorry, I cannot do that: none of my tools can {v['task']} {v['city']}."),
    ],
    "missing_required_argument": [
        lambda v: _say(f"I can send it, but I need {v['name']}'s email address. What is it?"),
    ],
    "parallel_calls": [
        lambda v: _calls(("get_weather", {"city": v["city2"]}), ("get_weather", {"city": v["city1"]})),
    ],
    # Not a suite test: an instance of the tool-budget measurement (tests/scripted.py budget_test).
    "tool_budget": [lambda b: _budget_call(b["prompt"])],
}

# Test name -> {step index: the argument swapped for a near-identical distractor id}.
_DISTRACTORS: dict[str, dict[int, tuple[str, str]]] = {
    "tool_chain_distractor_ids": {1: ("customer_id", "CUS-40317")},
    "catena_tool_distrattori": {1: ("user_id", "USR-8817")},
}


def _budget_call(prompt: str) -> Message:
    key = answer_key(prompt)
    assert key is not None, prompt
    name, argument, value = key
    return {"content": None, "tool_calls": [{"name": name, "arguments": {argument: value}}]}


def perfect(test: BenchTest, step_index: int) -> Message:
    """The message a perfect model gives at `step_index` of `test` (a fresh copy)."""
    if test.name in PERFECT_RANDOM:
        return PERFECT_RANDOM[test.name][step_index](test.bindings)
    try:
        steps = PERFECT[test.name]
    except KeyError:
        raise KeyError(f"no scripted answer for test {test.name!r}: add it to tests/answers.py") from None
    return copy.deepcopy(steps[step_index])


def fenced_json(test: BenchTest, step_index: int) -> Message:
    """Perfect, but JSON answers come in a ```json fence after a sentence of prose."""
    message = perfect(test, step_index)
    if test.category == "json" and message["content"]:
        pretty = json.dumps(json.loads(message["content"]), indent=2, ensure_ascii=False)
        message["content"] = f"Here is the JSON you asked for:\n```json\n{pretty}\n```"
    return message


def no_tool_calls(test: BenchTest, step_index: int) -> Message:
    """Perfect text, but every tool call is only described in prose, never made."""
    message = perfect(test, step_index)
    if message["tool_calls"]:
        described = "; ".join(f"{c['name']}({json.dumps(c['arguments'])})" for c in message["tool_calls"])
        message = _say(f"To do this I would call {described}.")
    return message


def wrong_distractor(test: BenchTest, step_index: int) -> Message:
    """Perfect, except a chain test carries a near-identical distractor id into its second call."""
    message = perfect(test, step_index)
    swap = _DISTRACTORS.get(test.name, {}).get(step_index)
    if test.name == "tool_chain_random_ids" and step_index == 1:
        swap = ("customer_id", f"CUS-{test.bindings['n'] + 9}")
    if swap is not None:
        arg, distractor = swap
        message["tool_calls"][0]["arguments"][arg] = distractor
    return message


def string_integer(test: BenchTest, step_index: int) -> Message:
    """Perfect, except integer tool arguments arrive as strings (`"5"` instead of `5`)."""
    message = perfect(test, step_index)
    for call in message["tool_calls"]:
        arguments = call["arguments"]
        for key, value in arguments.items():
            if isinstance(value, int) and not isinstance(value, bool):
                arguments[key] = str(value)
    return message


def distracted(test: BenchTest, step_index: int) -> Message:
    """`wrong_distractor`, and where a test's answer is to call nothing though tools are offered
    (an abstention trap), a call of the first tool offered instead of an answer: the seed
    suite's toolCalling is then 0.65 exactly (the chain 0.625, the trap 0, weights 2/1/2)."""
    message = wrong_distractor(test, step_index)
    if (
        test.tools
        and not message["tool_calls"]
        and any(c.type == "tool_not_called" for c in test.all_steps[step_index].checks)
    ):
        function = test.tools[0]["function"]
        required = function.get("parameters", {}).get("required", [])
        return _call(function["name"], **dict.fromkeys(required, "Roma"))
    return message


BEHAVIOURS: dict[str, Behaviour] = {
    "perfect": perfect,
    "fenced_json": fenced_json,
    "no_tool_calls": no_tool_calls,
    "wrong_distractor": wrong_distractor,
    "string_integer": string_integer,
    "distracted": distracted,
}
