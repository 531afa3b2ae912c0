/*
 * times.h - the one comparison of times of the T-CSR build (csrc/tcsr.c) and the
 * samplers (csrc/temporal.c, csrc/neighbor.c).  A time is 8 bytes, a double or an
 * int64 (enum dds_time_type, dds_tcsr.h), and is compared through its key: an int64
 * whose order is the times' order.  An int64 is its own key; a double's key is its
 * bits, with the bits below the sign flipped for negative values, so that every
 * non-NaN double (inf included) keeps its order and -0.0 has the key of +0.0.  So every
 * comparison is written once, over keys, for both types; times are moved as their 8
 * bytes, never converted.  The samplers' binary search, their hot loop, is the one
 * exception: it is instantiated per type from one template (SEARCH_AS) and compares
 * natively, in the same order as the keys.  Internal, not for bindings; include after
 * internal.h.
 */
#ifndef DDSTORE_TIMES_H
#define DDSTORE_TIMES_H

#include <stdint.h>
#include <string.h>

/* whether `type` is a dds_time_type */
static inline int time_type_ok(int type)
{
    return type == DDS_TIME_F64 || type == DDS_TIME_I64;
}

/* the key of the time whose 8 bytes are `bits` */
static inline int64_t time_key(int64_t bits, int type)
{
    if (type == DDS_TIME_I64) return bits;
    if (bits == INT64_MIN) return 0;            /* -0.0 == +0.0 */
    return bits < 0 ? bits ^ INT64_MAX : bits;  /* negative: larger magnitude, lower */
}

/* the 8 bytes of time i of `times` */
static inline int64_t time_bits(const void *times, int64_t i)
{
    int64_t b;
    memcpy(&b, (const char *)times + 8 * i, sizeof b);
    return b;
}

/* the key of time i of `times` */
static inline int64_t time_key_at(const void *times, int64_t i, int type)
{
    return time_key(time_bits(times, i), type);
}

/* whether the time of `bits` is NaN (doubles only) */
static inline int time_is_nan(int64_t bits, int type)
{
    double x;
    memcpy(&x, &bits, sizeof x);
    return type == DDS_TIME_F64 && x != x;
}

/* the key of entry i of a table of times of `type` in `bytes` each (dds_tcsr.nbr_time:
 * 4 bytes are a float or an int32, widened exactly; 8 a double or an int64) */
static inline int64_t table_key(const void *table, int bytes, int type, int64_t i)
{
    if (bytes == 8) return time_key_at(table, i, type);
    if (type == DDS_TIME_I64) return ((const int32_t *)table)[i];
    double x = (double)((const float *)table)[i];
    int64_t b;
    memcpy(&b, &x, sizeof b);
    return time_key(b, DDS_TIME_F64);
}

/* *key = the key of node v's time in a table of `len` times (table_key), or, for a v
 * outside the table, 0 returned and *bad = v when it holds none yet (the samplers'
 * node-level searches stop that list and refuse the id after) */
static inline int node_time_key(const void *table, int bytes, int type, int64_t len,
                                int64_t v, int64_t *key, int64_t *bad)
{
    if (v < 0 || v >= len) {
        if (*bad < 0) *bad = v;
        return 0;
    }
    *key = table_key(table, bytes, type, v);
    return 1;
}

/* SEARCH_AS(name, T): `name(times, n, t, inclusive)`, the number of leading entries of
 * times[0, n) (sorted, of type T) that come before t: those < t (`inclusive` 0) or
 * <= t (`inclusive` 1), compared natively as T (for doubles -0.0 == +0.0, the keys'
 * order): the samplers' hot search, instantiated once per time type below */
#define SEARCH_AS(name, T)                                                              \
    static inline int64_t name(const void *times, int64_t n, T t, int inclusive)         \
    {                                                                                    \
        int64_t lo = 0, hi = n;                                                          \
        while (lo < hi) {                                                                \
            int64_t mid = lo + (hi - lo) / 2;                                            \
            T x;                                                                         \
            memcpy(&x, (const char *)times + 8 * mid, sizeof x);                         \
            if (inclusive ? x <= t : x < t) lo = mid + 1;                                \
            else hi = mid;                                                               \
        }                                                                                \
        return lo;                                                                       \
    }
SEARCH_AS(search_f64, double)
SEARCH_AS(search_i64, int64_t)
#undef SEARCH_AS

/* the number of leading entries of times[0, n) (sorted, of `type`) that come before the
 * time whose 8 bytes are `t`: those earlier (`inclusive` 0: the temporal sampler's
 * strictly earlier times) or not later (`inclusive` 1: the PyG sampler's) */
static inline int64_t time_search(const void *times, int64_t n, int64_t t, int type,
                                  int inclusive)
{
    if (type == DDS_TIME_I64) return search_i64(times, n, t, inclusive);
    double x;
    memcpy(&x, &t, sizeof x);
    return search_f64(times, n, x, inclusive);
}

#endif /* DDSTORE_TIMES_H */
