"""The version of msc (one place: the package, the generated sources and the caches read it)."""

__version__ = "0.1.0"
