/*
 * sampling.h - the small pieces the samplers over the store share (csrc/temporal.c,
 * csrc/neighbor.c): the counter-based random stream, a uniform integer from a random
 * word, and the group member holding a node's list.  Internal, not for bindings.
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

/* the member g with node_offsets[g] <= v < node_offsets[g + 1] (the last such g when
 * members hold no nodes) */
static inline int owner_of_node(const int64_t *node_offsets, int width, int64_t v)
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

#endif /* DDSTORE_SAMPLING_H */
