/*
 * temporal.c - temporal neighbour sampling over a T-CSR held in the store (see the
 * "temporal graphs" section of ddstore.h).
 *
 * Lists of members this rank can read by load (its own chunk, node-local peers) are
 * read in place.  Lists of the other members are read with batched one-sided reads:
 * - a list that is short, or asked for by enough roots of the call to pay for itself,
 *   is fetched whole (ts, nbr and eid: one batched dds_read each for all such lists,
 *   each distinct node once) and then sampled like a local one;
 * - a long list asked for by few roots is binary-searched remotely (all such roots in
 *   step, one batched dds_read of one timestamp each per step), and only the selected
 *   rows are read: one piece per root (the k latest, or the whole eligible range for
 *   uniform draws from at most range_factor * k entries), else one row per draw.
 * No state outlives the call.
 */
#include "internal.h"

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

/* open-addressing map node -> index of its fetched list (remote lists only) */
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
/* A remote list is fetched whole when deg <= fetch_whole_max * max(1, occ / 2), occ
 * being the number of roots of the call that ask for it: a remote search costs about
 * log2(deg) + k small reads per root, a whole fetch 24 bytes per entry once (with the
 * default 2048: 1024 entries per root). */
#define DDS_ROOTS_PER_WHOLE 2

static const double no_entries = 0.0; /* list of a node without entries */

/* where a root's list is read: in place or in fetched copies (ts, nbr, eid), or by
 * remote search (ts == NULL) */
struct list_src {
    const double *ts;
    const int64_t *nbr, *eid;
};

int dds_temporal_sample(dds_store *s, const dds_tcsr *g, const int64_t *roots,
                        const double *root_ts, int64_t n, int64_t k, int strategy,
                        uint64_t seed, uint64_t epoch, int layer, int64_t *row,
                        int64_t *nbr, int64_t *eid, double *ets, int64_t *count)
{
    *count = 0;
    if (!s) return DDS_ESTATE;
    if (n < 0 || k < 1)
        return dds_set_error(DDS_EINVAL, "temporal sample: n=%lld must be >= 0 and k=%lld "
                        ">= 1", (long long)n, (long long)k);
    if (strategy != DDS_SAMPLE_RECENT && strategy != DDS_SAMPLE_UNIFORM)
        return dds_set_error(DDS_EINVAL, "temporal sample: strategy %d is not recent (0) or "
                        "uniform (1)", strategy);
    for (int64_t i = 0; i < n; i++) {
        if (roots[i] < 0 || roots[i] >= g->num_nodes)
            return dds_set_error(DDS_ERANGE, "temporal sample: root %lld (position %lld) "
                            "out of range [0, %lld)", (long long)roots[i], (long long)i,
                            (long long)g->num_nodes);
        if (isnan(root_ts[i]))
            return dds_set_error(DDS_EINVAL, "temporal sample: root time at position %lld "
                            "is NaN", (long long)i);
    }
    int width = dds_group_size(s), rc = DDS_OK;
    int64_t whole_max = g->fetch_whole_max > 0 ? g->fetch_whole_max : DDS_FETCH_WHOLE_MAX;
    int64_t range_factor = g->range_factor > 0 ? g->range_factor : DDS_RANGE_FACTOR;
    struct member_view *view = calloc((size_t)width, sizeof *view);
    if (!view) return dds_set_error(DDS_ENOMEM, "temporal sample: out of memory");
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

    struct fetch_map map = {0, NULL, NULL};
    struct list_src *src = NULL;
    double *f_ts = NULL, *tmp_ts = NULL;
    int64_t *f_nbr = NULL, *f_eid = NULL, *cut = NULL, *d_node = NULL, *d_occ = NULL;
    int64_t *d_off = NULL, *req_start = NULL, *req_count = NULL, *rslot = NULL;
    int64_t *roff = NULL, *pstart = NULL, *pcount = NULL, *slo = NULL, *shi = NULL;
    int64_t *sidx = NULL, *tmp = NULL;
    int64_t npieces = 0, packed = 0, nsel_remote = 0, nsearch = 0;
    src = malloc(sizeof *src * (size_t)(n ? n : 1));
    cut = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!src || !cut) {
        rc = dds_set_error(DDS_ENOMEM, "temporal sample: out of memory");
        goto done;
    }
    /* in-place lists; remote roots counted per distinct node */
    int64_t nr = 0, nd = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = roots[i], start = g->indptr[v];
        const struct member_view *mv = &view[width == 1 ? 0 :
                                             owner_of_node(g->node_offsets, width, v)];
        src[i].ts = NULL;
        if (g->indptr[v + 1] == start) {
            src[i].ts = &no_entries; /* never read: the cut is 0 */
        } else if (mv->readable) {
            int64_t local = start - mv->first_row;
            src[i].ts = mv->ts + local;
            src[i].nbr = mv->nbr + local;
            src[i].eid = mv->eid + local;
        } else {
            nr++;
        }
    }
    if (any_remote && nr) {
        map.cap = 16;
        while (map.cap < 2 * nr) map.cap *= 2;
        map.key = malloc(sizeof(int64_t) * map.cap);
        map.val = malloc(sizeof(int64_t) * map.cap);
        d_node = malloc(sizeof(int64_t) * nr);
        d_occ = malloc(sizeof(int64_t) * nr);
        d_off = malloc(sizeof(int64_t) * nr);
        req_start = malloc(sizeof(int64_t) * nr);
        req_count = malloc(sizeof(int64_t) * nr);
        if (!map.key || !map.val || !d_node || !d_occ || !d_off || !req_start ||
            !req_count) {
            rc = dds_set_error(DDS_ENOMEM, "temporal sample: out of memory");
            goto done;
        }
        for (int64_t h = 0; h < map.cap; h++) map.key[h] = -1;
        for (int64_t i = 0; i < n; i++) {
            if (src[i].ts) continue;
            int64_t *d = map_slot(&map, roots[i]);
            if (*d < 0) {
                *d = nd;
                d_node[nd] = roots[i];
                d_occ[nd++] = 0;
            }
            d_occ[*d]++;
        }
        /* lists fetched whole: short ones, and long ones asked for by many roots */
        int64_t total = 0, nreq = 0;
        for (int64_t d = 0; d < nd; d++) {
            int64_t v = d_node[d], deg = g->indptr[v + 1] - g->indptr[v];
            d_off[d] = -1;
            if (deg <= whole_max || deg * DDS_ROOTS_PER_WHOLE <= whole_max * d_occ[d]) {
                d_off[d] = total;
                req_start[nreq] = g->indptr[v];
                req_count[nreq++] = deg;
                total += deg;
            }
        }
        if (nreq) {
            f_ts = malloc(sizeof(double) * total);
            f_nbr = malloc(sizeof(int64_t) * total);
            f_eid = malloc(sizeof(int64_t) * total);
            if (!f_ts || !f_nbr || !f_eid) {
                rc = dds_set_error(DDS_ENOMEM, "temporal sample: out of memory for %lld "
                              "remote list entries", (long long)total);
                goto done;
            }
            rc = dds_read(s, g->ts_var, req_start, req_count, nreq, f_ts, 0);
            if (rc == DDS_OK) rc = dds_read(s, g->nbr_var, req_start, req_count, nreq,
                                            f_nbr, 0);
            if (rc == DDS_OK) rc = dds_read(s, g->eid_var, req_start, req_count, nreq,
                                            f_eid, 0);
            if (rc != DDS_OK) goto done;
        }
        for (int64_t i = 0; i < n; i++) {
            if (src[i].ts) continue;
            int64_t off = d_off[*map_slot(&map, roots[i])];
            if (off >= 0) {
                src[i].ts = f_ts + off;
                src[i].nbr = f_nbr + off;
                src[i].eid = f_eid + off;
            } else {
                nsearch++;
            }
        }
    }
    /* cut[i]: number of eligible entries (timestamp < root time) */
    for (int64_t i = 0; i < n; i++)
        if (src[i].ts)
            cut[i] = lower_bound(src[i].ts, g->indptr[roots[i] + 1] - g->indptr[roots[i]],
                                 root_ts[i]);
    if (nsearch) {
        /* long remote lists: binary search, all of them in step, one batched read of one
         * timestamp per root per step */
        slo = malloc(sizeof(int64_t) * nsearch);
        shi = malloc(sizeof(int64_t) * nsearch);
        sidx = malloc(sizeof(int64_t) * nsearch);
        tmp = malloc(sizeof(int64_t) * nsearch);
        tmp_ts = malloc(sizeof(double) * nsearch);
        rslot = malloc(sizeof(int64_t) * (size_t)(nsearch * k));
        roff = malloc(sizeof(int64_t) * (size_t)(nsearch * k));
        pstart = malloc(sizeof(int64_t) * (size_t)(nsearch * k));
        pcount = malloc(sizeof(int64_t) * (size_t)(nsearch * k));
        if (!slo || !shi || !sidx || !tmp || !tmp_ts || !rslot || !roff || !pstart ||
            !pcount) {
            rc = dds_set_error(DDS_ENOMEM, "temporal sample: out of memory");
            goto done;
        }
        int64_t ns = 0;
        for (int64_t i = 0; i < n; i++) {
            if (src[i].ts) continue;
            sidx[ns] = i;
            slo[ns] = 0;
            shi[ns++] = g->indptr[roots[i] + 1] - g->indptr[roots[i]];
        }
        for (;;) {
            int64_t na = 0; /* tmp[a]: row probed by the a-th active search */
            for (int64_t q = 0; q < ns; q++)
                if (slo[q] < shi[q])
                    tmp[na++] = g->indptr[roots[sidx[q]]] + slo[q] + (shi[q] - slo[q]) / 2;
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

    uint64_t base = splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ (uint64_t)layer);
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = cut[i];
        if (c <= 0) continue;
        int64_t lo = 0, take = c;
        int draw = 0;
        if (c > k) {
            if (strategy == DDS_SAMPLE_RECENT) lo = c - k;
            else draw = 1;
            take = k;
        }
        uint64_t key = draw ? splitmix64(base ^ splitmix64((uint64_t)i)) : 0;
        const struct list_src *ls = &src[i];
        if (ls->ts) {
            for (int64_t q = 0; q < take; q++, j++) {
                int64_t p = draw ? below(splitmix64(key + (uint64_t)(q + 1) *
                                                    0x9E3779B97F4A7C15ULL), c) : lo + q;
                row[j] = i;
                ets[j] = ls->ts[p];
                nbr[j] = ls->nbr[p];
                eid[j] = ls->eid[p];
            }
            continue;
        }
        /* searched remote list: read the selected rows in pieces */
        int64_t start = g->indptr[roots[i]], piece0 = packed;
        int singles = draw && c > range_factor * k;
        if (!singles) {
            pstart[npieces] = start + lo;
            pcount[npieces++] = draw ? c : take;
            packed += draw ? c : take;
        }
        for (int64_t q = 0; q < take; q++, j++) {
            int64_t p = draw ? below(splitmix64(key + (uint64_t)(q + 1) *
                                                0x9E3779B97F4A7C15ULL), c) : lo + q;
            row[j] = i;
            rslot[nsel_remote] = j;
            if (singles) {
                pstart[npieces] = start + p;
                pcount[npieces++] = 1;
                roff[nsel_remote++] = packed++;
            } else {
                roff[nsel_remote++] = piece0 + p - lo;
            }
        }
    }
    *count = j;
    if (nsel_remote) {
        free(tmp);
        tmp = malloc(sizeof(int64_t) * (size_t)packed);
        if (!tmp) {
            rc = dds_set_error(DDS_ENOMEM, "temporal sample: out of memory");
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
    free(src);
    free(cut);
    free(f_ts);
    free(f_nbr);
    free(f_eid);
    free(tmp_ts);
    free(d_node);
    free(d_occ);
    free(d_off);
    free(req_start);
    free(req_count);
    free(rslot);
    free(roff);
    free(pstart);
    free(pcount);
    free(slo);
    free(shi);
    free(sidx);
    free(tmp);
    free(map.key);
    free(map.val);
    free(view);
    return rc;
}
