/*
 * sampling.h - the small pieces the samplers over the store share (csrc/temporal.c,
 * csrc/neighbor.c): the counter-based random stream and a uniform integer from a random
 * word, and the node and edge ids of a list stored as int32 or int64 (the group member
 * holding a node's list is dds_member_of, internal.h).  Internal, not for bindings;
 * include after internal.h.
 */
#ifndef DDSTORE_SAMPLING_H
#define DDSTORE_SAMPLING_H

#include <stdint.h>

/* SplitMix64's output function: a well-mixed 64-bit word from a counter */
static inline uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* uniform integer in [0, n) from a 64-bit random word (multiply-shift) */
static inline int64_t below(uint64_t r, int64_t n)
{
    return (int64_t)(((unsigned __int128)r * (uint64_t)n) >> 64);
}

/* the width of the ids of variable `var` (its row bytes: 4, int32, or 8, int64), for
 * the sampler `who` (its error messages) */
static inline int sample_id_bytes(dds_store *s, int var, const char *who,
                                  const char *what, int *bytes)
{
    int64_t rb = 0;
    int rc = dds_row_bytes(s, var, &rb);
    if (rc != DDS_OK) return rc;
    if (rb != 4 && rb != 8)
        return dds_set_error(DDS_EINVAL, "%s: the %s variable has rows of %lld bytes, not "
                             "int32 or int64 ids", who, what, (long long)rb);
    *bytes = (int)rb;
    return DDS_OK;
}

/* id i of a list of ids of `bytes` (4 or 8) bytes each, as int64 (ids are >= 0) */
static inline int64_t id_at(const void *ids, int bytes, int64_t i)
{
    return bytes == 8 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

#endif /* DDSTORE_SAMPLING_H */
