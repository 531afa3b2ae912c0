/*
 * dynamic.c - one step of a dynamic graph (ddstore.dynamic.DynamicGraph): apply an edge
 * delta to a snapshot kept as sorted int64 keys (dst << bits | src), in one linear merge
 * that also writes the edge_index rows.  See dds_dynamic.h for the contract.
 *
 * Every output write is checked against `cap` first: a corrupt delta (a removed key the
 * snapshot lacks, an added key it already has) makes the result longer than the caller
 * planned, and is reported instead of written past the end.
 */
#include "internal.h"

/* the position in rm[0, nr) of the first key not in keys[0, n) (both sorted), or -1 */
static int64_t first_missing(const int64_t *keys, int64_t n, const int64_t *rm, int64_t nr)
{
    int64_t i = 0;
    for (int64_t r = 0; r < nr; r++) {
        while (i < n && keys[i] < rm[r]) i++;
        if (i == n || keys[i] != rm[r]) return r;
    }
    return -1;
}

int dds_apply_delta(const int64_t *keys, const float *w, int64_t n, const int64_t *rm,
                    int64_t nr, const int64_t *add, const float *add_w, int64_t na,
                    const int64_t *chg, const float *chg_w, int64_t nc, int bits,
                    int64_t cap, int64_t *out_keys, float *out_w, int64_t *src,
                    int64_t *dst, int64_t *out_n)
{
    int64_t i = 0, r = 0, a = 0, o = 0, c = 0;
    *out_n = 0;
    /* the shift is checked before it is made: 1 << bits is undefined past 62 here */
    if (bits < 1 || bits > 62)
        return dds_set_error(DDS_EINVAL, "apply_delta: bits=%d out of range [1, 62]", bits);
    if (n < 0 || nr < 0 || na < 0 || nc < 0 || cap < 0)
        return dds_set_error(DDS_EINVAL, "apply_delta: n=%lld, nr=%lld, na=%lld, nc=%lld "
                             "and cap=%lld must be >= 0", (long long)n, (long long)nr,
                             (long long)na, (long long)nc, (long long)cap);
    if ((n && !keys) || (nr && !rm) || (na && !add) || (nc && (!chg || !chg_w)) ||
        (cap && !out_keys) || (src && !dst) || (!src && dst))
        return dds_set_error(DDS_EINVAL, "apply_delta: an array of nonzero length is "
                             "NULL (or only one of src, dst given)");
    int64_t size; /* n - nr + na: the result of a valid delta */
    if (__builtin_add_overflow(n, na, &size) || (size -= nr) < 0)
        return dds_set_error(DDS_EINVAL, "apply_delta: removing %lld keys from %lld plus "
                             "%lld added is not a valid delta", (long long)nr,
                             (long long)n, (long long)na);
    if (size > cap)
        return dds_set_error(DDS_EINVAL, "apply_delta: outputs of capacity %lld cannot "
                             "hold the %lld keys of the result", (long long)cap,
                             (long long)size);
    const int64_t mask = ((int64_t)1 << bits) - 1;
    while (i < n || a < na) {
        int64_t key;
        float weight = 0.0f;
        if (a < na && (i >= n || add[a] < keys[i])) {
            key = add[a];
            if (add_w) weight = add_w[a];
            a++;
        } else {
            key = keys[i];
            if (a < na && add[a] == key)
                return dds_set_error(DDS_EINVAL, "apply_delta: added key %lld (position "
                                     "%lld) is already in the snapshot", (long long)key,
                                     (long long)a);
            if (r < nr && rm[r] == key) { /* removed */
                r++;
                i++;
                continue;
            }
            if (r < nr && rm[r] < key)
                return dds_set_error(DDS_EINVAL, "apply_delta: removed key %lld (position "
                                     "%lld) is not in the snapshot", (long long)rm[r],
                                     (long long)r);
            if (w) weight = w[i];
            i++;
        }
        if (o >= cap) { /* more kept keys than planned: a removed key the snapshot lacks */
            int64_t miss = first_missing(keys + i, n - i, rm + r, nr - r);
            if (miss >= 0)
                return dds_set_error(DDS_EINVAL, "apply_delta: removed key %lld (position "
                                     "%lld) is not in the snapshot", (long long)rm[r + miss],
                                     (long long)(r + miss));
            return dds_set_error(DDS_EINVAL, "apply_delta: the result has more than "
                                 "cap=%lld keys (snapshot %lld, removed %lld, added %lld): "
                                 "the inputs are not sorted and unique", (long long)cap,
                                 (long long)n, (long long)nr, (long long)na);
        }
        while (c < nc && chg[c] < key) c++;
        if (c < nc && chg[c] == key) weight = chg_w[c++];
        out_keys[o] = key;
        if (out_w) out_w[o] = weight;
        if (src) {
            src[o] = key & mask;
            dst[o] = key >> bits;
        }
        o++;
    }
    if (r != nr)
        return dds_set_error(DDS_EINVAL, "apply_delta: removed key %lld (position %lld) "
                             "is not in the snapshot", (long long)rm[r], (long long)r);
    *out_n = o;
    return DDS_OK;
}
