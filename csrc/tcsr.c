/*
 * tcsr.c - the local loops of the chunked T-CSR build (see the "T-CSR build" part of
 * ddstore.h; the rounds of MPI exchange are driven from ddstore/temporal/build.py).
 *
 * The build never holds more than one chunk of entries outside the store: degrees are
 * counted from the edge table (dds_tcsr_count), each chunk of edges is packed into
 * entries grouped by owning member (dds_tcsr_pack), the entries a member receives are
 * placed straight into its chunk of the T-CSR at a per-node cursor (dds_tcsr_place), and
 * at the end every node's list is sorted in place by (time, edge id) (dds_tcsr_sort).
 * Times are optional (t / ts NULL: entries carry time 0, lists are sorted by edge id);
 * the PyG GraphStore's CSC is built this way, keyed by destination without reverse
 * entries.
 * No MPI and no allocation: every buffer is the caller's.
 */
#include "internal.h"

#include <string.h>

int dds_tcsr_count(const int64_t *edges, int64_t n, int add_reverse, int64_t num_nodes,
                   int64_t *deg)
{
    if (n < 0 || num_nodes < 0)
        return dds_set_error(DDS_EINVAL, "tcsr_count: n=%lld and num_nodes=%lld must be "
                             ">= 0", (long long)n, (long long)num_nodes);
    for (int64_t i = 0; i < n; i++) {
        int64_t s = edges[2 * i], d = edges[2 * i + 1];
        if (s < 0 || s >= num_nodes || d < 0 || d >= num_nodes)
            return dds_set_error(DDS_ERANGE, "tcsr_count: edge row %lld = (%lld, %lld) "
                                 "has a node outside [0, %lld)", (long long)i,
                                 (long long)s, (long long)d, (long long)num_nodes);
        deg[s]++;
        if (add_reverse) deg[d]++;
    }
    return DDS_OK;
}

static int member_of(const int64_t *node_offsets, int width, int64_t v)
{
    int lo = 0, hi = width - 1; /* last member g with node_offsets[g] <= v */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (node_offsets[mid] <= v) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int dds_tcsr_pack(const int64_t *edges, const double *t, int64_t eid0, int64_t n,
                  int add_reverse, const int64_t *node_offsets, int width,
                  int64_t *counts, int64_t *out)
{
    if (n < 0 || width < 1)
        return dds_set_error(DDS_EINVAL, "tcsr_pack: n=%lld must be >= 0 and width=%d "
                             ">= 1", (long long)n, width);
    int64_t num_nodes = node_offsets[width];
    int per = add_reverse ? 2 : 1;
    memset(counts, 0, (size_t)width * sizeof *counts);
    for (int64_t i = 0; i < n; i++) {
        for (int r = 0; r < per; r++) {
            int64_t v = edges[2 * i + r];
            if (v < 0 || v >= num_nodes)
                return dds_set_error(DDS_ERANGE, "tcsr_pack: edge row %lld has node %lld "
                                     "outside [0, %lld)", (long long)i, (long long)v,
                                     (long long)num_nodes);
            counts[member_of(node_offsets, width, v)]++;
        }
    }
    /* counts[g] becomes the cursor of member g (its first entry in `out`), and after
     * the placement the end of its entries; then back to counts */
    int64_t at = 0;
    for (int g = 0; g < width; g++) {
        int64_t c = counts[g];
        counts[g] = at;
        at += c;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int r = 0; r < per; r++) {
            int64_t v = edges[2 * i + r], u = edges[2 * i + 1 - r];
            int64_t *e = out + 4 * counts[member_of(node_offsets, width, v)]++;
            double ti = t ? t[i] : 0.0;
            e[0] = v;
            e[1] = u;
            memcpy(&e[2], &ti, sizeof(double));
            e[3] = eid0 + i;
        }
    }
    for (int g = width - 1; g > 0; g--) counts[g] -= counts[g - 1];
    return DDS_OK;
}

int dds_tcsr_place(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                   const int64_t *indptr, int64_t *fill, int64_t *nbr, double *ts,
                   int64_t *eid)
{
    int64_t base = indptr[node_lo];
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = entries + 4 * i;
        int64_t v = e[0];
        if (v < node_lo || v >= node_hi)
            return dds_set_error(DDS_EINVAL, "tcsr_place: entry %lld is for node %lld, "
                                 "not one of this member's [%lld, %lld)", (long long)i,
                                 (long long)v, (long long)node_lo, (long long)node_hi);
        int64_t row = indptr[v] + fill[v - node_lo];
        if (row >= indptr[v + 1])
            return dds_set_error(DDS_EINVAL, "tcsr_place: node %lld receives more than its "
                                 "degree %lld", (long long)v,
                                 (long long)(indptr[v + 1] - indptr[v]));
        fill[v - node_lo]++;
        row -= base;
        nbr[row] = e[1];
        if (ts) memcpy(&ts[row], &e[2], sizeof(double));
        eid[row] = e[3];
    }
    return DDS_OK;
}

/* ---- in-place sort of one list by (ts, eid), or by eid when ts is NULL, moving nbr
 * along (introsort) */
struct list3 {
    int64_t *nbr, *eid;
    double *ts; /* NULL: no times, the order is by edge id alone */
};

static inline double time_of(const struct list3 *l, int64_t a)
{
    return l->ts ? l->ts[a] : 0.0;
}

static inline int less(double ta, int64_t ia, double tb, int64_t ib)
{
    return ta < tb || (ta == tb && ia < ib);
}

static inline int before(const struct list3 *l, int64_t a, int64_t b)
{
    return less(time_of(l, a), l->eid[a], time_of(l, b), l->eid[b]);
}

static inline void swap3(const struct list3 *l, int64_t a, int64_t b)
{
    int64_t x = l->nbr[a];
    l->nbr[a] = l->nbr[b];
    l->nbr[b] = x;
    x = l->eid[a];
    l->eid[a] = l->eid[b];
    l->eid[b] = x;
    if (l->ts) {
        double y = l->ts[a];
        l->ts[a] = l->ts[b];
        l->ts[b] = y;
    }
}

static void insertion(const struct list3 *l, int64_t lo, int64_t hi)
{
    for (int64_t i = lo + 1; i < hi; i++) {
        int64_t nb = l->nbr[i], id = l->eid[i];
        double t = time_of(l, i);
        int64_t j = i;
        while (j > lo && less(t, id, time_of(l, j - 1), l->eid[j - 1])) {
            l->nbr[j] = l->nbr[j - 1];
            l->eid[j] = l->eid[j - 1];
            if (l->ts) l->ts[j] = l->ts[j - 1];
            j--;
        }
        l->nbr[j] = nb;
        l->eid[j] = id;
        if (l->ts) l->ts[j] = t;
    }
}

static void sift_down(const struct list3 *l, int64_t lo, int64_t root, int64_t n)
{
    for (;;) {
        int64_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && before(l, lo + child, lo + child + 1)) child++;
        if (!before(l, lo + root, lo + child)) return;
        swap3(l, lo + root, lo + child);
        root = child;
    }
}

static void heapsort3(const struct list3 *l, int64_t lo, int64_t hi)
{
    int64_t n = hi - lo;
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(l, lo, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        swap3(l, lo, lo + end);
        sift_down(l, lo, 0, end);
    }
}

static void introsort(const struct list3 *l, int64_t lo, int64_t hi, int depth)
{
    while (hi - lo > 24) {
        if (depth-- == 0) {
            heapsort3(l, lo, hi);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three to lo */
        if (before(l, mid, lo)) swap3(l, mid, lo);
        if (before(l, last, lo)) swap3(l, last, lo);
        if (before(l, last, mid)) swap3(l, last, mid);
        swap3(l, lo, mid); /* pivot (the median) at lo */
        int64_t i = lo + 1, j = hi - 1;
        for (;;) { /* Hoare partition around l[lo] */
            while (i <= j && before(l, i, lo)) i++;
            while (i <= j && before(l, lo, j)) j--;
            if (i >= j) break;
            swap3(l, i, j);
            i++;
            j--;
        }
        swap3(l, lo, j);
        /* recurse into the smaller side, loop over the larger */
        if (j - lo < hi - j - 1) {
            introsort(l, lo, j, depth);
            lo = j + 1;
        } else {
            introsort(l, j + 1, hi, depth);
            hi = j;
        }
    }
    insertion(l, lo, hi);
}

int dds_tcsr_sort(int64_t node_lo, int64_t node_hi, const int64_t *indptr, int64_t *nbr,
                  double *ts, int64_t *eid)
{
    if (node_lo < 0 || node_hi < node_lo)
        return dds_set_error(DDS_EINVAL, "tcsr_sort: node range [%lld, %lld) is not valid",
                             (long long)node_lo, (long long)node_hi);
    int64_t base = indptr[node_lo];
    struct list3 l = {nbr, eid, ts};
    for (int64_t v = node_lo; v < node_hi; v++) {
        int64_t lo = indptr[v] - base, hi = indptr[v + 1] - base, i;
        for (i = lo + 1; i < hi && !before(&l, i, i - 1); i++) {
        }
        if (i >= hi) continue; /* already in order */
        int depth = 0;
        for (int64_t m = hi - lo; m > 1; m >>= 1) depth += 2;
        introsort(&l, lo, hi, depth);
    }
    return DDS_OK;
}
