"""The one registry of study task types: what a config's ``type:`` may name, and everything such a
type is. Each step module (gendergap/steps/) registers its types with ``register_task`` when
imported; gendergap.config imports them all (config.task_types) before it validates a config.

A type is declared once, in its registration: its config keys, its planner, the frozen features it
reads, the checks of its config entry against the rest of the config, and, per kind of step it adds,
the cost estimate, the place in the stage order and the report's title. What other modules need by
kind is derived from the registrations, never kept beside them: the estimators of the cost table
(gendergap.cost), the stage order of a study's time table (gendergap.study), the titles handed to
the report (gendergap.plan), the order `--schema` and errors list the types in. So a task kind
missing from a table cannot happen: there is no table to miss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gendergap.config_schema import TaskBase

# (step, gendergap.cost.Context) -> (seconds of compute on the step's device, None when unknown;
# {location: bytes written}). The context gives the checkpoints' facts (ctx.models.facts), the
# throughput figures (ctx.figures(ctx.device(step))), the tables' rows once they can be read
# (ctx.known, ctx.table) and the feature store's sizes (ctx.feature_bytes); a plain tuple, so that a
# step module need not import gendergap.cost, which imports the step modules.
Estimator = Callable[[Any, Any], "tuple[float | None, dict[str, float]]"]
LAST = 1000.0   # the default place in the stage order: after the built-in types, in registration order


@dataclass(frozen=True)
class StepKind:
    """One kind of step a task type's planner adds (``Step.kind``; the task its result rows are
    filed under too). ``estimate``: its cost (see Estimator); None: the few seconds of a step without
    a model (gendergap.cost.FIXED_STEP_S). ``title``: the report's heading for its rows; None for the
    result kinds analysis titles itself (analysis.tables.ASR_TASK_TITLES: the rows the lower packages
    write, which `gendergap report` shows for a results DB no study wrote) and for rows shown in a
    table of their own (ST, probes, MuST-SHE); else the bare kind is shown."""
    name: str
    estimate: Estimator | None = None
    title: str | None = None


@dataclass(frozen=True)
class TaskType:
    """A downstream task type: its config keys (a TaskBase subclass), the planner adding its steps
    to the study graph ((graph, task name, task config) -> None), and, for a task on frozen
    features, what it reads from the feature store ((graph, checkpoint, task config) -> request).
    ``check``: (StudyConfig, task name, task config) -> None, raising a UserError for what its
    schema alone cannot see (a checkpoint it cannot use, a file it names). ``kinds``: the kinds of
    step its planner adds, its own first (named as the type). ``order``: its place among the types
    (the time table, `--schema`, errors). ``error_counts``: its rows are transcripts scored by error
    counts (WER, CER), which the per-utterance mixed model fits (gendergap.steps.mixed).
    ``own_models``: it runs models its own entry names (released models), not the study's checkpoints,
    so a study of such tasks alone needs no `checkpoints:`."""
    name: str
    schema: type[TaskBase]
    planner: Callable
    features: Callable | None = None
    check: Callable | None = None
    kinds: tuple[StepKind, ...] = ()
    order: float = LAST
    error_counts: bool = False
    own_models: bool = False


TASKS: dict[str, TaskType] = {}   # the one registry of task types, in stage order


def register_task(type_: str, schema: type[TaskBase], planner: Callable, features: Callable | None = None, *,
                  check: Callable | None = None, estimate: Estimator | None = None, title: str | None = None,
                  also: Iterable[StepKind] = (), order: float = LAST, error_counts: bool = False,
                  own_models: bool = False) -> TaskType:
    """Make ``type_`` a task type (see TaskType): ``estimate`` and ``title`` are those of its own
    step kind (StepKind), ``also`` the other kinds its planner adds (a variant with rows of its own,
    a scoring step). Registering the same type again does nothing; anything else under a taken name
    is refused, so a config never changes meaning silently."""
    if not (isinstance(schema, type) and issubclass(schema, TaskBase)):
        raise TypeError(f"task type {type_!r}: {schema!r} is not a subclass of gendergap.config_schema.TaskBase")
    if not type_ or not isinstance(type_, str):
        raise ValueError(f"a task type needs a non-empty name, got {type_!r}")
    for what, fn in (("planner", planner), ("features", features), ("check", check), ("estimate", estimate)):
        if (fn is not None or what == "planner") and not callable(fn):
            raise TypeError(f"task type {type_!r}: its {what} {fn!r} is not callable")
    kinds = (StepKind(type_, estimate, title), *also)
    if not all(isinstance(k, StepKind) for k in kinds) or len({k.name for k in kinds}) != len(kinds):
        raise ValueError(f"task type {type_!r}: `also` must be StepKinds other than {type_!r} and each other")
    if not all(k.estimate is None or callable(k.estimate) for k in kinds):
        raise TypeError(f"task type {type_!r}: an estimate is not callable")
    new = TaskType(type_, schema, planner, features, check, kinds, float(order), bool(error_counts), bool(own_models))
    old = TASKS.get(type_)
    if old is not None and old != new:
        raise ValueError(f"task type {type_!r} is already registered ({old.schema.__name__}, "
                         f"{old.planner.__qualname__})")
    # a kind two types add (MuST-SHE scoring) is declared alike by both, or costs would depend on order
    for k in kinds:
        other = step_kind(k.name)
        if other is not None and other != k and old is None:
            raise ValueError(f"task type {type_!r}: step kind {k.name!r} is already declared otherwise")
    TASKS[type_] = new
    _in_order()
    return new


def _in_order() -> None:
    """TASKS by ``order``, registration order among equals (in place: modules hold the dict)."""
    ordered = sorted(TASKS.values(), key=lambda t: t.order)
    if list(TASKS.values()) != ordered:
        TASKS.clear()
        TASKS.update((t.name, t) for t in ordered)


# --- what is derived from the registrations -------------------------------------------------------

def step_kinds() -> list[StepKind]:
    """Every task step kind in stage order: the types by ``order``, each its own kind then its
    others; a kind several types add (MuST-SHE scoring, after st and gender-st) comes after the last
    of them, since it waits for all of them."""
    last = {k.name: (i, k) for i, k in enumerate(k for t in TASKS.values() for k in t.kinds)}
    return [k for _, k in sorted(last.values(), key=lambda pair: pair[0])]


def step_kind(name: str) -> StepKind | None:
    """The declaration of step kind ``name``, or None when no task type adds it."""
    return next((k for t in TASKS.values() for k in t.kinds if k.name == name), None)


def titles(types: Iterable[str]) -> dict[str, str]:
    """{step kind: report title} declared by the task types ``types`` (empty: analysis titles them all)."""
    return {k.name: k.title for t in dict.fromkeys(types) for k in TASKS[t].kinds if k.title}


def builtin_types() -> tuple[str, ...]:
    """The types gendergap's own step modules register (once they are imported)."""
    return tuple(n for n, t in TASKS.items() if getattr(t.planner, "__module__", "").startswith("gendergap."))

