/* Symbolic analysis kernels of swCholesky: elimination tree, postorder,
 * column counts (Gilbert-Ng-Peyton, as in CSparse's cs_counts), relaxed
 * supernode amalgamation (CHOLMOD's rule) and the row structure of each
 * supernode. All loops are O(nnz(A) * alpha(n)) or O(size of the output).
 * Built at run time through msc.runtime (same cache as the stencils). */
#include <math.h>
#include <stdint.h>

/* Elimination tree of a symmetric matrix given by its strictly upper part
 * in CSC (column j holds rows i < j). ancestor: n ints of workspace. */
void sym_etree(int32_t n, const int64_t *Up, const int32_t *Ui,
               int32_t *parent, int32_t *ancestor)
{
    for (int32_t k = 0; k < n; k++) {
        parent[k] = -1;
        ancestor[k] = -1;
        for (int64_t p = Up[k]; p < Up[k + 1]; p++) {
            int32_t i = Ui[p];
            while (i != -1 && i < k) {          /* path compression */
                int32_t inext = ancestor[i];
                ancestor[i] = k;
                if (inext == -1) parent[i] = k;
                i = inext;
            }
        }
    }
}

/* Postorder of a forest: post[k] is the k-th node. work: 3n ints. */
void sym_postorder(int32_t n, const int32_t *parent, int32_t *post, int32_t *work)
{
    int32_t *head = work, *next = work + n, *stack = work + 2 * n;
    for (int32_t j = 0; j < n; j++) head[j] = -1;
    for (int32_t j = n - 1; j >= 0; j--) {      /* children in increasing order */
        if (parent[j] == -1) continue;
        next[j] = head[parent[j]];
        head[parent[j]] = j;
    }
    int32_t k = 0;
    for (int32_t j = 0; j < n; j++) {
        if (parent[j] != -1) continue;          /* start a DFS at each root */
        int32_t top = 0;
        stack[0] = j;
        while (top >= 0) {
            int32_t p = stack[top], i = head[p];
            if (i == -1) {
                top--;
                post[k++] = p;
            } else {
                head[p] = next[i];
                stack[++top] = i;
            }
        }
    }
}

static int32_t leaf(int32_t i, int32_t j, const int32_t *first, int32_t *maxfirst,
                    int32_t *prevleaf, int32_t *ancestor, int *jleaf)
{
    *jleaf = 0;
    if (i <= j || first[j] <= maxfirst[i]) return -1;
    maxfirst[i] = first[j];
    int32_t jprev = prevleaf[i];
    prevleaf[i] = j;
    *jleaf = (jprev == -1) ? 1 : 2;
    if (*jleaf == 1) return i;
    int32_t q = jprev;
    while (q != ancestor[q]) q = ancestor[q];
    for (int32_t s = jprev, sparent; s != q; s = sparent) {
        sparent = ancestor[s];
        ancestor[s] = q;
    }
    return q;
}

/* Column counts of L (diagonal included) without forming L. The matrix is
 * given by its strictly lower part in CSC (column j holds rows i > j).
 * work: 4n ints. */
void sym_colcounts(int32_t n, const int64_t *Lp, const int32_t *Li,
                   const int32_t *parent, const int32_t *post,
                   int32_t *colcount, int32_t *work)
{
    int32_t *first = work, *maxfirst = work + n, *prevleaf = work + 2 * n,
            *ancestor = work + 3 * n;
    int32_t *delta = colcount;
    for (int32_t k = 0; k < n; k++) {
        first[k] = -1;
        maxfirst[k] = -1;
        prevleaf[k] = -1;
        ancestor[k] = k;
    }
    for (int32_t k = 0; k < n; k++) {
        int32_t j = post[k];
        delta[j] = (first[j] == -1) ? 1 : 0;   /* j is a leaf */
        for (; j != -1 && first[j] == -1; j = parent[j]) first[j] = k;
    }
    for (int32_t k = 0; k < n; k++) {
        int32_t j = post[k];
        if (parent[j] != -1) delta[parent[j]]--;
        for (int64_t p = Lp[j]; p < Lp[j + 1]; p++) {
            int jleaf;
            int32_t q = leaf(Li[p], j, first, maxfirst, prevleaf, ancestor, &jleaf);
            if (jleaf >= 1) delta[j]++;
            if (jleaf == 2) delta[q]--;
        }
        if (parent[j] != -1) ancestor[j] = parent[j];
    }
    for (int32_t j = 0; j < n; j++)
        if (parent[j] != -1) colcount[parent[j]] += colcount[j];
}

/* Relaxed amalgamation (CHOLMOD's rule) of postordered fundamental
 * supernodes. fsuper[s]..fsuper[s+1]-1 are the columns of supernode s,
 * fsparent its parent supernode, lnz[s] the count of its first column.
 * A child merges into its parent when the parent is the next supernode and
 * the merged supernode has few columns or few explicit zeros.
 * Out: merge_next[s] = 1 when s is merged with s+1; lnz is updated so that
 * the first supernode of every merged run holds the run's first-column count.
 * Returns the number of relaxed supernodes. */
int32_t sym_amalgamate(int32_t nfs, const int32_t *fsuper, const int32_t *fsparent,
                       int64_t *lnz, int32_t nrelax0, int32_t nrelax1, int32_t nrelax2,
                       double zrelax0, double zrelax1, double zrelax2, int32_t maxsnode,
                       int32_t *merge_next, int32_t *nscol, double *zeros)
{
    for (int32_t s = 0; s < nfs; s++) {
        merge_next[s] = 0;
        nscol[s] = fsuper[s + 1] - fsuper[s];
        zeros[s] = 0.0;
    }
    int32_t count = nfs;
    for (int32_t j = nfs - 2; j >= 0; j--) {
        int32_t p = j + 1;                     /* leads the run that starts at j+1 */
        if (fsparent[j] != p) continue;
        int64_t ns = (int64_t)nscol[j] + nscol[p];
        if (ns > maxsnode) continue;
        int64_t lnz0 = lnz[j], lnz1 = lnz[p];
        double newzeros = (double)nscol[j] * (double)(lnz1 + nscol[j] - lnz0);
        double totzeros = zeros[j] + zeros[p] + newzeros;
        int merge;
        if (newzeros <= 0.0) {
            merge = 1;
        } else {
            double xns = (double)ns;
            double z = totzeros / (xns * (xns + 1.0) / 2.0 + xns * (double)(lnz1 - nscol[p]));
            merge = (ns <= nrelax0) || (ns <= nrelax1 && z < zrelax0) ||
                    (ns <= nrelax2 && z < zrelax1) || (z < zrelax2);
        }
        if (merge) {
            merge_next[j] = 1;
            lnz[j] = lnz1 + nscol[j];
            nscol[j] = (int32_t)ns;
            zeros[j] = totzeros;
            count--;
        }
    }
    return count;
}

/* Row structure of every supernode, sorted: for each row i in increasing
 * order, walk up the supernodal tree from every column j < i with A(i,j) != 0
 * (strictly upper CSC: column i lists such j) and append i to each supernode
 * on the way. Sp gives the predicted size of each list. fill, mark: ns ints.
 * Returns 0, or -(s+1) when supernode s's predicted size is wrong. */
int32_t sym_structure(int32_t n, int32_t ns, const int32_t *super, const int32_t *sparent,
                      const int32_t *snode_of, const int64_t *Up, const int32_t *Ui,
                      const int64_t *Sp, int32_t *Si, int64_t *fill, int32_t *mark)
{
    for (int32_t s = 0; s < ns; s++) {
        fill[s] = Sp[s];
        mark[s] = -1;
        for (int32_t c = super[s]; c < super[s + 1]; c++) {
            if (fill[s] >= Sp[s + 1]) return -(s + 1);
            Si[fill[s]++] = c;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t si = snode_of[i];
        for (int64_t p = Up[i]; p < Up[i + 1]; p++) {
            int32_t s = snode_of[Ui[p]];
            while (s != si && mark[s] != i) {
                if (s == -1 || fill[s] >= Sp[s + 1]) return -(s + 1);
                Si[fill[s]++] = i;
                mark[s] = i;
                s = sparent[s];
            }
        }
    }
    for (int32_t s = 0; s < ns; s++)
        if (fill[s] != Sp[s + 1]) return -(s + 1);
    return 0;
}

/* Sums of w over every subtree and subtree sizes, for a postordered tree
 * (every child is numbered before its parent). */
void sym_subtree_sum(int32_t ns, const int32_t *parent, const double *w, double *sum,
                     int32_t *size)
{
    for (int32_t s = 0; s < ns; s++) {
        sum[s] = w[s];
        size[s] = 1;
    }
    for (int32_t s = 0; s < ns; s++) {
        if (parent[s] == -1) continue;
        sum[parent[s]] += sum[s];
        size[parent[s]] += size[s];
    }
}

/* Lower triangle of P A P^T from the lower triangle of A (CSC, no
 * duplicates), in two forms: by rows (Rp/Ri: row i lists its columns j <= i,
 * unsorted; what the elimination tree and the supernode structures read)
 * and by columns (Cp/Ci with sorted rows, and map[k] = position in A's data
 * of the k-th entry). Two counting sorts, O(nnz + n). tidx: nnz int64. */
void sym_permute(int32_t n, const int64_t *Ap, const int32_t *Ai, const int64_t *pinv,
                 int64_t *Cp, int32_t *Ci, int64_t *map, int64_t *Rp, int32_t *Ri, int64_t *tidx)
{
    for (int32_t i = 0; i <= n; i++) Rp[i] = 0;
    for (int32_t j = 0; j < n; j++) {
        const int64_t c = pinv[j];
        for (int64_t p = Ap[j]; p < Ap[j + 1]; p++) {
            const int64_t r = pinv[Ai[p]];
            Rp[(r > c ? r : c) + 1]++;
        }
    }
    for (int32_t i = 0; i < n; i++) Rp[i + 1] += Rp[i];
    for (int32_t j = 0; j < n; j++) {
        const int64_t c = pinv[j];
        for (int64_t p = Ap[j]; p < Ap[j + 1]; p++) {
            const int64_t r = pinv[Ai[p]];
            const int64_t q = Rp[r > c ? r : c]++;
            Ri[q] = (int32_t)(r > c ? c : r);
            tidx[q] = p;
        }
    }
    for (int32_t i = n; i > 0; i--) Rp[i] = Rp[i - 1]; /* the fill moved each start to the next */
    Rp[0] = 0;
    for (int32_t j = 0; j <= n; j++) Cp[j] = 0;
    for (int64_t q = 0; q < Rp[n]; q++) Cp[Ri[q] + 1]++;
    for (int32_t j = 0; j < n; j++) Cp[j + 1] += Cp[j];
    for (int32_t i = 0; i < n; i++) {             /* rows in order: columns come out sorted */
        for (int64_t q = Rp[i]; q < Rp[i + 1]; q++) {
            const int64_t k = Cp[Ri[q]]++;
            Ci[k] = i;
            map[k] = tidx[q];
        }
    }
    for (int32_t j = n; j > 0; j--) Cp[j] = Cp[j - 1];
    Cp[0] = 0;
}

/* The graph of a symmetric matrix from its lower triangle (CSC, sorted, no
 * duplicates): A + A^T without the diagonal, every column sorted, as AMD
 * wants it. Column c receives the j < c first (in increasing j, while
 * column j is read) and then its own rows below the diagonal. Gp: n + 1,
 * Gi: 2 (nnz - diagonal entries). Returns the number of entries. */
int64_t sym_adjacency32(int32_t n, const int64_t *Ap, const int32_t *Ai, int32_t *Gp, int32_t *Gi,
                        int64_t *fill)
{
    for (int32_t j = 0; j <= n; j++) fill[j] = 0;
    for (int32_t j = 0; j < n; j++)
        for (int64_t p = Ap[j]; p < Ap[j + 1]; p++)
            if (Ai[p] != j) {
                fill[j + 1]++;
                fill[Ai[p] + 1]++;
            }
    for (int32_t j = 0; j < n; j++) fill[j + 1] += fill[j];
    for (int32_t j = 0; j <= n; j++) Gp[j] = (int32_t)fill[j];
    for (int32_t j = 0; j < n; j++)
        for (int64_t p = Ap[j]; p < Ap[j + 1]; p++) {
            const int32_t i = Ai[p];
            if (i == j) continue;
            Gi[fill[j]++] = i;
            Gi[fill[i]++] = j;
        }
    return Gp[n];
}

/* The lower triangle of a matrix that holds both (CSC, sorted rows, no
 * duplicates, finite), averaged with its mirror: L[i,j] = (A[i,j] + A[j,i])
 * / 2 for i >= j, in one pass without forming the transpose. The mirror of a
 * lower entry (i, j) is the upper entry (j, i) of column i; columns are
 * visited in order, so each column's upper entries are asked for in
 * increasing row order and one pointer per column (next: n entries of
 * workspace) walks them. report: [0] the largest |A[i,j] - A[j,i]|, [1] its
 * row, [2] its column, [3] max |A|, [4] the number of nonzero upper entries
 * without a lower mirror: L then lacks their mirrored entries (the caller
 * builds it otherwise). Lp: n + 1; Li, Lx: room for nnz(A). Returns nnz(L). */
int64_t sym_lower_full(int32_t n, const int64_t *Ap, const int32_t *Ai, const double *Ax,
                       int64_t *Lp, int32_t *Li, double *Lx, int64_t *next, double *report)
{
    double worst = 0.0, scale = 0.0;
    int64_t worst_row = -1, worst_col = -1, nz = 0, unmatched = 0;
#define SYM_ASYMMETRY(value, row, col) \
    if ((value) > worst) { worst = (value); worst_row = (row); worst_col = (col); }
#define SYM_UNMATCHED(q, col) \
    if (Ax[q] != 0.0) { unmatched++; SYM_ASYMMETRY(fabs(Ax[q]), Ai[q], col) }
    for (int32_t j = 0; j < n; j++) next[j] = Ap[j];
    for (int32_t j = 0; j < n; j++) {
        Lp[j] = nz;
        for (int64_t p = Ap[j]; p < Ap[j + 1]; p++) {
            const int32_t i = Ai[p];
            const double a = Ax[p];
            if (fabs(a) > scale) scale = fabs(a);
            if (i < j) continue; /* an upper entry: met as a mirror from column i */
            double mirror = a;   /* the diagonal is its own mirror */
            if (i > j) {
                int64_t q = next[i];
                for (; q < Ap[i + 1] && Ai[q] < j; q++) /* upper entries of column i without a lower mirror */
                    SYM_UNMATCHED(q, i)
                mirror = q < Ap[i + 1] && Ai[q] == j ? Ax[q++] : 0.0;
                next[i] = q;
                SYM_ASYMMETRY(fabs(a - mirror), i, j)
            }
            Li[nz] = i;
            Lx[nz++] = a == mirror ? a : 0.5 * a + 0.5 * mirror;
        }
    }
    Lp[n] = nz;
    for (int32_t i = 0; i < n; i++) /* upper entries never asked for */
        for (int64_t q = next[i]; q < Ap[i + 1] && Ai[q] < i; q++) SYM_UNMATCHED(q, i)
#undef SYM_UNMATCHED
#undef SYM_ASYMMETRY
    report[0] = worst;
    report[1] = (double)worst_row;
    report[2] = (double)worst_col;
    report[3] = scale;
    report[4] = (double)unmatched;
    return nz;
}
