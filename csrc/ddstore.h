/*
 * ddstore.h - the whole C API of the ddstore core.
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
 * Threads (MPI_THREAD_MULTIPLE for the RMA path).  Variables never move in memory once
 * added (see DDS_MAX_VARS in csrc/internal.h), so:
 *   - reads (dds_read, dds_read_range, dds_ranges_total) and queries (dds_nrows,
 *     dds_chunk_offsets, dds_member_ptr, dds_local_bytes, dds_group_*) may run in several
 *     threads at once, and may overlap a dds_add on the same store (in one other thread);
 *   - dds_write_local may overlap reads; rows it writes read as undefined until dds_sync;
 *   - a dds_read with DDS_READ_PER_ROW_LOCK leaves the variable's shared access epoch for
 *     its duration: it may not overlap any other read of that variable;
 *   - dds_remove may not overlap anything on that variable; dds_sync and dds_free may
 *     not overlap anything on the store; two dds_add calls may not overlap each other.
 */
#ifndef DDSTORE_H
#define DDSTORE_H

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

typedef struct dds_store dds_store;

/* COLLECTIVE.  Create a store over `*comm` (duplicated internally) with groups of
 * `width` consecutive ranks (width <= 0 means all ranks).  The communicator is passed by
 * address so that bindings need not know the size of MPI_Comm (mpi4py's
 * MPI._addressof(comm) gives it). */
int dds_create(const MPI_Comm *comm, int width, int transport, dds_store **out);

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

/* COLLECTIVE.  Add a variable: this rank holds `n_local` rows of `row_bytes` bytes each
 * (contents undefined until written).  `name` is used in messages only.  On success
 * *var_id is the variable's handle. */
int dds_add(dds_store *store, const char *name, int64_t n_local, int64_t row_bytes,
            int *var_id);

/* COLLECTIVE.  Free a variable's windows and memory; its id is never reused. */
int dds_remove(dds_store *store, int var_id);

/* Local.  Copy `nrows` rows from `src` into this rank's chunk at local row `offset`. */
int dds_write_local(dds_store *store, int var_id, int64_t offset, const void *src,
                    int64_t nrows);

/* Local.  Address of group member `member`'s chunk when this rank can read it by plain
 * loads (its own chunk, or a node-local peer's in shared memory), else NULL (read it
 * with dds_read); *nrows is the member's number of rows either way. */
int dds_member_ptr(dds_store *store, int var_id, int member, void **ptr, int64_t *nrows);

/* COLLECTIVE.  Make every rank's local writes visible to every reader. */
int dds_sync(dds_store *store);

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

/* Local.  Check ranges as dds_read does, without reading: *total is the number of rows
 * they hold in all (what the caller must allocate).  Counts < 0 give DDS_EINVAL, ranges
 * outside [0, nrows) DDS_ERANGE, a total too large for one buffer DDS_ENOMEM. */
int dds_ranges_total(dds_store *store, int var_id, const int64_t *starts,
                     const int64_t *counts, int64_t n, int64_t *total);

/* Local (one-sided).  dds_read of the one range [start, start + count) into `out` of
 * `out_bytes` bytes. */
int dds_read_range(dds_store *store, int var_id, int64_t start, int64_t count, void *out,
                   int64_t out_bytes);

/* Bytes of row data this rank holds. */
int64_t dds_local_bytes(const dds_store *store);

/* ================================================================== temporal graphs
 * (csrc/temporal.c, used by ddstore.temporal)
 *
 * A T-CSR: the neighbour lists of all nodes, each sorted by timestamp (ties in edge
 * order), concatenated in node order into three store variables of equal row count:
 * `nbr` (int64 neighbour id), `ts` (double timestamp) and `eid` (int64 edge id).  Group
 * member g holds the lists of nodes [node_offsets[g], node_offsets[g + 1]), so its chunk
 * is the global rows [indptr[node_offsets[g]], indptr[node_offsets[g + 1]]).  `indptr`
 * (num_nodes + 1 global rows) and `node_offsets` are replicated metadata.
 */
typedef struct dds_tcsr {
    int nbr_var, ts_var, eid_var;
    int64_t num_nodes;
    const int64_t *indptr;       /* [num_nodes + 1] */
    const int64_t *node_offsets; /* [group_size + 1] */
    /* lists of members that are not load-readable are fetched whole (ts, nbr, eid) when
     * they have at most fetch_whole_max * max(1, roots asking / 2) entries; longer ones
     * are binary-searched remotely (one batched read per step); <= 0 means 2048 */
    int64_t fetch_whole_max;
    /* uniform draws from a list that is not load-readable read its whole eligible range
     * in one piece when it has at most range_factor * k entries, else one row per draw;
     * <= 0 means 64 */
    int64_t range_factor;
} dds_tcsr;

enum dds_sample_strategy {
    DDS_SAMPLE_RECENT = 0,  /* the k eligible edges with the latest timestamps */
    DDS_SAMPLE_UNIFORM = 1  /* k draws with replacement when more than k are eligible */
};

/* Local (one-sided).  One layer of temporal neighbour sampling for `n` roots
 * (`roots[i]` at time `root_ts[i]`).  Only edges with timestamp strictly before the
 * root's time are eligible.  `recent`: the last min(k, eligible) eligible edges, in list
 * (time) order.  `uniform`: all eligible edges in list order when there are at most k,
 * else k draws with replacement, in draw order, from a random stream that depends only
 * on (seed, epoch, layer, i), not on the rank or the store's layout.
 * Outputs (capacity `cap` each; the sum over roots of min(k, degree) always suffices),
 * compact in root order: row[j] (root position), nbr[j], eid[j], ets[j] (edge
 * timestamp); *count is the number written.  DDS_EINVAL, nothing written, when the
 * edges taken need more than `cap`.  Lists held by members that are not load-readable
 * are fetched with batched dds_read calls. */
int dds_temporal_sample(dds_store *store, const dds_tcsr *graph, const int64_t *roots,
                        const double *root_ts, int64_t n, int64_t k, int strategy,
                        uint64_t seed, uint64_t epoch, int layer, int64_t cap,
                        int64_t *row, int64_t *nbr, int64_t *eid, double *ets,
                        int64_t *count);
/* T-CSR build (csrc/tcsr.c; the MPI rounds are ddstore/temporal/build.py).  Local, no MPI,
 * no allocation.  `edges` is an edge table chunk: n rows of (src, dst) int64, row i is
 * edge id eid0 + i at time t[i].  An entry is 4 words: (node, neighbour, timestamp bits
 * as double, edge id); every edge gives (src, dst, t, id), and with add_reverse also
 * (dst, src, t, id).
 *
 * dds_tcsr_count: deg[v] += the entries of node v (DDS_ERANGE for a node outside
 * [0, num_nodes)).  dds_tcsr_pack: the entries of n edges into out (capacity `cap`
 * entries of 4 words; n * (1 + add_reverse) suffice), grouped by the member owning the
 * node (node_offsets[width + 1]), in edge order within a member; counts[width] gets the
 * number of entries per member.  dds_tcsr_place: put n received entries of nodes in
 * [node_lo, node_hi) into this member's chunk (nbr, ts, eid, each of capacity `rows`;
 * local row 0 is global row indptr[node_lo]) at row indptr[v] + fill[v - node_lo]++
 * (DDS_EINVAL if a node is not this member's, gets more entries than its degree, or
 * its row is outside [0, rows)).  dds_tcsr_sort: sort every list of nodes
 * [node_lo, node_hi) in place by (timestamp, edge id) (DDS_EINVAL, nothing sorted, if a
 * list is outside [0, rows) of the chunk).  Times are optional: t NULL
 * in dds_tcsr_pack packs time 0; ts NULL in dds_tcsr_place / dds_tcsr_sort keeps no
 * times and sorts every list by edge id alone (the CSC of ddstore.pyg without a time).
 * `id_bytes` is the width of the ids in nbr and eid: 8 (int64_t, the T-CSR) or 4
 * (int32_t, the CSC of ddstore.pyg when its ids fit; dds_tcsr_place gives DDS_ERANGE for
 * an entry whose neighbour or edge id does not fit); anything else is DDS_EINVAL. */
int dds_tcsr_count(const int64_t *edges, int64_t n, int add_reverse, int64_t num_nodes,
                   int64_t *deg);
int dds_tcsr_pack(const int64_t *edges, const double *t, int64_t eid0, int64_t n,
                  int add_reverse, const int64_t *node_offsets, int width,
                  int64_t *counts, int64_t *out, int64_t cap);
int dds_tcsr_place(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                   const int64_t *indptr, int64_t *fill, void *nbr, double *ts,
                   void *eid, int64_t rows, int id_bytes);
int dds_tcsr_sort(int64_t node_lo, int64_t node_hi, const int64_t *indptr, void *nbr,
                  double *ts, void *eid, int64_t rows, int id_bytes);
/* ================================================================== end temporal */

/* ================================================================== neighbour sampling
 * (csrc/neighbor.c, used by ddstore.pyg)
 *
 * A CSC held like a T-CSR (dds_tcsr): per edge, `nbr` = its source node, `eid` = its
 * edge id and, optionally, `ts` = its time (ts_var < 0: no times); the lists sorted by
 * destination, then time; `indptr` indexed by destination node.  `nbr` and `eid` hold
 * int32 or int64 ids (rows of 4 or 8 bytes, each variable its own); outputs are int64.
 */
enum dds_neighbor_flags {
    DDS_NEIGHBOR_REPLACE = 1, /* k independent uniform draws (with replacement) */
    DDS_NEIGHBOR_LAST = 2     /* the last min(k, eligible) entries of the list */
};

/* Local (one-sided).  One hop for `n` destination nodes.  Node i's eligible entries are
 * its whole list or, when `node_ts` is not NULL, the entries with ts <= node_ts[i] (a
 * prefix: lists are sorted by time).  With c eligible: k < 0 takes all c; LAST takes the
 * last min(k, c); REPLACE takes k independent uniform draws (none when c == 0);
 * otherwise min(k, c) distinct entries, uniformly (all c in list order when c <= k).
 * Buffers are sized by what is taken, never by k alone, so any k >= 0 is valid.
 * Draws depend only on (seed, i).  Outputs (capacity `cap` each, compact in node
 * order): row[j] (position i of the node), nbr[j], eid[j]; *count is the number
 * written.  The entries taken are counted before anything is written: DDS_EINVAL when
 * they exceed `cap`, DDS_ENOMEM when their number does not fit 64 bits (REPLACE with
 * an absurd k).  Rows readable by load are copied in place, the others read one-sidedly by
 * one batched dds_read per variable. */
int dds_neighbor_sample(dds_store *store, const dds_tcsr *graph, const int64_t *nodes,
                        const double *node_ts, int64_t n, int64_t k, int flags,
                        uint64_t seed, int64_t cap, int64_t *row, int64_t *nbr,
                        int64_t *eid, int64_t *count);

/* Local, no MPI, no store.  Map `n` keys (>= 0) to dense ids through the caller's
 * open-addressing table (`cap` a power of two > *next + n; empty slots hold key -1):
 * a key seen before gets its id, a new key the id *next (then incremented), and its
 * position is appended to new_pos (*n_new of them, in order of first occurrence).
 * ids and new_pos have capacity n (one entry per key at most). */
int dds_relabel(int64_t *map_keys, int64_t *map_ids, int64_t cap, const int64_t *keys,
                int64_t n, int64_t *ids, int64_t *next, int64_t *new_pos, int64_t *n_new);
/* Local (one-sided).  dds_neighbor_sample with weights: `w_var` holds one float64 per
 * CSC row (the edge's weight, in the CSC's row order), read with each list (by load, or
 * the eligible ranges of all remote lists in one batched dds_read).  Entries of weight 0
 * are never taken; with p positive-weight entries among node i's eligible ones: k < 0
 * or (without REPLACE) p <= k takes all p, in list order; REPLACE takes k independent
 * draws, each entry with probability w / (sum of the eligible weights) (none when
 * p == 0); otherwise k distinct entries by Efraimidis-Spirakis: every positive entry
 * gets the key E / w (E exponential(1), from the stream of (seed, i, entry)), and the k
 * smallest keys are taken, in list order (the law of k successive draws without
 * replacement, each in proportion to the weights left).  flags: only REPLACE
 * (DDS_EINVAL for LAST).  DDS_EINVAL when an eligible weight is negative, NaN or
 * infinite (naming its CSC row), or the entries taken exceed `cap`; nothing is
 * counted as written then.  Outputs as dds_neighbor_sample. */
int dds_neighbor_sample_weighted(dds_store *store, const dds_tcsr *graph, int w_var,
                                 const int64_t *nodes, const double *node_ts, int64_t n,
                                 int64_t k, int flags, uint64_t seed, int64_t cap,
                                 int64_t *row, int64_t *nbr, int64_t *eid, int64_t *count);
/* ================================================================== end neighbour */

/* ================================================================== subgraph transforms
 * (csrc/subgraph.c, used by ddstore.pyg's samplers for subgraph_type="bidirectional")
 *
 * Local, no MPI, no store.  PyG's to_bidirectional of one sampled edge set: the pairs
 * (row[i], col[i]) for i < n followed by (rev_col[j], rev_row[j]) for j < nr, sorted by
 * (col, row), each distinct pair once.  With edge ids (eid and rev_eid both given, else
 * both NULL), a pair keeps the id of its last occurrence in that concatenation (as PyG's
 * coalesce with reduce="any" does on the CPU).  Every node id is in [0, num_nodes)
 * (DDS_ERANGE, naming the pair, otherwise).  Outputs have capacity `cap` each (n + nr
 * always suffices): DDS_EINVAL, nothing written, when the distinct pairs exceed it;
 * *out_n is the number written.  Time and memory O(n + nr + num_nodes). */
int dds_bidirectional(const int64_t *row, const int64_t *col, const int64_t *eid, int64_t n,
                      const int64_t *rev_row, const int64_t *rev_col, const int64_t *rev_eid,
                      int64_t nr, int64_t num_nodes, int64_t cap, int64_t *out_row,
                      int64_t *out_col, int64_t *out_eid, int64_t *out_n);
/* ================================================================== end subgraph */

/* ================================================================== dynamic graphs
 * (csrc/dynamic.c, used by ddstore.spatiotemporal.DynamicGraph)
 *
 * Local, no MPI, no store.  One snapshot step: out = keys - rm + add, in one merge.
 * `keys` (n) sorted and unique; `rm` (nr) a sorted subset of keys; `add` (na) sorted and
 * disjoint from keys - rm; `chg` (nc) sorted keys of the result whose weight becomes
 * chg_w.  Keys are dst << bits | src (1 <= bits <= 62).  Weights (`w`, `add_w`, `chg_w`,
 * `out_w`) may all be NULL for an unweighted graph.  out_keys/out_w hold n - nr + na;
 * `src`/`dst` (the rows of edge_index, same length), unless NULL, get each key's parts.
 * `cap` is the capacity of every output (n - nr + na suffices for a valid delta).
 * Returns DDS_EINVAL, with a message naming the key, when the inputs break these rules
 * (a corrupt delta), never writing past `cap`: a removed key missing from the snapshot
 * is found however it compares to the kept keys. */
int dds_apply_delta(const int64_t *keys, const float *w, int64_t n, const int64_t *rm,
                    int64_t nr, const int64_t *add, const float *add_w, int64_t na,
                    const int64_t *chg, const float *chg_w, int64_t nc, int bits,
                    int64_t cap, int64_t *out_keys, float *out_w, int64_t *src,
                    int64_t *dst, int64_t *out_n);
/* ================================================================== end dynamic */

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_H */
