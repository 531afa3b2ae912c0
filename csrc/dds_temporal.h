/*
 * dds_temporal.h - temporal neighbour sampling over a T-CSR held in the store
 * (csrc/temporal.c; used by ddstore.temporal.TemporalSampler through
 * ddstore._core.TCSR).  Part of the C API of the ddstore core (include ddstore.h); the
 * rules every function follows are at the top of dds_store.h, the T-CSR in dds_tcsr.h.
 */
#ifndef DDSTORE_TEMPORAL_H
#define DDSTORE_TEMPORAL_H

#include "dds_store.h"
#include "dds_tcsr.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dds_sample_strategy {
    DDS_SAMPLE_RECENT = 0,  /* the k eligible edges with the latest timestamps */
    DDS_SAMPLE_UNIFORM = 1  /* k draws with replacement when more than k are eligible */
};

/* Local (one-sided).  One layer of temporal neighbour sampling for `n` roots
 * (`roots[i]` at time `root_ts[i]`, of the graph's time type: doubles or int64, see
 * dds_tcsr.h).  Only edges with timestamp strictly before the root's time are
 * eligible.  `recent`: the last min(k, eligible) eligible edges, in list (time) order.
 * `uniform`: all eligible edges in list order when there are at most k, else k draws
 * with replacement, in draw order, from a random stream that depends only on (seed,
 * epoch, layer, i), not on the rank or the store's layout.
 * Outputs (capacity `cap` each; the sum over roots of min(k, degree) always suffices),
 * compact in root order: row[j] (root position), nbr[j], eid[j], ets[j] (edge
 * timestamp, of the graph's time type); *count is the number written.  DDS_EINVAL,
 * nothing written, when the edges taken need more than `cap`, a root time is NaN or
 * graph->time_type is not a dds_time_type.  Lists held by members that are not
 * load-readable are fetched with batched dds_read calls.  nbr and eid of the T-CSR may
 * hold int32 or int64 ids (DDS_EINVAL for rows of another size); the outputs are
 * int64. */
int dds_temporal_sample(dds_store *store, const dds_tcsr *graph, const int64_t *roots,
                        const void *root_ts, int64_t n, int64_t k, int strategy,
                        uint64_t seed, uint64_t epoch, int layer, int64_t cap,
                        int64_t *row, int64_t *nbr, int64_t *eid, void *ets,
                        int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_TEMPORAL_H */
