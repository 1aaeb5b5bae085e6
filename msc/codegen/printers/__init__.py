"""Printers: the kernel IR as source text, one module per language."""
