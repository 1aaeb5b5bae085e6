"""The jinja2 environment for the file scaffolding of every backend (jinja2
is imported on first use: loading a cached kernel renders nothing). Compiled
templates are kept in the kernel cache directory (jinja2 checks them against
the template text and writes them atomically), so a new process does not
compile the templates again."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    import jinja2

    from msc.runtime.build import cache_dir

    compiled = cache_dir() / "templates"
    compiled.mkdir(exist_ok=True)
    return jinja2.Environment(
        loader=jinja2.PackageLoader("msc.targets", "templates"),
        bytecode_cache=jinja2.FileSystemBytecodeCache(str(compiled)),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )


def render(template: str, **values: Any) -> str:
    return _env().get_template(template).render(**values)
