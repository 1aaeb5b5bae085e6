"""The text of one .msc file and the errors that point into it.

Every error of the textual language reads `file:line:col: message`, then the
offending source line and a caret under the fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from msc.errors import StencilDefinitionError


@dataclass(frozen=True)
class SourceText:
    text: str
    filename: str

    def line(self, number: int) -> str:
        lines = self.text.split("\n")
        return lines[number - 1].rstrip("\r") if 1 <= number <= len(lines) else ""

    def end(self) -> tuple[int, int]:
        """(line, column) just after the last non-blank character."""
        body = self.text.rstrip()
        line = body.count("\n") + 1
        return line, len(body) - (body.rfind("\n") + 1) + 1

    def error(self, line: int, column: int, message: str) -> StencilDefinitionError:
        source = self.line(line)
        first = max(0, min(column - 1 - SHOWN // 2, len(source) - SHOWN))  # a long line: the part around the fault
        shown = source[first:first + SHOWN]
        if first:
            shown = "..." + shown[3:]
        if first + SHOWN < len(source):
            shown = shown[:-3] + "..."
        caret = "".join(c if c == "\t" else " " for c in shown[: column - 1 - first]) + "^"
        return StencilDefinitionError(f"{self.filename}:{line}:{column}: {message}\n    {shown}\n    {caret}")


#: the most characters of a source line an error shows (a longer one is cut around the fault)
SHOWN = 100
