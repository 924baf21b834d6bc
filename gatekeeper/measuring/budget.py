"""Measuring a pair's tool budget: how many offered tools it chooses among reliably (issue 41).

The suite's own tests offer two to four tools; agents offer dozens, and choosing among many
similar ones is where models break. This measures, for one `model@effort` whose tier is already
certified, the accuracy of choosing the right tool among N offered, at each N of a ladder (4, 8,
16, 32, 64), and stores the largest N certified (`toolBudget`).

An instance (`instance`): N tools drawn from a pool of realistic, similar-sounding tools
(`POOL`: 16 business objects x 5 actions, so `get_invoice_details` sits beside
`get_invoice_history`, `get_order_details` ...), the siblings of the right tool drawn first so a
small N is as confusable as a large one, shuffled so the right one can be anywhere; one request
that only the right tool serves, naming the object's id. It passes when the first call is the
right tool with that id as its argument, as a structured call (a call written as text fails).

The certificate, per rung: each instance is one observation `Z_i` (1: failed), independent given
the model (fresh instance, own conversation); the lower bound of `confidence.estimate` with
predictable bets (each bet fixed before its observation: Kelly's fraction for the failure rate seen
so far) at level `risk`, valid at any stopping time. A rung stops once its bound reaches the
threshold (certified: next rung), its upper bound falls below it (not certified: the measurement
ends) or after `max_calls` (not certified). The threshold is the certified tier's toolCalling
threshold (`large`: 0.9, `medium`: 0.6 by default); a `small` pair is measured at the lowest
toolCalling threshold any tier sets (0.6), the least a shown tool list should be chosen from.

The guarantee: P(stored budget > true budget) <= `risk`, the true budget being the largest rung up
to which every rung's true accuracy reaches the threshold (1 when the first does not). Without
splitting `risk` across rungs: rungs are tested in a fixed order and the measurement stops at the
first not certified, so the stored budget is too high only if the first rung whose accuracy is
truly below the threshold (a fixed rung, given the model) is certified, which its bound allows
with probability at most `risk` (a fixed-sequence test). The runs are fresh, after the tier was
decided, so the argument holds given whichever tier (and threshold) was certified.
`scripts/simulate_budget.py` checks it against models whose accuracy per N is known.

Cost: a rung of a model that never errs is about log(1/risk) / log(1 + 0.95 m / (1 - m)) calls
(m = 1 - threshold): 30 at 0.9, 7 at 0.6 (risk 0.05); the measurement stops at the first rung
not certified, so a weak model pays for about one rung. Prompts grow with N (64 schemas are about
5k tokens).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from structlog.contextvars import bound_contextvars

from gatekeeper.config import Settings
from gatekeeper.measuring.backends import Backend, together
from gatekeeper.measuring.confidence import Estimate, estimate
from gatekeeper.observe import logs
from gatekeeper.rules.tiers import Thresholds, Tier
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile
from gatekeeper.suite.loader import ANSWER_TOKENS
from gatekeeper.types import Answer

log = logs.get_logger(__name__)

LADDER: tuple[int, ...] = (4, 8, 16, 32, 64)
# Per rung. At 0.9 a rung of a model erring one time in 100 is certified after about 42 calls on
# average, one erring 3 times in 100 after about 82 (Kelly growth): scripts/simulate_budget.py.
MAX_CALLS = 100
BATCH = 4  # instances asked at once (their bets are fixed before the batch)
_MAX_BET = 0.95

# The pool: every action on every object, one required id argument each.
OBJECTS: tuple[tuple[str, str], ...] = (
    ("customer", "CUS"),
    ("order", "ORD"),
    ("invoice", "INV"),
    ("ticket", "TCK"),
    ("shipment", "SHP"),
    ("subscription", "SUB"),
    ("employee", "EMP"),
    ("product", "PRD"),
    ("refund", "RFD"),
    ("warehouse", "WHS"),
    ("vendor", "VND"),
    ("contract", "CTR"),
    ("payment", "PAY"),
    ("account", "ACC"),
    ("device", "DEV"),
    ("project", "PRJ"),
)
# action -> (tool name template, description, request template)
ACTIONS: dict[str, tuple[str, str, str]] = {
    "details": (
        "get_{o}_details",
        "Return the current details of one {o} (status, owner, amounts, dates).",
        "What is the current status of {o} {id}?",
    ),
    "history": (
        "get_{o}_history",
        "Return the change log of one {o}: every past modification with its author and date.",
        "Who changed {o} {id} in the past, and when? I need its full change log.",
    ),
    "archive": (
        "archive_{o}",
        "Move one {o} to the archive; it disappears from active lists but can be restored.",
        "Please archive {o} {id}, we are done with it.",
    ),
    "export": (
        "export_{o}_pdf",
        "Render one {o} as a PDF document and return a download link.",
        "I need {o} {id} as a PDF to send to the auditors.",
    ),
    "notify": (
        "notify_{o}_owner",
        "Send a notification message to the person responsible for one {o}.",
        "Let the person responsible for {o} {id} know that it needs their attention.",
    ),
}


@dataclass(frozen=True)
class PoolTool:
    obj: str
    prefix: str
    action: str

    @property
    def name(self) -> str:
        return ACTIONS[self.action][0].format(o=self.obj)

    @property
    def argument(self) -> str:
        return f"{self.obj}_id"

    def schema(self) -> dict[str, Any]:
        description = ACTIONS[self.action][1].format(o=self.obj)
        parameters = {
            "type": "object",
            "properties": {
                self.argument: {"type": "string", "description": f"The {self.obj}'s id, e.g. {self.prefix}-1234"}
            },
            "required": [self.argument],
        }
        return {
            "type": "function",
            "function": {"name": self.name, "description": description, "parameters": parameters},
        }


POOL: tuple[PoolTool, ...] = tuple(PoolTool(o, p, a) for o, p in OBJECTS for a in ACTIONS)


@dataclass(frozen=True)
class Instance:
    """One question: the tools offered (in order), the request, the right tool and its id."""

    tools: list[dict[str, Any]]
    prompt: str
    target: str
    argument: str
    value: str


def instance(n: int, rng: random.Random) -> Instance:
    """N tools of the pool with the right one anywhere; its siblings (same object or same action)
    first among the others, so that every N is made of the most confusable neighbours."""
    if not 2 <= n <= len(POOL):
        raise ValueError(f"an instance offers 2 to {len(POOL)} tools, not {n}")
    target = rng.choice(POOL)
    siblings = [t for t in POOL if t != target and (t.obj == target.obj or t.action == target.action)]
    others = [t for t in POOL if t != target and t not in siblings]
    rng.shuffle(siblings)
    rng.shuffle(others)
    chosen = [target, *(siblings + others)[: n - 1]]
    rng.shuffle(chosen)
    value = f"{target.prefix}-{rng.randint(1000, 9999)}"
    prompt = ACTIONS[target.action][2].format(o=target.obj, id=value)
    return Instance([t.schema() for t in chosen], prompt, target.name, target.argument, value)


_ID = re.compile(r"\b[A-Z]{3}-\d{4}\b")


def answer_key(prompt: str) -> tuple[str, str, str] | None:
    """The right call for an instance's request: (tool, argument, id); None for any other text.
    For scripted models and simulations, which must answer without being told."""
    found = _ID.search(prompt)
    if found is None:
        return None
    for tool in POOL:
        if ACTIONS[tool.action][2].format(o=tool.obj, id=found.group(0)) == prompt:
            return tool.name, tool.argument, found.group(0)
    return None


# A call written as text: `<tool_call>{...}`, or a JSON object naming a tool, in the content.
_TEXT_CALL = re.compile(r"<tool_call>|\{\s*\"(?:name|function|tool)\"\s*:")


def failure(case: Instance, answer: Answer) -> str | None:
    """Why an answer fails its instance (None: it passes), in the kinds that look like success
    to an agent that only checks for a 200: `text_call` (a call written in the content where
    tools were offered), `not_offered` (a tool the request did not offer), `bad_arguments`
    (arguments that do not parse, or without the request's id); and `wrong_tool` (another offered
    tool), `no_call`; and `cut` (an answer past its call's bound: unfinished, a failed answer
    whatever call it holds, as in the suite's scoring)."""
    if answer.cut:
        return "cut"
    if not answer.tool_calls:
        return "text_call" if _TEXT_CALL.search(answer.content) else "no_call"
    call = answer.tool_calls[0]
    if call.name not in {t["function"]["name"] for t in case.tools}:
        return "not_offered"
    if call.name != case.target:
        return "wrong_tool"
    try:
        arguments = json.loads(call.arguments)
    except (ValueError, TypeError):
        return "bad_arguments"
    if not isinstance(arguments, dict) or arguments.get(case.argument) != case.value:
        return "bad_arguments"
    return None


def passed(case: Instance, answer: Answer) -> bool:
    """The first structured call is the right tool, with the request's id as its argument."""
    return failure(case, answer) is None


def threshold_for(tier: Tier, thresholds: Thresholds) -> float:
    """The toolCalling accuracy a rung must be certified at: the tier's, or for `small` the lowest
    any tier sets (a small pair still deserves a list it chooses from reliably)."""
    found = [t.get("toolCalling") for t in (thresholds.medium, thresholds.large)]
    floor = min((f for f in found if f is not None), default=0.6)
    needs = {Tier.LARGE: thresholds.large, Tier.MEDIUM: thresholds.medium}.get(tier, {})
    return needs.get("toolCalling", floor)


def kelly_bet(failures: Sequence[float], threshold: float) -> float:
    """The next observation's bet, from the ones before it only (predictable): Kelly's fraction
    1 - p/m for the failure rate p seen so far (one tenth of a failure as a prior), against the
    failure rate m = 1 - threshold the bound must rule out; in [0, 0.95]."""
    m = 1 - threshold
    p = (sum(failures) + 0.1) / (len(failures) + 1)
    return min(max(1 - p / m, 0.0), _MAX_BET) if m > 0 else 0.0


@dataclass
class Rung:
    """What one N of the ladder found."""

    n: int
    failures: list[float] = field(default_factory=list)
    bets: list[float] = field(default_factory=list)
    certified: bool = False
    kinds: Counter[str] = field(default_factory=Counter)  # failure kind -> count (`failure`)

    def estimate(self, risk: float) -> Estimate:
        return estimate(self.failures, risk, self.bets)


@dataclass
class BudgetResult:
    budget: int  # the largest certified N, 1 when none is
    threshold: float
    rungs: list[Rung]

    @property
    def calls(self) -> int:
        return sum(len(r.failures) for r in self.rungs)


async def measure_budget(
    backend: Backend,
    model: str,
    effort: str | None,
    tier: Tier,
    *,
    thresholds: Thresholds | None = None,
    risk: float = 0.05,
    seed: int = 0,
    ladder: Sequence[int] = LADDER,
    max_calls: int = MAX_CALLS,
    system_prompt: str | None = None,
) -> BudgetResult:
    """Climb the ladder until a rung is not certified; BackendError propagates (a broken backend
    is never a small budget)."""
    threshold = threshold_for(tier, thresholds or Thresholds())
    rungs: list[Rung] = []
    budget = 1
    for n in ladder:
        rung = Rung(n)
        rungs.append(rung)
        await _climb(backend, model, effort, rung, threshold, risk, f"{seed}/budget/{n}", max_calls, system_prompt)
        log.info(
            "tool_budget_rung",
            model=model,
            effort=effort or "default",
            tools=n,
            calls=len(rung.failures),
            accuracy=round(1 - sum(rung.failures) / max(1, len(rung.failures)), 4),
            bound=round(rung.estimate(risk).low, 4),
            threshold=threshold,
            certified=rung.certified,
            failures=dict(rung.kinds),
        )
        if not rung.certified:
            break
        budget = n
    return BudgetResult(budget, threshold, rungs)


async def _climb(
    backend: Backend,
    model: str,
    effort: str | None,
    rung: Rung,
    threshold: float,
    risk: float,
    key: str,
    max_calls: int,
    system_prompt: str | None,
) -> None:
    while len(rung.failures) < max_calls:
        size = min(BATCH, max_calls - len(rung.failures))
        bets = [kelly_bet(rung.failures, threshold)] * size  # fixed before the batch is asked
        start = len(rung.failures)
        cases = [instance(rung.n, random.Random(f"{key}/{start + i}")) for i in range(size)]
        answers = await together(_ask(backend, model, effort, c, system_prompt) for c in cases)
        kinds = [failure(c, a) for c, a in zip(cases, answers, strict=True)]
        rung.failures += [0.0 if kind is None else 1.0 for kind in kinds]
        rung.kinds.update(kind for kind in kinds if kind is not None)
        rung.bets += bets
        found = rung.estimate(risk)
        if found.low >= threshold:
            rung.certified = True
            return
        if found.high < threshold:
            return


async def _ask(backend: Backend, model: str, effort: str | None, case: Instance, system_prompt: str | None) -> Answer:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": case.prompt})
    # The answer is one call: bounded like a suite tool-calling test's (measuring/backends.py CallBound).
    with bound_contextvars(test=f"toolBudget[{len(case.tools)}]"):
        return (await backend.complete(model, messages, case.tools, effort, need=ANSWER_TOKENS["toolCalling"])).answer


async def with_budgets(
    backend: Backend, profiles: list[Profile], settings: Settings, seed: int, shared: Mapping[str, str] | None = None
) -> list[Profile]:
    """`profiles` with their measured `toolBudget`, one pair after another (a pinned pair keeps
    none: its pin decides, and may carry a budget of its own). A level in `shared` (effort ->
    the level whose evidence it took) takes that level's budget: its requests are that level's."""
    shared = shared or {}
    found = {(p.model, p.reasoning_effort): p for p in profiles}  # in order; budgets filled in below
    for key, profile in found.items():
        effort = None if profile.reasoning_effort == DEFAULT_EFFORT else profile.reasoning_effort
        if profile.reasoning_effort in shared or settings.pin_for(*key) is not None:
            continue
        result = await measure_budget(
            backend,
            profile.model,
            effort,
            profile.tier,
            thresholds=settings.bench.thresholds,
            risk=settings.bench.risk,
            seed=seed,
            system_prompt=settings.bench.system_prompt,
        )
        log.info(
            "tool_budget_measured",
            model=profile.model,
            effort=profile.reasoning_effort,
            tool_budget=result.budget,
            threshold=result.threshold,
            calls=result.calls,
        )
        found[key] = profile.model_copy(update={"tool_budget": result.budget})
    for (model, effort), profile in found.items():
        if effort in shared and (other := found.get((model, shared[effort]))) is not None:
            found[model, effort] = profile.model_copy(update={"tool_budget": other.tool_budget})
    return list(found.values())
