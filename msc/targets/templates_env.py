"""The jinja2 environment for the file scaffolding of every backend (jinja2
is imported on first use: loading a cached kernel renders nothing). Compiled
templates are kept in the kernel cache directory of the moment (jinja2
checks them against the template text and writes them atomically), so a new
process does not compile the templates again; one that cannot be kept there
(the directory was removed or is read-only) is compiled again next time."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2


@lru_cache(maxsize=4)
def _env(directory: str) -> jinja2.Environment:
    import jinja2

    class KeptIfPossible(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                os.makedirs(self.directory, exist_ok=True)
                super().dump_bytecode(bucket)
            except OSError:  # compiled again next time; nothing is lost
                pass

    return jinja2.Environment(
        loader=jinja2.PackageLoader("msc.targets", "templates"),
        bytecode_cache=KeptIfPossible(directory),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )


def environment() -> jinja2.Environment:
    """The environment whose compiled templates go to the cache directory of the moment ($MSC_CACHE_DIR may
    change within a process, and the directory may be removed)."""
    from msc.runtime.build import cache_dir

    return _env(str(cache_dir() / "templates"))


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)
