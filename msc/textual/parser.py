"""Reading .msc text: the lark parser, its syntax errors as msc errors, and
loading a file into a Stencil."""

from __future__ import annotations

import functools
from collections.abc import Collection

from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput

from msc import ir
from msc.errors import MscError
from msc.textual.builder import build_stencil
from msc.textual.source import SourceText

_DESCRIBED = {"NAME": "a name", "NUMBER": "a number", "$END": "the end of the file"}


@functools.cache
def _lark() -> Lark:
    return Lark.open("grammar.lark", rel_to=__file__, parser="lalr", propagate_positions=True,
                     maybe_placeholders=True)


def parse_stencil(text: str, filename: str = "<string>") -> ir.StencilIR:
    """The StencilIR of one stencil written in the textual language.

    Raises StencilDefinitionError (`file:line:col: ...`, the line, a caret).
    """
    source = SourceText(text, filename)
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(source, e) from None
    try:
        return build_stencil(tree, source)
    except RecursionError:
        raise source.error(1, 1, "expressions are nested too deeply") from None


def _syntax_error(source: SourceText, e: UnexpectedInput) -> MscError:
    if isinstance(e, UnexpectedCharacters):
        line, column = e.line, e.column
        found = f"character {source.text[e.pos_in_stream]!r}"
        expected = e.allowed
    else:  # an unexpected token, or the end of the file
        token: Token | None = getattr(e, "token", None)
        if token is None or token.type == "$END":
            (line, column), found = source.end(), "end of the file"
        else:
            line, column, found = token.line or 0, token.column or 0, _describe(token)
        # What the parser accepts here exactly (`expected` merges LALR lookaheads).
        parser = getattr(e, "interactive_parser", None)
        expected = parser.accepts() if parser is not None else getattr(e, "expected", None)
    return source.error(line, column, f"syntax error: unexpected {found}{_expected(expected)}"
                        f"{PYTHON_ONLY.get(found, '')}")


#: characters of the Python DSL that the language writes otherwise, and how
PYTHON_ONLY = {"character '~'": " ('~' is the Python DSL's not: here it is '!')",
               "character '%'": " (no remainder here: a - b * floor(a / b))"}


def _describe(token: Token) -> str:
    text = token.value if len(token.value) <= 20 else token.value[:17] + "..."
    return f"{_DESCRIBED[token.type].split()[-1]} '{text}'" if token.type in _DESCRIBED else f"'{text}'"


def _expected(names: Collection[str] | None) -> str:
    """'; expected one of ...' in words, keywords left out where any name would do."""
    if not names:
        return ""
    patterns = {t.name: t.pattern for t in _lark().terminals}
    shown = set()
    for name in names:
        pattern = patterns.get(name)
        if name in _DESCRIBED:
            shown.add(_DESCRIBED[name])
        elif pattern is not None and pattern.type == "str":
            if not ("NAME" in names and pattern.value.isidentifier()):
                shown.add(f"'{pattern.value}'")
    if not shown:
        return ""
    items = sorted(shown)
    return f"; expected {items[0]}" if len(items) == 1 else f"; expected one of {', '.join(items)}"
