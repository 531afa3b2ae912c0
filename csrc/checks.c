/*
 * checks.c - checks of a user's input at memory speed (see dds_checks.h).  Local: no MPI,
 * no store.
 *
 * dds_fingerprint is XXH64: four independent lanes of 64-bit multiply-rotate rounds over
 * 32-byte stripes (so the loop is bound by memory, not by one chain of
 * multiplications), then the tail and a final avalanche, as the xxHash specification
 * writes them.  dds_mark_ids is one pass of bit tests (and sets) over the ids.
 */
#include "internal.h"

#include <string.h>

#define P1 11400714785074694791ULL
#define P2 14029467366897019727ULL
#define P3 1609587929392839161ULL
#define P4 9650029242287828579ULL
#define P5 2870177450012600261ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);  /* unaligned-safe; one load */
    return v;
}

static inline uint32_t read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t input)
{
    acc += input * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}

static inline uint64_t merge64(uint64_t acc, uint64_t val)
{
    acc ^= round64(0, val);
    return acc * P1 + P4;
}

int dds_fingerprint(const void *data, int64_t nbytes, uint64_t seed, uint64_t *out)
{
    if (nbytes < 0 || (nbytes > 0 && data == NULL))
        return dds_set_error(DDS_EINVAL, "fingerprint: nbytes=%lld must be >= 0 (and the "
                             "data given)", (long long)nbytes);
    const unsigned char *p = (const unsigned char *)data;
    const unsigned char *end = p + nbytes;
    uint64_t h;
    if (nbytes >= 32) {
        const unsigned char *limit = end - 32;
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        do {
            v1 = round64(v1, read64(p));
            v2 = round64(v2, read64(p + 8));
            v3 = round64(v3, read64(p + 16));
            v4 = round64(v4, read64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = merge64(h, v1);
        h = merge64(h, v2);
        h = merge64(h, v3);
        h = merge64(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)nbytes;
    for (; p + 8 <= end; p += 8) {
        h ^= round64(0, read64(p));
        h = rotl64(h, 27) * P1 + P4;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)read32(p) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl64(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    *out = h;
    return DDS_OK;
}

int dds_mark_ids(uint64_t *bits, int64_t nbits, const int64_t *ids, int64_t n, int mark,
                 int64_t *first)
{
    *first = -1;
    if (nbits < 0 || n < 0 || (n > 0 && (ids == NULL || bits == NULL)))
        return dds_set_error(DDS_EINVAL, "mark_ids: nbits=%lld and n=%lld must be >= 0 "
                             "(and the arrays given)", (long long)nbits, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ids[i];
        if (v < 0 || v >= nbits)
            return dds_set_error(DDS_ERANGE, "mark_ids: id %lld at position %lld is "
                                 "outside [0, %lld)", (long long)v, (long long)i,
                                 (long long)nbits);
        uint64_t bit = (uint64_t)1 << (v & 63), *word = &bits[v >> 6];
        if (*word & bit) {
            *first = i;
            return DDS_OK;
        }
        if (mark) *word |= bit;
    }
    return DDS_OK;
}
