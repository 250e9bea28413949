"""The one registry of study task types: what a config's ``type:`` may name. Each step module
(gendergap/steps/) registers its types with ``register_task`` when imported; gendergap.config
imports them all (config.task_types) before it validates a config."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gendergap.config_schema import TaskBase


@dataclass(frozen=True)
class TaskType:
    """A downstream task type: its config keys (a TaskBase subclass), the planner adding its steps
    to the study graph ((graph, task name, task config) -> None), and, for a task on frozen
    features, what it reads from the feature store ((graph, checkpoint, task config) -> request)."""
    schema: type[TaskBase]
    planner: Callable
    features: Callable | None = None


TASKS: dict[str, TaskType] = {}   # the one registry of task types


def register_task(type_: str, schema: type[TaskBase], planner: Callable, features: Callable | None = None) -> None:
    """Make ``type_`` a task type (see TaskType). Registering the same type again does nothing;
    another schema or planner under a taken name is refused, so a config never changes meaning
    silently."""
    if not (isinstance(schema, type) and issubclass(schema, TaskBase)):
        raise TypeError(f"task type {type_!r}: {schema!r} is not a subclass of gendergap.config_schema.TaskBase")
    if not type_ or not isinstance(type_, str):
        raise ValueError(f"a task type needs a non-empty name, got {type_!r}")
    if not callable(planner):
        raise TypeError(f"task type {type_!r}: its planner {planner!r} is not callable")
    new = TaskType(schema, planner, features)
    old = TASKS.get(type_)
    if old is not None and (old.schema is not schema or old.planner is not planner):
        raise ValueError(f"task type {type_!r} is already registered ({old.schema.__name__}, "
                         f"{old.planner.__qualname__})")
    TASKS[type_] = new
