"""How an option is declared (:class:`Option`), and the parser, Flex Template metadata and Markdown table options give.

Standard library only: the CLI parser is built from these before any dependency is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Template:
    """How an option appears as a Flex Template parameter (its name is the option's dest)."""

    label: str
    help: str
    regex: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Option:
    """One command option: its flag, how argparse reads it, and where else it appears."""

    flag: str
    help: str
    doc_default: str = ""  # the default as docs/options.md shows it ("" for none)
    type: Optional[Callable[[str], Any]] = None
    default: Any = None
    choices: Optional[Sequence[Any]] = None
    metavar: Optional[str] = None
    switch: bool = False  # a flag without a value (store_true)
    negates: Optional[str] = None  # a flag that turns off this dest (store_false)
    required: bool = False
    short: Optional[str] = None
    exclusive_group: Optional[str] = None
    recorded_as: Optional[str] = None  # its key in dataset.json's "options"
    template: Optional[Template] = None
    doc: Optional[str] = None  # its meaning in docs/options.md (Markdown, with links), when richer than ``help``
    python_types: Tuple[Any, ...] = (str,)  # what the Python API takes for an option without a ``type``

    @property
    def dest(self) -> str:
        return self.negates or self.flag.lstrip("-").replace("-", "_")

    @property
    def default_value(self) -> Any:
        """The value of ``dest`` when the option is not given."""
        if self.switch:
            return False
        return True if self.negates else self.default

    def value_of(self, value: Any) -> Any:
        """The Python API's ``value`` for ``dest``, checked as the flag's text is (None: not given); ValueError
        with the line the command line would print."""
        if self.switch or self.negates:
            if not isinstance(value, bool):
                raise ValueError(f"{self.dest}: {value!r} is not True or False ({self.flag})")
            return value
        if value is None:
            return self.default
        if self.type is not None:
            try:
                value = self.type(value) if self.type not in (int, float) else _typed(self.type, value)
            except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
                typed = self.type in (int, float)
                message = f"invalid {getattr(self.type, '__name__', '')} value: {str(value)!r}" if typed else str(e)
                raise ValueError(f"argument {self.flag}: {message}") from None
        elif not isinstance(value, self.python_types):
            raise ValueError(f"{self.dest}: {value!r} is not a {self.dest.replace('_', ' ')} ({self.flag})")
        if self.choices is not None and value not in self.choices:
            choices = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"argument {self.flag}: invalid choice: {value!r} (choose from {choices})")
        return value

    def add_to(self, parser) -> None:
        flags = [self.short, self.flag] if self.short else [self.flag]
        kwargs: Dict[str, Any] = {"help": self.help.replace("%", "%%")}
        if self.switch:
            kwargs["action"] = "store_true"
        elif self.negates:
            kwargs.update(action="store_false", dest=self.negates)
        else:
            kwargs.update(type=self.type, default=self.default, required=self.required)
            if self.choices is not None:
                kwargs["choices"] = self.choices
            if self.metavar is not None:
                kwargs["metavar"] = self.metavar
        parser.add_argument(*flags, **kwargs)


def _typed(kind: Callable[[Any], Any], value: Any) -> Any:
    """``int``/``float`` of a flag's text, or of a Python number of that kind (never a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (str, int, float))
        or (kind is int and isinstance(value, float))
    ):
        raise ValueError(value)
    return kind(value)


def add_arguments(parser: argparse.ArgumentParser, options: Sequence[Option]) -> List[str]:
    """Add ``options`` to ``parser``; -> the option strings, for "did you mean" hints."""
    groups: Dict[str, Any] = {}
    strings: List[str] = []
    for option in options:
        target: Any = parser
        if option.exclusive_group:
            # One group per name: argparse's help refuses a group left empty.
            if option.exclusive_group not in groups:
                groups[option.exclusive_group] = parser.add_mutually_exclusive_group()
            target = groups[option.exclusive_group]
        option.add_to(target)
        strings.extend(s for s in (option.short, option.flag) if s)
    return strings


def flex_template_metadata(name: str, description: str, parameters: Mapping[str, Option]) -> str:
    """A Flex Template's ``metadata.json``: one parameter per entry of ``parameters`` (name -> an option with a
    template entry)."""
    lines = []
    for parameter, option in parameters.items():
        template = option.template
        if template is None:  # never: callers pass only options with a template
            continue
        entry: Dict[str, Any] = {
            "name": parameter,
            "label": template.label,
            "helpText": template.help,
            "isOptional": not option.required,
        }
        if template.regex:
            entry["regexes"] = [template.regex]
        lines.append("    " + json.dumps(entry, ensure_ascii=False))
    head = json.dumps(name)
    described = json.dumps(description, ensure_ascii=False)
    return (
        '{\n  "name": '
        + head
        + ',\n  "description": '
        + described
        + ',\n  "parameters": [\n'
        + ",\n".join(lines)
        + "\n  ]\n}\n"
    )


def markdown_table(options: Sequence[Option]) -> str:
    """The Markdown table of ``options``: usage, default and meaning, one row each."""
    bar = "\\|"
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for option in options:
        if option.switch or option.negates:
            usage = f"`{option.short}`, `{option.flag}`" if option.short else f"`{option.flag}`"
        elif option.choices is not None:
            usage = f"`{option.flag} {bar.join(str(c) for c in option.choices)}`"
        else:
            usage = f"`{option.flag} {(option.metavar or option.dest.upper()).replace('|', bar)}`"
        meaning = (option.doc or option.help).replace("|", bar)
        rows.append(f"| {usage} | {option.doc_default} | {meaning} |")
    return "\n".join(rows) + "\n"
