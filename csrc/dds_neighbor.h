/*
 * dds_neighbor.h - one hop of PyG-style neighbour sampling over a CSC held in the store,
 * uniform or weighted, and the relabelling of the nodes sampled (csrc/neighbor.c; used
 * by ddstore.pyg.NeighborSampler through ddstore._core.CSC and ddstore._core.Relabel).
 * Part of the C API of the ddstore core (include ddstore.h); the rules every function
 * follows are at the top of dds_store.h, the T-CSR layout in dds_tcsr.h.
 *
 * A CSC held like a T-CSR (dds_tcsr): per edge, `nbr` = its source node, `eid` = its
 * edge id and, optionally, `ts` = its time (ts_var < 0: no time per entry; then, with
 * node-level time, graph->nbr_time holds the time of every source node); the lists
 * sorted by destination, then time; `indptr` indexed by destination node.  `nbr` and `eid` hold
 * int32 or int64 ids (rows of 4 or 8 bytes, each variable its own); outputs are int64.
 */
#ifndef DDSTORE_NEIGHBOR_H
#define DDSTORE_NEIGHBOR_H

#include "dds_store.h"
#include "dds_tcsr.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dds_neighbor_flags {
    DDS_NEIGHBOR_REPLACE = 1, /* k independent uniform draws (with replacement) */
    DDS_NEIGHBOR_LAST = 2     /* the last min(k, eligible) entries of the list */
};

/* Local (one-sided).  One hop for `n` destination nodes.  Node i's eligible entries are
 * its whole list or, when `node_ts` is not NULL, the entries whose time is <= node_ts[i]
 * (a prefix: lists are sorted by time; node_ts of the graph's time type, doubles or
 * int64, see dds_tcsr.h; DDS_EINVAL for a NaN, or a graph->time_type that is not a
 * dds_time_type); an entry's time is its `ts` row, or with node-level time (ts_var < 0,
 * graph->nbr_time set) the time of its source node, nbr_time[nbr] (DDS_ERANGE for a
 * source outside [0, nbr_time_len)).  With c
 * eligible: k < 0 takes all c; LAST takes the last min(k, c); REPLACE takes k
 * independent uniform draws (none when c == 0); otherwise min(k, c) distinct entries,
 * uniformly (all c in list order when c <= k).  Buffers are sized by what is taken,
 * never by k alone, so any k >= 0 is valid.  Draws depend only on (seed, i).  Outputs
 * (capacity `cap` each, compact in node order): row[j] (position i of the node),
 * nbr[j], eid[j]; *count is the number written.  The entries taken are counted before
 * anything is written: DDS_EINVAL when they exceed `cap`, DDS_ENOMEM when their number
 * does not fit 64 bits (REPLACE with an absurd k).  Rows readable by load are copied in
 * place, the others read one-sidedly by one batched dds_read per variable. */
int dds_neighbor_sample(dds_store *store, const dds_tcsr *graph, const int64_t *nodes,
                        const void *node_ts, int64_t n, int64_t k, int flags,
                        uint64_t seed, int64_t cap, int64_t *row, int64_t *nbr,
                        int64_t *eid, int64_t *count);

/* Local, no MPI, no store.  Map `n` keys (>= 0) to dense ids through the caller's
 * open-addressing table of `cap` slots (a power of two > *next - base + n), each two
 * int64: a key and its id.  A slot belongs to the current generation when its id is
 * >= base; older slots (ids below base: earlier generations, or -1 in a new table)
 * count as empty, so a caller starts a new generation without clearing the table by
 * setting base to *next.  A key seen in this generation gets its id, a new key the id
 * *next (then incremented); ids are returned minus base (0, 1, ... per generation), and
 * the positions of new keys are appended to new_pos (*n_new of them, in order of first
 * occurrence).  ids and new_pos have capacity n.  Every key is checked (>= 0) before
 * any is mapped. */
int dds_relabel(int64_t *table, int64_t cap, int64_t base, const int64_t *keys, int64_t n,
                int64_t *ids, int64_t *next, int64_t *new_pos, int64_t *n_new);
/* Local, no MPI, no store.  dds_relabel over a dense table instead of a hash: `map` has
 * one int32 per key in [0, map_len) (-1: not seen); ids stay below 2**31.  Every key is
 * checked before any is mapped (a key outside [0, map_len) maps nothing).  The caller
 * restores the table by setting the keys it added back to -1. */
int dds_relabel_dense(int32_t *map, int64_t map_len, const int64_t *keys, int64_t n,
                      int64_t *ids, int64_t *next, int64_t *new_pos, int64_t *n_new);
/* Local (one-sided).  dds_neighbor_sample with weights: `w_var` holds one float32 or
 * float64 per CSC row (its row bytes, 4 or 8, say which: the edge's weight, in the
 * CSC's row order), read with each list (by load, or the eligible ranges of remote
 * lists in pieces: one batched dds_read per 32768 entries or 1024 lists, a longer list
 * alone); float32 weights are widened to double once per entry, so the draws are exactly
 * those of the same values stored as float64.  Entries of weight 0 are never taken;
 * with p positive-weight entries among node i's eligible ones: k < 0 or (without
 * REPLACE) p <= k takes all p, in list order; REPLACE takes k independent draws, each
 * entry with probability w / (sum of the eligible weights) (none when p == 0);
 * otherwise k distinct entries by Efraimidis-Spirakis: every positive entry gets the
 * key E / w (E exponential(1), from the stream of (seed, i, entry)), and the k smallest
 * keys are taken, in list order (the law of k successive draws without replacement,
 * each in proportion to the weights left).  flags: only REPLACE (DDS_EINVAL for LAST).
 * DDS_EINVAL when an eligible weight is negative, NaN or infinite (naming its CSC
 * row), or the entries taken exceed `cap`; nothing is counted as written then.
 * Outputs as dds_neighbor_sample. */
int dds_neighbor_sample_weighted(dds_store *store, const dds_tcsr *graph, int w_var,
                                 const int64_t *nodes, const void *node_ts, int64_t n,
                                 int64_t k, int flags, uint64_t seed, int64_t cap,
                                 int64_t *row, int64_t *nbr, int64_t *eid, int64_t *count);

/* Local (one-sided).  PyG's induced subgraph (subgraph_type="induced"): every stored
 * entry of the lists of the `n_dst` destination nodes `dst` (in [0, graph->num_nodes);
 * a repeated node takes its list at its first occurrence only) whose source is one of
 * the `n_src` nodes `src` (in [0, num_src); DDS_ERANGE, naming the position, otherwise).
 * Output, in destination order (first occurrences), each list in its stored order:
 * row[j] = the position in `src` of the entry's source node (its first occurrence),
 * col[j] = the position in `dst` of the destination, eid[j] = the edge id; *count the
 * number written.  `src` may be `dst` (same pointer and n: one node set).  Outputs have
 * capacity `cap` each (the destinations' degree sum always suffices): DDS_EINVAL when
 * more entries are kept, *count 0.  A list entry whose source is outside [0, num_src)
 * is DDS_ERANGE naming its CSC row.  Lists readable by load are filtered in place; the
 * others' sources are read by one batched dds_read per `chunk` (>= 1) list entries or
 * fewer (a longer list alone), in destination order, and only the edge ids of the
 * entries kept by one more.  Memory: a map of the source set (an int32 per
 * node of [0, num_src) when num_src <= max(2^22, 16 n_src), else a table of 32 bytes
 * per source node or less), the same for the destinations unless one node set. */
int dds_induced_edges(dds_store *store, const dds_tcsr *graph, const int64_t *dst,
                      int64_t n_dst, const int64_t *src, int64_t n_src, int64_t num_src,
                      int64_t chunk, int64_t cap, int64_t *row, int64_t *col, int64_t *eid,
                      int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_NEIGHBOR_H */
