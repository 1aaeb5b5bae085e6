/* Arguments of the hand-written Jacobi kernel (shared by host and slave). */
#ifndef JACOBI_H
#define JACOBI_H

/* What to leave out, to show the emulator catches it. */
enum { OMIT_NOTHING = 0, OMIT_FIRST_GET_WAIT = 1, OMIT_FINAL_PUT_WAIT = 2 };

typedef struct {
    const double *in; /* (nx + 2) x (ny + 2), Dirichlet ring included */
    double *out;
    int nx, ny;       /* interior points */
    int bx, by;       /* tile (LDM block) of interior points */
    int omit;
} jacobi_args;

#endif
