/*
 * dds_neighbor.h - one hop of PyG-style neighbour sampling over a CSC held in the store,
 * uniform or weighted (csrc/neighbor.c), and the relabelling of the nodes sampled
 * (csrc/relabel.c), one call per hop (dds_neighbor_hop; used by
 * ddstore.pyg.NeighborSampler through ddstore._core.CSC and ddstore._core.RelabelMap).
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
    DDS_NEIGHBOR_LAST = 2     /* the last min(k, eligible) entries (the draws' range) */
};

/* Local (one-sided).  One hop for `n` destination nodes.  Node i's eligible entries are
 * its whole list or, when `node_ts` is not NULL, the entries whose time is <= node_ts[i]
 * (a prefix: lists are sorted by time; node_ts of the graph's time type, doubles or
 * int64, see dds_tcsr.h; DDS_EINVAL for a NaN, or a graph->time_type that is not a
 * dds_time_type); an entry's time is its `ts` row, or with node-level time (ts_var < 0,
 * graph->nbr_time set) the time of its source node, nbr_time[nbr] (DDS_ERANGE for a
 * source outside [0, nbr_time_len)).  With c
 * eligible: k < 0 takes all c; LAST takes the last min(k, c); REPLACE takes k
 * independent uniform draws (none when c == 0), with LAST among the last min(k, c)
 * (pyg-lib's temporal "last" narrows the list, then draws); otherwise min(k, c) distinct entries,
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

/* Local (one-sided).  dds_neighbor_sample with weights: `w_var` holds one float32 or
 * float64 per CSC row (its row bytes, 4 or 8, say which: the edge's weight, in the
 * CSC's row order), read with each list (by load, or the eligible ranges of remote
 * lists in pieces: one batched dds_read per 32768 entries or 1024 lists, a longer list
 * alone); float32 weights are widened to double once per entry, so the draws are exactly
 * those of the same values stored as float64.  The rule is pyg-lib's: with c eligible
 * entries of node i, p of them of positive weight: k < 0, or k >= c without REPLACE,
 * takes all c, in list order (the weights play no part, zeros included); REPLACE takes
 * k independent draws, each entry with probability w / (sum of the eligible weights)
 * (none when p == 0, where pyg-lib's multinomial raises); without REPLACE and p <= k
 * < c, all p positive entries and k - p of the zero-weight ones, every such subset
 * alike (pyg-lib's keys of weight 0 tie at -inf), in list order; otherwise k distinct
 * entries by Efraimidis-Spirakis: every positive entry gets the key E / w (E
 * exponential(1), from the stream of (seed, i, entry)), and the k smallest keys are
 * taken, in list order (the law of k successive draws without replacement, each in
 * proportion to the weights left).  flags: only REPLACE (DDS_EINVAL for LAST).
 * DDS_EINVAL when an eligible weight is negative, NaN or infinite (naming its CSC
 * row), or the entries taken exceed `cap`; nothing is counted as written then.
 * Outputs as dds_neighbor_sample. */
int dds_neighbor_sample_weighted(dds_store *store, const dds_tcsr *graph, int w_var,
                                 const int64_t *nodes, const void *node_ts, int64_t n,
                                 int64_t k, int flags, uint64_t seed, int64_t cap,
                                 int64_t *row, int64_t *nbr, int64_t *eid, int64_t *count);

/* ------------------------------------------------------------------ the relabelling
 * The one relabelling of the PyG sampler (csrc/relabel.c): a map holds a batch's node
 * list of one node type and maps each key to the position of its first occurrence in
 * it.  A key is a node id in [0, num_nodes), or in disjoint mode (subgraphs > 0) a
 * (node, subgraph) pair, subgraph in [0, subgraphs).  One rule picks the structure at
 * dds_relabel_begin: a dense array of an int32 per key of the key space (num_nodes
 * keys, or subgraphs * num_nodes) when the key space holds at most max(dense_max,
 * 16 * expected) keys and fewer than 2^31, else an open-addressing hash of 24-byte
 * slots, doubled when 3/4 full of the batch's distinct keys.  The sampler passes
 * DDS_RELABEL_DENSE_MAX (2^24 keys: 64 MiB, zeroed pages faulted in as touched) and
 * expected 0; dds_induced_edges the same constant with its node count.  A map is kept
 * between batches (the dense array, the hash slots): a new batch clears only what the
 * last one set.  Local, no MPI, no store; one thread at a time per map. */
enum { DDS_RELABEL_DENSE_MAX = 1 << 24 };

typedef struct dds_relabel dds_relabel;

/* a new empty map (*out; DDS_ENOMEM) */
int dds_relabel_open(dds_relabel **out);
void dds_relabel_free(dds_relabel *map);
/* start a batch (the last one forgotten): keys of nodes [0, num_nodes), with subgraphs
 * [0, subgraphs) when subgraphs > 0; `expected` keys (0: unknown) and `dense_max` as
 * the rule above says.  DDS_EINVAL for a negative argument. */
int dds_relabel_begin(dds_relabel *map, int64_t num_nodes, int64_t subgraphs,
                      int64_t expected, int64_t dense_max);
/* forget the batch (count 0, the structure cleared of its keys) */
void dds_relabel_reset(dds_relabel *map);
/* the seeds: the n keys appended to the node list as given, a repeat included (a
 * repeated key keeps the position of its first occurrence); `subs` the subgraphs
 * (NULL unless disjoint).  Every key is checked first (DDS_EINVAL naming it). */
int dds_relabel_seed(dds_relabel *map, const int64_t *nodes, const int64_t *subs,
                     int64_t n);
/* pos[i] = the position of key (nodes[i], subs[i]); the keys not in the map are
 * appended in order of first occurrence, and written to new_nodes (new_sub: their
 * subgraphs, when disjoint), *n_new of them.  Outputs of capacity `cap` each: DDS_EINVAL
 * when cap < n, nothing written.  Every key is checked first (DDS_EINVAL naming it). */
int dds_relabel_add(dds_relabel *map, const int64_t *nodes, const int64_t *subs,
                    int64_t n, int64_t cap, int64_t *pos, int64_t *new_nodes,
                    int64_t *new_sub, int64_t *n_new);
/* the nodes in the batch's list */
int64_t dds_relabel_count(const dds_relabel *map);
/* whether the batch is mapped densely, and the dense entries or hash slots held */
int dds_relabel_is_dense(const dds_relabel *map);
int64_t dds_relabel_slots(const dds_relabel *map);

/* Local (one-sided).  One hop of the PyG sampler, sampled and relabelled in one call:
 * dds_neighbor_sample (w_var < 0) or dds_neighbor_sample_weighted (w_var, its weights)
 * of the n frontier nodes `nodes` (their times node_ts, flags, k, seed as there), then
 * each drawn neighbour (with, in disjoint mode, the subgraph sub[i] of the frontier
 * node that drew it; sub NULL otherwise) mapped through `map` (dds_relabel_add).
 * Outputs, in the order dds_neighbor_sample gives, capacity `cap` each:
 * from[j] = pos[i] (the local id of the frontier node i that drew edge j), to[j] = the
 * position of the drawn neighbour in the map's node list, eid[j]; *count of them; the
 * neighbours new to the map in new_nodes (and their subgraphs in new_sub, NULL unless
 * disjoint), *n_new of them.  The errors of the samplers; DDS_EINVAL for a drawn node
 * outside the map's node range. */
int dds_neighbor_hop(dds_store *store, const dds_tcsr *graph, int w_var,
                     const int64_t *nodes, const int64_t *pos, const int64_t *sub,
                     const void *node_ts, int64_t n, int64_t k, int flags, uint64_t seed,
                     dds_relabel *map, int64_t cap, int64_t *from, int64_t *to,
                     int64_t *eid, int64_t *new_nodes, int64_t *new_sub, int64_t *count,
                     int64_t *n_new);

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
 * entries kept by one more.  Memory: a relabelling map of the source set (the rule
 * of dds_relabel_begin with expected = n_src: an int32 per node of [0, num_src) when
 * num_src <= max(2^24, 16 n_src), else a hash of at most 64 bytes per source node),
 * the same for the destinations unless one node set. */
int dds_induced_edges(dds_store *store, const dds_tcsr *graph, const int64_t *dst,
                      int64_t n_dst, const int64_t *src, int64_t n_src, int64_t num_src,
                      int64_t chunk, int64_t cap, int64_t *row, int64_t *col, int64_t *eid,
                      int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_NEIGHBOR_H */
