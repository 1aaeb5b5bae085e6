"""The solver's compiled side: builds symbolic.c and supernodal.c through the
msc runtime JIT (same cache as the stencils), declares their ctypes
signatures, and hands scipy's BLAS/LAPACK to them as C function pointers."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np
import scipy.linalg.cython_blas as cython_blas
import scipy.linalg.cython_lapack as cython_lapack

from msc.runtime import build_shared_library, load_library

_HERE = Path(__file__).resolve().parent

I32 = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
I64 = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
F64 = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
i32 = ctypes.c_int32
i64 = ctypes.c_int64
f64 = ctypes.c_double
ptr = ctypes.c_void_p


def _declare(lib: ctypes.CDLL, name: str, restype: object, *argtypes: object) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


@functools.lru_cache(maxsize=None)
def symbolic_lib() -> ctypes.CDLL:
    """symbolic.c: etree, postorder, column counts, amalgamation, structure, and the
    lower triangle of a matrix given in full."""
    lib = load_library(build_shared_library((_HERE / "symbolic.c").read_text(), "swchol_symbolic"))
    _declare(lib, "sym_etree", None, i32, I64, I32, I32, I32)
    _declare(lib, "sym_postorder", None, i32, I32, I32, I32)
    _declare(lib, "sym_colcounts", None, i32, I64, I32, I32, I32, I32, I32)
    _declare(lib, "sym_amalgamate", i32, i32, I32, I32, I64, i32, i32, i32, f64, f64, f64, i32,
             I32, I32, F64)
    _declare(lib, "sym_structure", i32, i32, i32, I32, I32, I32, I64, I32, I64, I32, I64, I32)
    _declare(lib, "sym_subtree_sum", None, i32, I32, F64, F64, I32)
    _declare(lib, "sym_permute", None, i32, I64, I32, I64, I64, I32, I64, I64, I32, I64)
    _declare(lib, "sym_adjacency32", i64, i32, I64, I32, I32, I32, I64)
    _declare(lib, "sym_lower_full", i64, i32, I64, I32, F64, I64, I32, F64, I64, F64)
    return lib


@functools.lru_cache(maxsize=None)
def numeric_lib() -> ctypes.CDLL:
    """supernodal.c: the queued left-looking factorization, solves, export."""
    lib = load_library(build_shared_library((_HERE / "supernodal.c").read_text(), "swchol_supernodal"))
    _declare(lib, "chol_factor", i64, i32, i32, I32, I32, I64, I32, I64, I64, I32, F64, F64,
             I32, I32, I64, i32, I32, I32, i32, I32, I32, i32, I64, ptr, ptr, ptr, ptr, F64)
    _declare(lib, "chol_solve", i32, i32, i32, I32, I64, I32, I64, F64, I64, F64, F64, F64, i32)
    _declare(lib, "chol_populate", None, ptr, i64, i32)
    _declare(lib, "chol_to_csc", None, i32, I32, I64, I32, I64, F64, I64, I32, F64)
    return lib


def _capsule_pointer(module: object, name: str) -> int:
    capsule = module.__pyx_capi__[name]  # type: ignore[attr-defined]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get_pointer(capsule, get_name(capsule)))


@functools.lru_cache(maxsize=None)
def blas_pointers() -> tuple[int, int, int, int]:
    """(dgemm, dsyrk, dtrsm, dpotrf) from scipy's bundled BLAS/LAPACK."""
    return (
        _capsule_pointer(cython_blas, "dgemm"),
        _capsule_pointer(cython_blas, "dsyrk"),
        _capsule_pointer(cython_blas, "dtrsm"),
        _capsule_pointer(cython_lapack, "dpotrf"),
    )
