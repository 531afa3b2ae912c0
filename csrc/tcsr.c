/*
 * tcsr.c - the local loops of the chunked T-CSR build (see the "T-CSR build" part of
 * dds_tcsr.h; the rounds of MPI exchange are driven from Python, through
 * ddstore._core.tcsr_count / tcsr_pack / tcsr_place / tcsr_sort).
 *
 * The build never holds more than one chunk of entries outside the store: degrees are
 * counted from the edge table (dds_tcsr_count), each chunk of edges is packed into
 * entries grouped by owning member (dds_tcsr_pack), the entries a member receives are
 * placed straight into its chunk of the T-CSR at a per-node cursor (dds_tcsr_place), and
 * at the end every node's list is sorted in place by (time, edge id) (dds_tcsr_sort).
 * Times are optional (t / ts NULL: entries carry time 0, lists are sorted by edge id);
 * they are moved as their 8 bytes and compared, in the sort, through their keys
 * (times.h), so doubles and int64 times share every loop;
 * the CSC of ddstore.pyg.GraphStore is built this way, keyed by destination without
 * reverse entries.
 * Node and edge ids in the lists are int64 (the T-CSR) or int32 (a CSC whose ids fit):
 * placing and sorting are written once, with the width passed at run time (the id
 * accessors of sampling.h, the one way ids of either width are handled).
 * No MPI and no allocation: every buffer is the caller's.
 */
#include "internal.h"
#include "sampling.h"
#include "times.h"

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

int dds_tcsr_pack(const int64_t *edges, const void *t, int64_t eid0, int64_t n,
                  int add_reverse, const int64_t *node_offsets, int width,
                  int64_t *counts, int64_t *out, int64_t cap)
{
    if (n < 0 || width < 1 || cap < 0)
        return dds_set_error(DDS_EINVAL, "tcsr_pack: n=%lld and cap=%lld must be >= 0 and "
                             "width=%d >= 1", (long long)n, (long long)cap, width);
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
            counts[dds_member_of(node_offsets, width, v)]++;
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
    /* at <= 2n: no overflow (n entries of 2 words each exist in memory) */
    if (at > cap)
        return dds_set_error(DDS_EINVAL, "tcsr_pack: %lld entries do not fit the output's "
                             "capacity of %lld", (long long)at, (long long)cap);
    for (int64_t i = 0; i < n; i++) {
        for (int r = 0; r < per; r++) {
            int64_t v = edges[2 * i + r], u = edges[2 * i + 1 - r];
            int64_t *e = out + 4 * counts[dds_member_of(node_offsets, width, v)]++;
            e[0] = v;
            e[1] = u;
            e[2] = t ? time_bits(t, i) : 0; /* the bits of 0.0 and of 0 */
            e[3] = eid0 + i;
        }
    }
    for (int g = width - 1; g > 0; g--) counts[g] -= counts[g - 1];
    return DDS_OK;
}

/* (time key, edge id) pairs in order */
static inline int less(int64_t ta, int64_t ia, int64_t tb, int64_t ib)
{
    return ta < tb || (ta == tb && ia < ib);
}

/* Placing and sorting take the ids' width as a value (4 or 8), as every loop over ids
 * does (sampling.h); being this file's hot loops, they are written as always-inline
 * bodies and compiled once per width (place_4 / place_8, sort_lists_4 / sort_lists_8:
 * the constant width folds every id_at / id_put / id_swap into a plain load or store). */
#define PER_WIDTH static inline __attribute__((always_inline))

/* place the n entries (ids of `bytes`, 4 or 8, each; see dds_tcsr_place) */
PER_WIDTH int place(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                    const int64_t *indptr, int64_t *fill, void *nbr, int64_t *ts,
                    void *eid, int64_t rows, int bytes)
{
    int64_t base = indptr[node_lo];
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = entries + 4 * i;
        int64_t v = e[0];
        if (v < node_lo || v >= node_hi)
            return dds_set_error(DDS_EINVAL, "tcsr_place: entry %lld is for node %lld, "
                                 "not one of this member's [%lld, %lld)", (long long)i,
                                 (long long)v, (long long)node_lo, (long long)node_hi);
        if (!id_fits(bytes, e[1]) || !id_fits(bytes, e[3]))
            return dds_set_error(DDS_ERANGE, "tcsr_place: entry %lld has neighbour %lld "
                                 "and edge id %lld, not both %d-byte ids", (long long)i,
                                 (long long)e[1], (long long)e[3], bytes);
        int64_t f = fill[v - node_lo];
        if (f < 0 || f >= indptr[v + 1] - indptr[v])
            return dds_set_error(DDS_EINVAL, "tcsr_place: node %lld receives more than its "
                                 "degree %lld", (long long)v,
                                 (long long)(indptr[v + 1] - indptr[v]));
        int64_t row = indptr[v] - base + f;
        if (row < 0 || row >= rows)
            return dds_set_error(DDS_EINVAL, "tcsr_place: entry %lld (node %lld) goes to "
                                 "local row %lld, outside the chunk's %lld rows",
                                 (long long)i, (long long)v, (long long)row,
                                 (long long)rows);
        fill[v - node_lo]++;
        id_put(nbr, bytes, row, e[1]);
        if (ts) ts[row] = e[2]; /* the time's 8 bytes */
        id_put(eid, bytes, row, e[3]);
    }
    return DDS_OK;
}

/* ---- in-place sort of one list by (ts, eid), or by eid when ts is NULL, moving nbr
 * along (introsort); times are compared by their keys (times.h) and moved as bits */
struct list3 {
    char *nbr, *eid; /* ids of `bytes` (4 or 8) each */
    int64_t *ts;     /* the times' 8 bytes; NULL: no times, the order is by edge id alone */
    int type;        /* their dds_time_type (DDS_TIME_I64 for keys) */
    int bytes;
};

PER_WIDTH int64_t time_of(const struct list3 *l, int64_t a)
{
    return l->ts ? time_key(l->ts[a], l->type) : 0;
}

PER_WIDTH int before(const struct list3 *l, int64_t a, int64_t b)
{
    return less(time_of(l, a), id_at(l->eid, l->bytes, a), time_of(l, b),
                id_at(l->eid, l->bytes, b));
}

PER_WIDTH void swap3(const struct list3 *l, int64_t a, int64_t b)
{
    id_swap(l->nbr, l->bytes, a, b);
    id_swap(l->eid, l->bytes, a, b);
    if (l->ts) {
        int64_t y = l->ts[a];
        l->ts[a] = l->ts[b];
        l->ts[b] = y;
    }
}

PER_WIDTH void insertion(const struct list3 *l, int64_t lo, int64_t hi)
{
    int w = l->bytes;
    for (int64_t i = lo + 1; i < hi; i++) {
        int64_t nb = id_at(l->nbr, w, i), id = id_at(l->eid, w, i);
        int64_t t = time_of(l, i), bits = l->ts ? l->ts[i] : 0;
        int64_t j = i;
        while (j > lo && less(t, id, time_of(l, j - 1), id_at(l->eid, w, j - 1))) {
            id_put(l->nbr, w, j, id_at(l->nbr, w, j - 1));
            id_put(l->eid, w, j, id_at(l->eid, w, j - 1));
            if (l->ts) l->ts[j] = l->ts[j - 1];
            j--;
        }
        id_put(l->nbr, w, j, nb);
        id_put(l->eid, w, j, id);
        if (l->ts) l->ts[j] = bits;
    }
}

PER_WIDTH void sift_down(const struct list3 *l, int64_t lo, int64_t root, int64_t n)
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

PER_WIDTH void heapsort3(const struct list3 *l, int64_t lo, int64_t hi)
{
    int64_t n = hi - lo;
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(l, lo, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        swap3(l, lo, lo + end);
        sift_down(l, lo, 0, end);
    }
}

/* introsort of rows [lo, hi): quicksort (median of three) down to `depth` levels, then
 * heapsort; ranges of 24 rows or fewer by insertion.  The larger side of a partition
 * waits on a stack while the smaller is sorted (at most 63 wait: each smaller side is at
 * most half its range) */
PER_WIDTH void introsort(const struct list3 *l, int64_t lo, int64_t hi, int depth)
{
    struct range {
        int64_t lo, hi;
        int depth;
    } wait[64];
    int waiting = 0;
    for (;;) {
        int done = 0;
        while (hi - lo > 24) {
            if (depth-- == 0) {
                heapsort3(l, lo, hi);
                done = 1;
                break;
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
            if (j - lo < hi - j - 1) { /* the larger side waits */
                wait[waiting++] = (struct range){j + 1, hi, depth};
                hi = j;
            } else {
                wait[waiting++] = (struct range){lo, j, depth};
                lo = j + 1;
            }
        }
        if (!done) insertion(l, lo, hi);
        if (!waiting) return;
        waiting--;
        lo = wait[waiting].lo;
        hi = wait[waiting].hi;
        depth = wait[waiting].depth;
    }
}

/* sort rows [lo, hi) of l, unless already in order */
PER_WIDTH void sort_rows(const struct list3 *l, int64_t lo, int64_t hi)
{
    int64_t i;
    for (i = lo + 1; i < hi && !before(l, i, i - 1); i++) {
    }
    if (i >= hi) return; /* already in order */
    int depth = 0;
    for (int64_t m = hi - lo; m > 1; m >>= 1) depth += 2;
    introsort(l, lo, hi, depth);
}

/* sort every list of nodes [node_lo, node_hi) (the range is checked by the caller) by
 * (ts, eid), ts of `type`; with a neighbour-time table (ts NULL, nbr_time non-NULL: times
 * of `type` in nbr_time_bytes each) by (nbr_time[nbr], eid), each list's time keys
 * gathered into scratch first (the caller checked every neighbour against the table and
 * the scratch against the longest list) */
PER_WIDTH void sort_lists(int64_t node_lo, int64_t node_hi, const int64_t *indptr,
                          char *nbr, int64_t *ts, char *eid, int bytes, int type,
                          const void *nbr_time, int nbr_time_bytes, int64_t *scratch)
{
    int64_t base = indptr[node_lo];
    struct list3 l = {nbr, eid, ts, type, bytes};
    for (int64_t v = node_lo; v < node_hi; v++) {
        int64_t lo = indptr[v] - base, hi = indptr[v + 1] - base;
        if (!nbr_time) {
            sort_rows(&l, lo, hi);
            continue;
        }
        for (int64_t k = lo; k < hi; k++)
            scratch[k - lo] = table_key(nbr_time, nbr_time_bytes == 4 ? 4 : 8, type,
                                        id_at(nbr, bytes, k));
        struct list3 one = {nbr + bytes * lo, eid + bytes * lo, scratch, DDS_TIME_I64,
                            bytes};
        sort_rows(&one, 0, hi - lo);
    }
}

/* the per-width copies (functions of their own, as the loops they hold) */
#define PLACE_ARGS const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi, \
                   const int64_t *indptr, int64_t *fill, void *nbr, int64_t *ts,         \
                   void *eid, int64_t rows
#define SORT_ARGS int64_t node_lo, int64_t node_hi, const int64_t *indptr, char *nbr,     \
                  int64_t *ts, char *eid, int type, const void *nbr_time,                \
                  int nbr_time_bytes, int64_t *scratch
static __attribute__((noinline)) int place_4(PLACE_ARGS)
{
    return place(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows, 4);
}
static __attribute__((noinline)) int place_8(PLACE_ARGS)
{
    return place(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows, 8);
}
static __attribute__((noinline)) void sort_lists_4(SORT_ARGS)
{
    sort_lists(node_lo, node_hi, indptr, nbr, ts, eid, 4, type, nbr_time, nbr_time_bytes,
               scratch);
}
static __attribute__((noinline)) void sort_lists_8(SORT_ARGS)
{
    sort_lists(node_lo, node_hi, indptr, nbr, ts, eid, 8, type, nbr_time, nbr_time_bytes,
               scratch);
}

/* the first local row in [0, rows) whose neighbour is outside [0, len), or -1 */
static int64_t nbr_outside(const void *nbr, int bytes, int64_t rows, int64_t len)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t v = id_at(nbr, bytes, i);
        if (v < 0 || v >= len) return i;
    }
    return -1;
}

static int bad_id_bytes(const char *what, int id_bytes)
{
    return dds_set_error(DDS_EINVAL, "%s: id_bytes=%d must be 4 or 8", what, id_bytes);
}

int dds_tcsr_place(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                   const int64_t *indptr, int64_t *fill, void *nbr, void *ts,
                   void *eid, int64_t rows, int id_bytes)
{
    if (n < 0 || rows < 0 || node_lo < 0 || node_hi < node_lo)
        return dds_set_error(DDS_EINVAL, "tcsr_place: n=%lld and rows=%lld must be >= 0 "
                             "and [%lld, %lld) a valid node range", (long long)n,
                             (long long)rows, (long long)node_lo, (long long)node_hi);
    if (id_bytes == 4)
        return place_4(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows);
    if (id_bytes == 8)
        return place_8(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows);
    return bad_id_bytes("tcsr_place", id_bytes);
}

int dds_tcsr_sort(int64_t node_lo, int64_t node_hi, const int64_t *indptr, void *nbr,
                  void *ts, void *eid, int64_t rows, int id_bytes, int time_type,
                  const void *nbr_time, int64_t nbr_time_len, int nbr_time_bytes,
                  int64_t *scratch, int64_t scratch_len)
{
    if (node_lo < 0 || node_hi < node_lo)
        return dds_set_error(DDS_EINVAL, "tcsr_sort: node range [%lld, %lld) is not valid",
                             (long long)node_lo, (long long)node_hi);
    if (id_bytes != 4 && id_bytes != 8)
        return bad_id_bytes("tcsr_sort", id_bytes);
    if (!time_type_ok(time_type))
        return dds_set_error(DDS_EINVAL, "tcsr_sort: time_type=%d is not a dds_time_type "
                             "(%d double, %d int64)", time_type, DDS_TIME_F64,
                             DDS_TIME_I64);
    if (nbr_time && (ts || !scratch || nbr_time_len < 0 ||
                     (nbr_time_bytes != 4 && nbr_time_bytes != 8)))
        return dds_set_error(DDS_EINVAL, "tcsr_sort: a neighbour-time table needs ts NULL, "
                             "a scratch, a length >= 0 and 4- or 8-byte times (got %d)",
                             nbr_time_bytes);
    /* every list inside the chunk [0, rows) (and, sorting by neighbour time, inside the
     * scratch, every neighbour inside the table) before anything moves */
    for (int64_t v = node_lo; v < node_hi; v++) {
        int64_t lo = indptr[v] - indptr[node_lo], hi = indptr[v + 1] - indptr[node_lo];
        if (lo < 0 || hi < lo || hi > rows)
            return dds_set_error(DDS_EINVAL, "tcsr_sort: the list of node %lld, local rows "
                                 "[%lld, %lld), is not inside the chunk's %lld rows",
                                 (long long)v, (long long)lo, (long long)hi,
                                 (long long)rows);
        if (nbr_time && hi - lo > scratch_len)
            return dds_set_error(DDS_EINVAL, "tcsr_sort: the list of node %lld has %lld "
                                 "entries, more than the scratch's %lld", (long long)v,
                                 (long long)(hi - lo), (long long)scratch_len);
    }
    if (nbr_time) {
        int64_t used = node_hi > node_lo ? indptr[node_hi] - indptr[node_lo] : 0;
        int64_t bad = nbr_outside(nbr, id_bytes, used, nbr_time_len);
        if (bad >= 0)
            return dds_set_error(DDS_ERANGE, "tcsr_sort: local row %lld has a neighbour "
                                 "outside the %lld neighbour times", (long long)bad,
                                 (long long)nbr_time_len);
    }
    (id_bytes == 4 ? sort_lists_4 : sort_lists_8)(node_lo, node_hi, indptr, nbr, ts, eid,
                                                  time_type, nbr_time, nbr_time_bytes,
                                                  scratch);
    return DDS_OK;
}
