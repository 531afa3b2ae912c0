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
 * placing and sorting are written once, in tcsr_lists.h, and instantiated per width.
 * No MPI and no allocation: every buffer is the caller's.
 */
#include "internal.h"
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

/* placing and sorting, once per id width (see tcsr_lists.h) */
#define ID_PASTE(a, b) a##b
#define ID_CAT(a, b) ID_PASTE(a, b)
#define ID_FN(name) ID_CAT(name, ID_SUFFIX)
#define ID_T int32_t
#define ID_SUFFIX _i32
#include "tcsr_lists.h"
#undef ID_T
#undef ID_SUFFIX
#define ID_T int64_t
#define ID_SUFFIX _i64
#include "tcsr_lists.h"
#undef ID_T
#undef ID_SUFFIX

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
        return place_i32(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows);
    if (id_bytes == 8)
        return place_i64(entries, n, node_lo, node_hi, indptr, fill, nbr, ts, eid, rows);
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
        int64_t bad = id_bytes == 4 ? nbr_outside_i32(nbr, used, nbr_time_len)
                                    : nbr_outside_i64(nbr, used, nbr_time_len);
        if (bad >= 0)
            return dds_set_error(DDS_ERANGE, "tcsr_sort: local row %lld has a neighbour "
                                 "outside the %lld neighbour times", (long long)bad,
                                 (long long)nbr_time_len);
    }
    if (id_bytes == 4)
        sort_i32(node_lo, node_hi, indptr, nbr, ts, eid, time_type, nbr_time,
                 nbr_time_bytes, scratch);
    else
        sort_i64(node_lo, node_hi, indptr, nbr, ts, eid, time_type, nbr_time,
                 nbr_time_bytes, scratch);
    return DDS_OK;
}
