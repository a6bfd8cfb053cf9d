"""The host scripts' templates (infra/task/*.sh), rendered. Pure: the template files of
this checkout are read once; nothing else is read or written.

A template is the script as it runs, readable whole, with three kinds of marks:

- `@NAME@` (upper case): a value, inserted as given. The caller quotes it for the shell
  (shlex.quote) where it must be one word; the template never quotes a value itself.
  A line holding only `@NAME@` is a block: its value is whole lines ('' or text that
  ends with a newline), and the line's own newline goes with it.
- `#@if flag` ... `#@else` ... `#@end` lines (lower case flag, `#@else` optional, may
  nest and be indented): an optional part, kept when its flag is true (else the
  `#@else` part). The directive lines themselves are never rendered.
- `#@ text`: a comment on the template, never rendered.

Everything else is rendered byte for byte. Why bytes matter: a launch script is an input
of its `command.remote.Command`, and the delete script too; a byte of difference is an
update that relaunches (the launch's delete stops the run first) every user's training
on upgrade. So a change of a template shows in the goldens of every variant
(tests/unit/infra/golden/scripts/), and the renderer refuses a flag or a value that the
template does not name, or a name the template uses without a value: a typo is an
error, never a silently different script.

The marks leave a template a shell script to shellcheck (scripts/lint lints the
templates as they are, and the rendered goldens).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1] / "task"
"""Where the templates live, beside the programs the launch copies into the task."""

VALUE = re.compile(r"@([A-Z][A-Z0-9_]*)@")
FLAG = re.compile(r"[a-z][a-z0-9_]*")
DIRECTIVE = "#@"


class TemplateError(ValueError):
    """A template that cannot be parsed, or a render that does not match its template."""


@dataclass(frozen=True)
class Section:
    """`#@if flag`: the lines kept when `flag` is true, and those kept when it is not."""

    flag: str
    then: tuple[Node, ...]
    otherwise: tuple[Node, ...]


Node = str | Section
"""A line of text (with its newline), or an optional part."""


@dataclass(frozen=True)
class Template:
    """A parsed template: its name (for errors) and its lines and parts."""

    name: str
    nodes: tuple[Node, ...]

    def render(self, values: Mapping[str, str], flags: Mapping[str, bool]) -> str:
        """The text with `values` in and the parts `flags` keep. `flags` names every flag
        of the template; `values` only names of the template (those of parts left out
        may be left out)."""
        _check(self.name, self.nodes, values, flags)
        return "".join(_fill(self.name, self.nodes, values, flags))


def parse(name: str, text: str) -> Template:
    """`text` (the template `name`) as lines and parts; a directive out of place (an
    `#@else` or `#@end` with no `#@if`, an `#@if` never ended) is refused, naming its
    line."""
    lines = list(enumerate(text.splitlines(keepends=True), start=1))
    nodes, _, _ = _block(name, lines, 0, None)
    return Template(name, tuple(nodes))


Line = tuple[int, str]


def _block(
    name: str, lines: Sequence[Line], i: int, opened: tuple[str, int] | None
) -> tuple[list[Node], int, str]:
    """The nodes from line `i` up to the `#@else` or `#@end` that closes `opened` (the
    flag and line of its `#@if`; None: the end of the file): the nodes, the index after
    that directive, and which it was."""
    nodes: list[Node] = []
    while i < len(lines):
        number, line = lines[i]
        i += 1
        stripped = line.strip()
        if not stripped.startswith(DIRECTIVE):
            nodes.append(line)
            continue
        word, _, rest = stripped[len(DIRECTIVE) :].partition(" ")
        if word == "":  # `#@ text`: a comment on the template
            continue
        if word == "if" and FLAG.fullmatch(rest):
            then, i, how = _block(name, lines, i, (rest, number))
            otherwise: list[Node] = []
            if how == "else":
                otherwise, i, how = _block(name, lines, i, (rest, number))
                if how == "else":
                    raise TemplateError(f"{name} line {number}: #@if {rest} has two #@else")
            nodes.append(Section(rest, tuple(then), tuple(otherwise)))
        elif word in ("else", "end") and not rest and opened is not None:
            return nodes, i, word
        else:
            raise TemplateError(
                f"{name} line {number}: {stripped!r} out of place; allowed: #@if <flag> "
                "(lower case), #@else, #@end in that order, or #@ and a comment"
            )
    if opened is not None:
        raise TemplateError(f"{name} line {opened[1]}: #@if {opened[0]} has no #@end")
    return nodes, i, ""


@cache
def load(name: str) -> Template:
    """The template infra/task/<name>, parsed (once per process)."""
    return parse(name, (TASK_DIR / name).read_text())


def _walk(nodes: Sequence[Node]) -> Iterator[Node]:
    """Every node, those inside parts too."""
    for node in nodes:
        yield node
        if isinstance(node, Section):
            yield from _walk(node.then)
            yield from _walk(node.otherwise)


def names(nodes: Sequence[Node]) -> tuple[set[str], set[str]]:
    """The flags and the values `nodes` name, in every part."""
    flags: set[str] = set()
    values: set[str] = set()
    for node in _walk(nodes):
        if isinstance(node, Section):
            flags.add(node.flag)
        else:
            values.update(VALUE.findall(node))
    return flags, values


def _fill(
    template: str, nodes: Sequence[Node], values: Mapping[str, str], flags: Mapping[str, bool]
) -> Iterator[str]:
    """The text of `nodes`: the parts `flags` keep, `values` in."""
    for node in nodes:
        if isinstance(node, Section):
            kept = node.then if flags[node.flag] else node.otherwise
            yield from _fill(template, kept, values, flags)
            continue
        block = VALUE.fullmatch(node.rstrip("\n"))
        if block and node.endswith("\n"):
            text = _value(template, block[1], values)
            if text and not text.endswith("\n"):
                raise TemplateError(
                    f"{template}: block @{block[1]}@ ends {text[-40:]!r}; "
                    "allowed: '' or lines that end with a newline"
                )
            yield text
        else:
            yield VALUE.sub(lambda m: _value(template, m[1], values), node)


def _value(template: str, name: str, values: Mapping[str, str]) -> str:
    """The value of `@name@`; none given is an error."""
    if name not in values:
        raise TemplateError(f"{template}: @{name}@ has no value; allowed: {sorted(values)}")
    return values[name]


def _check(
    template: str, nodes: Sequence[Node], values: Mapping[str, str], flags: Mapping[str, bool]
) -> None:
    """Refuses flags other than those `nodes` name, and values they do not name."""
    named_flags, named_values = names(nodes)
    if set(flags) != named_flags:
        raise TemplateError(
            f"{template}: flags {sorted(flags)}; allowed: exactly {sorted(named_flags)}"
        )
    if unknown := set(values) - named_values:
        raise TemplateError(
            f"{template}: values {sorted(unknown)} are not in the template; "
            f"allowed: {sorted(named_values)}"
        )


def render(name: str, values: Mapping[str, str], flags: Mapping[str, bool]) -> str:
    """The template infra/task/<name>, rendered (`Template.render`)."""
    return load(name).render(values, flags)
