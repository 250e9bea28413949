"""Which command line a keyword function is: each function behind a CLI leaf declares its leaf where
it is defined (``@cli_leaf("asr frozen")``), so the link travels with the function.

A study step whose work is CLI leaves returns these functions from ``calls()``; `gendergap trace`
prints them as the command lines that redo the step. A table kept beside the functions (the old
``CLI_LEAF``) let a new step kind run fine and then fail at trace time with a bare KeyError; here a
function without a leaf is refused when its step runs (gendergap.steps.base.run_calls), and
`tests/test_trace.py` checks every declared leaf against the real parser.

No imports of gendergap.runs' other modules: they import this one."""
from __future__ import annotations

from typing import Callable

LEAVES: dict[Callable, str] = {}   # function -> "group leaf", filled by @cli_leaf as its modules load


def cli_leaf(leaf: str) -> Callable[[Callable], Callable]:
    """Declare that `gendergap <leaf>` calls the decorated function with its options as keyword
    arguments (their dests are its parameter names: gendergap.options.call)."""
    words = leaf.split()
    if len(words) < 2 or " ".join(words) != leaf:
        raise ValueError(f"a CLI leaf is 'group leaf' (e.g. 'asr frozen'), got {leaf!r}")

    def declare(function: Callable) -> Callable:
        # two functions behind one leaf would make trace print one command for two different runs
        taken = next((f for f, name in LEAVES.items() if name == leaf and f is not function), None)
        if taken is not None and _where(taken) != _where(function):
            raise ValueError(f"CLI leaf {leaf!r} is already declared by {_where(taken)}")
        LEAVES[function] = leaf
        return function
    return declare


def leaf_of(function: Callable) -> str | None:
    """The CLI leaf that runs ``function`` (`asr frozen`), None when it is no leaf's function."""
    return LEAVES.get(function)


def _where(function: Callable) -> str:
    return f"{function.__module__}.{function.__qualname__}"
