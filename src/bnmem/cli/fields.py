"""Command-line flags generated from a pydantic config's fields (a lens's own options).

A field of a simple type (int, float, str, bool, a Literal, a list of those, or
None-able) becomes ``--field-name`` with the field's default and its description
(else the class docstring's ``Attributes:`` entry); any other field stays
reachable through ``--set``.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class FieldFlag:
    """One config field as a flag: its name, element type, and whether it is a comma list."""

    name: str
    kind: type
    is_list: bool
    default: Any
    help: str

    def parameter(self) -> inspect.Parameter:
        """The typer parameter (lists and None-able fields are typed as optional strings/values)."""
        if self.is_list:
            default = None if self.default is None else ",".join(str(v) for v in self.default)
            ann = Annotated[Optional[str], typer.Option(help=f"{self.help} (comma list)")]
        elif self.kind is bool:
            flag = self.name.replace("_", "-")
            ann = Annotated[bool, typer.Option(f"--{flag}/--no-{flag}", help=self.help)]
            default = self.default
        else:
            ann = Annotated[Optional[self.kind], typer.Option(help=self.help)]  # type: ignore[name-defined]
            default = self.default
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=default)

    def value(self, raw: Any) -> Any:
        """The config value of the flag's raw value (a comma list parsed; a bad item: one line naming the flag)."""
        if not self.is_list or raw is None:
            return raw
        from bnmem.cli.app import parse_flag_list

        return parse_flag_list(raw, self.kind, "--" + self.name.replace("_", "-"), f"{self.kind.__name__} values")


def _element(annotation: Any) -> tuple[type, bool] | None:
    """(scalar type, is a list) of a field annotation, or None when no flag can say it."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _element(args[0]) if len(args) == 1 else None
    if origin is Literal:
        kinds = {type(v) for v in typing.get_args(annotation)}
        kind = next(iter(kinds))
        return (kind, False) if len(kinds) == 1 and kind in SCALARS else None
    if origin is list:
        (arg,) = typing.get_args(annotation) or (None,)
        inner = _element(arg)
        return (inner[0], True) if inner and not inner[1] and inner[0] is not bool else None
    return (annotation, False) if annotation in SCALARS else None


def docstring_attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` entries of a class docstring (Google style), name -> first sentence, one line."""
    doc = inspect.getdoc(cls) or ""
    section = re.search(r"^Attributes:\n((?:[ \t]+.*\n?|\n)*)", doc, flags=re.M)
    found: dict[str, str] = {}
    if not section:
        return found
    for names, text in re.findall(r"^ {4}([\w, ]+):[ \t]*(.*(?:\n {6,}.*)*)", section.group(1), flags=re.M):
        line = " ".join(text.replace("``", "").split())
        for name in names.split(","):
            found[name.strip()] = line
    return found


def field_flags(config: type[BaseModel], skip: set[str]) -> list[FieldFlag]:
    """A flag for each field of ``config`` not in ``skip`` that has a simple type and a default."""
    notes = docstring_attributes(config)
    flags = []
    for name, field in config.model_fields.items():
        element = _element(field.annotation)
        if name in skip or element is None or field.default is PydanticUndefined:
            continue
        text = field.description or notes.get(name) or f"the config field {name}"
        flags.append(FieldFlag(name, element[0], element[1], field.default, text))
    return flags
