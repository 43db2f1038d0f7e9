"""Every setting of a node, generated from the config dataclasses themselves.

The key, type, default and environment variables come from the fields (and their
metadata: :func:`streamwal.environment.default_from`, :func:`~streamwal.environment.set_by`);
the description from the ``#:`` comment above a field, else from a ``- ``name``: ...``
item of its class's docstring. Nothing is written twice, so ``streamwal config show``
and the table in ``docs/settings.md`` (which a test regenerates) cannot drift from the
code.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from streamwal.node.config import ENV_PREFIX, SECRET_KEYS, NodeConfig, load_config

__all__ = ["FORMATS", "Setting", "render", "settings"]

#: what ``--format`` takes
FORMATS = ("table", "yaml", "json")

#: the type of a row that describes a section, not a key
SECTION = "section"

#: defaults computed on the machine at hand, shown as what they mean instead
_COMPUTED = {"pulsar.client_log_file": "<the user's log folder>/pulsar-client.log"}


@dataclass(frozen=True)
class Setting:
    """One key of a node's file."""

    key: str
    type: str
    default: Any
    #: what this configuration holds (``None`` when only the defaults were asked for)
    value: Any
    #: ``STREAMWAL_<SECTION>__<KEY>``, and a standard variable that wins, if any
    environment: tuple[str, ...]
    #: the variable that stands in for the default, beneath the file, if any
    default_from: str | None
    description: str


def settings(config: NodeConfig | None = None) -> list[Setting]:
    """Every key, in the order of the dataclasses; ``config``: the values to show
    beside the defaults (the defaults are those of an empty environment)."""
    defaults = load_config(environ={})
    return list(_walk(NodeConfig, "", defaults, config))


def _walk(cls: type, prefix: str, default: Any, value: Any) -> Iterator[Setting]:
    hints = typing.get_type_hints(cls)
    docs = _descriptions(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        hint = hints[f.name]
        own_default = getattr(default, f.name)
        own_value = None if value is None else getattr(value, f.name)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if docs.get(f.name):  # what the section is for, above its keys
                yield Setting(key, SECTION, None, None, (), None, docs[f.name])
            yield from _walk(hint, key, own_default, own_value)
            continue
        # a list item's keys are set in the file only: no variable names one item
        variables = [] if "[]" in key else [ENV_PREFIX + key.upper().replace(".", "__")]
        if "env" in f.metadata:
            variables.append(f.metadata["env"])
        yield Setting(
            key=key,
            type=_type_name(hint),
            default=_COMPUTED.get(key) or _plain(f.name, own_default),
            value=None if value is None else _plain(f.name, own_value),
            environment=tuple(variables),
            default_from=f.metadata.get("default_env"),
            description=docs.get(f.name, ""),
        )
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            # a list of mappings (auth.identities): each item's keys, under key[]
            yield from _walk(item, f"{key}[]", item(), None)


def _plain(name: str, value: Any) -> Any:
    """``value`` as YAML and JSON write it; a secret only as whether it is set."""
    if name in SECRET_KEYS and value:
        return "<redacted>"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(name, v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " | ".join([_type_name(a) for a in inner] + ["null"])
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "mapping"  # a list item's keys follow as rows of their own
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    return getattr(hint, "__name__", str(hint))


@cache
def _descriptions(cls: type) -> Mapping[str, str]:
    """Each field's ``#:`` comment, else its docstring item; base classes' too."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        found.update(_docstring_items(klass))
        found.update(_comments(klass))
    return found


def _comments(cls: type) -> dict[str, str]:
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):  # no source (a frozen install): docstrings only
        return {}
    source = textwrap.dedent("".join(lines))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    text = source.splitlines()
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        comment: list[str] = []
        line = node.lineno - 2  # the line above, 0-based
        while line >= 0 and text[line].strip().startswith("#:"):
            comment.insert(0, text[line].strip()[2:].strip())
            line -= 1
        if comment:
            found[node.target.id] = _one_line(" ".join(comment))
    return found


_ITEM = re.compile(r"^- (?P<head>(?:``\w+``(?: / |, | and )?)+): (?P<text>.*)$")


def _docstring_items(cls: type) -> dict[str, str]:
    """``- ``name``: text`` items (continued on indented lines) of the class docstring."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    found: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for name in names:
            found[name] = _one_line(" ".join(text))

    for line in doc.splitlines():
        match = _ITEM.match(line)
        if match:
            flush()
            names = re.findall(r"``(\w+)``", match["head"])
            text = [match["text"]]
        elif names and line.startswith("  "):
            text.append(line.strip())
        else:
            flush()
            names, text = [], []
    flush()
    return found


def _one_line(text: str) -> str:
    """Collapsed, without reST roles, fit for a table cell."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"``{m[1].rsplit('.', 1)[-1]}``", text)
    text = text.replace("``", "`")
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def render(rows: list[Setting], fmt: str, *, values: bool) -> str:
    """``rows`` as a Markdown table, YAML or JSON; ``values``: include what the
    configuration holds beside each default."""
    if fmt == "table":
        return _table(rows, values=values)
    data = [
        {
            "key": r.key,
            "type": r.type,
            "default": r.default,
            **({"value": r.value} if values else {}),
            "environment": list(r.environment),
            "default_from": r.default_from,
            "description": r.description,
        }
        for r in rows
    ]
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")


def _cell(value: Any) -> str:
    shown = json.dumps(value) if not isinstance(value, str) else (value or '""')
    return f"`{shown}`".replace("|", "\\|")


def _table(rows: list[Setting], *, values: bool) -> str:
    head = ["key", "type", "default", *(["value"] if values else []), "environment", "about"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        env = ", ".join(f"`{v}`" for v in r.environment)
        if r.default_from:
            env += f"; default: `{r.default_from}`"
        section = r.type == SECTION
        cells = [
            f"`{r.key}`",
            r.type.replace("|", "\\|"),
            "" if section else _cell(r.default),
            *([("" if section else _cell(r.value))] if values else []),
            env,
            r.description,
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
