"""A YAML config checked by a pydantic model, every problem one line ``file:line: what -- fix``.

YAML is read with PyYAML's composer: its node tree gives the line of every key and list item,
so pydantic's error locations become lines of the file, and a key given twice in one mapping
is refused naming both lines (YAML itself keeps the last one silently). Values resolve by the
YAML 1.1 rules PyYAML's ``safe_load`` uses (``yes`` is true, ``1e3`` a string); a tag that
``safe_load`` refuses (``!python/name:...``) is refused here too, and so is any tag on a mapping
or a list (``!!python/tuple [..]``, ``!!set``, ``!!omap``): ``safe_load`` would drop or reinterpret it.

A config is small and read from people we do not know, so the reader is bounded: aliases
repeat their anchor's whole content (a "billion laughs" file of 8 levels x 10 aliases expands
to 10^8 values from 10 lines), so at most ``MAX_VALUES`` values after expansion and
``MAX_DEPTH`` levels of nesting; an anchor used inside itself (``&a [*a]``) is refused; a file
over ``MAX_BYTES`` is refused before it is parsed. Each is one line naming the file and line.

A model's own checks raise ``refuse(message, fix)`` to keep their words in the error.
``field_lines`` describes a model's fields for people (type, default, choices, description).
"""
from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from corpora.base.boundary import regular_file
from corpora.base.errors import UserError


def refuse(message: str, fix: str = "") -> PydanticCustomError:
    """A validation error that keeps our own message and fix (``user_error`` prints both)."""
    return PydanticCustomError("refused", "{message}", {"message": message, "fix": fix})


MAX_BYTES = 1_000_000     # the built-in configs are ~4 kB
MAX_VALUES = 10_000       # values after alias expansion (the built-in configs: ~300)
MAX_DEPTH = 40            # levels of nesting (the built-in configs: 5)
PLAIN_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def read_yaml(path: Path, missing_fix: str, what: str = "config") -> tuple[Any, dict]:
    """The file as plain values, and the line of every key path (``("tasks", "st")`` -> 9)."""
    if not path.is_file():
        raise UserError(f"no such {what} file", path=path, fix=missing_fix)
    if path.stat().st_size > MAX_BYTES:
        raise UserError(f"the {what} is {path.stat().st_size:,} bytes; a {what} is a few kB (limit {MAX_BYTES:,})",
                        path=path, fix=f"give the {what} file itself, not a data file")
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise UserError(f"not valid YAML: {getattr(e, 'problem', e)}", path=path,
                        line=mark.line + 1 if mark else None, fix="fix the YAML syntax") from None
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", path=path, fix=f"save the {what} as UTF-8") from None
    except RecursionError:  # PyYAML's composer recurses once per level
        raise UserError(f"the YAML is nested too deeply (more than {MAX_DEPTH} levels)", path=path,
                        fix=f"a {what} nests a few levels: flatten it") from None
    if root is None:
        raise UserError(f"the {what} is empty", path=path, fix=missing_fix)
    marks: dict[tuple, int] = {}
    return _plain(root, (), marks, path, _Budget()), marks


class _TagsAsNone(yaml.SafeLoader):
    """Safe YAML in which every tagged value (an object HyperPyYAML would build: ``!new:``, ``!ref``,
    ``!name:``) reads as None: nothing is built or imported, only the keys and plain values remain."""


_TagsAsNone.add_multi_constructor("!", lambda loader, suffix, node: None)


def read_hyperpyyaml_keys(path: Path, what: str = "hyperparams.yaml") -> dict:
    """A HyperPyYAML file (SpeechBrain's hyperparams.yaml, the package's recipe templates) as a mapping of
    its top-level keys to plain values, tagged values None -- to see which keys it has, never to build it."""
    regular_file(path, what, max_bytes=MAX_BYTES, fix=f"copy the {what} again")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_TagsAsNone) or {}
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"the {what} is not YAML ({first[:120]})", path=path, fix=f"copy the {what} again") from None
    if not isinstance(data, dict):
        raise UserError(f"the {what} is not a mapping of keys", path=path, fix=f"copy the {what} again")
    return data


class _Budget:
    """What one read has expanded so far, and the nodes being expanded (an alias's anchor among
    them is a recursive anchor)."""

    def __init__(self):
        self.values = 0
        self.open: set[int] = set()


def _plain(node: yaml.Node, at: tuple, marks: dict, path: Path, budget: _Budget) -> Any:
    """The node as plain Python values; records the line of every key and list item in ``marks``.

    PyYAML's composer gives an alias the very node object of its anchor, so expanding the tree
    expands every alias: counted against ``MAX_VALUES``, and a node met again while it is still
    being expanded is an anchor used inside itself."""
    line = node.start_mark.line + 1
    budget.values += 1
    if budget.values > MAX_VALUES:
        raise UserError(f"the YAML expands to more than {MAX_VALUES:,} values (aliases repeat their anchor's "
                        "content; a config has a few hundred)", path=path, line=line,
                        fix="write the values out, or use fewer nested aliases (*name)")
    if len(at) > MAX_DEPTH:
        raise UserError(f"the YAML is nested more than {MAX_DEPTH} levels deep", path=path, line=line,
                        fix="a config nests a few levels: flatten it")
    if id(node) in budget.open:
        raise UserError("an anchor is used inside itself (a recursive alias): its value would never end",
                        path=path, line=line, fix="replace the alias (*name) inside the anchored value by the values")
    plain_tag = PLAIN_TAGS.get(type(node))
    if plain_tag is not None and node.tag != plain_tag:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise UserError(f"tag {tag} on a {'mapping' if plain_tag.endswith('map') else 'list'}: a config "
                        "holds plain mappings, lists and values", path=path, line=line, fix="remove the tag (!...)")
    if plain_tag is None:
        return _scalar(node, path)
    budget.open.add(id(node))
    try:
        if isinstance(node, yaml.MappingNode):
            out = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    raise UserError("a key is a mapping or a list", path=path, line=knode.start_mark.line + 1,
                                    fix="keys are plain names")
                key, kline = str(knode.value), knode.start_mark.line + 1
                if key in out:
                    raise UserError(f"key '{key}' appears twice in one mapping (first on line {marks[at + (key,)]})",
                                    path=path, line=kline, fix="remove or rename one of them")
                marks[at + (key,)] = kline
                out[key] = _plain(vnode, at + (key,), marks, path, budget)
            return out
        for i, item in enumerate(node.value):
            marks[at + (i,)] = item.start_mark.line + 1
        return [_plain(item, at + (i,), marks, path, budget) for i, item in enumerate(node.value)]
    finally:
        budget.open.discard(id(node))


def _scalar(node: yaml.Node, path: Path) -> Any:
    try:
        return yaml.constructor.SafeConstructor().construct_object(node)
    except yaml.YAMLError as e:   # e.g. a tag safe_load would refuse too
        raise UserError(f"not a plain YAML value: {getattr(e, 'problem', e)}", path=path,
                        line=node.start_mark.line + 1, fix="write a string, number, true/false or null") from None


def validate(model: type[BaseModel], raw: Any, at: tuple, marks: dict, path: Path, hint: str = "",
             subjects: dict | None = None) -> dict:
    """``raw`` (found at key path ``at`` of the file) checked by ``model``; its values with the
    defaults filled in. The first problem is one UserError; ``hint`` is added to unknown-key fixes;
    ``subjects`` names the entries of top-level mappings in refusals ({"tasks": "task"})."""
    try:
        return model.model_validate(raw).model_dump()
    except ValidationError as e:
        errors = e.errors(include_url=False)
        first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])  # a typo explains the rest
        raise user_error(first, model, at, marks, path, hint, subjects or {}) from None


def user_error(err: dict, model: type[BaseModel], at: tuple, marks: dict, path: Path, hint: str = "",
               subjects: dict | None = None) -> UserError:
    """One pydantic error as one line: the key path, the line it is on, what is wrong, the fix."""
    rel = tuple(err["loc"])
    loc = at + rel
    known = next(loc[:n] for n in range(len(loc), -1, -1) if loc[:n] in marks or n == 0)  # in the file
    line = marks.get(known, 1)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = dotted(loc[:-1])
        keys = list(_model_at(model, rel[:-1]).model_fields)
        close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(keys))}"
        return UserError(f"unknown key '{loc[-1]}' in {repr(parent) if parent else 'the config'}", path=path,
                         line=line, fix=fix + hint)
    annotation, field = _annotation_at(model, rel)
    doc = field.description if field is not None else None
    if kind == "missing":
        return UserError(f"'{dotted(loc)}' is required", path=path, line=line, fix=doc)
    if kind == "refused":
        subject = (subjects or {}).get(loc[0]) if len(loc) > 1 else None
        who = f"{subject} '{loc[1]}'" if subject else repr(dotted(known))
        return UserError(f"{who}: {err['ctx']['message']}", path=path, line=line, fix=err["ctx"]["fix"] or None)
    if kind == "literal_error":
        return UserError(f"'{dotted(known)}' is {err['input']!r}", path=path, line=line,
                         fix="use one of: " + ", ".join(map(str, choices(annotation))))
    value = err["input"]
    return UserError(f"'{dotted(known)}' must be {type_name(annotation, ' or ')}, got {type(value).__name__} "
                     f"{value!r}", path=path, line=line, fix=doc)


def dotted(loc: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))


def _annotation_at(model: type[BaseModel], loc: tuple):
    """The type found at ``loc`` inside ``model``, and the last field on the way (for its description).
    Stops at a part that is no key or item (pydantic names union members in its locations)."""
    annotation, field = model, None
    for part in loc:
        annotation = bare(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and part in annotation.model_fields:
            field = annotation.model_fields[part]
            annotation = field.annotation
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            break
    return bare(annotation), field


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    annotation, _ = _annotation_at(model, loc)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else model


# --- types and fields described for people ------------------------------------------------------

def bare(annotation: Any) -> Any:
    """``X`` from ``Annotated[X, ...]`` and from ``X | None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        return bare(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return bare(members[0])
    return annotation


def choices(annotation: Any) -> tuple:
    """The values a Literal field allows (empty for any other field)."""
    annotation = bare(annotation)
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()


def type_name(annotation: Any, union: str = "/") -> str:
    """A reader's name for a field's type: str, int/float, list of str, mapping."""
    annotation = bare(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return type(args[0]).__name__
    if origin in (Union, types.UnionType):
        return union.join(type_name(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {type_name(args[0])}" if args and args[0] is not Any else "list"
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, (dict, BaseModel))):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def model_lines(model: type[BaseModel], indent: int, lines: list[str], given: dict | None = None) -> None:
    for name, field in model.model_fields.items():
        field_lines(name, field, indent, lines, (given or {}).get(name))


def field_lines(name: str, field: FieldInfo, indent: int, lines: list[str], allowed: tuple | None = None) -> None:
    """``name: type, default X (choices) -- description``; a nested model as its own indented block."""
    pad, annotation = "  " * indent, bare(field.annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        lines.append(f"{pad}{name}:        # {field.description}" if field.description else f"{pad}{name}:")
        model_lines(annotation, indent + 1, lines)
        return
    default = "required" if field.is_required() else f"default {field.get_default(call_default_factory=True)!r}"
    allowed = allowed or choices(annotation)
    listed = f" ({'|'.join(map(str, allowed))})" if allowed else ""
    lines.append(f"{pad}{name}: {type_name(field.annotation)}, {default}{listed} -- {field.description}")
