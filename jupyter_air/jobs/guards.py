"""Metric guards: a condition on a logged metric, and what to do when it holds.

A guard is written ``METRIC: CONDITION [-> ACTION, ...]``::

    loss: nan                                  # NaN (the default action: stop)
    loss: inf -> notify                        # +inf or -inf
    loss: nan or inf -> checkpoint
    loss: > 10 -> notify, stop                 # also >=, <, <=
    val_loss: no better for 500 steps          # lower is better ("no lower" too)
    val_accuracy: no higher for 2000 steps     # higher is better

or, in a YAML file, as the mapping YAML makes of an unquoted ``- loss: nan -> stop``, or
``{metric: loss, when: "> 10", then: [notify, stop]}``. ``none`` alone turns every guard
off, the default one included. Actions: ``notify`` (the job's notification targets,
whatever events they chose), ``stop`` (the job ends FAILED, not retried), ``checkpoint``
(the HF Trainer or Lightning in the ranks saves, then the attempt stops FAILED; a job
with retries left retries from that checkpoint).

Pure logic: what a guard says, its parsing and its evaluation on points (``Watcher``);
the supervisor feeds it the job's journal (``supervision.guard_feed``), a rank's trainer
hook saves on request (``guard_hook``).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: What turns every guard off (the default one included).
OFF = "none"
#: The guard of a job that has notification targets and names none of its own.
DEFAULT = "loss: nan -> notify"
#: MLflow's longest metric key.
MAX_METRIC = 250
#: Guards a job may have at most.
MAX_GUARDS = 50


class BadGuard(ValueError):
    """A guard that cannot be read; its message says what is wrong, in one line."""


class Action(enum.StrEnum):
    NOTIFY = "notify"
    STOP = "stop"
    CHECKPOINT = "checkpoint"


class Condition(enum.StrEnum):
    """What a condition tests, as it is written."""

    NAN = "nan"
    INF = "inf"
    NOT_FINITE = "nan or inf"
    ABOVE = ">"
    AT_LEAST = ">="
    BELOW = "<"
    AT_MOST = "<="
    NO_BETTER = "no better"  # lower is better, as for a loss
    NO_LOWER = "no lower"
    NO_HIGHER = "no higher"


#: What a guard does when its user names no action.
DEFAULT_ACTIONS = (Action.STOP,)
_COMPARE = (Condition.ABOVE, Condition.AT_LEAST, Condition.BELOW, Condition.AT_MOST)
_STALL = (Condition.NO_BETTER, Condition.NO_LOWER, Condition.NO_HIGHER)
_EXPECTED = (
    "expected nan, inf, 'nan or inf', '> N', '>= N', '< N', '<= N' or "
    "'no better for N steps' (no lower, no higher)"
)
_THRESHOLD = re.compile(r"(>=|<=|>|<)\s*(\S+)")
_STALL_TEXT = re.compile(r"no\s+(better|lower|higher)\s+(?:for|in)\s+([\d,_]+)\s+steps?")


@dataclass(frozen=True)
class Guard:
    metric: str
    test: Condition
    #: The number compared with, for ``>``, ``>=``, ``<``, ``<=``.
    threshold: float | None = None
    #: Steps without a better value, for ``no better``.
    steps: int | None = None
    actions: tuple[Action, ...] = DEFAULT_ACTIONS

    @property
    def condition(self) -> str:
        """The guard without its actions: ``loss: > 10``."""
        if self.test in _COMPARE:
            return f"{self.metric}: {self.test} {self.threshold:g}"
        if self.test in _STALL:
            return f"{self.metric}: {self.test} for {self.steps} steps"
        return f"{self.metric}: {self.test}"

    def __str__(self) -> str:
        return f"{self.condition} -> {', '.join(self.actions)}"

    @property
    def stops(self) -> bool:
        return Action.STOP in self.actions or Action.CHECKPOINT in self.actions


def parse(value: Any) -> Guard:
    """A guard from a flag's or a file's text, or a file's mapping."""
    if isinstance(value, Mapping):
        value = _from_mapping(value)
    if not isinstance(value, str):
        raise BadGuard(f"expected a guard like 'loss: nan -> stop', got {value!r}")
    text = " ".join(value.split())
    condition, arrow, then = text.partition("->")
    metric, colon, test = condition.rpartition(":")
    metric = metric.strip()
    if not colon or not metric:
        raise BadGuard(f"{value!r}: expected METRIC: CONDITION, like 'loss: nan'")
    if len(metric) > MAX_METRIC:
        raise BadGuard(f"{value!r}: a metric's name has at most {MAX_METRIC} characters")
    actions = _actions(then, value) if arrow else DEFAULT_ACTIONS
    return _condition(metric, test.strip().lower(), actions, value)


def _from_mapping(value: Mapping[Any, Any]) -> str:
    """``{loss: "nan -> stop"}`` (YAML's reading of an unquoted ``- loss: nan -> stop``)
    or ``{metric: loss, when: nan, then: [notify, stop]}``, as text."""
    data = dict(value)
    if "metric" in data or "when" in data:
        unknown = set(data) - {"metric", "when", "then"}
        if unknown or not {"metric", "when"} <= set(data):
            raise BadGuard(
                f"{value!r}: a guard's mapping is {{metric: NAME, when: CONDITION, "
                "then: [ACTION, ...]}} (then may be left out)"
            )
        then = data.get("then")
        actions = then if isinstance(then, str) or then is None else ", ".join(map(str, then))
        return f"{data['metric']}: {_scalar(data['when'])}" + (f" -> {actions}" if then else "")
    if len(data) != 1:
        raise BadGuard(f"{value!r}: one guard per item, like '- loss: nan -> stop'")
    ((metric, condition),) = data.items()
    return f"{metric}: {_scalar(condition)}"


def _scalar(value: Any) -> str:
    """A condition YAML read as a number (``.nan``, ``.inf``), as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf"
    if not isinstance(value, str):
        raise BadGuard(f"{value!r}: {_EXPECTED}")
    return value


def _actions(text: str, value: str) -> tuple[Action, ...]:
    words = [w.strip().lower() for w in re.split(r",|\band\b", text)]
    if not any(words):
        raise BadGuard(f"{value!r}: no action after '->': notify, stop or checkpoint")
    chosen: list[Action] = []
    for word in words:
        if not word:
            continue
        try:
            action = Action(word)
        except ValueError:
            raise BadGuard(
                f"{value!r}: {word!r} is no action: notify, stop or checkpoint"
            ) from None
        if action not in chosen:
            chosen.append(action)
    if Action.CHECKPOINT in chosen and Action.STOP in chosen:
        chosen.remove(Action.STOP)  # a checkpoint stops the job after it is saved
    return tuple(chosen)


def _condition(metric: str, test: str, actions: tuple[Action, ...], value: str) -> Guard:
    if test in ("nan", "inf", "nan or inf"):
        return Guard(metric, Condition(test), actions=actions)
    if test in ("inf or nan", "not finite"):
        return Guard(metric, Condition.NOT_FINITE, actions=actions)
    if match := _THRESHOLD.fullmatch(test):
        try:
            threshold = float(match[2].replace("_", ""))
        except ValueError:
            raise BadGuard(f"{value!r}: {match[2]!r} is not a number") from None
        if not math.isfinite(threshold):
            raise BadGuard(f"{value!r}: compare with a finite number (nan and inf are tests)")
        return Guard(metric, Condition(match[1]), threshold=threshold, actions=actions)
    if match := _STALL_TEXT.fullmatch(test):
        steps = int(re.sub(r"[,_]", "", match[2]) or "0")
        if steps < 1:
            raise BadGuard(f"{value!r}: the steps must be 1 or more")
        return Guard(metric, Condition(f"no {match[1]}"), steps=steps, actions=actions)
    raise BadGuard(f"{value!r}: {_EXPECTED}")


def parse_all(values: Sequence[Any]) -> tuple[Guard, ...] | None:
    """A job's guards; None when ``none`` turns them all off."""
    if any(_is_off(v) for v in values):
        if len(values) > 1:
            raise BadGuard(f"{OFF!r} turns every guard off: give it alone")
        return None
    if len(values) > MAX_GUARDS:
        raise BadGuard(f"at most {MAX_GUARDS} guards, got {len(values)}")
    return tuple(parse(v) for v in values)


def readable(texts: Sequence[str]) -> list[Guard]:
    """A job's stored guards, those this version reads (each was checked when the job
    was submitted; one a later version wrote is left out, never failing the job)."""
    found = []
    for text in texts:
        try:
            found.append(parse(text))
        except BadGuard:
            continue
    return found


def _is_off(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == OFF


def resolved(values: Sequence[Any], has_targets: bool) -> tuple[str, ...]:
    """The guards a job runs with, each as its canonical text: those given; none for
    ``none``; the default (``DEFAULT``) for a job with notification targets that names
    none."""
    guards = parse_all(values)
    if guards is None:
        return ()
    if not guards and has_targets:
        return (DEFAULT,)
    return tuple(str(g) for g in guards)


def shown(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"


@dataclass(frozen=True)
class Firing:
    """A guard that held: at which step, on which value."""

    guard: Guard
    step: int
    value: float
    #: For ``no better``: the best value and its step.
    best: tuple[float, int] | None = None

    @property
    def reason(self) -> str:
        """What the job's outcome and its notification say:
        ``guard 'loss: nan' at step 4,210 (loss = nan)``."""
        what = f"{self.guard.metric} = {shown(self.value)}"
        if self.best is not None:
            what += f", best {shown(self.best[0])} at step {self.best[1]:,}"
        return f"guard '{self.guard.condition}' at step {self.step:,} ({what})"


@dataclass
class _State:
    guard: Guard
    best: tuple[float, int] | None = None
    fired: bool = False

    def see(self, value: float, step: int) -> Firing | None:
        test = self.guard.test
        if test in _STALL:
            return self._stall(value, step)
        held = {
            Condition.NAN: math.isnan(value),
            Condition.INF: math.isinf(value),
            Condition.NOT_FINITE: not math.isfinite(value),
        }.get(test)
        if held is None:
            limit = self.guard.threshold
            assert limit is not None
            held = {
                Condition.ABOVE: value > limit,
                Condition.AT_LEAST: value >= limit,
                Condition.BELOW: value < limit,
                Condition.AT_MOST: value <= limit,
            }[test]
        return Firing(self.guard, step, value) if held else None

    def _stall(self, value: float, step: int) -> Firing | None:
        """A value is better than the best only strictly; NaN never is."""
        higher = self.guard.test is Condition.NO_HIGHER
        better = self.best is None or (value > self.best[0] if higher else value < self.best[0])
        if better and not math.isnan(value):
            self.best = (value, step)
            return None
        if self.best is None:
            return None
        steps = self.guard.steps
        assert steps is not None
        if step - self.best[1] >= steps:
            return Firing(self.guard, step, value, self.best)
        return None


@dataclass
class Watcher:
    """Evaluates guards on a job's points, in the order they were logged; each guard
    fires once."""

    guards: Sequence[Guard]
    _states: dict[str, list[_State]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for guard in self.guards:
            self._states.setdefault(guard.metric, []).append(_State(guard))

    @property
    def metrics(self) -> set[str]:
        return set(self._states)

    def see(self, points: Iterable[tuple[str, float, int]]) -> list[Firing]:
        """The guards that hold at these (metric, value, step) points, as they hold."""
        fired = []
        for key, value, step in points:
            for state in self._states.get(key, ()):
                if state.fired:
                    continue
                firing = state.see(value, step)
                if firing is not None:
                    state.fired = True
                    fired.append(firing)
        return fired
