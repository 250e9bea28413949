"""The study graph: each step a small typed object (gendergap/steps/base.py).

Importing this package imports every module in it, and so registers their task types (the
built-in ones: asr-e2e, asr-frozen, st, gender-st, probes, asr-released): each step module
declares its step classes, its planner, its cost estimate and ``register_task``. A new task's
module dropped here is found the same way; nothing else lists it.
"""
import importlib
import pkgutil

from gendergap.steps.base import (
    GRAPH_FIELDS,
    LIGHT,
    TASKS,
    Graph,
    ModelStep,
    Step,
    StepKind,
    register_task,
    task_runtime,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["GRAPH_FIELDS", "LIGHT", "TASKS", "Graph", "ModelStep", "Step", "StepKind", "register_task", "task_runtime"]
