"""The statistics of live drift: the sequential test that demotes, and the check that restores.

**What is tested.** For one `model@effort` and one fault kind f with ceiling c (the tier's
ceiling for f), the tool calls form a 0/1 sequence X_1, X_2, ... (1: the call has fault f). The
model is *healthy* when, whatever came before, each call has fault f with probability at most c.
The proxy looks after every call, for ever; a healthy model must still almost never be demoted.

**The statistic** is Page's CUSUM (1954) of the log-likelihood ratio between a faulty rate
p1 = min(r·c, (1+c)/2) and the ceiling c (r = `drift.detect_ratio`, default 3: the rate the test
is tuned to catch fastest; the cap keeps p1 < 1 for large ceilings):

    up   = ln(p1 / c)               for a call with the fault
    down = ln((1 - p1) / (1 - c))   for one without (negative)
    S_t  = max(0, S_{t-1} + up | down)           alarm when S_t >= h

S never goes below 0, so a long healthy past is no credit: a model that breaks after a million
good calls is caught as fast as a new one.

**The threshold** is h = ln(N · p1 · k / α): N = `drift.horizon_calls` (10,000), α = 1 -
`drift.confidence` (0.01), k = the fault kinds judged (3). Defaults, `large` (c = 0.02 and 0.01,
p1 = 0.06 and 0.03): h = ln(10,000 · 0.06 · 3 / 0.01) = 12.1 and ln(9 · 10^4) = 11.4.

**Why a look after every call does not inflate it.** S leaves 0 only on a call with the fault;
call the calls from there on, until S is back at 0, a *run*. Within a run, exp(the sum of the
increments since its first call) is a nonnegative supermartingale for a healthy model:
E[e^inc] = p·p1/c + (1-p)·(1-p1)/(1-c) <= 1 for every p <= c (= 1 at p = c, increasing in p).
After its first call it stands at p1/c, so by Ville's inequality the run *ever* reaches h with
probability at most (p1/c)·e^-h: a bound on the maximum over every later look, which is what
makes continuous monitoring safe. A false alarm within N calls needs a run that starts within
them and reaches h; runs start on faulty calls, of which a healthy model makes at most c·N
expected. So P(false alarm within N calls) <= c·N·(p1/c)·e^-h = N·p1·e^-h = α/k per kind, and
<= α for the pair (the union over the k kinds). Every later stretch of N calls alike: the run in
progress at its start is almost surely short, since S keeps falling back to 0. The bound is
conservative (it counts every faulty call as a run start and ignores the overshoot past h):
scripts/drift_simulation.py measures the real rate, and the delays the threshold costs.

**Restoring.** A demotion ends when the calls since it began (the last `window_calls` of them)
show, for every judged kind, a rate under the *restore level* R = min(q·c, (c + p1)/2) (q =
`drift.restore_ratio`, default 1.5): P(Binomial(n, R) <= faults) <= α, i.e. the Clopper-Pearson
upper bound of the rate at `confidence` is under R. Why not under c itself: to show a rate is
under c takes about z²·c / (c - p)² calls at a true rate p, so a healthy pair just under its
ceiling (0.9c: ~50,000 calls at c = 1%) would stay demoted for ever, while the demotion was for
a rate the CUSUM catches only well above c. R sits between the two: a pair that still faults at
q·c or more is restored with probability at most α at each look (more over many looks: one kind
at 2c for 10,000 calls, 0-2 times in 200), at 3c and 5c not once in 200; back at 0.9c on every
kind it is restored within 20,000 calls 197 times in 200 (never at q = 1): section 5 of
scripts/drift_simulation.py. With no fault at all it takes n >= ln(1/α) / -ln(1 - R) calls:
152 at c = 0.02, 305 at c = 0.01 (`Tally.clean` says how the calls of several clients are
counted so that no `min_clients - 1` of them decide).

Pure: no I/O, no clock, no threads.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from gatekeeper.drift.window import Ceilings, DriftSettings, Fault, rates


@dataclass(frozen=True)
class Cusum:
    """The CUSUM of one fault kind against its ceiling: the two increments and the threshold."""

    fault: Fault
    ceiling: float
    faulty: float  # p1, the rate the test is tuned to
    up: float
    down: float
    threshold: float
    restore: float  # R: a demotion ends when the rate is shown to be under it

    def step(self, score: float, fault: Fault | None) -> float:
        return max(0.0, score + (self.up if fault is self.fault else self.down))


@lru_cache(maxsize=256)
def make_cusum(
    fault: Fault,
    ceiling: float,
    detect_ratio: float,
    horizon_calls: int,
    alpha: float,
    kinds: int,
    restore_ratio: float,
) -> Cusum:
    faulty, restore = rates(ceiling, detect_ratio, restore_ratio)
    up = math.log(faulty / ceiling)
    down = math.log((1 - faulty) / (1 - ceiling))
    threshold = math.log(horizon_calls * faulty * kinds / alpha)
    return Cusum(fault, ceiling, faulty, up, down, max(threshold, up), restore)  # one faulty call never suffices


def cusums_for(ceilings: Ceilings, settings: DriftSettings) -> dict[Fault, Cusum]:
    """One test per judged fault kind (a null ceiling is not judged)."""
    judged = {f: c for f in Fault if (c := ceilings.of(f)) is not None}
    s = settings
    return {
        f: make_cusum(f, c, s.detect_ratio, s.horizon_calls, 1 - s.confidence, len(judged), s.restore_ratio)
        for f, c in judged.items()
    }


# -- the evidence of many clients ------------------------------------------------------------


@dataclass
class Pooled:
    """The CUSUM of every identified client's calls together, and each client's share of the
    current run, per fault kind.

    `standing(f, drop)` is the run's score without the `drop` clients that contributed most. It
    passing the threshold means that no `drop` clients could have produced the alarm: for any set
    A of at most `drop` clients, the other clients' calls alone, from the run's start, sum to at
    least score - (the `drop` largest shares) >= h, so the CUSUM of their calls alone passed h,
    and for healthy clients that has the probability bounded above, whatever A sent.
    """

    score: dict[Fault, float] = field(default_factory=dict)
    shares: dict[Fault, dict[str, float]] = field(default_factory=dict)

    def add(self, tests: Iterable[Cusum], client: str, fault: Fault | None, max_clients: int) -> None:
        for test in tests:
            inc = test.up if fault is test.fault else test.down
            score = self.score.get(test.fault, 0.0) + inc
            shares = self.shares.setdefault(test.fault, {})
            if score <= 0:  # the run is over: the next one starts from nothing
                self.score[test.fault] = 0.0
                shares.clear()
                continue
            if client in shares or len(shares) < max_clients:
                shares[client] = shares.get(client, 0.0) + inc
            elif inc > 0:
                continue  # a client past the table's bound brings no evidence (keeps the bound sound)
            self.score[test.fault] = score

    def standing(self, fault: Fault, drop: int) -> float:
        score = self.score.get(fault, 0.0)
        if drop <= 0 or score <= 0:
            return score
        shares = self.shares.get(fault, {})
        return score - sum(s for s in heapq.nlargest(drop, shares.values()) if s > 0)

    def clients(self, fault: Fault) -> int:
        return sum(1 for s in self.shares.get(fault, {}).values() if s > 0)

    def reset(self) -> None:
        self.score.clear()
        self.shares.clear()


# -- restoring ----------------------------------------------------------------------------------


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in logs (n in the thousands underflows a plain product)."""
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    total = 0.0
    for i in range(k + 1):
        total += math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
    return min(total, 1.0)


def under_rate(faults: int, calls: int, rate: float, alpha: float) -> bool:
    """The Clopper-Pearson upper bound of `faults / calls` at 1 - alpha is at most `rate`."""
    if calls <= 0 or faults >= calls * rate:  # at or above the rate: never under it
        return False
    return binomial_cdf(faults, calls, rate) <= alpha


@dataclass
class Tally:
    """The last `size` calls since a demotion began, and of those at most `per_client` of each
    client (its newest): faults per kind, calls and faults per client.

    The cap keeps a client that floods calls from pushing everyone else's out of the tally: it
    only ever replaces its own oldest calls, so the others' stay to be judged (everyone's tally:
    `window_calls` per client, `window_calls x min_clients` in all)."""

    size: int
    per_client: int | None = None
    _calls: deque[tuple[int, str, Fault | None]] = field(default_factory=deque)  # (seq, client, fault)
    _mine: dict[str, deque[tuple[int, Fault | None]]] = field(default_factory=dict)  # oldest first
    _gone: set[int] = field(default_factory=set)  # seqs a client's cap removed, still in _calls
    _seq: int = 0
    _live: int = 0  # calls counted: _calls without the _gone ones
    faults: Counter[Fault] = field(default_factory=Counter)
    by_client: Counter[str] = field(default_factory=Counter)
    _client_faults: Counter[tuple[str, Fault]] = field(default_factory=Counter)

    def add(self, client: str, fault: Fault | None) -> None:
        seq, self._seq = self._seq, self._seq + 1
        self._calls.append((seq, client, fault))
        mine = self._mine.setdefault(client, deque())
        mine.append((seq, fault))
        self._count(client, fault, +1)
        while self.per_client is not None and len(mine) > self.per_client:
            old, old_fault = mine.popleft()  # its own oldest call goes, wherever it stands
            self._gone.add(old)
            self._count(client, old_fault, -1)
        while self._live > self.size:
            self._pop_oldest()
        if len(self._calls) > 2 * self.size + 64:  # drop the removed calls' places now and then
            self._calls = deque(c for c in self._calls if c[0] not in self._gone)
            self._gone.clear()

    def _pop_oldest(self) -> None:
        seq, client, fault = self._calls.popleft()
        if seq in self._gone:  # already removed (and uncounted) by its client's cap
            self._gone.discard(seq)
            return
        self._mine[client].popleft()  # the oldest of all is its client's oldest too
        if not self._mine[client]:
            del self._mine[client]
        self._count(client, fault, -1)

    def _count(self, client: str, fault: Fault | None, step: int) -> None:
        self._live += step
        self.by_client[client] += step
        if not self.by_client[client]:
            del self.by_client[client]
        if fault is not None:
            self.faults[fault] += step
            self._client_faults[(client, fault)] += step
            if not self._client_faults[(client, fault)]:
                del self._client_faults[(client, fault)]

    @property
    def calls(self) -> int:
        return self._live

    def counted(self, drop: int) -> int:
        """The calls without those of the `drop` busiest clients."""
        return self.calls - sum(n for _, n in self.by_client.most_common(drop)) if drop > 0 else self.calls

    def clean(self, tests: Iterable[Cusum], alpha: float, drop: int = 0) -> bool:
        """Every judged rate is back under its restore level, whatever `drop` clients sent. Either of:

        - on every fault, without the faults of the `drop` clients that made most of that kind
          and over the calls of all but the `drop` busiest clients (fewer than the other
          clients made: the binomial CDF falls with the calls). So `drop` clients can neither
          hold the demotion in force with faults of their own nor end it with calls of their
          own: the faults that count are the other clients', at least `min_clients - drop`
          of whom made faults if the pair truly drifted for everyone;
        - on the calls of each of `drop + 1` clients alone: one of them is not among any `drop`.
        """
        tests = list(tests)
        n = self.counted(drop)
        if all(under_rate(self.faults_without(t.fault, drop), n, t.restore, alpha) for t in tests):
            return True
        return drop > 0 and self.clean_clients(tests, alpha, enough=drop + 1) > drop

    def faults_without(self, fault: Fault, drop: int) -> int:
        """Faults of one kind without those of the `drop` clients that made most of them."""
        if drop <= 0:
            return self.faults[fault]
        mine = heapq.nlargest(drop, (n for (_, f), n in self._client_faults.items() if f is fault))
        return self.faults[fault] - sum(mine)

    def clean_clients(self, tests: list[Cusum], alpha: float, enough: int) -> int:
        """How many clients' own calls are clean (counting stops at `enough`)."""
        # A client with fewer calls than a faultless run needs cannot pass: skip it cheaply.
        needed = max((math.log(alpha) / math.log1p(-t.restore) for t in tests), default=0.0)
        found = 0
        for client, calls in self.by_client.items():
            if calls >= needed and all(
                under_rate(self._client_faults[(client, t.fault)], calls, t.restore, alpha) for t in tests
            ):
                found += 1
                if found >= enough:
                    break
        return found

    def to_json(self, drop: int = 0) -> dict[str, int]:
        return {"calls": self.calls, "counted": self.counted(drop), **{f.value: self.faults[f] for f in Fault}}
