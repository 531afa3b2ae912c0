/*
 * subgraph.c - transforms of one sampled batch's edge set, done after sampling.  Local:
 * no MPI, no store.  See dds_subgraph.h (dds_bidirectional).
 *
 * dds_bidirectional sorts the pairs by (col, row) with two stable counting sorts (by row,
 * then by col: O(pairs + num_nodes), where a comparison or radix sort of the 2 x 64-bit
 * key is O(pairs log pairs) or several passes), then keeps the last pair of each run of
 * equal pairs.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* pair k of the concatenation: the originals (row, col), then the reversed (rev_col, rev_row) */
#define PAIR_ROW(k) ((k) < n ? row[(k)] : rev_col[(k) - n])
#define PAIR_COL(k) ((k) < n ? col[(k)] : rev_row[(k) - n])
#define PAIR_EID(k) ((k) < n ? eid[(k)] : rev_eid[(k) - n])

int dds_bidirectional(const int64_t *row, const int64_t *col, const int64_t *eid, int64_t n,
                      const int64_t *rev_row, const int64_t *rev_col, const int64_t *rev_eid,
                      int64_t nr, int64_t num_nodes, int64_t cap, int64_t *out_row,
                      int64_t *out_col, int64_t *out_eid, int64_t *out_n)
{
    int64_t m;
    *out_n = 0;
    if (n < 0 || nr < 0 || num_nodes < 0 || __builtin_add_overflow(n, nr, &m))
        return dds_set_error(DDS_EINVAL, "bidirectional: n=%lld, nr=%lld and num_nodes=%lld "
                             "must be >= 0 (and n + nr fit 64 bits)", (long long)n,
                             (long long)nr, (long long)num_nodes);
    if ((eid == NULL) != (rev_eid == NULL) || (eid != NULL && out_eid == NULL))
        return dds_set_error(DDS_EINVAL, "bidirectional: edge ids given for one side only "
                             "(or no output for them)");
    for (int64_t k = 0; k < m; k++) {
        int64_t r = PAIR_ROW(k), c = PAIR_COL(k);
        if (r < 0 || r >= num_nodes || c < 0 || c >= num_nodes)
            return dds_set_error(DDS_ERANGE, "bidirectional: pair %lld (%lld, %lld) has a "
                                 "node outside [0, %lld)", (long long)k, (long long)r,
                                 (long long)c, (long long)num_nodes);
    }
    if (m == 0) return DDS_OK;
    size_t bytes_perm, bytes_count;
    if (__builtin_mul_overflow((size_t)m, 2 * sizeof(int64_t), &bytes_perm) ||
        __builtin_mul_overflow((size_t)num_nodes + 1, sizeof(int64_t), &bytes_count))
        return dds_set_error(DDS_ENOMEM, "bidirectional: %lld pairs over %lld nodes do not "
                             "fit in memory", (long long)m, (long long)num_nodes);
    int64_t *perm = malloc(bytes_perm);          /* two arrays of m: by row, then by col */
    int64_t *count = malloc(bytes_count);
    if (!perm || !count) {
        free(perm);
        free(count);
        return dds_set_error(DDS_ENOMEM, "bidirectional: no memory for %lld pairs over "
                             "%lld nodes", (long long)m, (long long)num_nodes);
    }
    int64_t *by_row = perm, *by_col = perm + m;
    /* stable counting sort of 0..m-1 by row */
    memset(count, 0, bytes_count);
    for (int64_t k = 0; k < m; k++) count[PAIR_ROW(k) + 1]++;
    for (int64_t v = 0; v < num_nodes; v++) count[v + 1] += count[v];
    for (int64_t k = 0; k < m; k++) by_row[count[PAIR_ROW(k)]++] = k;
    /* stable counting sort of that order by col: sorted by (col, row), ties in input order */
    memset(count, 0, bytes_count);
    for (int64_t k = 0; k < m; k++) count[PAIR_COL(k) + 1]++;
    for (int64_t v = 0; v < num_nodes; v++) count[v + 1] += count[v];
    for (int64_t j = 0; j < m; j++) {
        int64_t k = by_row[j];
        by_col[count[PAIR_COL(k)]++] = k;
    }
    free(count);
    /* the distinct pairs, each with the last of its run (first counted, then written) */
    int64_t distinct = 0;
    for (int64_t j = 0; j < m; j++) {
        int64_t k = by_col[j], k2 = j + 1 < m ? by_col[j + 1] : -1;
        if (k2 < 0 || PAIR_ROW(k) != PAIR_ROW(k2) || PAIR_COL(k) != PAIR_COL(k2)) distinct++;
    }
    if (distinct > cap) {
        free(perm);
        return dds_set_error(DDS_EINVAL, "bidirectional: %lld distinct pairs exceed the "
                             "output capacity %lld", (long long)distinct, (long long)cap);
    }
    int64_t w = 0;
    for (int64_t j = 0; j < m; j++) {
        int64_t k = by_col[j], k2 = j + 1 < m ? by_col[j + 1] : -1;
        if (k2 >= 0 && PAIR_ROW(k) == PAIR_ROW(k2) && PAIR_COL(k) == PAIR_COL(k2)) continue;
        out_row[w] = PAIR_ROW(k);
        out_col[w] = PAIR_COL(k);
        if (eid) out_eid[w] = PAIR_EID(k);
        w++;
    }
    free(perm);
    *out_n = w;
    return DDS_OK;
}
