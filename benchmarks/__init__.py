"""The benchmarks (a package, so that `benchmarks.*` imports find these and not a peer's own top-level `benchmarks`: Devito installs one)."""
