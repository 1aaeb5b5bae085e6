/* Arguments of the fault kernel (shared by host and slave). */
#ifndef FAULTS_H
#define FAULTS_H

enum {
    LDM_MALLOC = 0,      /* ldm_malloc(BYTES) and a DMA into it: legal when BYTES fits */
    MISALIGNED_DMA = 1,  /* main-memory address 2 bytes off */
    BAD_LENGTH = 2,      /* DMA of BYTES bytes, not a multiple of the granule */
    BAD_BLOCKS = 3,      /* strided DMA whose length is not a whole number of blocks */
    DMA_TO_MEMORY = 4,   /* DMA whose "LDM" side is main memory */
    DIRECT_ACCESS = 5,   /* LDM_ACCESS of a main-memory pointer */
    WAIT_TOO_LONG = 6,   /* waits for more transfers than were issued */
    STATIC_LDM = 7,      /* only touches the __thread_local array (its size is a -D at build time) */
    SYNC = 8,            /* legal: each CPE publishes its id, syncs (BYTES = scope), reads a neighbour's */
    DIRECT_LOAD = 9,     /* loads main memory directly instead of by DMA */
    REPLY_ON_STACK = 10, /* a DMA whose reply word is on the stack */
    PUT_REWRITTEN = 11,  /* a put's LDM buffer written again before its wait */
    GET_OVERWRITTEN = 12, /* a get's LDM buffer written before its wait */
    PUT_AT_BARRIER = 13,  /* an array barrier with a put not waited for */
    RACE = 14,            /* each CPE puts a word and gets its neighbour's: no barrier between when there is a
                             culprit (every CPE races), an array barrier when there is none */
    INIT_TWICE = 15,      /* the MPE calls athread_init a second time (the CPEs do nothing) */
    BIG_STACK = 16        /* a local array of BYTES bytes on the stack */
};

/* SYNC: where CPE i publishes and what it read from its neighbour (doubles into memory). */
#define SYNC_PUBLISHED 8192
#define SYNC_READ (8192 + 64)

/* The neighbour CPE i reads after a barrier of the given scope (0 array, 1 row, 2 column). */
static inline int sync_neighbour(int id, int scope) {
    int row = id / 8, col = id % 8;
    if (scope == 1) return row * 8 + (col + 1) % 8;
    if (scope == 2) return ((row + 1) % 8) * 8 + col;
    return (id + 1) % 64;
}

typedef struct {
    double *memory;
    int mode;
    int bytes;
    int culprit; /* the CPE that breaks the rule, -1 for none */
} faults_args;

#endif
