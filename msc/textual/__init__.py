"""The textual stencil language: `.msc` files parsed with lark into the same
StencilIR as decorated Python functions, and StencilIR printed back as text.

    parse_stencil(text, filename) -> StencilIR     (msc.textual.parser)
    load_stencil(path) -> msc.Stencil              (msc.textual.parser)
    print_stencil(ir) -> str                       (msc.textual.printer)

The grammar is grammar.lark; docs/language.md describes the language.
"""

from msc.textual.parser import load_stencil, parse_stencil
from msc.textual.printer import print_stencil

__all__ = ["load_stencil", "parse_stencil", "print_stencil"]
