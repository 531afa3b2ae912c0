/*
 * dynamic.c - one step of a dynamic graph (ddstore.spatiotemporal.DynamicGraph): apply an
 * edge delta to a snapshot kept as sorted int64 keys (dst << bits | src), in one linear
 * merge that also writes the edge_index rows.  See ddstore.h for the contract.
 */
#include "ddstore.h"

int dds_apply_delta(const int64_t *keys, const float *w, int64_t n, const int64_t *rm,
                    int64_t nr, const int64_t *add, const float *add_w, int64_t na,
                    const int64_t *chg, const float *chg_w, int64_t nc, int bits,
                    int64_t *out_keys, float *out_w, int64_t *src, int64_t *dst,
                    int64_t *out_n)
{
    int64_t i = 0, r = 0, a = 0, o = 0, c = 0;
    /* the shift is checked before it is made: 1 << bits is undefined past 62 here */
    if (bits < 1 || bits > 62 || n < 0 || nr < 0 || na < 0 || nc < 0) return DDS_EINVAL;
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
            if (a < na && add[a] == key) return DDS_EINVAL; /* added twice */
            if (r < nr && rm[r] == key) { /* removed */
                r++;
                i++;
                continue;
            }
            if (r < nr && rm[r] < key) return DDS_EINVAL; /* removing a missing edge */
            if (w) weight = w[i];
            i++;
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
    if (r != nr) return DDS_EINVAL;
    *out_n = o;
    return DDS_OK;
}
