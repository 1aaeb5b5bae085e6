"""The jinja2 environment for the file scaffolding of every backend (jinja2
is imported on first use: loading a cached kernel renders nothing)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("msc.codegen", "templates"),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )


def render(template: str, **values: Any) -> str:
    return _env().get_template(template).render(**values)
