"""Passes over the kernel IR: each rewrites a `Kernel` for one target's
hardware (work-sharing and SIMD mappings, whole cache-line stores,
prefetches, fences); a target lists the passes it runs, in order."""
