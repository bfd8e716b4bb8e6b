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
from typing import Annotated, Any, Callable, Iterable, Literal, Optional, TypeVar, Union

import typer
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from bnmem.config import validation_line
from bnmem.errors import BnmemError

M = TypeVar("M", bound=BaseModel)

SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class FieldFlag:
    """One config field as a flag: its name, element type, and whether it is a comma list."""

    name: str
    kind: type
    is_list: bool
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parameter(self) -> inspect.Parameter:
        """The typer parameter (lists and None-able fields are typed as optional strings/values)."""
        text = shown(self.help)
        if self.is_list:
            default = None if self.default is None else ",".join(str(v) for v in self.default)
            ann = Annotated[Optional[str], typer.Option(help=f"{text} (comma list)")]
        elif self.kind is bool:
            flag = self.name.replace("_", "-")
            ann = Annotated[bool, typer.Option(f"--{flag}/--no-{flag}", help=text)]
            default = self.default
        else:
            ann = Annotated[Optional[self.kind], typer.Option(help=text)]  # type: ignore[name-defined]
            default = self.default
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=default)

    def value(self, raw: Any) -> Any:
        """The config value of the flag's raw value (a comma list parsed; a bad item: one line naming the flag)."""
        if not self.is_list or raw is None:
            return raw
        from bnmem.cli.app import parse_flag_list

        return parse_flag_list(raw, self.kind, self.flag, f"{self.kind.__name__} values")


def shown(text: str) -> str:
    """Help text as the help renderer shows it: rich markup escaped, so ``pip install 'bnmem[mlflow]'`` keeps its
    ``[mlflow]`` (rich would read it as a style tag and drop it)."""
    try:
        from rich.markup import escape
    except ImportError:  # no rich: click prints the text as it is
        return text
    return escape(text)


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


def flag_names(flags: Iterable[FieldFlag]) -> dict[str, str]:
    """Config path -> the flag that sets it: ``flags`` (a command's own) and the shared experiment flags."""
    from bnmem.cli.app import FLAG_FIELDS

    return {**{path: "--" + flag.replace("_", "-") for flag, path in FLAG_FIELDS.items()},
            **{f.name: f.flag for f in flags}}


def validated(config: type[M], values: dict[str, Any], flags: Iterable[FieldFlag] = ()) -> M:
    """``values`` validated by ``config``; a bad value is one line naming its flag (or the ``--set`` path).

    Raises:
        BnmemError: ``invalid configuration: --shadow-models: must be even and at least 4, got 5``.
    """
    try:
        return config.model_validate(values)
    except ValidationError as e:
        raise BnmemError("invalid configuration: " + validation_line(e, names=flag_names(flags))) from None


def with_flags(flags: list[FieldFlag]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the command's ``**options`` become ``flags`` (typer reads the signature), each value parsed.

    The command receives its own parameters and ``options``: field name -> config value.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        # Resolved in fn's own module (its annotations may be strings under `from __future__ import annotations`).
        hints = typing.get_type_hints(fn, include_extras=True)
        fixed = [p.replace(annotation=hints.get(p.name, p.annotation))
                 for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]

        def command(**kwargs: Any) -> Any:
            own = {f.name: f.value(kwargs.pop(f.name)) for f in flags}
            return fn(**kwargs, **own)

        command.__name__, command.__doc__, command.__module__ = fn.__name__, fn.__doc__, fn.__module__
        command.__signature__ = sig.replace(parameters=fixed + [f.parameter() for f in flags])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}  # type: ignore[attr-defined]
        return command

    return deco
