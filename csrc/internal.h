/*
 * internal.h - what the C files of the core share and the API does not show: the store
 * and variable structs, the one way to set the error message, and the one search for
 * the group member that holds a row or a node.  Not for bindings.
 */
#ifndef DDSTORE_INTERNAL_H
#define DDSTORE_INTERNAL_H

#include "ddstore.h"

#include <pthread.h>
#include <stdatomic.h>

/* Variables live in blocks of DDS_VAR_BLOCK that are allocated once and never moved or
 * reallocated, listed in a table of DDS_VAR_BLOCKS entries inside the store: a variable's
 * address is fixed from dds_add to dds_free, so a read in one thread never holds a
 * pointer into memory that a dds_add in another thread replaces.  At most
 * DDS_MAX_VARS variables per store (ids are never reused, removed ones included). */
#define DDS_VAR_BLOCK 256
#define DDS_VAR_BLOCKS 4096
#define DDS_MAX_VARS (DDS_VAR_BLOCK * DDS_VAR_BLOCKS)

struct dds_var {
    char name[160];
    int64_t n_local;    /* rows held by this rank */
    int64_t row_bytes;  /* bytes per row */
    int64_t nrows;      /* rows in the group's global row space */
    int64_t *offsets;   /* [group_size + 1] first global row of each member's chunk;
                         * NULL once removed (the name is kept) */
    char *base;         /* this rank's chunk */
    MPI_Win shm_win;    /* shared-memory window over the node-local members, or NULL */
    MPI_Win rma_win;    /* window over the group for MPI_Get, or MPI_WIN_NULL */
    char **peer_base;   /* [group_size] chunk address readable by load, or NULL */
    /* this rank's chunk lies in private memory (MPI gives it where the rank has no
     * node-local peer: a process forked from it keeps a copy-on-write copy, blind to
     * later writes), and how many syncs of the variable this process has seen: a
     * forked process holds the count of its fork (dds_get_var, `synced`) */
    int private_rows;
    uint32_t syncs;
    /* written since the last sync (dds_write_local, dds_mark_written): a dds_sync of a
     * private chunk counts as a change then only */
    int written;
};

/* The message path (csrc/serve.c).  A server's reusable buffers: one per thread that
 * answers requests (the agent's own; a waiting reader's for the length of its call). */
struct dds_server {
    char *pack[2];     /* DDS_SERVE_CHUNK bytes each: a reply is sent while the next
                        * part is packed */
    int64_t *words;    /* the request being answered */
    int64_t words_cap;
    int patient;       /* the agent's: waits for its sends by testing and sleeping */
};
struct dds_store {
    MPI_Comm comm;       /* duplicate of the user's communicator */
    MPI_Comm group_comm; /* the `width` ranks of this rank's group */
    MPI_Comm node_comm;  /* members of the group on this node, or MPI_COMM_NULL */
    MPI_Comm host_comm;  /* every rank of `comm` on this node (memory accounting) */
    int rank, size, width, group_rank, ngroups, transport;
    int *node_rank;      /* [group_size] rank in node_comm of each member, or -1 */
    int need_rma;        /* some member of the group is not reachable by load */
    /* MPI below MPI_THREAD_MULTIPLE and need_rma: a read's MPI calls take turns with
     * every other read's of the process, whatever its store (transport.c's lock): two
     * threads calling MPI at once is erroneous there (MPICH crashed or asserted) */
    int mpi_serial;
    int shm_peers;
    int off_node;        /* group members on other nodes (as MPI_Comm_split_type sees) */
    /* the progress agent (csrc/progress.c): the communicator its thread polls, the
     * thread, whether it runs, its stop flag and period */
    MPI_Comm progress_comm;  /* a duplicate of group_comm: ranks are group members */
    pthread_t progress_thread;
    int progress_on;
    atomic_int progress_stop;
    atomic_llong progress_interval_ns;
    /* the message path (csrc/serve.c): whether reads of other nodes' members go by
     * message (dds_serve), from how many pieces, and which members are on other nodes */
    atomic_int serve_on;  /* set by dds_serve, read by the agent and by readers */
    int64_t serve_min_pieces;
    /* the local pieces of a read of at least copy_min_bytes are copied by copy_threads
     * threads (dds_set_copy_threads; 1: in the reading thread) */
    int copy_threads;
    int64_t copy_min_bytes;
    char *member_off;    /* [group_size] 1: member on another node */
    struct dds_server agent_srv;  /* the agent's buffers (allocated by dds_serve) */
    atomic_int mpi_waiters;       /* threads of this rank waiting inside MPI for their
                                   * own one-sided reads (a flush): they run MPI's
                                   * progress, which answers gets, not requests */
    atomic_int mpi_servers;       /* threads of this rank waiting for replies to their
                                   * reads by message, answering others' requests
                                   * meanwhile (csrc/serve.c).  The agent does not poll
                                   * while a server waits; while a flusher does, it polls
                                   * less often, or not at all where the store does not
                                   * serve (csrc/progress.c) */
    /* variables [0, nvars) are complete: dds_add fills a slot, then publishes it by a
     * release store of nvars; readers load nvars with acquire */
    atomic_int nvars;
    struct dds_var *var_blocks[DDS_VAR_BLOCKS];
    /* the ids of the variables not removed, in no order (collective calls only, the
     * main thread's: add appends, remove swaps out, sync walks them: its cost is the
     * variables held, not every slot ever published), and the bytes of their chunks on
     * this rank (read by any thread) */
    int *live;
    int nlive, live_cap;
    atomic_llong local_bytes;
    /* a shared anonymous mapping (DDS_SHARED_BYTES) written by the process that made
     * the store: a process forked from it (a DataLoader worker kept alive) reads its
     * copy of the store's memory by load, and this tells it what changed since the
     * fork.  `gone`: set to 1 by dds_free; `removed[id]`: set to 1 by dds_remove of
     * variable `id`; `synced[id]`: the syncs of variable `id` (dds_sync,
     * dds_sync_windows) made by the rank, against its private copy's count (ids are
     * never reused; a page of the mapping is touched only once a variable of its ids is
     * removed or synced).  NULL when it could not be mapped. */
    volatile int *gone;
    volatile unsigned char *removed;
    volatile uint32_t *synced;
    /* whether this rank's chunks lie in private memory (1), shared (0), not yet known
     * (-1): told from /proc/self/maps at the first add with rows here (every variable
     * of a store is allocated alike) */
    int private_chunks;
};

#define DDS_SHARED_BYTES (64 + (size_t)DDS_MAX_VARS * (1 + sizeof(uint32_t)))

/* Stop and join the store's progress agent if it runs (csrc/progress.c); local. */
void dds_progress_halt(dds_store *s) __attribute__((visibility("hidden")));

/* The variable in slot `id` (its block exists: id < nvars, or id == nvars in dds_add),
 * and how many slots are published (complete). */
static inline struct dds_var *dds_var_at(const dds_store *s, int id)
{
    return &s->var_blocks[id / DDS_VAR_BLOCK][id % DDS_VAR_BLOCK];
}
static inline int dds_nvars_published(const dds_store *s)
{
    return atomic_load_explicit(&((dds_store *)s)->nvars, memory_order_acquire);
}

/* The variable `var_id` of the store (DDS_ESTATE for a freed store or an unknown or
 * removed variable); csrc/base.c. */
int dds_get_var(const dds_store *s, int var_id, struct dds_var **v)
    __attribute__((visibility("hidden")));

/* Answer at most one request waiting for this rank (MPI_Improbe on progress_comm, which
 * also runs MPI's progress engine).  *served = 1 when one was answered.  A request this
 * rank cannot answer (an unknown variable, a range outside its chunk) is answered with
 * a failure status, never left waiting.  DDS_OK, or an MPI error / DDS_ENOMEM. */
int dds_serve_poll(dds_store *s, struct dds_server *srv, int *served)
    __attribute__((visibility("hidden")));
/* Allocate a server's pack buffers if it has none (DDS_ENOMEM); release them all. */
int dds_server_prepare(struct dds_server *srv) __attribute__((visibility("hidden")));
void dds_server_release(struct dds_server *srv) __attribute__((visibility("hidden")));

/* A reader's request to one owner within one dds_read_many call: the pieces (request
 * index, byte offset in the owner's chunk, bytes, where they go), then what sending it
 * posted.  Zeroed before use; dds_outbox_free releases it. */
struct dds_outbox {
    int *req;
    int64_t *disp, *len;
    char **dst;
    int64_t n, cap, bytes;
    int64_t *words;    /* the request message */
    char *tmp;         /* the reply when its pieces are not consecutive in the output */
    MPI_Request *mpi;  /* status and data receives, the request's send */
    int nmpi, sent;
    int64_t status;
};
/* Add a piece (merged into the last one when it continues it in both places). */
int dds_outbox_add(struct dds_outbox *o, int req, int64_t disp, int64_t len, char *dst)
    __attribute__((visibility("hidden")));
/* Post the reply's receives, then send the request to `owner` (no wait). */
int dds_outbox_send(dds_store *s, struct dds_outbox *o, int owner,
                    const dds_read_req *reqs) __attribute__((visibility("hidden")));
/* Wait for the replies of every sent outbox of boxes[nboxes] (box g = member g),
 * answering other ranks' requests meanwhile, and copy them into place. */
int dds_wait_outboxes(dds_store *s, struct dds_outbox *boxes, int nboxes,
                      const dds_read_req *reqs) __attribute__((visibility("hidden")));
void dds_outbox_free(struct dds_outbox *o) __attribute__((visibility("hidden")));

/* The files of the core in layers, each calling only the files below it (a test,
 * tests/test_layers.py, keeps it so): the samplers and checks (neighbor.c, temporal.c,
 * sampling.c, tcsr.c, dynamic.c, subgraph.c, checks.c) -> the store (ddstore.c) -> the
 * transport (transport.c: how a read's bytes travel) -> the progress agent
 * (progress.c) -> the message path (serve.c) -> base.c (errors, the fork guard, the
 * variable lookup), which calls none of them. */

/* The size of this thread's error message buffer (csrc/base.c). */
#define DDS_ERROR_BYTES 1024

/* Set this thread's error message (what dds_last_error returns); returns `code`. */
int dds_set_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), visibility("hidden")));

/* dds_set_error(DDS_EMPI, "<what> failed: <MPI's text for rc>"); returns DDS_EMPI. */
int dds_mpi_error(int rc, const char *what) __attribute__((visibility("hidden")));

/* DDS_ESTATE: `what` needs MPI, and this process was forked from an MPI rank. */
int dds_forked_refusal(const char *what) __attribute__((visibility("hidden")));

/* The group member that holds position `x` of a space cut into `width` consecutive
 * pieces: piece g is [offsets[g], offsets[g + 1]), `offsets` non-decreasing with
 * width + 1 entries (a variable's rows: dds_var.offsets; a T-CSR's nodes:
 * dds_tcsr.node_offsets).  Returns the last g in [0, width) with offsets[g] <= x, so
 * members with empty pieces (equal offsets) are skipped, in O(log width) loads.  Bounds
 * are the caller's to check: on a miss the result is still a valid member, 0 for
 * x < offsets[0] and width - 1 for x >= offsets[width].  `width` >= 1 (1: always 0). */
static inline int dds_member_of(const int64_t *offsets, int width, int64_t x)
{
    /* the answer is in [lo, lo + n); the loop's trip count depends on width only and
     * its choice is a conditional move, not a branch: random rows of a group do not
     * mispredict it */
    int lo = 0;
    for (int n = width; n > 1;) {
        int half = n / 2;
        lo = offsets[lo + half] <= x ? lo + half : lo;
        n -= half;
    }
    return lo;
}

#endif /* DDSTORE_INTERNAL_H */
