"""msc.runtime: building, caching and loading compiled kernels, and running them."""

from msc.runtime.build import (
    atomic_write_text,
    build_shared_library,
    cache_dir,
    load_library,
)

__all__ = ["atomic_write_text", "build_shared_library", "cache_dir", "load_library"]
