/*
 * dds_tcsr.h - the T-CSR: neighbour lists sorted by time, held in three store variables,
 * and its build (csrc/tcsr.c).  The temporal sampler (dds_temporal.h) reads it, and the
 * PyG neighbour sampler (dds_neighbor.h) reads a CSC held the same way.  Part of the C
 * API of the ddstore core (include ddstore.h); the rules every function follows are at
 * the top of dds_store.h.
 *
 * A T-CSR: the neighbour lists of all nodes, each sorted by timestamp (ties in edge
 * order), concatenated in node order into three store variables of equal row count:
 * `nbr` (neighbour id), `ts` (timestamp: 8 bytes, a double or an int64 as the graph's
 * time_type says) and `eid` (edge id), the ids int32 when
 * the node and edge counts fit in int32, else int64 (the variables' row bytes, 4 or 8,
 * say which; the samplers widen them to their int64 outputs).  Group
 * member g holds the lists of nodes [node_offsets[g], node_offsets[g + 1]), so its chunk
 * is the global rows [indptr[node_offsets[g]], indptr[node_offsets[g + 1]]).  `indptr`
 * (num_nodes + 1 global rows) and `node_offsets` are replicated metadata.
 *
 * Times.  A graph's times are all of one type, enum dds_time_type: doubles (integer
 * times beyond 2^53 would be rounded) or int64 (kept exactly, e.g. Unix nanoseconds).
 * The times stored, the query times a sampler is given and the times it writes are of
 * that type; every comparison of times (the sort of the build, the samplers' searches)
 * orders them as numbers of that type (for doubles -0.0 equals +0.0; NaN is refused
 * where times come in).  Where times are only moved (dds_tcsr_pack, dds_tcsr_place),
 * they are 8-byte values copied as bits, whatever their type.
 */
#ifndef DDSTORE_TCSR_H
#define DDSTORE_TCSR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dds_time_type {
    DDS_TIME_F64 = 0, /* double */
    DDS_TIME_I64 = 1  /* int64_t */
};

typedef struct dds_tcsr {
    int nbr_var, ts_var, eid_var;
    int64_t num_nodes;
    const int64_t *indptr;       /* [num_nodes + 1] */
    const int64_t *node_offsets; /* [group_size + 1] */
    /* lists of members that are not load-readable are read (the temporal sampler
     * fetches ts, nbr and eid whole; the neighbour sampler reads the times in pieces)
     * when they have at most fetch_whole_max * max(1, roots asking / 2) entries (the
     * neighbour sampler counts one asking); longer ones are binary-searched where they
     * lie (one batched read per step).  <= 0: 2048 for the temporal sampler, 65536 for
     * the neighbour sampler, and the longer lists of a call are read too when they hold
     * at most 1 MiB in all (csrc/sampling.h, "remote cuts") */
    int64_t fetch_whole_max;
    /* uniform draws from a list that is not load-readable read its whole eligible range
     * in one piece when it has at most range_factor * k entries, else one row per draw;
     * <= 0 means 64 */
    int64_t range_factor;
    /* node-level time (the PyG sampler's CSC only; the temporal sampler ignores it):
     * when ts_var < 0 and nbr_time is not NULL, an entry's time is nbr_time[nbr], the
     * time of its neighbour node (nbr_time_len of them, the lists sorted by it), so no
     * time per entry is stored; an entry whose neighbour is outside [0, nbr_time_len) is
     * DDS_ERANGE.  nbr_time holds times of time_type in nbr_time_bytes each: doubles
     * (8) or floats (4: times that float32 holds exactly, half the memory) for
     * DDS_TIME_F64, int64 (8) or int32 (4: times that fit) for DDS_TIME_I64; 0 means 8 */
    const void *nbr_time;
    int64_t nbr_time_len;
    int nbr_time_bytes;
    /* the type of the graph's times (enum dds_time_type; 0: doubles): of ts_var's rows,
     * of nbr_time, and of the samplers' query and output times.  Anything else is
     * DDS_EINVAL. */
    int time_type;
} dds_tcsr;

/* T-CSR build (csrc/tcsr.c; the MPI rounds are driven from Python, through
 * ddstore._core.tcsr_count / tcsr_pack / tcsr_place / tcsr_sort).  Local, no MPI,
 * no allocation.  `edges` is an edge table chunk: n rows of (src, dst) int64, row i is
 * edge id eid0 + i at time t[i] (8 bytes: a double or an int64, moved as bits).  An
 * entry is 4 words: (node, neighbour, the time's bits, edge id); every edge gives
 * (src, dst, t, id), and with add_reverse also (dst, src, t, id).
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
 * [node_lo, node_hi) in place by (timestamp, edge id), the times compared as
 * `time_type` (enum dds_time_type; DDS_EINVAL, nothing sorted, for another type or if a
 * list is outside [0, rows) of the chunk).  Times are optional: t NULL
 * in dds_tcsr_pack packs time 0; ts NULL in dds_tcsr_place / dds_tcsr_sort keeps no
 * times and sorts every list by edge id alone (the CSC of ddstore.pyg.GraphStore
 * without a time).  `id_bytes` is the width of the ids in nbr and eid: 8 (int64_t) or 4
 * (int32_t, a T-CSR or a CSC of ddstore.pyg.GraphStore whose ids fit;
 * dds_tcsr_place gives DDS_ERANGE for an entry whose neighbour or edge id does not fit);
 * anything else is DDS_EINVAL.  dds_tcsr_sort with `nbr_time` (ts NULL; NULL otherwise):
 * the lists are sorted by (nbr_time[neighbour], edge id) instead, the time of each
 * neighbour read from a table of nbr_time_len times of `time_type` in nbr_time_bytes
 * each (as dds_tcsr.nbr_time: float or double, int32 or int64), so that no time per
 * entry is kept (ddstore.pyg.GraphStore's node-level time): each list's times are
 * gathered into `scratch` (scratch_len int64 sort keys, at least the longest list's
 * length: DDS_EINVAL otherwise) and the list sorted with them; a neighbour outside the
 * table gives DDS_ERANGE, nothing sorted. */
int dds_tcsr_count(const int64_t *edges, int64_t n, int add_reverse, int64_t num_nodes,
                   int64_t *deg);
int dds_tcsr_pack(const int64_t *edges, const void *t, int64_t eid0, int64_t n,
                  int add_reverse, const int64_t *node_offsets, int width,
                  int64_t *counts, int64_t *out, int64_t cap);
int dds_tcsr_place(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                   const int64_t *indptr, int64_t *fill, void *nbr, void *ts,
                   void *eid, int64_t rows, int id_bytes);
int dds_tcsr_sort(int64_t node_lo, int64_t node_hi, const int64_t *indptr, void *nbr,
                  void *ts, void *eid, int64_t rows, int id_bytes, int time_type,
                  const void *nbr_time, int64_t nbr_time_len, int nbr_time_bytes,
                  int64_t *scratch, int64_t scratch_len);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_TCSR_H */
