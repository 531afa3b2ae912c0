/*
 * temporal.c - temporal neighbour sampling over a T-CSR held in the store (see the
 * "temporal graphs" section of ddstore.h).
 *
 * Lists of members this rank can read by load (its own chunk, node-local peers) are
 * read in place.  For the others, the eligible count of each root is found first: the
 * timestamps of every distinct short list are fetched whole with one batched dds_read;
 * long lists are binary-searched, all roots in step, one batched dds_read of one
 * timestamp per root per step.  Then the neighbour, edge id and timestamp of exactly the
 * selected rows are fetched with one batched dds_read each.  No state outlives the
 * call.
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

/* default of dds_tcsr.fetch_whole_max */
#define DDS_FETCH_WHOLE_MAX 2048
/* default of dds_tcsr.range_factor */
#define DDS_RANGE_FACTOR 64

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
    int64_t whole_max = g->fetch_whole_max > 0 ? g->fetch_whole_max : DDS_FETCH_WHOLE_MAX;
    int64_t range_factor = g->range_factor > 0 ? g->range_factor : DDS_RANGE_FACTOR;
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

    /* cut[i]: number of eligible entries (timestamp < root time) of root i's list */
    struct fetch_map map = {0, NULL, NULL};
    double *ts_buf = NULL, *tmp_ts = NULL;
    int64_t *cut = NULL, *req_start = NULL, *req_count = NULL, *rslot = NULL, *roff = NULL;
    int64_t *pstart = NULL, *pcount = NULL, npieces = 0, packed = 0;
    int64_t *slo = NULL, *shi = NULL, *sidx = NULL, *tmp = NULL;
    int64_t nsel_remote = 0;
    cut = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!cut) {
        rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
        goto done;
    }
    int64_t nr = 0, nsearch = 0; /* remote roots; of them, with long lists */
    for (int64_t i = 0; i < n; i++) {
        int64_t v = roots[i], start = g->indptr[v], deg = g->indptr[v + 1] - start;
        cut[i] = 0;
        if (!deg) continue;
        const struct member_view *mv = &view[width == 1 ? 0 :
                                             owner_of_node(g->node_offsets, width, v)];
        if (mv->readable) {
            cut[i] = lower_bound(mv->ts + (start - mv->first_row), deg, root_ts[i]);
        } else {
            nr++;
            if (deg > whole_max) nsearch++;
            cut[i] = -1; /* found below */
        }
    }
    if (any_remote && nr) {
        /* short lists: fetch the timestamps of each distinct node once */
        map.cap = 16;
        while (map.cap < 2 * nr) map.cap *= 2;
        map.key = malloc(sizeof(int64_t) * map.cap);
        map.val = malloc(sizeof(int64_t) * map.cap);
        req_start = malloc(sizeof(int64_t) * nr);
        req_count = malloc(sizeof(int64_t) * nr);
        rslot = malloc(sizeof(int64_t) * (size_t)(nr * k));
        roff = malloc(sizeof(int64_t) * (size_t)(nr * k));
        pstart = malloc(sizeof(int64_t) * (size_t)(nr * k));
        pcount = malloc(sizeof(int64_t) * (size_t)(nr * k));
        if (!map.key || !map.val || !req_start || !req_count || !rslot || !roff || !pstart ||
            !pcount) {
            rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
            goto done;
        }
        for (int64_t h = 0; h < map.cap; h++) map.key[h] = -1;
        int64_t total = 0, nreq = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = roots[i], deg = g->indptr[v + 1] - g->indptr[v];
            if (cut[i] >= 0 || deg > whole_max) continue;
            int64_t *off = map_slot(&map, v);
            if (*off >= 0) continue;
            *off = total;
            req_start[nreq] = g->indptr[v];
            req_count[nreq++] = deg;
            total += deg;
        }
        ts_buf = malloc(sizeof(double) * (total ? total : 1));
        if (!ts_buf) {
            rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory for %lld "
                          "remote timestamps", (long long)total);
            goto done;
        }
        if (nreq) rc = dds_read(s, g->ts_var, req_start, req_count, nreq, ts_buf, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = roots[i], deg = g->indptr[v + 1] - g->indptr[v];
            if (cut[i] < 0 && deg <= whole_max)
                cut[i] = lower_bound(ts_buf + *map_slot(&map, v), deg, root_ts[i]);
        }
        /* long lists: binary search, all of them in step, one batched read per step */
        if (nsearch) {
            slo = malloc(sizeof(int64_t) * nsearch);
            shi = malloc(sizeof(int64_t) * nsearch);
            sidx = malloc(sizeof(int64_t) * nsearch);
            tmp = malloc(sizeof(int64_t) * nsearch);
            tmp_ts = malloc(sizeof(double) * nsearch);
            if (!slo || !shi || !sidx || !tmp || !tmp_ts) {
                rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
                goto done;
            }
            int64_t ns = 0;
            for (int64_t i = 0; i < n; i++) {
                if (cut[i] >= 0) continue;
                int64_t v = roots[i];
                sidx[ns] = i;
                slo[ns] = 0;
                shi[ns++] = g->indptr[v + 1] - g->indptr[v];
            }
            for (;;) {
                int64_t na = 0; /* tmp[q]: row of the probe of the q-th active search */
                for (int64_t q = 0; q < ns; q++)
                    if (slo[q] < shi[q])
                        tmp[na++] = g->indptr[roots[sidx[q]]] + slo[q] +
                                    (shi[q] - slo[q]) / 2;
                if (!na) break;
                rc = dds_read(s, g->ts_var, tmp, NULL, na, tmp_ts, 0);
                if (rc != DDS_OK) goto done;
                na = 0;
                for (int64_t q = 0; q < ns; q++) {
                    if (slo[q] >= shi[q]) continue;
                    int64_t mid = slo[q] + (shi[q] - slo[q]) / 2;
                    if (tmp_ts[na++] < root_ts[sidx[q]]) slo[q] = mid + 1;
                    else shi[q] = mid;
                }
            }
            for (int64_t q = 0; q < ns; q++) cut[sidx[q]] = slo[q];
        }
    }

    uint64_t base = splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ (uint64_t)layer);
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = cut[i];
        if (c <= 0) continue;
        int64_t v = roots[i], start = g->indptr[v];
        const struct member_view *mv = &view[width == 1 ? 0 :
                                             owner_of_node(g->node_offsets, width, v)];
        int64_t local = start - mv->first_row; /* position of the list in the chunk */
        int64_t lo = 0, take = c;
        int draw = 0;
        if (c > k) {
            if (strategy == DDS_SAMPLE_RECENT) lo = c - k;
            else draw = 1;
            take = k;
        }
        uint64_t key = draw ? splitmix64(base ^ splitmix64((uint64_t)i)) : 0;
        /* remote rows are read in pieces: the whole selected range, or, for draws
         * scattered over a long eligible range, one row per draw */
        int64_t piece0 = packed;
        int singles = !mv->readable && draw && c > range_factor * k;
        if (!mv->readable && !singles) {
            pstart[npieces] = start + (draw ? 0 : lo);
            pcount[npieces++] = draw ? c : take;
            packed += draw ? c : take;
        }
        for (int64_t q = 0; q < take; q++, j++) {
            int64_t p = draw ? below(splitmix64(key + (uint64_t)(q + 1) *
                                                0x9E3779B97F4A7C15ULL), c) : lo + q;
            row[j] = i;
            if (mv->readable) {
                ets[j] = mv->ts[local + p];
                nbr[j] = mv->nbr[local + p];
                eid[j] = mv->eid[local + p];
            } else {
                rslot[nsel_remote] = j;
                if (singles) {
                    pstart[npieces] = start + p;
                    pcount[npieces++] = 1;
                    roff[nsel_remote++] = packed++;
                } else {
                    roff[nsel_remote++] = piece0 + (draw ? p : q);
                }
            }
        }
    }
    *count = j;
    if (nsel_remote) {
        /* the selected pieces of remote lists: one batched read per variable */
        free(tmp);
        tmp = malloc(sizeof(int64_t) * (size_t)packed);
        if (!tmp) {
            rc = dds_fail(s, DDS_ENOMEM, "temporal sample: out of memory");
            goto done;
        }
        rc = dds_read(s, g->nbr_var, pstart, pcount, npieces, tmp, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t q = 0; q < nsel_remote; q++) nbr[rslot[q]] = tmp[roff[q]];
        rc = dds_read(s, g->eid_var, pstart, pcount, npieces, tmp, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t q = 0; q < nsel_remote; q++) eid[rslot[q]] = tmp[roff[q]];
        rc = dds_read(s, g->ts_var, pstart, pcount, npieces, tmp, 0);
        if (rc != DDS_OK) goto done;
        for (int64_t q = 0; q < nsel_remote; q++)
            memcpy(&ets[rslot[q]], &tmp[roff[q]], sizeof(double));
    }
done:
    if (rc != DDS_OK) *count = 0;
    free(cut);
    free(tmp);
    free(tmp_ts);
    free(slo);
    free(shi);
    free(sidx);
    free(rslot);
    free(roff);
    free(pstart);
    free(pcount);
    free(ts_buf);
    free(req_start);
    free(req_count);
    free(map.key);
    free(map.val);
    free(view);
    return rc;
}
