/*
 * sampling.h - the small pieces the samplers over the store share (csrc/temporal.c,
 * csrc/neighbor.c): the counter-based random stream and a uniform integer from a random
 * word (the group member holding a node's list is dds_member_of, internal.h).
 * Internal, not for bindings.
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

#endif /* DDSTORE_SAMPLING_H */
