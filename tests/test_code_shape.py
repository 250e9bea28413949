"""The code's shape, read with ast (nothing is imported or run): functions stay short, and the
packages keep their layering -- data flows corpora -> manifests -> ssl_pretrain ->
downstream_asr / downstream_st -> analysis, a lower package never imports a higher one, and
none imports gendergap (it only wires them: CLI, steps, sweep). docs/architecture.md."""
from __future__ import annotations

import ast
import re
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
    """``import_module(...)`` / ``importlib.import_module(...)`` with a literal name or an f-string."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))):
        return False
    if isinstance(node.args[0], ast.Constant) and not isinstance(node.args[0].value, str):
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or \
        (isinstance(func, ast.Name) and func.id == "import_module")


def _import_module_pattern(node: ast.Call, module: str) -> re.Pattern:
    """The names an import_module call may import, as a regex: a literal name matches itself; an
    f-string's computed parts match one name each (``f"gendergap.cmd_{group}"`` imports every
    gendergap.cmd_* module; ``__name__`` is the calling module's own name)."""
    arg = node.args[0]
    if isinstance(arg, ast.Constant):
        return re.compile(re.escape(arg.value))
    parts = []
    for value in arg.values:
        if isinstance(value, ast.Constant):
            parts.append(re.escape(str(value.value)))
        elif isinstance(value.value, ast.Name) and value.value.id == "__name__":
            parts.append(re.escape(module))
        else:
            parts.append(r"\w+")
    return re.compile("".join(parts))


def _import_module_names(node: ast.Call, module: str, known) -> list[str]:
    """The modules among ``known`` an import_module call may import (the literal name itself when
    it is no project module: the layering test still sees it)."""
    pattern = _import_module_pattern(node, module)
    if isinstance(node.args[0], ast.Constant):
        return [node.args[0].value]
    return sorted(m for m in known if pattern.fullmatch(m))


def test_no_package_imports_a_higher_layer():
    """Module-level imports and those inside functions alike (a lazy import is still a dependency)."""
    breaches = []
    known = {module for _rel, module, _tree in _modules(PACKAGES + ("gendergap",))}
    for rel, module, tree in _modules():
        package = module.split(".")[0]
        forbidden = FORBIDDEN[package]
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, rel.name == "__init__.py")
            elif _is_import_module_call(node):   # importlib.import_module("pkg.mod"), or f"pkg.{x}"
                names = _import_module_names(node, module, known)
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
    function declaring a CLI leaf (@cli_leaf, the functions steps run) lies outside gendergap/cmd_*.py."""
    from gendergap.runs import LEAVES

    breaches = []
    for rel, module, tree in _modules(("gendergap",)):
        if not module.startswith("gendergap.steps"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, rel.name == "__init__.py")
                breaches += [f"{rel}:{node.lineno}: {n}" for n in names if n.startswith("gendergap.cmd_")]
    assert not breaches, "steps importing the CLI: " + ", ".join(breaches)
    assert LEAVES and not [f for f in LEAVES if f.__module__.startswith("gendergap.cmd_")]


def _file_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (at module level or inside a function alike: a lazy
    import is still a dependency, and a circle closed by one is still a circle)."""
    modules = {module: (rel, tree) for rel, module, tree in _modules(PACKAGES + ("gendergap",))}
    graph = {}
    for module, (rel, tree) in modules.items():
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, rel.name == "__init__.py")
            elif _is_import_module_call(node):   # a computed name: every module it may name
                names = _import_module_names(node, module, modules)
            else:
                continue
            # `from pkg import a, b` names the modules pkg.a and pkg.b when they are modules (their
            # package's __init__ then only runs first); pkg itself when any name is not a module
            if isinstance(node, ast.ImportFrom) and len(names) > 1 and all(n in modules for n in names[1:]):
                names = names[1:]
            deps |= {n for n in names if n in modules and n != module}
        graph[module] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_among_files():
    """No two files import each other, directly or round a longer circle, lazy imports included: a
    circle means a concept is split between files (docs/architecture.md)."""
    cycles = _cycles(_file_graph())
    assert not cycles, "import circles (move the shared concept into one module):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


# Issue 48: a project import inside a function hides who depends on whom, so imports sit at module level
# unless listed here: file -> {module imported lazily: why}. A reason is what the module pulls at import
# that the importing file does not (torch ~3 s, pandas ~0.8 s, ...): in gendergap/cli.py and cmd_*.py that
# keeps `gendergap --help` and a light command's start-up fast; elsewhere it keeps a light module light
# for whoever imports it.
LAZY_IMPORTS = {
    "analysis/probing/checkpoints.py": {"analysis.probing.figures": "matplotlib, scipy"},
    "analysis/report.py": {"corpora.base.registry_file": "pydantic"},
    "corpora/checks.py": {"corpora.audio_info": "numpy, soundfile"},
    "corpora/feature_request.py": {"corpora.table": "pandas (Layers, the option types' grammar, stays light)"},
    "corpora/synth/__init__.py": {"corpora.synth.build": "pyrealb, numpy, scipy, soundfile, tqdm (SIZES and "
                                  "synthesize on first use: the package, and a synthesis worker importing it, "
                                  "stay light)"},
    "corpora/synth/build.py": {"corpora.table": "pandas"},
    "downstream_asr/common.py": {"downstream_asr.data": "pandas"},
    "downstream_asr/data.py": {"corpora.prepared_audio": "numpy, soundfile",
        "ssl_pretrain.features": "torch, numpy, soundfile"},
    "downstream_asr/decode.py": {"downstream_asr.data": "pandas", "ssl_pretrain.device": "torch"},
    "downstream_asr/export.py": {"downstream_asr.finetune": "torch, speechbrain, pandas, numpy, hyperpyyaml, pydantic",
        "ssl_pretrain.registry": "pydantic", "ssl_pretrain.safe_load": "torch"},
    "downstream_asr/kaldi.py": {"manifests.export_kaldi": "numpy, soundfile",
        "ssl_pretrain.feature_store": "torch, numpy, soundfile, pydantic"},
    "downstream_asr/recognisers.py": {"corpora.base.strict_yaml": "pydantic",
        "downstream_asr.ctc_inference": "speechbrain",
        "downstream_asr.finetune": "speechbrain, pandas, numpy, hyperpyyaml, pydantic"},
    "downstream_asr/runs.py": {"downstream_asr.finetune": "torch, speechbrain, pandas, numpy, hyperpyyaml, pydantic",
        "downstream_asr.frozen": "torch, speechbrain, pandas, numpy, soundfile, hyperpyyaml, pydantic",
        "ssl_pretrain.device": "torch"},
    "downstream_asr/transcribe.py": {"corpora.table": "pandas", "corpora.utterances": "pandas",
        "ssl_pretrain.features": "numpy, soundfile"},
    "downstream_st/data.py": {"corpora.base.strict_yaml": "pydantic"},
    "downstream_st/runs.py": {"downstream_st.data": "pandas, numpy, soundfile",
        "downstream_st.decode": "torch, pandas, numpy, soundfile, pydantic",
        "downstream_st.prepare": "pandas, numpy, soundfile", "downstream_st.presets": "pydantic",
        "downstream_st.train": "torch, pandas, numpy, soundfile, pydantic", "ssl_pretrain.device": "torch",
        "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic", "ssl_pretrain.safe_load": "torch"},
    "gendergap/cmd_asr.py": {"downstream_asr.kaldi": "pandas",
        "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic"},
    "gendergap/cmd_bench.py": {"gendergap.cost": "torch, pandas, numpy, soundfile, pydantic",
        "ssl_pretrain.device": "torch", "ssl_pretrain.precision_canary": "torch",
        "ssl_pretrain.throughput": "torch, transformers, pandas, numpy, soundfile"},
    "gendergap/cmd_ckpt.py": {"ssl_pretrain.checkpoint_tools": "torch, pydantic",
        "ssl_pretrain.checkpoints": "pydantic",
        "ssl_pretrain.feature_store": "torch, pandas, numpy, soundfile, pydantic",
        "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic", "ssl_pretrain.registry": "pydantic"},
    "gendergap/cmd_corpus.py": {"corpora.index": "pandas, numpy, soundfile", "corpora.merge": "pandas",
        "corpora.readers": "pandas, numpy, soundfile", "corpora.stats": "pandas",
        "corpora.synth": "scipy, numpy, soundfile", "corpora.utterances": "pandas",
        "corpora.voice_measures": "pandas, numpy, soundfile", "corpora.filter": "pandas"},
    "gendergap/cmd_manifest.py": {"manifests.build": "pandas, numpy, soundfile", "manifests.stats": "pandas, numpy"},
    "gendergap/cmd_probe.py": {"analysis.probing.figures": "torch, pandas, matplotlib, sklearn, scipy, numpy"},
    "gendergap/cmd_report.py": {"analysis.report": "torch, pandas, matplotlib, sklearn, numpy"},
    "gendergap/cmd_score.py": {"analysis.compare": "pandas, sacrebleu, numpy, jiwer", "analysis.delta": "numpy",
        "analysis.normalize": "jiwer", "analysis.score_file": "pandas, sacrebleu, numpy, jiwer",
        "analysis.score_runs": "pandas, sacrebleu, numpy, jiwer", "analysis.store": "pandas"},
    "gendergap/cmd_score_gender.py": {"analysis.gender_translation": "pandas, sacrebleu, numpy, jiwer"},
    "gendergap/cmd_study.py": {"gendergap.demo_record": "torch",
                               "gendergap.study": "torch, pandas, numpy, soundfile, pydantic"},
    "gendergap/cmd_sweep.py": {"analysis.store": "pandas",
                               "gendergap": "torch, pandas, numpy, soundfile, submitit, pydantic",
        "gendergap.config": "pydantic", "gendergap.cost": "torch, pandas, numpy, soundfile, pydantic",
        "gendergap.design": "torch, pandas, numpy, scipy, soundfile, pydantic",
        "gendergap.plan": "torch, pandas, numpy, soundfile, pydantic",
        "gendergap.sweep": "torch, pandas, numpy, soundfile, submitit, pydantic"},
    "gendergap/cmd_trace.py": {"analysis.trace": "pandas",
        "gendergap.steps": "registers every step class; pulls torch, pandas, pydantic"},
    "gendergap/config.py": {"gendergap.steps": "torch, pandas, numpy, soundfile"},
    "gendergap/config_schema.py": {"manifests.select": "pandas, numpy"},
    "gendergap/cost.py": {"corpora.synth": "scipy"},
    "gendergap/demo_record.py": {"gendergap.config": "pydantic",
        "gendergap.plan": "torch, pandas, numpy, soundfile, pydantic",
        "gendergap.study": "torch, pandas, numpy, soundfile, pydantic",
        "gendergap.sweep": "torch, pandas, numpy, soundfile, submitit, pydantic"},
    "gendergap/jobs.py": {"analysis.store": "pandas"},
    "gendergap/preflight.py": {"corpora.base.strict_yaml": "pydantic",
        "gendergap.sweep": "torch, pandas, numpy, soundfile, submitit, pydantic"},
    "gendergap/runs/asr.py": {"analysis.score_runs": "pandas, sacrebleu, numpy, jiwer",
        "ssl_pretrain.device": "torch", "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic"},
    "gendergap/runs/probe.py": {"analysis.probing": "torch, pandas, sklearn, numpy",
        "analysis.probing.checkpoints": "torch, pandas, sklearn, numpy",
        "ssl_pretrain.device": "torch", "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic"},
    "gendergap/runs/st.py": {"analysis.score_runs": "pandas, sacrebleu, numpy, jiwer",
        "ssl_pretrain.device": "torch", "ssl_pretrain.model_choice": "torch, pandas, numpy, soundfile, pydantic"},
    "gendergap/runs/transcribe.py": {"analysis.score_runs": "pandas, sacrebleu, numpy, jiwer",
        "analysis.scoring": "pandas, sacrebleu, numpy, jiwer", "corpora.table": "pandas",
        "downstream_asr.transcribe": "torch", "downstream_st.data": "pandas, numpy, soundfile"},
    "gendergap/steps/asr.py": {"downstream_asr.rundir": "pandas, hyperpyyaml"},
    "gendergap/warm.py": {"ssl_pretrain.run": "numpy, soundfile (the client, which imports warm.py, starts every job)"},
    "gendergap/steps/base.py": {"ssl_pretrain.device": "torch"},
    "gendergap/steps/conditions.py": {"analysis.conditions": "pandas, sacrebleu, numpy, jiwer",
        "analysis.report": "torch, pandas, matplotlib, sklearn, numpy"},
    "gendergap/steps/data.py": {"corpora.checks": "pandas", "corpora.merge": "pandas", "corpora.utterances": "pandas",
        "corpora.synth": "scipy, numpy, soundfile",
        "corpora.synth.build": "scipy, numpy, soundfile", "manifests.build": "pandas, numpy, soundfile",
        "manifests.export_speechbrain": "pandas"},
    "gendergap/steps/mixed.py": {"analysis.conditions": "pandas, sacrebleu, numpy, jiwer",
        "analysis.mixed_model": "pandas, sacrebleu, numpy, jiwer", "analysis.store": "pandas",
        "corpora.utterances": "pandas", "corpora.voice_measures": "pandas, numpy, soundfile"},
    "gendergap/steps/released.py": {"corpora.checks": "pandas"},
    "gendergap/steps/report.py": {"analysis.report": "torch, pandas, matplotlib, sklearn, numpy"},
    "gendergap/steps/seeds.py": {"analysis.seeds": "pandas, sacrebleu, numpy, jiwer"},
    "gendergap/steps/selection.py": {"corpora.checks": "pandas",
        "manifests.task_selection": "pandas, numpy, soundfile"},
    "gendergap/steps/st.py": {"analysis.mustshe": "pandas, sacrebleu, numpy, jiwer",
        "corpora.checks": "pandas",
        "downstream_st.train": "torch, pandas, numpy, soundfile"},
    "gendergap/study.py": {"gendergap.sweep": "submitit"},
    "ssl_pretrain/checkpoint_tools.py": {"corpora.utterances": "pandas",
        "manifests.build": "pandas, numpy, soundfile", "ssl_pretrain.evaluate": "numpy, soundfile"},
    "ssl_pretrain/checkpoints.py": {"ssl_pretrain.feature_store": "torch, pandas, numpy, soundfile",
        "ssl_pretrain.features": "torch, numpy, soundfile", "ssl_pretrain.safe_load": "torch"},
    "ssl_pretrain/convert.py": {"ssl_pretrain.safe_load": "torch"},
    "ssl_pretrain/hardware.py": {"corpora.base.strict_yaml": "pydantic"},
    "ssl_pretrain/pretrain_jobs.py": {"ssl_pretrain.checkpoints": "pydantic",
        "ssl_pretrain.launch": "numpy, soundfile, submitit", "ssl_pretrain.registry": "pydantic",
        "ssl_pretrain.run": "numpy, soundfile"},
    "ssl_pretrain/run.py": {"ssl_pretrain.safe_load": "torch", "ssl_pretrain.device": "torch"},
    "ssl_pretrain/study_checkpoints.py": {"manifests.build": "pandas, numpy, soundfile",
        "ssl_pretrain.checkpoints": "pydantic", "ssl_pretrain.evaluate": "torch, numpy, soundfile",
        "ssl_pretrain.registry": "pydantic", "ssl_pretrain.run": "numpy, soundfile"},
}


def _lazy_project_imports():
    """(file, module) for every import of a project module inside a function (nested ones included)."""
    project = PACKAGES + ("gendergap",)
    for rel, module, tree in _modules(project):
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    name = _imported(node, module, rel.name == "__init__.py")[0]
                elif isinstance(node, ast.Import):
                    name = node.names[0].name
                else:
                    continue
                if name.split(".")[0] in project:
                    yield str(rel), name, node.lineno


def test_lazy_project_imports_are_listed_with_their_reason():
    """Every project import inside a function is in LAZY_IMPORTS (a heavy library, or a file still to
    do); an entry no import needs any more fails too, so the list stays true."""
    seen, unlisted = set(), []
    for rel, name, line in _lazy_project_imports():
        seen.add((rel, name))
        if name not in LAZY_IMPORTS.get(rel, {}):
            unlisted.append(f"{rel}:{line}: {name}")
    assert not unlisted, ("imports inside functions that pull nothing heavy: move them to module level "
                          "(or list the heavy library they pull in LAZY_IMPORTS):\n" + "\n".join(sorted(set(unlisted))))
    stale = sorted(f"{rel}: {name}" for rel, names in LAZY_IMPORTS.items() for name in names if (rel, name) not in seen)
    assert not stale, "LAZY_IMPORTS lists imports that are gone (drop them):\n" + "\n".join(stale)


def test_the_circle_test_follows_computed_import_module_names():
    """cli.py imports its groups through import_module(f"gendergap.cmd_{group}"): the graph holds an
    edge to every gendergap.cmd_* module, so a cmd module importing cli back is a circle."""
    graph = _file_graph()
    cmds = {m for m in graph if m.startswith("gendergap.cmd_")}
    assert cmds and cmds <= graph["gendergap.cli"]


# reads of a file with pandas that is NOT an utterance table, each with what it is
# (a handed TSV/CSV -- SpeechBrain CSVs, feature indexes -- is read by corpora.base.textfile.read_delimited)
NOT_TABLES = {
    "ssl_pretrain/feature_store.py": "the store's own rows.tsv / index files",
    "downstream_asr/perturb.py": "a SpeechBrain CSV it wrote itself a moment before (its durations)",
    "analysis/trace.py": "a report's CSV table, written by pandas and read back by pandas",
    "corpora/voice_measures.py": "its own measures TSV and cache (id, speaker, gender, measures), written by pandas "
                                 "with full float precision and read back by the same parser",
}
# the loader: one TSV (corpora/table.py), several merged (corpora/merge.py), the value (corpora/utterances.py)
TABLE_LOADER = {"corpora/table.py", "corpora/merge.py", "corpora/utterances.py"}


def test_every_table_read_goes_through_the_one_loader():
    """Only the loader reads an utterance table file: no other module calls corpora.table.read_table,
    and pandas.read_csv appears only where the file read is another format (NOT_TABLES, each named)."""
    breaches = []
    for rel, _module, tree in _modules(PACKAGES + ("gendergap",)):
        if str(rel) in TABLE_LOADER:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            pandas = isinstance(func, ast.Attribute) and getattr(func.value, "id", "") in ("pd", "pandas")
            if name == "read_table" or (pandas and name == "read_csv" and str(rel) not in NOT_TABLES):
                breaches.append(f"{rel}:{node.lineno}: {name}")
    assert not breaches, "table reads outside corpora.utterances.UtteranceTable.load:\n" + "\n".join(breaches)
    assert all((ROOT / p).is_file() for p in NOT_TABLES), "a NOT_TABLES entry names a file that is gone"


# Issue 47: a handed file is parsed by the boundary's readers only -- JSON in corpora/base/boundary.py, line
# files and tables (TSV, CSV) in corpora/base/textfile.py, YAML in corpora/base/strict_yaml.py. Any other
# parse call names its reason.
READERS = {"corpora/base/boundary.py", "corpora/base/textfile.py", "corpora/base/strict_yaml.py"}
PARSE_CALLS = {("json", "load"), ("json", "loads"), ("yaml", "load"), ("yaml", "safe_load"), ("yaml", "full_load"),
               ("yaml", "unsafe_load"), ("yaml", "compose"), (None, "load_hyperpyyaml")}
RAW_PARSES = {
    ("gendergap/warm.py", "loads"): "the warm server's socket messages from this user's own sweep process, no file",
    ("ssl_pretrain/watchdog.py", "loads"): "fairseq's JSON log lines, read live from the run's own child process",
    ("corpora/synth/build.py", "loads"): "json.loads(json.dumps(config)): its own value made JSON-shaped",
    ("downstream_asr/transcribe.py", "loads"): "json.loads(json.dumps(header)): its own value made JSON-shaped",
    ("corpora/readers/mtedx.py", "load"): "a corpus's segment list (~100k entries): PyYAML's C safe loader (no tag "
                                          "builds an object), beyond the config reader's budget of 10k values",
    ("downstream_asr/decode.py", "safe_load"): "a command-line KEY=VALUE value (flags are trusted)",
    ("downstream_st/presets.py", "safe_load"): "a command-line KEY=VALUE value (flags are trusted)",
    ("downstream_asr/rundir.py", "load_hyperpyyaml"): "the package's own recipe template (trusted), never handed",
    ("downstream_asr/export.py", "load_hyperpyyaml"): "gendergap's own rendering of the template, compared byte for "
                                                      "byte with the folder's file first",
}
# the one special-file test is boundary.special_kind; a stat mode test elsewhere names its reason
MODE_TESTS = {"S_ISREG", "S_ISDIR", "S_ISFIFO", "S_ISCHR", "S_ISBLK", "S_ISSOCK", "S_ISLNK"}
RAW_MODE_TESTS: dict[str, str] = {}


def _parse_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            owner = getattr(f.value, "id", None) if isinstance(f, ast.Attribute) else None
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if (owner, name) in PARSE_CALLS:
                yield node.lineno, name
        if isinstance(node, ast.Attribute) and node.attr in MODE_TESTS:
            yield node.lineno, node.attr


def test_handed_files_are_parsed_only_by_the_boundary_readers():
    """No raw json/yaml parse and no stat mode test outside the boundary, but those listed with a reason;
    a listed exception that is gone fails too (the list stays true)."""
    breaches, seen = [], set()
    for rel, _module, tree in _modules(PACKAGES + ("gendergap",)):
        if str(rel) in READERS:
            continue
        for line, name in _parse_calls(tree):
            if (str(rel), name) in RAW_PARSES or str(rel) in RAW_MODE_TESTS and name in MODE_TESTS:
                seen.add((str(rel), name))
                continue
            breaches.append(f"{rel}:{line}: {name}")
    assert not breaches, ("handed files parsed outside corpora.base.boundary / textfile / strict_yaml (use read_json, "
                          "parse_json, read_lines, read_yaml, special_kind):\n" + "\n".join(breaches))
    stale = set(RAW_PARSES) - seen
    assert not stale, f"RAW_PARSES lists parses that are gone: {sorted(stale)}"


# Issue 66: a text file's lines and fields are read by corpora.base.textfile only -- read_lines (split on "\n"
# only: str.splitlines also splits inside a line, on U+2028, U+0085, \x1c..., and shifts every later line) and
# read_delimited (a header and rows, each with its line; UTF-8 or one line naming file and line). A raw
# pandas.read_csv (NOT_TABLES / TABLE_LOADER give its reason), csv.reader / csv.DictReader, or .splitlines() on
# what a file read returned, elsewhere names its reason here: (file, call) -> why.
RAW_TEXT_READS = {
    ("corpora/prepared_audio.py", "csv.DictReader"): "the prepared-audio cache's own index.tsv, written by "
        "csv.DictWriter under the cache's lock and read back by its pair (csv's quoting both ways); each row is "
        "checked against its file's size and mtime before reuse",
    # fairseq's log: not a handed file but the output of the run's own child process (stdout and stderr),
    # decoded with errors="replace" and split as the watchdog's log parser always has (str.splitlines also
    # ends a line at a lone \r); changing that split changes what the watchdog sees, so it is left as it is
    ("ssl_pretrain/evaluate.py", "splitlines"): "fairseq's training log of the run's own child (the last validation)",
    ("ssl_pretrain/launch.py", "splitlines"): "fairseq's training log of the run's own child, read live (the watchdog)",
    ("ssl_pretrain/run.py", "splitlines"): "fairseq's training log of the run's own child: the watchdog, resume point",
    ("downstream_st/train.py", "splitlines"): "fairseq's log of the run's own child: a failure's last lines, the "
                                               "epoch summaries echoed live",
}
# what returns a file's text or bytes: ``.splitlines()`` on it (or on a name bound to it) is a raw line read
FILE_READS = {"read_text", "read_bytes", "read", "readlines", "read_utf8", "read_log_from"}


def _own_nodes(scope):
    """The nodes of a module or function body, nested functions' bodies left to their own scope."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _reads_a_file(node, bound: set[str]) -> bool:
    return any((isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute)
                                             else getattr(n.func, "id", "")) in FILE_READS)
               or (isinstance(n, ast.Name) and n.id in bound) for n in ast.walk(node))


def _bound_to_file_text(nodes: list) -> set[str]:
    """Names a scope binds to what a file read returned (``text = p.read_text()``, ``data, _ = ...``,
    ``for line in text``), to a fixed point."""
    bound: set[str] = set()
    while True:
        before = len(bound)
        for n in nodes:
            pairs = ([(t, n.value) for t in n.targets] if isinstance(n, ast.Assign)
                     else [(n.target, n.value)] if isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value
                     else [(n.target, n.iter)] if isinstance(n, (ast.For, ast.comprehension))
                     else [(i.optional_vars, i.context_expr) for i in n.items if i.optional_vars]
                     if isinstance(n, ast.With) else [])
            bound |= {x.id for t, v in pairs if _reads_a_file(v, bound) for x in ast.walk(t) if isinstance(x, ast.Name)}
        if len(bound) == before:
            return bound


def _raw_text_reads(tree):
    """(line, call) of every raw text-file parse in a module: pandas read_csv, csv.reader / DictReader (called
    or imported by name), and ``.splitlines()`` on a file read's result."""
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        nodes = list(_own_nodes(scope))
        bound = _bound_to_file_text(nodes)
        for n in nodes:
            if isinstance(n, ast.ImportFrom) and n.module == "csv":
                yield from ((n.lineno, f"csv.{a.name}") for a in n.names if a.name in ("reader", "DictReader"))
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            owner, name = getattr(n.func.value, "id", None), n.func.attr
            if name == "read_csv" and owner in ("pd", "pandas"):
                yield n.lineno, "read_csv"
            elif name in ("reader", "DictReader") and owner == "csv":
                yield n.lineno, f"csv.{name}"
            elif name == "splitlines" and _reads_a_file(n.func.value, bound):
                yield n.lineno, "splitlines"


def test_text_files_are_read_only_by_the_boundary_readers():
    """No raw TSV/CSV or line read of a file outside corpora.base.textfile, but those listed with a reason
    (RAW_TEXT_READS; pandas reads in NOT_TABLES / TABLE_LOADER); a listed exception that is gone fails too."""
    breaches, seen = [], set()
    for rel, _module, tree in _modules(PACKAGES + ("gendergap",)):
        if str(rel) in READERS:
            continue
        for line, call in sorted(set(_raw_text_reads(tree))):
            if (str(rel), call) in RAW_TEXT_READS:
                seen.add((str(rel), call))
            elif not (call == "read_csv" and (str(rel) in NOT_TABLES or str(rel) in TABLE_LOADER)):
                breaches.append(f"{rel}:{line}: {call}")
    assert not breaches, ("text files parsed outside corpora.base.textfile (use read_lines / read_delimited, or "
                          "list the exception with its reason in RAW_TEXT_READS):\n" + "\n".join(breaches))
    stale = sorted(set(RAW_TEXT_READS) - seen)
    assert not stale, f"RAW_TEXT_READS lists reads that are gone: {stale}"


def test_the_raw_text_read_check_finds_a_planted_read():
    """The checker on a small module: each raw read is found, a message's splitlines is not."""
    source = (
        "import csv\nimport pandas as pd\nfrom csv import DictReader\n\n"
        "def f(path, e):\n"
        "    text = path.read_text(encoding='utf-8')\n"
        "    head, _, rest = text.partition('\\n')\n"
        "    a = rest.splitlines()\n"                               # bound to the file's text: found
        "    b = open(path).read().splitlines()\n"                  # found
        "    c = csv.reader(open(path), delimiter='\\t')\n"         # found
        "    d = pd.read_csv(path, sep='\\t')\n"                    # found
        "    return str(e).splitlines()[0], __doc__.splitlines()\n"  # a message, a docstring: not file reads
        "\n"
        "def g(text):\n"
        "    return text.splitlines()\n")                           # another scope's `text`: not bound here
    found = sorted(_raw_text_reads(ast.parse(source)))
    assert found == [(3, "csv.DictReader"), (8, "splitlines"), (9, "splitlines"), (10, "csv.reader"),
                     (11, "read_csv")], found


def test_one_name_check():
    """Names that become paths are checked by boundary.check_name only: no other module defines a
    name or label check of its own."""
    own = [f"{rel}:{node.lineno}: {node.name}" for rel, _m, tree in _modules(PACKAGES + ("gendergap",))
           if str(rel) not in READERS for node in ast.walk(tree)
           if isinstance(node, ast.FunctionDef) and node.name in ("check_name", "check_label", "is_special")
           and not any(isinstance(c, ast.Call) and getattr(c.func, "attr", getattr(c.func, "id", None)) == node.name
                       for c in ast.walk(node))]
    assert not own, "a second name check (delegate to corpora.base.boundary):\n" + "\n".join(own)


CHECKPOINT_ARGS = {"ckpt", "checkpoint", "ckpt_spec"}


def test_packages_take_a_resolved_model_not_a_checkpoint_name_and_a_registry():
    """Issue 48: a checkpoint is one value below gendergap/ (ssl_pretrain.model_choice.ModelChoice:
    checkpoint, registry entry, trust, device, precision), resolved once at the edge (a command's
    keyword function or a step); no package function or dataclass carries a checkpoint name and a
    registry side by side and resolves them itself."""
    pairs = []
    for rel, _module, tree in _modules(PACKAGES):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {a.arg for a in node.args.args + node.args.kwonlyargs}
            elif isinstance(node, ast.ClassDef):
                names = {s.target.id for s in node.body
                         if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            else:
                continue
            if names & CHECKPOINT_ARGS and any("registry" in n for n in names):
                pairs.append(f"{rel}:{node.lineno}: {node.name}")
    assert not pairs, "take a ModelChoice instead of (checkpoint, registry):\n" + "\n".join(pairs)


def test_one_place_makes_an_extractor_from_a_checkpoint():
    """The chain checkpoint -> extractor -> store view is written once (ModelChoice.extractor/features)."""
    callers = [f"{rel}:{node.lineno}" for rel, _m, tree in _modules(PACKAGES + ("gendergap",))
               if str(rel) not in ("ssl_pretrain/model_choice.py", "ssl_pretrain/feature_store.py")
               for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "attr", getattr(node.func, "id", None)) == "extractor_for"]
    assert not callers, "call ModelChoice(...).extractor / .features instead of extractor_for:\n" + "\n".join(callers)
