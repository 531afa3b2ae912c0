/*
 * sampling.c - the parts of the samplers' internal unit that are not inline (see
 * sampling.h): argument checks, member views, the table's memory, the remote picks of
 * a batch, and sample_read, through which every remote read of a batch goes.
 */
#include "internal.h"
#include "sampling.h"
#include "times.h"

#include <stdlib.h>

int sample_no_memory(const char *who)
{
    return dds_set_error(DDS_ENOMEM, "%s: out of memory", who);
}

int sample_id_bytes(dds_store *s, int var, const char *who, const char *what, int *bytes)
{
    int64_t rb = 0;
    int rc = dds_row_bytes(s, var, &rb);
    if (rc != DDS_OK) return rc;
    if (rb != 4 && rb != 8)
        return dds_set_error(DDS_EINVAL, "%s: the %s variable has rows of %lld bytes, not "
                             "int32 or int64 ids", who, what, (long long)rb);
    *bytes = (int)rb;
    return DDS_OK;
}

/* ------------------------------------------------------------------ argument checks */

int sample_check_graph(dds_store *s, const dds_tcsr *g, const char *who)
{
    if (!s) return dds_set_error(DDS_ESTATE, "store has been freed");
    if (!time_type_ok(g->time_type))
        return dds_set_error(DDS_EINVAL, "%s: time_type=%d is not a dds_time_type (%d "
                             "double, %d int64)", who, g->time_type, DDS_TIME_F64,
                             DDS_TIME_I64);
    return DDS_OK;
}

int sample_check_nodes(const dds_tcsr *g, const int64_t *nodes, const void *times,
                       int64_t n, const char *who, const char *node, const char *time)
{
    for (int64_t i = 0; i < n; i++) {
        if (nodes[i] < 0 || nodes[i] >= g->num_nodes)
            return dds_set_error(DDS_ERANGE, "%s: %s %lld (position %lld) out of range "
                                 "[0, %lld)", who, node, (long long)nodes[i], (long long)i,
                                 (long long)g->num_nodes);
        if (times && time_is_nan(time_bits(times, i), g->time_type))
            return dds_set_error(DDS_EINVAL, "%s: %s at position %lld is NaN", who, time,
                                 (long long)i);
    }
    return DDS_OK;
}

/* ------------------------------------------------------------------ member views */

void members_close(struct members *mv)
{
    free(mv->chunk);
    free(mv->first);
    mv->chunk = NULL;
    mv->first = NULL;
}

int members_open(struct members *mv, dds_store *s, const dds_tcsr *g, const int *vars,
                 int nvars, const char *who)
{
    int width = dds_group_size(s), rc = DDS_OK;
    *mv = (struct members){width, nvars, NULL, NULL};
    mv->chunk = calloc((size_t)width * (size_t)nvars, sizeof *mv->chunk);
    mv->first = calloc((size_t)width, sizeof *mv->first);
    if (!mv->chunk || !mv->first) rc = sample_no_memory(who);
    for (int m = 0; m < width && rc == DDS_OK; m++) {
        const char **c = mv->chunk + (size_t)m * (size_t)nvars;
        int all = 1;
        for (int v = 0; v < nvars && rc == DDS_OK; v++) {
            void *p = NULL;
            int64_t rows = 0;
            rc = dds_member_ptr(s, vars[v], m, &p, &rows);
            c[v] = p;
            all = all && p;
        }
        if (!all)
            for (int v = 0; v < nvars; v++) c[v] = NULL;
        mv->first[m] = g->indptr[g->node_offsets[m]];
    }
    if (rc != DDS_OK) members_close(mv);
    return rc;
}

/* ------------------------------------------------------------------ the table */

int table_open(struct table *t, int64_t live, const char *who)
{
    uint64_t size = 16;
    while (size / 2 < (uint64_t)live) size *= 2;  /* live keys exist in memory: < 2^62 */
    t->mask = size - 1;
    t->slot = malloc(2 * sizeof(int64_t) * size);
    if (!t->slot) return sample_no_memory(who);
    memset(t->slot, 0xff, 2 * sizeof(int64_t) * size);
    return DDS_OK;
}

void table_close(struct table *t)
{
    free(t->slot);
    *t = (struct table){NULL, 0};
}

/* ------------------------------------------------------------------ remote picks */

/* P's five arrays in one block of room for m of each (start, count, slot, take, pos) */
static int picks_alloc(struct picks *P, int64_t most, const char *who)
{
    size_t m = (size_t)(most > 0 ? most : 1);
    if (m > SIZE_MAX / (5 * sizeof(int64_t))) return sample_no_memory(who);
    int64_t *block = malloc(5 * sizeof(int64_t) * m);
    if (!block) return sample_no_memory(who);
    int64_t *was[5] = {P->start, P->count, P->slot, P->take, P->pos};
    int64_t held[5] = {P->n, P->n, P->n, P->n, P->npos};
    for (int a = 0; a < 5; a++)
        if (held[a]) memcpy(block + a * m, was[a], sizeof(int64_t) * (size_t)held[a]);
    free(P->start);
    P->start = block;
    P->count = block + m;
    P->slot = block + 2 * m;
    P->take = block + 3 * m;
    P->pos = block + 4 * m;
    P->cap = (int64_t)m;
    return DDS_OK;
}

int picks_open(struct picks *P, int64_t most, const char *who)
{
    *P = (struct picks){0};
    return picks_alloc(P, most, who);
}

int picks_reserve(struct picks *P, int64_t more, const char *who)
{
    if (more <= P->cap - P->n) return DDS_OK;
    int64_t want;
    if (__builtin_add_overflow(P->n, more, &want)) return sample_no_memory(who);
    if (P->cap <= INT64_MAX / 2 && want < 2 * P->cap) want = 2 * P->cap;
    return picks_alloc(P, want, who);
}

void picks_close(struct picks *P)
{
    free(P->start);
    *P = (struct picks){0};
}

int picks_read(dds_store *s, const struct picks *P, int nvars, const int *vars,
               const int *bytes, int64_t *const *outs, const char *who)
{
    if (P->n == 0) return DDS_OK;
    if (nvars > SAMPLE_MAX_VARS || P->rows > INT64_MAX / 8 / SAMPLE_MAX_VARS)
        return sample_no_memory(who);
    size_t total = 0, at[SAMPLE_MAX_VARS];
    int64_t cap[SAMPLE_MAX_VARS] = {0};
    void *got[SAMPLE_MAX_VARS] = {0};
    for (int v = 0; v < nvars; v++) {  /* each variable's rows 8-byte aligned */
        cap[v] = (int64_t)bytes[v] * P->rows;
        at[v] = total;
        total += ((size_t)cap[v] + 7) & ~(size_t)7;
    }
    char *buf = malloc(total ? total : 1);  /* one buffer per variable, in one block */
    if (!buf) return sample_no_memory(who);
    for (int v = 0; v < nvars; v++) got[v] = buf + at[v];
    int rc = sample_read(s, nvars, vars, P->start, P->count, P->n, got, cap);
    for (int v = 0; v < nvars && rc == DDS_OK; v++) {
        const char *piece = got[v];
        const int64_t *pos = P->pos;  /* the scattered pieces' positions, in piece order */
        for (int64_t p = 0; p < P->n; p++) {
            if (P->take[p] >= 0) {
                gather_ids(outs[v] + P->slot[p], piece, bytes[v], pos, P->take[p]);
                pos += P->take[p];
            } else {
                copy_ids(outs[v] + P->slot[p], piece, bytes[v], P->count[p]);
            }
            piece += (size_t)bytes[v] * (size_t)P->count[p];
        }
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ remote cuts */

/* the key of entry i of `entries` (bytes each) of a list of pl: its time, or node-level
 * its neighbour's (*bad = the id and 0 returned when the id has no time) */
static inline int entry_key(const struct probe_lists *pl, const char *entries, int bytes,
                            int64_t i, int64_t *key, int64_t *bad)
{
    if (!pl->node_time) {
        *key = time_key_at(entries, i, pl->type);
        return 1;
    }
    return node_time_key(pl->node_time, pl->time_bytes, pl->type, pl->node_time_len,
                         id_at(entries, bytes, i), key, bad);
}

int probe_cuts(dds_store *s, const struct probe_lists *pl, const int64_t *start,
               const int64_t *len, const int64_t *key, int64_t n, int64_t *cut,
               int64_t *bad, const char *who)
{
    *bad = -1;
    if (n <= 0) return DDS_OK;
    size_t m = (size_t)n, got_cap = 0;
    int bytes = pl->node_time ? pl->id_bytes : 8;  /* of an entry read */
    if (m > SIZE_MAX / (4 * sizeof(int64_t))) return sample_no_memory(who);
    /* lo, hi, and the round's reads: the first row and the rows of each */
    int64_t *lo = malloc(4 * sizeof(int64_t) * m);
    char *got = NULL;  /* what a round read */
    if (!lo) return sample_no_memory(who);
    int64_t *hi = lo + m, *row = hi + m, *count = row + m;
    for (int64_t q = 0; q < n; q++) {
        lo[q] = 0;
        hi[q] = len[q];
    }
    int rc = DDS_OK;
    for (;;) {
        /* each list still searching: its middle entry, or its PROBE_TAIL or fewer left */
        int64_t na = 0;
        size_t need = 0;
        for (int64_t q = 0; q < n; q++) {
            if (lo[q] >= hi[q]) continue;
            int tail = hi[q] - lo[q] <= PROBE_TAIL;
            row[na] = start[q] + (tail ? lo[q] : lo[q] + (hi[q] - lo[q]) / 2);
            count[na] = tail ? hi[q] - lo[q] : 1;
            need += (size_t)bytes * (size_t)count[na++];  /* <= bytes * PROBE_TAIL * m */
        }
        if (!na) break;
        if (need > got_cap) {
            free(got);
            if (!(got = malloc(need))) {
                rc = sample_no_memory(who);
                break;
            }
            got_cap = need;
        }
        void *out = got;
        int64_t out_bytes = (int64_t)need;
        rc = sample_read(s, 1, &pl->var, row, count, na, &out, &out_bytes);
        if (rc != DDS_OK) break;
        /* each search goes on in what was read, with the same midpoints: one step on
         * the middle entry, or to its end on the entries left */
        const char *at = got;
        na = 0;
        for (int64_t q = 0; q < n; q++) {
            if (lo[q] >= hi[q]) continue;
            int64_t first = lo[q], c = count[na++], k;
            do {
                int64_t mid = lo[q] + (hi[q] - lo[q]) / 2;
                if (!entry_key(pl, at, bytes, c == 1 ? 0 : mid - first, &k, bad)) {
                    hi[q] = lo[q];  /* an id without a time: the search stops */
                    break;
                }
                if (pl->inclusive ? k <= key[q] : k < key[q]) lo[q] = mid + 1;
                else hi[q] = mid;
            } while (c > 1 && lo[q] < hi[q]);
            at += (size_t)bytes * (size_t)c;
        }
    }
    for (int64_t q = 0; q < n; q++) cut[q] = lo[q];
    free(lo);
    free(got);
    return rc;
}

/* ------------------------------------------------------------------ remote reads */

int sample_read(dds_store *s, int nvars, const int *vars, const int64_t *starts,
                const int64_t *counts, int64_t n, void *const *outs,
                const int64_t *out_bytes)
{
    /* one call for every variable: one round trip (one request by message) per owner */
    dds_read_req reqs[SAMPLE_MAX_VARS];
    if (nvars < 1 || nvars > SAMPLE_MAX_VARS)
        return dds_set_error(DDS_EINVAL, "internal: sample_read of %d variables (1 to %d)",
                             nvars, SAMPLE_MAX_VARS);
    for (int v = 0; v < nvars; v++)
        reqs[v] = (dds_read_req){vars[v], starts, counts, n, outs[v], out_bytes[v]};
    return dds_read_many(s, reqs, nvars);
}
