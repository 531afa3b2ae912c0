/*
 * dds_dynamic.h - one step of a dynamic graph: a snapshot's edges plus an edge delta
 * (csrc/dynamic.c; used by ddstore.dynamic.DynamicGraph through
 * ddstore._core.apply_delta).  Part of the C API of the ddstore core (include
 * ddstore.h); the rules every function follows are at the top of dds_store.h.
 */
#ifndef DDSTORE_DYNAMIC_H
#define DDSTORE_DYNAMIC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Local, no MPI, no store.  One snapshot step: out = keys - rm + add, in one merge.
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

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_DYNAMIC_H */
