"""infra.render.template: the host scripts' templates parsed and rendered (values, blocks,
optional parts, the template's own comments), and every mistake refused by name."""

from __future__ import annotations

import itertools
import re

import pytest

from infra.render import template
from infra.render.template import TemplateError, names, parse

pytestmark = pytest.mark.unit

TEXT = """\
#@ a comment on the template
head @A@ and @B@
@BLOCK@
#@if one
  one @A@
  #@if two
  both
  #@else
  one only
  #@end
#@else
  not one
#@end
tail
"""


def test_values_go_in_as_given_and_are_not_read_again() -> None:
    """A value is inserted verbatim, even one holding a mark or shell quoting."""
    t = parse("t", "x @A@ @B@\n")
    assert t.render({"A": "'a b'", "B": "@A@"}, {}) == "x 'a b' @A@\n"


def test_comment_and_directive_lines_are_never_rendered() -> None:
    """`#@ ...`, `#@if`, `#@else` and `#@end` lines leave nothing in the text."""
    out = parse("t", TEXT).render({"A": "a", "B": "b", "BLOCK": ""}, {"one": True, "two": True})
    assert out == "head a and b\n  one a\n  both\ntail\n"


def test_parts_keep_their_lines_or_their_else() -> None:
    """Each flag keeps its part or its `#@else` part, nested ones too."""
    t = parse("t", TEXT)
    values = {"A": "a", "B": "b", "BLOCK": ""}
    outs = {
        (one, two): t.render(values, {"one": one, "two": two})
        for one, two in itertools.product((False, True), repeat=2)
    }
    assert outs[(True, False)] == "head a and b\n  one a\n  one only\ntail\n"
    assert outs[(False, True)] == outs[(False, False)] == "head a and b\n  not one\ntail\n"


def test_a_block_is_whole_lines_or_nothing() -> None:
    """A line holding only a mark is replaced by its value's lines, with its newline;
    an empty value removes the line."""
    t = parse("t", "a\n@BLOCK@\nb\n")
    assert t.render({"BLOCK": "x\ny\n"}, {}) == "a\nx\ny\nb\n"
    assert t.render({"BLOCK": ""}, {}) == "a\nb\n"


def test_a_block_value_that_does_not_end_a_line_is_refused() -> None:
    """A block value must end with a newline, or the next line would join it."""
    with pytest.raises(TemplateError, match=r"block @BLOCK@ ends 'x'"):
        parse("t", "@BLOCK@\nb\n").render({"BLOCK": "x"}, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("#@else\n", r"t line 1: '#@else' out of place"),
        ("a\n#@end\n", r"t line 2: '#@end' out of place"),
        ("#@if x\na\n", r"t line 1: #@if x has no #@end"),
        ("#@if x\n#@else\n#@else\n#@end\n", r"t line 1: #@if x has two #@else"),
        ("#@if Upper\n#@end\n", r"t line 1: '#@if Upper' out of place"),
        ("#@when x\n", r"t line 1: '#@when x' out of place"),
    ],
)
def test_a_directive_out_of_place_is_refused_with_its_line(text: str, message: str) -> None:
    """A malformed template is refused at parse, naming the line."""
    with pytest.raises(TemplateError, match=message):
        parse("t", text)


def test_flags_must_be_exactly_the_templates() -> None:
    """A flag the template lacks (a typo) or one it has but was not given is refused."""
    t = parse("t", "#@if one\na\n#@end\n")
    with pytest.raises(TemplateError, match=r"flags \['onee'\]; allowed: exactly \['one'\]"):
        t.render({}, {"onee": True})
    with pytest.raises(TemplateError, match=r"flags \[\]; allowed: exactly \['one'\]"):
        t.render({}, {})


def test_a_value_the_template_lacks_is_refused() -> None:
    """A value named nowhere in the template is a typo, refused."""
    with pytest.raises(TemplateError, match=r"values \['C'\] are not in the template"):
        parse("t", "@A@\n").render({"A": "a", "C": "c"}, {})


def test_a_value_left_out_is_refused_only_where_it_is_rendered() -> None:
    """A mark with no value fails; in a part left out it needs none."""
    t = parse("t", "#@if one\n@A@ x\n#@end\n")
    assert t.render({}, {"one": False}) == ""
    with pytest.raises(TemplateError, match=r"@A@ has no value"):
        t.render({}, {"one": True})


TEMPLATES = sorted(p.name for p in template.TASK_DIR.glob("*.sh"))


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_renders_under_every_flag(name: str) -> None:
    """Each infra/task/*.sh parses, and renders under every combination of its flags
    with every mark filled (a stand-in each; a block's is a line): no mark and no
    template line is left in the text."""
    t = template.load(name)
    flags, values = names(t.nodes)
    blocks = set(re.findall(r"^@([A-Z][A-Z0-9_]*)@$", (template.TASK_DIR / name).read_text(), re.M))
    filled = {v: f"<{v}>\n" if v in blocks else f"<{v}>" for v in values}
    for on in itertools.product((False, True), repeat=len(flags)):
        out = t.render(filled, dict(zip(sorted(flags), on, strict=True)))
        assert not template.VALUE.search(out), f"{name}: a mark left in {out!r}"
        assert "#@" not in out, f"{name}: a template line rendered"
