"""Tracing of decorated Python functions into StencilIR."""
