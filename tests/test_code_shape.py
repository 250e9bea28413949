"""The code's shape, read with ast (nothing is imported or run): functions stay short, and the
packages keep their layering -- data flows corpora -> manifests -> ssl_pretrain ->
downstream_asr / downstream_st -> analysis, a lower package never imports a higher one, and
none imports gendergap (it only wires them: CLI, steps, sweep). docs/architecture.md."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("corpora", "manifests", "ssl_pretrain", "downstream_asr", "downstream_st", "analysis")
MAX_FUNCTION_LINES = 60
# argparse option lists: long by nature, one add_argument after another
LONG_BY_NATURE = {"register"}

# package -> the packages it must not import (corpora.base, the lowest layer, is for everyone)
FORBIDDEN = {
    "corpora": {"manifests", "ssl_pretrain", "downstream_asr", "downstream_st", "analysis", "gendergap"},
    "manifests": {"ssl_pretrain", "downstream_asr", "downstream_st", "analysis", "gendergap"},
    "ssl_pretrain": {"downstream_asr", "downstream_st", "analysis", "gendergap"},
    "downstream_asr": {"downstream_st", "analysis", "gendergap"},
    "downstream_st": {"downstream_asr", "analysis", "gendergap"},
    # analysis reads the training packages' output files, never their code
    "analysis": {"ssl_pretrain", "downstream_asr", "downstream_st", "gendergap"},
}


def _modules(packages=PACKAGES):
    """(path relative to the checkout, dotted module name, parsed tree) of every module in ``packages``."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield rel, ".".join(parts), ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))


def test_no_function_is_longer_than_60_lines():
    """Every function and method, nested ones included, from ``def`` to its last line; the wiring
    (gendergap/) too."""
    too_long = []
    for rel, _module, tree in _modules(PACKAGES + ("gendergap",)):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in LONG_BY_NATURE:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.name}:{length}")
    assert not too_long, (f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): "
                          + ", ".join(too_long))


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The absolute module names an import statement names (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[:len(here) - (node.level - 1)] if node.level > 1 else here
        base = ".".join(here + ([node.module] if node.module else []))
    # `from pkg import mod` may name a module: check pkg.mod too
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def _is_import_module_call(node: ast.AST) -> bool:
    """``import_module("a.b")`` / ``importlib.import_module("a.b")`` with a literal name."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or \
        (isinstance(func, ast.Name) and func.id == "import_module")


def test_no_package_imports_a_higher_layer():
    """Module-level imports and those inside functions alike (a lazy import is still a dependency)."""
    breaches = []
    for rel, module, tree in _modules():
        package = module.split(".")[0]
        forbidden = FORBIDDEN[package]
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, rel.name == "__init__.py")
            elif _is_import_module_call(node):   # importlib.import_module("pkg.mod")
                names = [node.args[0].value]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in forbidden:
                    breaches.append(f"{rel}:{node.lineno}: {package} imports {name}")
                    break
    assert not breaches, "imports against the layering (docs/architecture.md):\n" + "\n".join(breaches)


def test_the_steps_reach_package_functions_not_the_cli():
    """The CLI only wires: no module of gendergap/steps/ imports a command-line module, and every
    CLI leaf a step runs (LEAF_FUNCTIONS) is a keyword function outside gendergap/cmd_*.py."""
    from gendergap.steps.base import LEAF_FUNCTIONS

    breaches = []
    for rel, module, tree in _modules(("gendergap",)):
        if not module.startswith("gendergap.steps"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, rel.name == "__init__.py")
                breaches += [f"{rel}:{node.lineno}: {n}" for n in names if n.startswith("gendergap.cmd_")]
    assert not breaches, "steps importing the CLI: " + ", ".join(breaches)
    assert LEAF_FUNCTIONS and not [f for f in LEAF_FUNCTIONS.values() if f.startswith("gendergap.cmd_")]
