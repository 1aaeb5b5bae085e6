"""CPU targets: OpenMP C and serial C, with their kernel-IR passes (x86 vector
hints, OpenMP loop annotations)."""
