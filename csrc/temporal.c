/*
 * temporal.c - temporal neighbour sampling over a T-CSR held in the store (see the
 * "temporal graphs" section of ddstore.h).
 *
 * Lists of members this rank can read by load (its own chunk, node-local peers) are
 * read in place.  For the others, the timestamps of every distinct node needed in the
 * call are fetched with one batched dds_read, the selection runs on those copies, and
 * the neighbour and edge ids of exactly the selected rows are fetched with one batched
 * dds_read each.  No state outlives the call.
 */
#include "ddstore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* uniform integer in [0, n) from a 64-bit random word (multiply-shift) */
static int64_t below(uint64_t r, int64_t n)
{
    return (int64_t)(((unsigned __int128)r * (uint64_t)n) >> 64);
}

/* first position p in ts[0, n) with ts[p] >= t (n when none) */
static int64_t lower_bound(const double *ts, int64_t n, double t)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ts[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

struct member_view {
    const int64_t *nbr, *eid;
    const double *ts;
    int64_t first_row; /* global row of the chunk's first entry */
    int readable;      /* 1: read in place */
};

static int owner_of_node(const int64_t *node_offsets, int width, int64_t v)
{
    int lo = 0, hi = width - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (node_offsets[mid] <= v) lo = mid;
        else hi = mid - 1;
    }
    while (lo < width - 1 && node_offsets[lo + 1] <= v) lo++;
    return lo;
}

/* open-addressing map node -> offset of its fetched timestamps (remote lists only) */
struct fetch_map {
    int64_t cap; /* power of two */
    int64_t *key, *val;
};

static int64_t *map_slot(struct fetch_map *m, int64_t node)
{
    uint64_t h = splitmix64((uint64_t)node) & (uint64_t)(m->cap - 1);
    while (m->key[h] != -1 && m->key[h] != node) h = (h + 1) & (uint64_t)(m->cap - 1);
    if (m->key[h] == -1) {
        m->key[h] = node;
        m->val[h] = -1;
    }
    return &m->val[h];
}

int dds_temporal_sample(dds_store *s, const dds_tcsr *g, const int64_t *roots,
                        const double *root_ts, int64_t n, int64_t k, int strategy,
                        uint64_t seed, uint64_t epoch, int layer, int64_t *row,
                        int64_t *nbr, int64_t *eid, double *ets, int64_t *count)
{
    *count = 0;
    if (!s) return DDS_ESTATE;
    if (n < 0 || k < 1)
        return dds_fail(s, DDS_EINVAL, "temporal sample: n=%lld must be >= 0 and k=%lld "
                        ">= 1", (long long)n, (long long)k);
    if (strategy != DDS_SAMPLE_RECENT && strategy != DDS_SAMPLE_UNIFORM)
        return dds_fail(s, DDS_EINVAL, "temporal sample: strategy %d is not recent (0) or "
                        "uniform (1)", strategy);
    for (int64_t i = 0; i < n; i++) {
        if (roots[i] < 0 || roots[i] >= g->num_nodes)
            return dds_fail(s, DDS_ERANGE, "temporal sample: root %lld (position %lld) "
                            "out of range [0, %lld)", (long long)roots[i], (long long)i,
                            (long long)g->num_nodes);
        if (isnan(root_ts[i]))
            return dds_fail(s, DDS_EINVAL, "temporal sample: root time at position %lld "
                            "is NaN", (long long)i);
    }
    int width = dds_group_size(s), rc = DDS_OK;
    struct member_view *view = calloc((size_t)width, sizeof *view);
    if (!view) return dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
    int any_remote = 0;
    for (int m = 0; m < width && rc == DDS_OK; m++) {
        void *pn = NULL, *pt = NULL, *pe = NULL;
        int64_t rows = 0;
        rc = dds_member_ptr(s, g->nbr_var, m, &pn, &rows);
        if (rc == DDS_OK) rc = dds_member_ptr(s, g->ts_var, m, &pt, &rows);
        if (rc == DDS_OK) rc = dds_member_ptr(s, g->eid_var, m, &pe, &rows);
        view[m].nbr = pn;
        view[m].ts = pt;
        view[m].eid = pe;
        view[m].first_row = g->indptr[g->node_offsets[m]];
        view[m].readable = rows == 0 || (pn && pt && pe);
        if (!view[m].readable) any_remote = 1;
    }
    if (rc != DDS_OK) {
        free(view);
        return rc;
    }

    /* remote lists: fetch the timestamps of each distinct node once */
    struct fetch_map map = {0, NULL, NULL};
    double *ts_buf = NULL;
    int64_t *req_start = NULL, *req_count = NULL, *rrow = NULL, *rslot = NULL;
    int64_t nremote = 0, nsel_remote = 0;
    int64_t *tmp = NULL;
    if (any_remote) {
        int64_t nr = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = roots[i];
            if (g->indptr[v + 1] > g->indptr[v] &&
                !view[owner_of_node(g->node_offsets, width, v)].readable)
                nr++;
        }
        if (nr) {
            map.cap = 16;
            while (map.cap < 2 * nr) map.cap *= 2;
            map.key = malloc(sizeof(int64_t) * map.cap);
            map.val = malloc(sizeof(int64_t) * map.cap);
            req_start = malloc(sizeof(int64_t) * nr);
            req_count = malloc(sizeof(int64_t) * nr);
            if (!map.key || !map.val || !req_start || !req_count) {
                rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
                goto done;
            }
            for (int64_t h = 0; h < map.cap; h++) map.key[h] = -1;
            int64_t total = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t v = roots[i], deg = g->indptr[v + 1] - g->indptr[v];
                if (!deg || view[owner_of_node(g->node_offsets, width, v)].readable)
                    continue;
                int64_t *off = map_slot(&map, v);
                if (*off >= 0) continue;
                *off = total;
                req_start[nremote] = g->indptr[v];
                req_count[nremote++] = deg;
                total += deg;
            }
            ts_buf = malloc(sizeof(double) * (total ? total : 1));
            if (!ts_buf) {
                rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory for %lld "
                              "remote timestamps", (long long)total);
                goto done;
            }
            rc = dds_read(s, g->ts_var, req_start, req_count, nremote, ts_buf, 0);
            if (rc != DDS_OK) goto done;
            rrow = malloc(sizeof(int64_t) * (size_t)(nr * k));
            rslot = malloc(sizeof(int64_t) * (size_t)(nr * k));
            if (!rrow || !rslot) {
                rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
                goto done;
            }
        }
    }

    uint64_t base = splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ (uint64_t)layer);
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = roots[i], start = g->indptr[v], deg = g->indptr[v + 1] - start;
        if (!deg) continue;
        const struct member_view *mv = &view[width == 1 ? 0 :
                                             owner_of_node(g->node_offsets, width, v)];
        const double *ts;
        int64_t local = start - mv->first_row; /* position of the list in the chunk */
        if (mv->readable) ts = mv->ts + local;
        else ts = ts_buf + *map_slot(&map, v);
        int64_t cut = lower_bound(ts, deg, root_ts[i]); /* eligible: [0, cut) */
        if (!cut) continue;
        int64_t lo = 0, take = cut;
        int draw = 0;
        if (cut > k) {
            if (strategy == DDS_SAMPLE_RECENT) lo = cut - k;
            else draw = 1;
            take = k;
        }
        uint64_t key = draw ? splitmix64(base ^ splitmix64((uint64_t)i)) : 0;
        for (int64_t q = 0; q < take; q++, j++) {
            int64_t p = draw ? below(splitmix64(key + (uint64_t)(q + 1) *
                                                0x9E3779B97F4A7C15ULL), cut) : lo + q;
            row[j] = i;
            ets[j] = ts[p];
            if (mv->readable) {
                nbr[j] = mv->nbr[local + p];
                eid[j] = mv->eid[local + p];
            } else {
                rrow[nsel_remote] = start + p;
                rslot[nsel_remote++] = j;
            }
        }
    }
    *count = j;
    if (nsel_remote) {
        tmp = malloc(sizeof(int64_t) * (size_t)nsel_remote);
        if (!tmp) {
            rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
            goto done;
        }
        rc = dds_read(s, g->nbr_var, rrow, NULL, nsel_remote, tmp, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t q = 0; q < nsel_remote; q++) nbr[rslot[q]] = tmp[q];
        rc = dds_read(s, g->eid_var, rrow, NULL, nsel_remote, tmp, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t q = 0; q < nsel_remote; q++) eid[rslot[q]] = tmp[q];
    }
done:
    if (rc != DDS_OK) *count = 0;
    free(tmp);
    free(rrow);
    free(rslot);
    free(ts_buf);
    free(req_start);
    free(req_count);
    free(map.key);
    free(map.val);
    free(view);
    return rc;
}
