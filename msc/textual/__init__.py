"""The textual stencil language: `.msc` files parsed with lark into the same
StencilIR as decorated Python functions, and StencilIR printed back as text.

    parse_stencil(text, filename) -> StencilIR     (msc.textual.parser)
    (msc.load_stencil(path) wraps a parsed file in the user's Stencil)
    print_stencil(ir) -> str                       (msc.textual.printer)

The grammar is grammar.lark; docs/language.md describes the language.
"""

from msc.textual.parser import parse_stencil
from msc.textual.printer import print_stencil

__all__ = ["parse_stencil", "print_stencil"]
