/*
 * tcsr_lists.h - the part of csrc/tcsr.c that depends on the width of the node and edge
 * ids in a member's lists: placing received entries (dds_tcsr_place) and sorting every
 * list in place (dds_tcsr_sort).  A template: tcsr.c includes it once per id type, with
 * ID_T defined as the type (int32_t, int64_t) and ID_FN(name) as `name` with the type's
 * suffix.  Internal, not for bindings.
 */

static int ID_FN(place)(const int64_t *entries, int64_t n, int64_t node_lo, int64_t node_hi,
                        const int64_t *indptr, int64_t *fill, ID_T *nbr, int64_t *ts,
                        ID_T *eid, int64_t rows)
{
    int64_t base = indptr[node_lo];
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = entries + 4 * i;
        int64_t v = e[0];
        if (v < node_lo || v >= node_hi)
            return dds_set_error(DDS_EINVAL, "tcsr_place: entry %lld is for node %lld, "
                                 "not one of this member's [%lld, %lld)", (long long)i,
                                 (long long)v, (long long)node_lo, (long long)node_hi);
        if ((ID_T)e[1] != e[1] || (ID_T)e[3] != e[3])
            return dds_set_error(DDS_ERANGE, "tcsr_place: entry %lld has neighbour %lld "
                                 "and edge id %lld, not both %d-byte ids", (long long)i,
                                 (long long)e[1], (long long)e[3], (int)sizeof(ID_T));
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
        nbr[row] = (ID_T)e[1];
        if (ts) ts[row] = e[2]; /* the time's 8 bytes */
        eid[row] = (ID_T)e[3];
    }
    return DDS_OK;
}

/* ---- in-place sort of one list by (ts, eid), or by eid when ts is NULL, moving nbr
 * along (introsort); times are compared by their keys (times.h) and moved as bits */
struct ID_FN(list3) {
    ID_T *nbr, *eid;
    int64_t *ts; /* the times' 8 bytes; NULL: no times, the order is by edge id alone */
    int type;    /* their dds_time_type (DDS_TIME_I64 for keys) */
};

static inline int64_t ID_FN(time_of)(const struct ID_FN(list3) *l, int64_t a)
{
    return l->ts ? time_key(l->ts[a], l->type) : 0;
}

static inline int ID_FN(before)(const struct ID_FN(list3) *l, int64_t a, int64_t b)
{
    return less(ID_FN(time_of)(l, a), l->eid[a], ID_FN(time_of)(l, b), l->eid[b]);
}

static inline void ID_FN(swap3)(const struct ID_FN(list3) *l, int64_t a, int64_t b)
{
    ID_T x = l->nbr[a];
    l->nbr[a] = l->nbr[b];
    l->nbr[b] = x;
    x = l->eid[a];
    l->eid[a] = l->eid[b];
    l->eid[b] = x;
    if (l->ts) {
        int64_t y = l->ts[a];
        l->ts[a] = l->ts[b];
        l->ts[b] = y;
    }
}

static void ID_FN(insertion)(const struct ID_FN(list3) *l, int64_t lo, int64_t hi)
{
    for (int64_t i = lo + 1; i < hi; i++) {
        ID_T nb = l->nbr[i], id = l->eid[i];
        int64_t t = ID_FN(time_of)(l, i), bits = l->ts ? l->ts[i] : 0;
        int64_t j = i;
        while (j > lo && less(t, id, ID_FN(time_of)(l, j - 1), l->eid[j - 1])) {
            l->nbr[j] = l->nbr[j - 1];
            l->eid[j] = l->eid[j - 1];
            if (l->ts) l->ts[j] = l->ts[j - 1];
            j--;
        }
        l->nbr[j] = nb;
        l->eid[j] = id;
        if (l->ts) l->ts[j] = bits;
    }
}

static void ID_FN(sift_down)(const struct ID_FN(list3) *l, int64_t lo, int64_t root,
                             int64_t n)
{
    for (;;) {
        int64_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && ID_FN(before)(l, lo + child, lo + child + 1)) child++;
        if (!ID_FN(before)(l, lo + root, lo + child)) return;
        ID_FN(swap3)(l, lo + root, lo + child);
        root = child;
    }
}

static void ID_FN(heapsort3)(const struct ID_FN(list3) *l, int64_t lo, int64_t hi)
{
    int64_t n = hi - lo;
    for (int64_t i = n / 2 - 1; i >= 0; i--) ID_FN(sift_down)(l, lo, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        ID_FN(swap3)(l, lo, lo + end);
        ID_FN(sift_down)(l, lo, 0, end);
    }
}

static void ID_FN(introsort)(const struct ID_FN(list3) *l, int64_t lo, int64_t hi,
                             int depth)
{
    while (hi - lo > 24) {
        if (depth-- == 0) {
            ID_FN(heapsort3)(l, lo, hi);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three to lo */
        if (ID_FN(before)(l, mid, lo)) ID_FN(swap3)(l, mid, lo);
        if (ID_FN(before)(l, last, lo)) ID_FN(swap3)(l, last, lo);
        if (ID_FN(before)(l, last, mid)) ID_FN(swap3)(l, last, mid);
        ID_FN(swap3)(l, lo, mid); /* pivot (the median) at lo */
        int64_t i = lo + 1, j = hi - 1;
        for (;;) { /* Hoare partition around l[lo] */
            while (i <= j && ID_FN(before)(l, i, lo)) i++;
            while (i <= j && ID_FN(before)(l, lo, j)) j--;
            if (i >= j) break;
            ID_FN(swap3)(l, i, j);
            i++;
            j--;
        }
        ID_FN(swap3)(l, lo, j);
        /* recurse into the smaller side, loop over the larger */
        if (j - lo < hi - j - 1) {
            ID_FN(introsort)(l, lo, j, depth);
            lo = j + 1;
        } else {
            ID_FN(introsort)(l, j + 1, hi, depth);
            hi = j;
        }
    }
    ID_FN(insertion)(l, lo, hi);
}

/* sort rows [lo, hi) of l, unless already in order */
static void ID_FN(sort_rows)(const struct ID_FN(list3) *l, int64_t lo, int64_t hi)
{
    int64_t i;
    for (i = lo + 1; i < hi && !ID_FN(before)(l, i, i - 1); i++) {
    }
    if (i >= hi) return; /* already in order */
    int depth = 0;
    for (int64_t m = hi - lo; m > 1; m >>= 1) depth += 2;
    ID_FN(introsort)(l, lo, hi, depth);
}

/* sort every list of nodes [node_lo, node_hi) (the range is checked by the caller) by
 * (ts, eid), ts of `type`; with a neighbour-time table (ts NULL, nbr_time non-NULL: times
 * of `type` in nbr_time_bytes each) by (nbr_time[nbr], eid), each list's time keys
 * gathered into scratch first (the caller checked every neighbour against the table and
 * the scratch against the longest list) */
static void ID_FN(sort)(int64_t node_lo, int64_t node_hi, const int64_t *indptr, ID_T *nbr,
                        int64_t *ts, ID_T *eid, int type, const void *nbr_time,
                        int nbr_time_bytes, int64_t *scratch)
{
    int64_t base = indptr[node_lo];
    struct ID_FN(list3) l = {nbr, eid, ts, type};
    for (int64_t v = node_lo; v < node_hi; v++) {
        int64_t lo = indptr[v] - base, hi = indptr[v + 1] - base;
        if (!nbr_time) {
            ID_FN(sort_rows)(&l, lo, hi);
            continue;
        }
        for (int64_t k = lo; k < hi; k++)
            scratch[k - lo] = table_key(nbr_time, nbr_time_bytes == 4 ? 4 : 8, type, nbr[k]);
        struct ID_FN(list3) one = {nbr + lo, eid + lo, scratch, DDS_TIME_I64};
        ID_FN(sort_rows)(&one, 0, hi - lo);
    }
}

/* the first local row in [0, rows) whose neighbour is outside [0, len), or -1 */
static int64_t ID_FN(nbr_outside)(const ID_T *nbr, int64_t rows, int64_t len)
{
    for (int64_t i = 0; i < rows; i++)
        if (nbr[i] < 0 || (int64_t)nbr[i] >= len) return i;
    return -1;
}
