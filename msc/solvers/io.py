"""Readers for the sparse-matrix formats of ../shared/matrices: Matrix
Market, CHOLMOD triplet, the headerless CSparse triplet file, Harwell-Boeing
(RUA/RSA, fixed-width Fortran fields), METIS .graph (made SPD as I + graph
Laplacian) and MATLAB .mat (the variable 'A'). scipy.io is used where it
works (Matrix Market, .mat)."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from msc.solvers.errors import MatrixReadError


def read_matrix_market(path: Path) -> sp.csc_array:
    try:
        return sp.csc_array(scipy.io.mmread(str(path)))
    except (ValueError, OSError) as exc:
        raise MatrixReadError(f"{path}: not a readable Matrix Market file: {exc}") from exc


def _numeric_lines(path: Path) -> list[str]:
    with open(path, encoding="ascii", errors="replace") as f:
        return [ln for ln in f if ln.strip() and not ln.lstrip().startswith("%")]


def _triplets(lines: list[str], path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        data = np.loadtxt(lines, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise MatrixReadError(f"{path}: malformed triplet line: {exc}") from exc
    if data.shape[1] != 3:
        raise MatrixReadError(f"{path}: triplet lines must have 3 fields, got {data.shape[1]}")
    return data[:, 0].astype(np.int64), data[:, 1].astype(np.int64), data[:, 2]


def _symmetric_from_triangle(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int) -> sp.csc_array:
    """Both triangles from entries stored in one (entries on the diagonal once)."""
    off = rows != cols
    r = np.concatenate((rows, cols[off]))
    c = np.concatenate((cols, rows[off]))
    v = np.concatenate((vals, vals[off]))
    return sp.csc_array((v, (r, c)), shape=(n, n))


def read_triplet(path: Path) -> sp.csc_array:
    """CHOLMOD triplet ("nrow ncol nnz stype" header, then "i j x") or the
    headerless CSparse form ("i j x"). 0- or 1-based indexing is detected
    from the indices (1-based where no index is 0); stype != 0 (or one triangle only) means that
    the other triangle is implied by symmetry."""
    lines = _numeric_lines(path)
    if not lines:
        raise MatrixReadError(f"{path}: empty file")
    head = lines[0].split()
    header = len(head) == 4 and all(re.fullmatch(r"-?\d+", t) for t in head)
    if header:
        nrow, ncol, nnz, stype = (int(t) for t in head)
        lines = lines[1:]
    rows, cols, vals = _triplets(lines, path)
    if header and rows.shape[0] != nnz:
        raise MatrixReadError(f"{path}: header promises {nnz} entries, found {rows.shape[0]}")
    base = 0 if (rows.size and (rows.min() == 0 or cols.min() == 0)) else 1
    if not header:  # CSparse writes 0-based; 1-based (no index 0, which would leave row 0 empty) is read as such
        nrow = ncol = int(max(rows.max(), cols.max())) + 1 - base if rows.size else 0
        stype = -1 if np.all(rows >= cols) else (1 if np.all(rows <= cols) else 0)
    elif base == 1 and (rows.max(initial=0) > nrow or cols.max(initial=0) > ncol):
        raise MatrixReadError(f"{path}: index out of range for a {nrow}x{ncol} matrix")
    rows = rows - base
    cols = cols - base
    if nrow != ncol:
        raise MatrixReadError(f"{path}: matrix is {nrow}x{ncol}, not square")
    if stype != 0:
        return _symmetric_from_triangle(rows, cols, vals, nrow)
    return sp.csc_array((vals, (rows, cols)), shape=(nrow, ncol))


def _fortran_fields(fmt: str) -> tuple[int, int]:
    """(fields per line, width) of a Fortran format such as (16I5) or (1P,5E15.8)."""
    m = re.search(r"(\d*)\s*[IEDFG](\d+)", fmt.upper())
    if not m:
        raise MatrixReadError(f"unsupported Fortran format {fmt!r}")
    return int(m.group(1) or 1), int(m.group(2))


def _read_fixed(lines: list[str], count: int, fmt: str, dtype: type) -> np.ndarray:
    per_line, width = _fortran_fields(fmt)
    out: list[str] = []
    for ln in lines:
        ln = ln.rstrip("\n")
        out.extend(ln[k:k + width] for k in range(0, per_line * width, width) if ln[k:k + width].strip())
    if len(out) < count:
        raise MatrixReadError(f"expected {count} values, found {len(out)}")
    text = [t.strip().upper().replace("D", "E") for t in out[:count]]
    return np.array(text, dtype=np.float64).astype(dtype)


def read_harwell_boeing(path: Path) -> sp.csc_array:
    """Harwell-Boeing assembled real matrices (RUA, RSA); own fixed-width
    parser since scipy.io.hb_read rejects some valid headers."""
    with open(path, encoding="ascii", errors="replace") as f:
        lines = f.readlines()
    if len(lines) < 4:
        raise MatrixReadError(f"{path}: too short for a Harwell-Boeing header")
    try:
        _, ptrcrd, indcrd, valcrd, *rest = (int(t) for t in lines[1].split())
        mxtype = lines[2][:3].upper()
        nrow, ncol, nnz = (int(t) for t in lines[2][3:].split()[:3])
        ptrfmt, indfmt, valfmt = lines[3][:16], lines[3][16:32], lines[3][32:52]
    except ValueError as exc:
        raise MatrixReadError(f"{path}: malformed Harwell-Boeing header: {exc}") from exc
    if mxtype[0] != "R" or mxtype[2] != "A":
        raise MatrixReadError(f"{path}: only real assembled matrices are supported, got type {mxtype}")
    rhscrd = rest[0] if rest else 0
    start = 5 if rhscrd > 0 else 4
    ptr_lines = lines[start:start + ptrcrd]
    ind_lines = lines[start + ptrcrd:start + ptrcrd + indcrd]
    val_lines = lines[start + ptrcrd + indcrd:start + ptrcrd + indcrd + valcrd]
    try:
        colptr = _read_fixed(ptr_lines, ncol + 1, ptrfmt, np.int64) - 1
        rowind = _read_fixed(ind_lines, nnz, indfmt, np.int64) - 1
        values = _read_fixed(val_lines, nnz, valfmt, np.float64)
    except (MatrixReadError, ValueError) as exc:
        raise MatrixReadError(f"{path}: {exc}") from exc
    A = sp.csc_array((values, rowind, colptr), shape=(nrow, ncol))
    if mxtype[1] == "S":
        coo = A.tocoo()
        return _symmetric_from_triangle(coo.row, coo.col, coo.data, nrow)
    return A


def read_metis_graph(path: Path) -> sp.csc_array:
    """METIS graph ("n m [fmt]", then one 1-based adjacency line per vertex),
    returned as the SPD matrix I + graph Laplacian (diagonal 1 + degree,
    off-diagonal -1). Weighted graphs (fmt other than 0) are refused."""
    with open(path, encoding="ascii", errors="replace") as f:
        lines = [(k, ln) for k, ln in enumerate(f, 1) if not ln.startswith("%")]
    head = lines[0][1].split() if lines else []
    if len(head) < 2 or not all(re.fullmatch(r"\d+", t) for t in head[:2]):
        raise MatrixReadError(f"{path}: a METIS graph starts with the line 'vertices edges [fmt]', "
                              f"got {lines[0][1].strip()[:60]!r}" if lines else f"{path}: empty file")
    n, m = int(head[0]), int(head[1])
    fmt = head[2] if len(head) > 2 else "0"
    if fmt not in ("0", "000"):
        raise MatrixReadError(f"{path}: weighted METIS graphs (fmt {fmt}) are not supported")
    adj = lines[1:1 + n]
    if len(adj) != n:
        raise MatrixReadError(f"{path}: expected {n} adjacency lines, found {len(adj)}")
    counts = np.fromiter((len(text.split()) for _, text in adj), dtype=np.int64, count=n)
    try:
        cols = np.array(" ".join(text for _, text in adj).split(), dtype=np.int64) - 1
    except ValueError:  # the first line that does not parse, named
        for vertex, (line, text) in enumerate(adj, 1):
            try:
                np.array(text.split(), dtype=np.int64)
            except ValueError:
                raise MatrixReadError(f"{path}, line {line}: vertex {vertex}'s neighbours are not integers: "
                                      f"{text.strip()[:60]!r}") from None
        raise MatrixReadError(f"{path}: the adjacency lists are not integers") from None
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    outside = np.flatnonzero((cols < 0) | (cols >= n))
    if outside.size:
        vertex = int(rows[outside[0]])
        raise MatrixReadError(f"{path}, line {adj[vertex][0]}: vertex {vertex + 1} lists neighbour "
                              f"{cols[outside[0]] + 1}, outside 1..{n}")
    if cols.shape[0] != 2 * m:
        raise MatrixReadError(f"{path}: header says {m} edges, so {2 * m} adjacency entries (each edge in both "
                              f"lists), but the lists hold {cols.shape[0]}")
    G = sp.csc_array((np.ones(cols.shape[0]), (rows, cols)), shape=(n, n))
    G.data[:] = 1.0  # duplicate edges count once
    degree = np.asarray(G.sum(axis=0)).ravel()
    return sp.csc_array(sp.diags_array(1.0 + degree) - G)


def read_mat(path: Path, name: str = "A") -> sp.csc_array:
    try:
        data = scipy.io.loadmat(str(path))
    except (ValueError, OSError, NotImplementedError, scipy.io.matlab.MatReadError) as exc:
        raise MatrixReadError(f"{path}: not a readable MATLAB file: {exc}") from exc
    if name not in data:
        raise MatrixReadError(f"{path}: no variable {name!r} (has {sorted(k for k in data if not k.startswith('__'))})")
    return sp.csc_array(data[name], dtype=np.float64)


def read_matrix(path: str | os.PathLike[str]) -> sp.csc_array:
    """Read any supported file, chosen by extension and header."""
    p = Path(path)
    if not p.is_file():
        raise MatrixReadError(f"{p}: {'a directory, not a matrix file' if p.is_dir() else 'no such file'}")
    suffix = p.suffix.lower()
    if suffix == ".mtx":
        return read_matrix_market(p)
    if suffix in (".rua", ".rsa", ".rb", ".hb"):
        return read_harwell_boeing(p)
    if suffix == ".graph":
        return read_metis_graph(p)
    if suffix == ".mat":
        return read_mat(p)
    with open(p, encoding="ascii", errors="replace") as f:
        first = f.readline()
    if first.startswith("%%MatrixMarket"):
        return read_matrix_market(p)
    return read_triplet(p)


def matrices_dir() -> Path:
    """The shared test matrices: $MSC_MATRICES, else ../shared/matrices next to the repository."""
    env = os.environ.get("MSC_MATRICES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "matrices"


def manifest(directory: Path | None = None) -> list[dict[str, str]]:
    """Rows of MANIFEST.csv of the shared matrices."""
    root = directory or matrices_dir()
    with open(root / "MANIFEST.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
