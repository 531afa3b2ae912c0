/*
 * sampling.h - the one internal unit of the samplers over the store (csrc/neighbor.c:
 * the PyG sampler, weighted and induced; csrc/temporal.c: the temporal sampler) and of
 * the T-CSR build's id handling (csrc/tcsr.c).  Each piece is written here once:
 *
 * - ids: node and edge ids are stored as int32 or int64 (each variable's row bytes say
 *   which) and handled one way, by a width passed at run time (4 or 8): id_at / id_put
 *   per entry, copy_ids / gather_ids per list (the branch taken once per list);
 * - the random stream: one counter-based generator (SplitMix64's output function of a
 *   key plus a multiple of the golden ratio), uniform integers and doubles from it;
 * - argument checks that both samplers make (the store, the time type, every node and
 *   its time);
 * - member views: where this rank reads each group member's chunks of a set of
 *   variables by plain loads;
 * - one open-addressing table of int64 keys and values (a set, a map, with generations);
 * - the relabelling map (csrc/relabel.c): global ids to a batch's positions;
 * - the remote picks of a batch: pieces of rows of other members' lists (consecutive
 *   picks merged into runs), read and scattered to output slots;
 * - remote cuts: whether a list of another member is read or searched where it lies
 *   (one rule), and the search in step of all such lists of a call;
 * - sample_read: the one function through which every remote read of a batch goes
 *   (lists, picks, probes), for one variable or several over the same ranges.
 *
 * Internal, not for bindings (nothing here is exported); include after internal.h.
 * Hot helpers are static inline here, the rest is in csrc/sampling.c.
 */
#ifndef DDSTORE_SAMPLING_H
#define DDSTORE_SAMPLING_H

#include <stdint.h>
#include <string.h>

#define SAMPLING_HIDDEN __attribute__((visibility("hidden")))

/* ------------------------------------------------------------------ ids */

/* the width of the ids of variable `var` (its row bytes: 4, int32, or 8, int64), for
 * the sampler `who` (its error messages) */
int sample_id_bytes(dds_store *s, int var, const char *who, const char *what, int *bytes)
    SAMPLING_HIDDEN;

/* id i of a list of ids of `bytes` (4 or 8) bytes each, as int64 (ids are >= 0) */
static inline int64_t id_at(const void *ids, int bytes, int64_t i)
{
    return bytes == 8 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

/* ids[i] = v, in `bytes` (4 or 8); v must fit (id_fits) */
static inline void id_put(void *ids, int bytes, int64_t i, int64_t v)
{
    if (bytes == 8) ((int64_t *)ids)[i] = v;
    else ((int32_t *)ids)[i] = (int32_t)v;
}

/* whether v is an id of `bytes` (4 or 8) bytes */
static inline int id_fits(int bytes, int64_t v)
{
    return bytes == 8 || (int32_t)v == v;
}

/* swap ids a and b of a list of `bytes` (4 or 8) each */
static inline void id_swap(void *ids, int bytes, int64_t a, int64_t b)
{
    if (bytes == 8) {
        int64_t *x = ids, t = x[a];
        x[a] = x[b];
        x[b] = t;
    } else {
        int32_t *x = ids, t = x[a];
        x[a] = x[b];
        x[b] = t;
    }
}

/* n int32 ids to int64.  Ids are >= 0, so they are read as uint32 and zero-extended,
 * four at a time: compilers turn that into a few vector instructions even at -O2, and
 * copying long lists then costs about what memcpy of int64 ids does. */
static inline void widen_ids(int64_t *out, const uint32_t *a, int64_t n)
{
    int64_t q = 0;
    for (; q + 4 <= n; q += 4) {
        out[q] = a[q];
        out[q + 1] = a[q + 1];
        out[q + 2] = a[q + 2];
        out[q + 3] = a[q + 3];
    }
    for (; q < n; q++) out[q] = a[q];
}

/* n ids of `bytes` (4 or 8) bytes each, to int64 (8: any 8-byte values, as bits) */
static inline void copy_ids(int64_t *out, const void *ids, int bytes, int64_t n)
{
    if (bytes == 8) memcpy(out, ids, sizeof(int64_t) * (size_t)n);
    else widen_ids(out, ids, n);
}

/* out[q] = ids[pos[q]] as int64, for q < n */
static inline void gather_ids(int64_t *out, const void *ids, int bytes, const int64_t *pos,
                              int64_t n)
{
    if (bytes == 8) {
        const int64_t *a = ids;
        for (int64_t q = 0; q < n; q++) out[q] = a[pos[q]];
    } else {
        const int32_t *a = ids;
        for (int64_t q = 0; q < n; q++) out[q] = a[pos[q]];
    }
}

/* ------------------------------------------------------------------ the random stream
 * Every draw of both samplers comes from one counter-based stream: a key (from the
 * call's seed and the list's position, so that the draws of a list depend on nothing
 * else) and words 1, 2, ... of it, word q being splitmix64(key + q * golden ratio). */

#define STREAM_GOLDEN 0x9E3779B97F4A7C15ULL

/* SplitMix64's output function: a well-mixed 64-bit word from a counter */
static inline uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + STREAM_GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

struct stream {
    uint64_t key, at; /* at: the last word taken by stream_next */
};

/* the word splitmix64(base ^ salt): a base mixed with a salt (an epoch, a layer) */
static inline uint64_t stream_mix(uint64_t base, uint64_t salt)
{
    return splitmix64(base ^ salt);
}

/* the stream of item `id` (a list's position) under the call's base */
static inline struct stream stream_of(uint64_t base, uint64_t id)
{
    return (struct stream){stream_mix(base, splitmix64(id)), 0};
}

/* a second stream of the same item, told apart by `salt` */
static inline struct stream stream_fork(struct stream st, uint64_t salt)
{
    return (struct stream){stream_mix(st.key, salt), 0};
}

/* word q (q >= 1) of the stream */
static inline uint64_t stream_word(const struct stream *st, uint64_t q)
{
    return splitmix64(st->key + q * STREAM_GOLDEN);
}

/* the next word of the stream (words 1, 2, ...) */
static inline uint64_t stream_next(struct stream *st)
{
    return stream_word(st, ++st->at);
}

/* uniform integer in [0, n) from a 64-bit random word (multiply-shift) */
static inline int64_t below(uint64_t r, int64_t n)
{
    return (int64_t)(((unsigned __int128)r * (uint64_t)n) >> 64);
}

/* a uniform double in [0, 1) from a random word */
static inline double unit_closed(uint64_t r)
{
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

/* a uniform double in (0, 1) from a random word (never 0 or 1) */
static inline double unit_open(uint64_t r)
{
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------ argument checks */

/* the checks every sampler makes first, as sampler `who`: the store is alive and
 * g->time_type a dds_time_type */
int sample_check_graph(dds_store *s, const dds_tcsr *g, const char *who) SAMPLING_HIDDEN;

/* every one of the n nodes in [0, g->num_nodes) (DDS_ERANGE naming it as `node`) and,
 * when times are given, its time not NaN (DDS_EINVAL naming it as `time`) */
int sample_check_nodes(const dds_tcsr *g, const int64_t *nodes, const void *times,
                       int64_t n, const char *who, const char *node, const char *time)
    SAMPLING_HIDDEN;

/* DDS_ENOMEM "<who>: out of memory" */
int sample_no_memory(const char *who) SAMPLING_HIDDEN;

/* ------------------------------------------------------------------ member views
 * Where this rank reads each group member's lists by plain loads: chunk[m * nvars + v]
 * is member m's chunk of variable vars[v], all of them NULL unless every one is
 * readable by load (its own chunk, a node-local peer's in shared memory); first[m] is
 * the global row of the chunks' first entry (the T-CSR's variables share their rows). */
#define SAMPLE_MAX_VARS 4

struct members {
    int width, nvars;
    const char **chunk;
    int64_t *first;
};

/* open the views of the `nvars` (<= SAMPLE_MAX_VARS) variables `vars` of g */
int members_open(struct members *mv, dds_store *s, const dds_tcsr *g, const int *vars,
                 int nvars, const char *who) SAMPLING_HIDDEN;
void members_close(struct members *mv) SAMPLING_HIDDEN;

/* member m's chunk of variable v (an index into the vars opened), or NULL */
static inline const char *member_chunk(const struct members *mv, int m, int v)
{
    return mv->chunk[m * mv->nvars + v];
}

/* the group member holding node v's list */
static inline int member_of_node(const dds_tcsr *g, const struct members *mv, int64_t v)
{
    return dds_member_of(g->node_offsets, mv->width, v);
}

/* ------------------------------------------------------------------ the table
 * Open addressing over slots of two int64, (key, value), a power of two of them.  A slot
 * is in use when its value is >= the caller's `base`: older values, and -1 in a new
 * table, count as empty, so a caller starts a new generation without clearing the
 * table by raising base above every value in it.  Keys are >= 0.  With base 0 and
 * values >= 0 it is a plain map (or set). */
struct table {
    int64_t *slot; /* 2 * (mask + 1) */
    uint64_t mask;
};

/* a table for at most `live` keys in use at once (16 slots or more, at least 2 per
 * key), every slot empty (value -1) */
int table_open(struct table *t, int64_t live, const char *who) SAMPLING_HIDDEN;
void table_close(struct table *t) SAMPLING_HIDDEN;

/* the slot of `key` among the slots in use (value >= base), or the empty slot where it
 * would go */
static inline uint64_t table_find(const int64_t *slot, uint64_t mask, int64_t base,
                                  int64_t key)
{
    uint64_t h = splitmix64((uint64_t)key) & mask;
    while (slot[2 * h + 1] >= base && slot[2 * h] != key) h = (h + 1) & mask;
    return h;
}

/* the value of key in use (>= base) in t, or -1 when absent */
static inline int64_t table_get(const struct table *t, int64_t base, int64_t key)
{
    int64_t v = t->slot[2 * table_find(t->slot, t->mask, base, key) + 1];
    return v >= base ? v : -1;
}

/* key's value in t when in use (>= base), else key is added with `value` (>= base);
 * returns whether it was added */
static inline int table_add(struct table *t, int64_t base, int64_t key, int64_t value,
                            int64_t *out)
{
    uint64_t h = table_find(t->slot, t->mask, base, key);
    if (t->slot[2 * h + 1] >= base) {
        *out = t->slot[2 * h + 1];
        return 0;
    }
    t->slot[2 * h] = key;
    t->slot[2 * h + 1] = *out = value;
    return 1;
}

/* ------------------------------------------------------------------ the relabelling
 * The one relabelling of the samplers (csrc/relabel.c; the C API's dds_relabel is this
 * struct): a batch's node list, keys (node, subgraph) (subgraph 0 unless disjoint) to
 * the position of their first occurrence, through a dense array or a hash picked by
 * one rule (see relabel.c and dds_neighbor.h). */
struct dds_relabel {
    int64_t num_nodes, subgraphs; /* this batch's key space (subgraphs 0: not disjoint) */
    int64_t count, held;          /* positions given; room in nodes / subs */
    int64_t *nodes, *subs;        /* the batch's node list (subs: disjoint only) */
    int32_t *dense_pos;           /* dense: position + 1 by key (0: none), else NULL */
    int32_t *dense_all;           /* the dense array kept between batches */
    int64_t dense_len;
    int64_t *slot;                /* hash: (node, sub, base + position) per slot */
    uint64_t mask;
    int64_t base, used;           /* the generation's values are >= base; its keys */
};

/* start a batch over nodes [0, num_nodes) (and subgraphs [0, subgraphs) when > 0),
 * about `expected` keys (0: unknown); the map then is dense when the key space holds
 * at most max(dense_max, 16 * expected) keys (and below 2^31), else hashed */
int relabel_begin(struct dds_relabel *m, int64_t num_nodes, int64_t subgraphs,
                  int64_t expected, int64_t dense_max) SAMPLING_HIDDEN;
/* forget the batch (the dense entries set back to 0, the hash's generation ended) */
void relabel_reset(struct dds_relabel *m) SAMPLING_HIDDEN;
/* free the map's memory (an embedded map) */
void relabel_release(struct dds_relabel *m) SAMPLING_HIDDEN;
/* every key in the key space, and `subs` given exactly when disjoint (DDS_EINVAL) */
int relabel_check(const struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                  int64_t n) SAMPLING_HIDDEN;
/* append the n keys to the node list as given (repeats too), each new key mapped to
 * its first position */
int relabel_seed(struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                 int64_t n) SAMPLING_HIDDEN;
/* pos[i] = the position of key i, new keys appended (and to new_nodes / new_sub, of
 * capacity n; new_sub NULL unless disjoint), *n_new of them.  pos may be nodes and
 * new_sub subs (each key is read before anything is written at or before it).  Keys
 * checked first (relabel_check). */
int relabel_map(struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                int64_t n, int64_t *pos, int64_t *new_nodes, int64_t *new_sub,
                int64_t *n_new) SAMPLING_HIDDEN;
/* the position of a key of the key space, or -1 */
int64_t relabel_find(const struct dds_relabel *m, int64_t node, int64_t sub)
    SAMPLING_HIDDEN;

/* ------------------------------------------------------------------ remote picks
 * The rows a batch takes from lists of members this rank does not read by load, as
 * pieces: piece p is the global rows [start[p], start[p] + count[p]) of the lists'
 * variables, going to the outputs from slot slot[p] on: the whole piece, or with
 * take[p] >= 0 only take[p] rows of it, at take[p] positions in the piece that P holds
 * itself (pos: the scattered picks of one list, read as the span that holds them; the
 * positions of the pieces in piece order, npos of them).  `rows` is the pieces' rows in
 * all (saturated at INT64_MAX: refused by picks_read); `cap` the pieces and the
 * positions P has room for. */
struct picks {
    int64_t n, rows, npos, cap;
    int64_t *start, *count, *slot, *take, *pos;
};

/* room for `most` pieces and `most` positions */
int picks_open(struct picks *P, int64_t most, const char *who) SAMPLING_HIDDEN;
/* room for `more` pieces after the n held (grown, doubling, when short) */
int picks_reserve(struct picks *P, int64_t more, const char *who) SAMPLING_HIDDEN;
void picks_close(struct picks *P) SAMPLING_HIDDEN;

/* where the positions of the next scattered piece are written (room for cap - npos of
 * them): a list's draws may be written here first, whether or not they become a piece
 * (picks_piece with take >= 0 keeps them; anything else leaves them unkept) */
static inline int64_t *picks_positions(struct picks *P)
{
    return P->pos + P->npos;
}

/* a piece of `count` rows from global row `start` to the outputs from `slot` on (take
 * -1: all of them; else the take rows at the positions just written at
 * picks_positions(P), kept by this call) */
static inline void picks_piece(struct picks *P, int64_t slot, int64_t start, int64_t count,
                               int64_t take)
{
    P->slot[P->n] = slot;
    P->start[P->n] = start;
    P->count[P->n] = count;
    P->take[P->n++] = take;
    if (take > 0) P->npos += take;
    if (__builtin_add_overflow(P->rows, count, &P->rows)) P->rows = INT64_MAX;
}

/* global row `row` to output slot `slot`: merged into the last piece when it continues
 * it in both (runs of consecutive rows to consecutive slots) */
static inline void picks_row(struct picks *P, int64_t slot, int64_t row)
{
    int64_t p = P->n - 1;
    if (P->n && P->take[p] < 0 && P->slot[p] + P->count[p] == slot &&
        P->start[p] + P->count[p] == row) {
        P->count[p]++;
        P->rows++;  /* <= the slots: no overflow */
    } else {
        picks_piece(P, slot, row, 1, -1);
    }
}

/* Read the pieces of P from the `nvars` variables `vars` (rows of bytes[v], 4 or 8,
 * each) by one sample_read and write each piece to outs[v] from its slot on, as int64
 * (4-byte rows widened; 8-byte rows copied as they are): whole, or its take[p] picks
 * at its positions.  Nothing when P has no piece. */
int picks_read(dds_store *s, const struct picks *P, int nvars, const int *vars,
               const int *bytes, int64_t *const *outs, const char *who) SAMPLING_HIDDEN;

/* ------------------------------------------------------------------ remote cuts
 * The one way both samplers cut a list of another member by time: read first (the
 * temporal sampler fetches it whole, times and ids, 16-24 bytes an entry; the
 * neighbour sampler reads its times, or node-level its neighbour ids, in pieces) and
 * searched in memory, or searched where it lies.  One rule decides, in two steps.  A
 * list is long when it holds more than `whole` entries (dds_tcsr.fetch_whole_max, else
 * the sampler's default) and more than `whole` times half the lists of the call asking
 * for it (sample_long_list); short lists are read.  The long lists of a call are all
 * searched where they lie, or all read: searched when fetch_whole_max is set, else
 * when reading them would move more than SAMPLE_READ_BUDGET bytes (sample_search_long).
 * A search costs about log2(length) round trips, shared by every list searched in the
 * call, and a piece per list per round; a read costs its bytes.  Through MPICH's
 * network module (docs/benchmarks.md) reading lists was cheaper than searching them
 * up to about 1 MiB a call, whatever their length, and searching cheaper above; the
 * defaults of `whole` keep the pieces few: TEMPORAL_WHOLE_MAX (a power-law graph's
 * many hubs searched, not fetched), NEIGHBOR_WHOLE_MAX (lists of times read in
 * cache-sized pieces below it).
 * probe_cuts searches n such lists in step: each step one batched read (sample_read)
 * of the middle entry of every list still searching, or of every entry it has left
 * once PROBE_TAIL or fewer are (the search ends in memory), so about log2(longest /
 * PROBE_TAIL) + 1 steps whatever n, with the midpoints of the searches in memory
 * (times.h): the same cuts.  List q is the len[q] rows of variable pl->var from global
 * CSC row start[q]; its entries' times are that variable's rows (8 bytes each,
 * node_time NULL) or, node-level, the times node_time[id] of the neighbour ids it holds
 * (id_bytes each; node_time_len times of time_bytes: table_key), an id outside them
 * stopping its list's search (*bad = the first such id met, else -1: the caller
 * refuses it).  cut[q] = the entries whose time key is < key[q] (inclusive 0) or <=
 * key[q] (inclusive 1). */
#define TEMPORAL_WHOLE_MAX 2048
#define NEIGHBOR_WHOLE_MAX 65536
#define SAMPLE_ASKING_PER_WHOLE 2
#define SAMPLE_READ_BUDGET (1 << 20)
/* a search reads the entries it has left at once when they are this many or fewer:
 * 2 KiB of 8-byte entries, about a piece's cost, in one round trip instead of 8
 * (through MPICH's network module a searched call took 0.72-0.84x the time) */
#define PROBE_TAIL 256

static inline int sample_long_list(const dds_tcsr *g, int64_t whole_default, int64_t deg,
                                   int64_t asking)
{
    int64_t whole = g->fetch_whole_max > 0 ? g->fetch_whole_max : whole_default, limit;
    if (__builtin_mul_overflow(whole, asking, &limit)) limit = INT64_MAX;
    return deg > whole && deg > limit / SAMPLE_ASKING_PER_WHOLE;
}

/* whether a call's long lists, `bytes` in all if read (saturated), are searched */
static inline int sample_search_long(const dds_tcsr *g, int64_t bytes)
{
    return g->fetch_whole_max > 0 || bytes > SAMPLE_READ_BUDGET;
}

/* *sum += deg * entry_bytes, saturated */
static inline void sample_add_bytes(int64_t *sum, int64_t deg, int64_t entry_bytes)
{
    int64_t b;
    if (__builtin_mul_overflow(deg, entry_bytes, &b) || __builtin_add_overflow(*sum, b, sum))
        *sum = INT64_MAX;
}

struct probe_lists {
    int var, id_bytes, type, inclusive;
    const void *node_time;  /* NULL: var holds the times */
    int time_bytes;
    int64_t node_time_len;
};

int probe_cuts(dds_store *s, const struct probe_lists *pl, const int64_t *start,
               const int64_t *len, const int64_t *key, int64_t n, int64_t *cut,
               int64_t *bad, const char *who) SAMPLING_HIDDEN;

/* ------------------------------------------------------------------ remote reads
 * The one function through which every read of a batch from other members goes: the n
 * ranges [starts[i], starts[i] + counts[i]) (counts NULL: one row each) of each of the
 * `nvars` variables vars[v] (1 to SAMPLE_MAX_VARS), packed in request order into
 * outs[v] of out_bytes[v] bytes, by one dds_read_many: every variable checked first
 * (the first failure returned, nothing read), then one round trip per owner for all. */
int sample_read(dds_store *s, int nvars, const int *vars, const int64_t *starts,
                const int64_t *counts, int64_t n, void *const *outs,
                const int64_t *out_bytes) SAMPLING_HIDDEN;

#endif /* DDSTORE_SAMPLING_H */
