/* msc halo-exchange library: Cartesian process grids and split-phase halo
 * exchange of padded C-order arrays (1D, 2D, 3D).
 *
 * A grid splits a global interior of N0 x N1 x N2 points into a Cartesian
 * block per rank (uneven divisions allowed: the first N % P coordinates get
 * one point more). Each rank stores its block padded by a halo of width
 * halo[d] on every side that has a neighbour and edge[d] on a physical
 * (non-periodic) boundary; an exchanger fills the halo of one such array from
 * the neighbours' blocks: faces, and edges and corners only for the
 * directions the caller asks for (a star stencil needs faces only). Sides
 * on a non-periodic physical boundary are left untouched (MPI_PROC_NULL).
 *
 * Communicators come in as MPI_Fint (MPI_Comm_c2f in C, comm.py2f() from
 * mpi4py), so the same library serves standalone programs and ctypes.
 * Functions that can fail return 0 on success, or non-zero with a one-line
 * message in err; they decide from arguments every rank shares, so every
 * rank fails alike and none waits on a message that never comes. */
#ifndef MSC_HALO_H
#define MSC_HALO_H
#include <mpi.h>

#define MSC_HALO_MAX_DIRS 26

typedef struct msc_grid msc_grid;
typedef struct msc_halo msc_halo;

/* Block `index` of `n` points split into `parts`: its first point and size. */
void msc_block(long n, int parts, int index, long *start, long *count);

/* Collective over comm. dims[d] == 0 lets MPI_Dims_create choose; ranks keep
 * their numbering (no reordering). */
int msc_grid_create(MPI_Fint comm, int ndim, const int *dims, const int *periodic,
                    const long *interior, msc_grid **out, char *err, int errlen);
/* Replace the even split by given blocks (grids whose blocks follow another grid's: multigrid's coarse
 * levels): bounds holds, per dimension d, dims[d] + 1 increasing points from 0 to the interior's size;
 * block c of dimension d is [bounds[c], bounds[c + 1]). Every rank passes the same bounds. */
int msc_grid_split(msc_grid *g, const long *bounds, char *err, int errlen);
/* This rank's place: process-grid dims and coords, block start and count. */
void msc_grid_layout(const msc_grid *g, int *dims, int *coords, long *start, long *count);
/* The grid coordinates of any rank (for scattering and gathering). */
void msc_grid_coords_of(const msc_grid *g, int rank, int *coords);
MPI_Comm msc_grid_comm(const msc_grid *g);
/* The padding of the block of `rank` on the low (lo) and high (hi) side of each
 * dimension: halo[d] toward a neighbour (a periodic wrap is one), edge[d] on a
 * physical boundary. */
void msc_grid_padding(const msc_grid *g, int rank, const long *halo, const long *edge, long *lo, long *hi);
void msc_grid_free(msc_grid *g);

/* An exchanger for arrays of this rank's block padded as msc_grid_padding
 * says, elements of elem_size bytes. dirs holds ndirs direction vectors of ndim entries in
 * {-1, 0, 1}: the halo regions to fill (the region of direction v comes
 * from the neighbour at coords + v). Buffers and persistent requests are
 * made once here. Fails when a block is thinner than the halo it feeds. */
int msc_halo_create(const msc_grid *g, const long *halo, const long *edge, int elem_size, int ndirs,
                    const int *dirs, msc_halo **out, char *err, int errlen);
/* Pack the boundary slabs of `array` and start the messages. */
void msc_halo_start(msc_halo *h, void *array);
/* Wait for the messages and unpack them into the halo of the started array. */
void msc_halo_finish(msc_halo *h);
/* Bytes this rank has sent through this exchanger since it was created. */
long long msc_halo_bytes_sent(const msc_halo *h);
void msc_halo_free(msc_halo *h);

#endif
