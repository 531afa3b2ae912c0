/*
 * dds_store.h - the store: variables whose rows are spread over the ranks, and their
 * reads; the status codes and the rules (errors, collective calls, outputs, threads)
 * that every function of the C API follows.  Part of the C API of the ddstore core
 * (include ddstore.h, which includes every part).
 *
 * A store spreads the rows of each variable over the ranks of a communicator.  Ranks
 * form groups of `width` consecutive ranks; each group holds one full replica, each
 * member one chunk.  The global row space of a variable is the concatenation of the
 * members' chunks in group-rank order.  A rank only ever reads from its own group.
 *
 * Every function returns DDS_OK (0) or an error code; on error the message is left in
 * dds_last_error(), which is per thread: read it in the thread that made the failed call
 * (before that thread's next call into the core).
 *
 * Functions marked COLLECTIVE must be called by every rank of the communicator, in the
 * same order, for the same variable.  C does not check that: collective calls made out
 * of step wait forever or mismatch.  The Python layer checks every collective call before
 * it enters C (ddstore/_collective.py: one allgather of (operation, name, error) that
 * every rank meets), so ranks in different calls are told instead of waiting.
 * What C guarantees once the calls match:
 *   - dds_create and dds_add agree on errors (every MPI call and allocation included):
 *     either every rank succeeds, or every rank returns the same code and the message of
 *     the lowest failing rank, and nothing is created (the store stays usable).  The
 *     exceptions are failures that leave nothing to agree over: MPI_Comm_dup (and the
 *     rank and size of its result) in dds_create, and an MPI error inside the agreement
 *     itself; those are this rank's alone.
 *   - dds_sync returns this rank's own MPI error only (an MPI failure there is fatal to
 *     the job in practice); dds_remove and dds_free release what they can and return
 *     DDS_OK (or a local DDS_ESTATE for an unknown variable, checked before any MPI call).
 * Local functions touch no other rank.
 *
 * Outputs.  Every function that writes into a caller's array is given that array's
 * capacity (named `cap`, in elements, or `out_bytes`, in bytes) and returns an error
 * (DDS_EINVAL, with a message naming both sizes) instead of writing past it; nothing is
 * written to an output before its size is checked.  Sizes computed from the caller's
 * integers (counts times row sizes, nodes times fanouts) are checked for overflow before
 * they are used: DDS_ENOMEM when they do not fit 64 bits.  The exceptions are arrays
 * whose length is another argument (`deg[num_nodes]`, `counts[width]`, `ids[n]`), and
 * inputs, whose lengths are the caller's to get right.
 *
 * Threads.  Below MPI_THREAD_MULTIPLE (MPI_Query_thread at dds_create), the reads that
 * call MPI take turns inside the core, those of every store of the process (one at a
 * time from its first piece read by MPI to its end: MPI_THREAD_SERIALIZED's rule for
 * them; reads of node-local rows alone do not wait; the caller's other MPI calls are its
 * own to keep apart).  Variables never move in memory once added (see DDS_MAX_VARS in
 * csrc/internal.h), so:
 *   - reads (dds_read, dds_read_range, dds_ranges_total) and queries (dds_nrows,
 *     dds_chunk_offsets, dds_member_ptr, dds_local_bytes, dds_group_*) may run in several
 *     threads at once, and may overlap a dds_add on the same store (in one other thread);
 *   - dds_write_local may overlap reads; rows it writes read as undefined until dds_sync;
 *   - a dds_read with DDS_READ_PER_ROW_LOCK leaves the variable's shared access epoch for
 *     its duration: it may not overlap any other read of that variable;
 *   - dds_remove may not overlap anything on that variable; dds_sync and dds_free may
 *     not overlap anything on the store; two dds_add calls may not overlap each other.
 */
#ifndef DDSTORE_STORE_H
#define DDSTORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dds_status {
    DDS_OK = 0,
    DDS_EINVAL = 1,   /* bad argument (value error) */
    DDS_ERANGE = 2,   /* index or offset out of range */
    DDS_ENOMEM = 3,   /* allocation too large or failed */
    DDS_EMPI = 4,     /* an MPI call failed */
    DDS_ESTATE = 5    /* store freed, or variable unknown */
};

enum dds_transport {
    DDS_TRANSPORT_AUTO = 0, /* node-local peers by shared memory, others by MPI_Get */
    DDS_TRANSPORT_RMA = 1,  /* always MPI_Get, even for node-local peers */
    DDS_TRANSPORT_SHM = 2   /* shared memory only: every group member must be node-local */
};

/* flags for dds_read */
enum dds_read_flags {
    DDS_READ_PER_ROW_LOCK = 1 /* lock/get/unlock per row (the slow path, for benchmarks) */
};

/* flags for dds_prefault (a union; DDS_PREFAULT_OWN | DDS_PREFAULT_PEERS: every chunk
 * this rank reads by plain loads) */
enum dds_prefault_flags {
    DDS_PREFAULT_OWN = 1,   /* this rank's own chunk */
    DDS_PREFAULT_PEERS = 2, /* the chunks of node-local group members (shared memory) */
    DDS_PREFAULT_TOUCH = 4  /* no madvise: read one byte per page (the fallback path) */
};

typedef struct dds_store dds_store;

/* COLLECTIVE.  Create a store over `*comm` (duplicated internally) with groups of
 * `width` consecutive ranks (width <= 0 means all ranks).  The communicator is passed by
 * address so that bindings need not know the size of MPI_Comm (mpi4py's
 * MPI._addressof(comm) gives it).  On an error, `*agreed` (when not NULL) is 1 where every
 * rank of `*comm` returned the same code and message (the failures after the
 * communicators are made), 0 where the error may be this rank's alone. */
int dds_create(const MPI_Comm *comm, int width, int transport, dds_store **out,
               int *agreed);

/* COLLECTIVE.  Free every window and communicator; *store becomes NULL.  Safe on NULL.
 * If MPI is already finalized the memory is released without MPI calls. */
int dds_free(dds_store **store);

/* Local.  The message of this thread's last failed call (empty before any failure).
 * Per thread, not per store: valid until this thread's next call into the core. */
const char *dds_last_error(void);

int dds_group_rank(const dds_store *store);
int dds_group_size(const dds_store *store);
int dds_ngroups(const dds_store *store);
/* number of group members whose chunk this rank reads by direct load (shared memory) */
int dds_shm_peers(const dds_store *store);
/* Members of this rank's group on other nodes (as MPI_Comm_split_type sees the nodes;
 * with MPICH's MPIR_CVAR_NOLOCAL=1 every other member), whatever the transport. */
int dds_off_node(const dds_store *store);
/* This process's one-sided traffic so far, every store together: MPI_Get calls made,
 * the bytes they asked for, and the round trips reads waited for (one per owner per
 * read call, whatever its variables: dds_read_many issues every get before its first
 * MPI_Win_flush).  Counters only grow; take differences. */
int dds_rma_stats(int64_t *gets, int64_t *bytes, int64_t *flushes);

/* Local.  1 in a process forked from an MPI rank after the core was loaded (a
 * DataLoader worker, os.fork), else 0.  There every function that would make an MPI
 * call returns DDS_ESTATE instead ("... needs MPI, and this process was forked ...")
 * and makes none: dds_create, dds_add, dds_remove, dds_sync, dds_sync_windows, and a
 * dds_read of rows that are not readable by load (another node's member, or any other
 * member with transport RMA) or with DDS_READ_PER_ROW_LOCK.  Reads of rows in this
 * process's memory (its own chunk, node-local members' shared memory inherited from
 * the parent) work as in the parent; dds_free releases the child's copy of the memory
 * without MPI. */
int dds_forked(void);

/* COLLECTIVE.  Add a variable: this rank holds `n_local` rows of `row_bytes` bytes each
 * (contents undefined until written: dds_zero_private zeroes them).  `name` is used in messages only.  On success
 * *var_id is the variable's handle. */
int dds_add(dds_store *store, const char *name, int64_t n_local, int64_t row_bytes,
            int *var_id);

/* COLLECTIVE.  Free a variable's windows and memory; its id is never reused. */
int dds_remove(dds_store *store, int var_id);

/* Local.  Copy `nrows` rows from `src` into this rank's chunk at local row `offset`. */
int dds_write_local(dds_store *store, int var_id, int64_t offset, const void *src,
                    int64_t nrows);

/* Local.  Mark this rank's chunk of a variable as written (by plain stores through the
 * address dds_member_ptr gives: a numpy view of it) since the last sync: where the chunk
 * is private memory, the next sync (dds_sync) counts as a change for the processes
 * forked from this one, which then refuse to read their stale copy (dds_get_var).
 * dds_write_local marks its own writes; dds_sync_windows counts every variable it is
 * given as changed. */
int dds_mark_written(dds_store *store, int var_id);

/* Local.  Zero this rank's chunk of a variable where it lies in private memory (which
 * MPI may take from a heap holding a removed variable's bytes); a chunk in node-shared
 * memory is a fresh mapping, zero already.  For variables made to be filled in pieces
 * (init): rows never written read as zeros. */
int dds_zero_private(dds_store *store, int var_id);

/* Local.  1 if this rank's chunk of variable `var_id` lies in private memory (MPI gives
 * it where the rank has no node-local peer): a process forked before keeps a
 * copy-on-write copy of its rows, blind to later writes.  0 otherwise (and without rows
 * here, or for a bad id). */
int dds_private_rows(const dds_store *store, int var_id);

/* Local.  1 if the process this one was forked from freed the store since (its shared
 * flag; 0 in the process that made it, which knows its own frees), else 0. */
int dds_gone(const dds_store *store);

/* Local.  1 if variable `var_id` is held (the store not freed, the variable not removed;
 * in a process forked from the rank, not by the rank since the fork either), else 0. */
int dds_held(const dds_store *store, int var_id);

/* Local.  Address of group member `member`'s chunk when this rank can read it by plain
 * loads (its own chunk, or a node-local peer's in shared memory), else NULL (read it
 * with dds_read); *nrows is the member's number of rows either way. */
int dds_member_ptr(dds_store *store, int var_id, int member, void **ptr, int64_t *nrows);

/* COLLECTIVE.  Make every rank's local writes visible to every reader. */
int dds_sync(dds_store *store);

/* Local.  MPI_Win_sync of the windows of the `n` variables `var_ids` (every id checked
 * first: DDS_ESTATE for an unknown one, nothing synced).  The local half of dds_sync for
 * a layer that runs its own barrier on its own communicator: this rank's writes to those
 * variables are made visible before the barrier, and (called again after it) the other
 * ranks' writes made before their barrier are visible to this rank's reads after it.
 * May overlap reads, dds_add and dds_sync_windows of other variables (its own thread);
 * not a dds_remove of one of those variables nor dds_free. */
int dds_sync_windows(dds_store *store, const int *var_ids, int64_t n);

/* Rows of a variable in the group's global row space. */
int dds_nrows(const dds_store *store, int var_id, int64_t *nrows);
/* Bytes per row of a variable. */
int dds_row_bytes(const dds_store *store, int var_id, int64_t *row_bytes);
/* first global row of each group member's chunk: offsets[group_size + 1] (`cap` the
 * capacity of offsets, at least group_size + 1) */
int dds_chunk_offsets(const dds_store *store, int var_id, int64_t *offsets, int64_t cap);

/* Local (one-sided).  Read `n` row ranges [starts[i], starts[i] + counts[i]) of a
 * variable into `out`, packed in request order.  Ranges may repeat, overlap and span
 * owners; `counts` may be NULL, meaning one row per range (a batch of row indices).
 * `out_bytes` is the capacity of `out` in bytes: DDS_EINVAL (nothing read) when the
 * rows asked for need more.  All remote reads of a call are issued in one access epoch
 * and completed by one flush per target (unless DDS_READ_PER_ROW_LOCK is given). */
int dds_read(dds_store *store, int var_id, const int64_t *starts, const int64_t *counts,
             int64_t n, void *out, int64_t out_bytes, int flags);

/* One read of dds_read_many: what dds_read takes, as a struct. */
typedef struct dds_read_req {
    int var_id;
    const int64_t *starts;
    const int64_t *counts;  /* NULL: one row per start */
    int64_t n;
    void *out;
    int64_t out_bytes;
} dds_read_req;

/* Local (one-sided).  Several reads (of one variable or of several) made as one: every
 * request is checked before anything is read (the first bad one's error, nothing
 * read), then the remote pieces of all of them are issued before any is waited for, so
 * the call costs one round trip per remote owner, not one per request.  Owners on other
 * nodes are asked by message when the store serves reads (dds_serve): one request
 * message per owner for all the call's pieces of every variable, answered by the
 * owner's agent thread with the rows packed in one reply. */
int dds_read_many(dds_store *store, const dds_read_req *reqs, int64_t nreq);

/* COLLECTIVE over the group in effect (the caller agrees that every member runs its
 * progress agent, see dds_progress.h).  on = 1: reads of members on other nodes with at
 * least `min_pieces` pieces (rows or runs of rows, every variable of the call
 * together) go by message to the owner's agent, which packs them (the network path:
 * a scattered MPI_Get over TCP costs about a microsecond per piece, a packed reply
 * streams); fewer pieces stay one-sided gets.  on = 0: every read stays one-sided.
 * DDS_EINVAL for min_pieces < 1, DDS_ESTATE when on = 1 and the agent does not run. */
int dds_serve(dds_store *store, int on, int64_t min_pieces);
/* Whether the store reads members on other nodes by message (0/1; 0 for NULL). */
int dds_serving(const dds_store *store);
/* Local.  The local pieces of a read (plain loads from this rank's chunk or a node-local
 * member's in shared memory) whose output buffers hold at least `min_bytes` bytes
 * together are copied by `threads` threads, each an even share of their bytes, once
 * the call's remote pieces are issued; smaller reads, and threads = 1, copy each piece
 * in the reading thread as it is walked.  threads = 0 chooses, from 1 to 8: the CPUs
 * this process is bound to, or, unbound (allowed every CPU of the node), the node's
 * CPUs divided by the store's ranks on it.  DDS_EINVAL for threads outside
 * [0, DDS_MAX_COPY_THREADS] or min_bytes < 1.  (A host copy runs at a few GB/s per
 * core, a pinned host-to-device copy ten times faster, in docs/benchmarks.md,
 * "Measured on one H200 (2026-11-29, sixteenth session)".) */
int dds_set_copy_threads(dds_store *store, int threads, int64_t min_bytes);
enum { DDS_MAX_COPY_THREADS = 64 };  /* the most dds_set_copy_threads takes */
/* The threads dds_set_copy_threads chose (1 until it is called; 0 for NULL). */
int dds_copy_threads(const dds_store *store);
/* What this process's message path did so far, every store together: request
 * messages sent and the bytes of rows they asked for (each a round trip of a read),
 * requests answered here (by its agents and by its waiting readers) and the bytes of
 * rows those answers packed.  Counters only grow. */
int dds_serve_stats(int64_t *sent, int64_t *asked, int64_t *served, int64_t *bytes);

/* Local.  Check ranges as dds_read does, without reading: *total is the number of rows
 * they hold in all (what the caller must allocate).  Counts < 0 give DDS_EINVAL, ranges
 * outside [0, nrows) DDS_ERANGE, a total too large for one buffer DDS_ENOMEM. */
int dds_ranges_total(dds_store *store, int var_id, const int64_t *starts,
                     const int64_t *counts, int64_t n, int64_t *total);

/* Local (one-sided).  dds_read of the one range [start, start + count) into `out` of
 * `out_bytes` bytes. */
int dds_read_range(dds_store *store, int var_id, int64_t start, int64_t count, void *out,
                   int64_t out_bytes);

/* Local.  Map the pages of a variable's chunks that this rank reads by plain loads (its
 * own with DDS_PREFAULT_OWN, node-local members' in shared memory with
 * DDS_PREFAULT_PEERS; under transport RMA there are none of the latter) into this
 * process's page tables, so that a read's first touch of a page costs no page fault:
 * madvise(MADV_POPULATE_READ) (Linux >= 5.14), else (refused, or DDS_PREFAULT_TOUCH) a
 * read of one byte per page.  Reads only: every byte stays as it is, nothing is
 * allocated (the pages are their owner's; only page tables grow), and the system's
 * refusals are not errors.  *bytes (unless NULL) = the bytes of the chunks mapped.
 * DDS_EINVAL for unknown flags.  Makes no MPI call: may run in any thread, overlapping
 * anything but dds_remove of that variable and dds_free.  (dds_add also advises huge
 * pages on every chunk before it is written: MADV_HUGEPAGE, where the system allows.) */
int dds_prefault(dds_store *store, int var_id, int flags, int64_t *bytes);

/* Bytes of row data this rank holds. */
int64_t dds_local_bytes(const dds_store *store);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_STORE_H */
