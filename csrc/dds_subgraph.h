/*
 * dds_subgraph.h - transforms of one sampled batch's edge set (csrc/subgraph.c; used by
 * ddstore.pyg's samplers for subgraph_type="bidirectional" through
 * ddstore._core.bidirectional).  Part of the C API of the ddstore core (include
 * ddstore.h); the rules every function follows are at the top of dds_store.h.
 */
#ifndef DDSTORE_SUBGRAPH_H
#define DDSTORE_SUBGRAPH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Local, no MPI, no store.  PyG's to_bidirectional of one sampled edge set: the pairs
 * (row[i], col[i]) for i < n followed by (rev_col[j], rev_row[j]) for j < nr, sorted by
 * (col, row), each distinct pair once.  With edge ids (eid and rev_eid both given, else
 * both NULL), a pair keeps the id of its last occurrence in that concatenation (PyG's
 * coalesce with reduce="any" keeps one of them, which one depending on its sort).
 * Every node id is in [0, num_nodes) (DDS_ERANGE, naming the pair, otherwise).
 * Outputs have capacity `cap` each (n + nr always suffices): DDS_EINVAL, nothing
 * written, when the distinct pairs exceed it; *out_n is the number written.  Time and
 * memory O(n + nr + num_nodes). */
int dds_bidirectional(const int64_t *row, const int64_t *col, const int64_t *eid, int64_t n,
                      const int64_t *rev_row, const int64_t *rev_col, const int64_t *rev_eid,
                      int64_t nr, int64_t num_nodes, int64_t cap, int64_t *out_row,
                      int64_t *out_col, int64_t *out_eid, int64_t *out_n);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_SUBGRAPH_H */
