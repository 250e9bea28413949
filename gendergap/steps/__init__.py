"""The study graph: each step a small typed object (gendergap/steps/base.py).

Importing this package registers the built-in task types (asr-e2e, asr-frozen, st, gender-st,
probes): each step module declares its step classes, its planner and ``register_task``.
"""
from gendergap.steps import asr, probes, st  # noqa: F401 -- registers the built-in task types
from gendergap.steps.base import GRAPH_FIELDS, LIGHT, PLANNERS, Graph, ModelStep, Step, register_task, runtime

__all__ = ["GRAPH_FIELDS", "LIGHT", "PLANNERS", "Graph", "ModelStep", "Step", "register_task", "runtime"]
