/*
 * neighbor.c - one hop of PyG-style neighbour sampling over a CSC held in the store (see
 * dds_neighbor.h).
 *
 * The CSC has the shape of a T-CSR (dds_tcsr): nbr = source node, eid = edge id and an
 * optional ts = time, one row per edge, sorted by destination (then time); indptr and
 * node_offsets replicated.  A node's degree is known from indptr, so the positions to
 * take are chosen before anything is read; then the picked rows (whole ranges where the
 * picks are contiguous) are read by one batched read per variable (picks_read, through
 * sample_read: csrc/sampling.c): rows of this rank and of node-local members are copied
 * by plain loads, the others fetched one-sidedly in one access epoch.  With times,
 * the eligible prefix of each list is found by binary search: in place for lists
 * readable by load, in a copy of the list's times for the others, or where they lie
 * for the long ones when sampling.h's rule ("remote cuts") says so.  Whatever reads
 * other members' whole lists (times, weights, the induced path's sources) reads them in
 * pieces through one list_reader.  Node and edge ids
 * are stored as int32 or int64 (each variable's row bytes say which) and widened to the
 * int64 outputs while copied, with the width chosen once per list, not per entry.  The
 * argument checks, member views, hash tables, random stream, remote picks and reads are
 * those of the samplers' unit (sampling.h).
 * Times are the graph's time type (doubles or int64, dds_tcsr.time_type), compared as
 * numbers of that type (times.h: a search per type; keys for node-level time).
 */
#include "internal.h"
#include "sampling.h"
#include "times.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WHO "neighbour sample" /* the messages' prefix */

static int no_memory(void)
{
    return sample_no_memory(WHO);
}

static int check_args(dds_store *s, const dds_tcsr *g, const int64_t *nodes,
                      const void *node_ts, int64_t n, int64_t cap)
{
    int rc = sample_check_graph(s, g, WHO);
    if (rc != DDS_OK) return rc;
    if (n < 0 || cap < 0)
        return dds_set_error(DDS_EINVAL, "neighbour sample: n=%lld and cap=%lld must be "
                             ">= 0", (long long)n, (long long)cap);
    if (node_ts && g->ts_var < 0 && !g->nbr_time)
        return dds_set_error(DDS_EINVAL, "neighbour sample: times given but the graph "
                             "holds none");
    if (g->nbr_time && (g->nbr_time_len < 0 || (g->nbr_time_bytes != 0 &&
                                                 g->nbr_time_bytes != 4 &&
                                                 g->nbr_time_bytes != 8)))
        return dds_set_error(DDS_EINVAL, "neighbour sample: nbr_time_len=%lld must be "
                             ">= 0 and nbr_time_bytes=%d 4 or 8", (long long)g->nbr_time_len,
                             g->nbr_time_bytes);
    return sample_check_nodes(g, nodes, node_ts, n, WHO, "node", "time");
}

/* ------------------------------------------------------------------ lists in pieces
 * A reader of the lists of one variable (times, neighbour ids or weights) in node
 * order: list i is the len[i] rows from indptr[nodes[i]] on (none when len[i] <= 0).  A
 * list of a member this rank reads by load is returned in place.  The others are read
 * ahead, the remote lists from i on, in pieces of at most piece_entries entries (one
 * longer list: a piece of its own) and piece_lists lists, each piece by one batched
 * read (sample_read) into one buffer the reader reuses: no buffer of all of a call's
 * remote rows is allocated (and faulted in), and a piece's rows are used while the copy
 * that wrote them is in cache.  The caller asks for every list with len[i] > 0, in increasing i; a
 * list returned from a piece is valid until the next piece is read (reader_refills). */
#define PIECE_ENTRIES 32768 /* cache-sized pieces, for what is used as it is read */
#define PIECE_LISTS 1024

struct list_reader {
    dds_store *s;
    const dds_tcsr *g;
    int var;
    int64_t bytes, piece_entries, piece_lists, n;
    const int64_t *nodes, *len;
    struct members mv;  /* where var's chunks are read by load */
    int64_t held_end;   /* the remote lists before held_end have been read */
    int64_t at;         /* the byte offset in buf of the next remote list's rows */
    char *buf;
    int64_t buf_cap;    /* entries buf holds */
    int64_t *pstart, *pcount;  /* the piece's CSC ranges, piece_lists each */
};

static void reader_close(struct list_reader *r)
{
    members_close(&r->mv);
    free(r->buf);
    free(r->pstart);
    r->pstart = NULL;
    r->buf = NULL;
}

static int reader_open(struct list_reader *r, dds_store *s, const dds_tcsr *g, int var,
                       int64_t bytes, const int64_t *nodes, const int64_t *len, int64_t n,
                       int64_t piece_entries, int64_t piece_lists)
{
    int rc;
    if (piece_lists > n) piece_lists = n > 0 ? n : 1;
    *r = (struct list_reader){s, g, var, bytes, piece_entries, piece_lists, n,
                              nodes, len};
    rc = members_open(&r->mv, s, g, &var, 1, WHO);
    if (rc == DDS_OK && !(r->pstart = malloc(2 * sizeof(int64_t) * (size_t)piece_lists)))
        rc = no_memory();
    if (rc == DDS_OK) r->pcount = r->pstart + piece_lists;
    if (rc != DDS_OK) reader_close(r);
    return rc;
}

static inline int reader_remote(const struct list_reader *r, int64_t i)
{
    return r->len[i] > 0 &&
           !member_chunk(&r->mv, member_of_node(r->g, &r->mv, r->nodes[i]), 0);
}

/* whether reader_list(r, i) reads a new piece (the lists returned from the one held are
 * then no longer valid) */
static inline int reader_refills(const struct list_reader *r, int64_t i)
{
    return i >= r->held_end && reader_remote(r, i);
}

/* *rows = the rows of list i (len[i] > 0; i greater than at the previous call) */
static int reader_list(struct list_reader *r, int64_t i, const char **rows)
{
    int64_t v = r->nodes[i];
    int m = member_of_node(r->g, &r->mv, v);
    const char *chunk = member_chunk(&r->mv, m, 0);
    if (chunk) {
        *rows = chunk + r->bytes * (r->g->indptr[v] - r->mv.first[m]);
        return DDS_OK;
    }
    if (i >= r->held_end) {  /* the next piece: the remote lists from i on */
        int64_t np = 0, entries = 0, q = i;
        for (; q < r->n; q++) {
            if (!reader_remote(r, q)) continue;
            if (np && (np == r->piece_lists || entries + r->len[q] > r->piece_entries))
                break;
            r->pstart[np] = r->g->indptr[r->nodes[q]];
            r->pcount[np++] = r->len[q];
            entries += r->len[q];  /* <= the rows of the variable: no overflow */
        }
        r->held_end = q;
        if (entries > r->buf_cap) {
            free(r->buf);
            r->buf_cap = entries;
            if (!(r->buf = malloc((size_t)r->bytes * (size_t)entries))) {
                r->buf_cap = 0;
                return dds_set_error(DDS_ENOMEM, "neighbour sample: out of memory for a "
                                     "piece of %lld remote list entries",
                                     (long long)entries);
            }
        }
        void *out = r->buf;
        int64_t out_bytes = r->bytes * r->buf_cap;
        int rc = sample_read(r->s, 1, &r->var, r->pstart, r->pcount, np, &out, &out_bytes);
        if (rc != DDS_OK) return rc;
        r->at = 0;
    }
    *rows = r->buf + r->at;
    r->at += r->bytes * r->len[i];
    return DDS_OK;
}

/* The eligible prefixes of lists, searched as they are added.  A time per entry: each
 * list by a binary search of its times at once.  Node-level time: an entry's time is
 * node_time[its neighbour id], a dependent load per probe (the id, then its node's
 * time, a random line of an array of every node's time), so SEARCH_GROUP lists are
 * searched in lockstep: every step loads the middle ids of all of them and prefetches
 * their times before comparing any, overlapping the misses of SEARCH_GROUP searches.
 * `ids` must stay valid until search_flush (a remote piece's buffer: flushed before
 * it is reused). */
#define SEARCH_GROUP 16

struct searches {
    int node_level, id_bytes, type;  /* type: the times' dds_time_type */
    const void *node_time;   /* times of type in time_bytes (4 or 8) each */
    int time_bytes;
    int64_t num_nodes, bad;  /* bad: a neighbour id outside the node times, or -1 */
    int m;                   /* lists queued */
    const char *ids[SEARCH_GROUP];
    int64_t lo[SEARCH_GROUP], hi[SEARCH_GROUP], *out[SEARCH_GROUP];
    int64_t t[SEARCH_GROUP];  /* the query times' keys (node-level) */
};

/* *out[q] = the number of entries of queued list q whose time key is <= t[q] */
static void search_flush(struct searches *S)
{
    int64_t v[SEARCH_GROUP];
    int live = S->m;
    while (live) {
        live = 0;
        for (int q = 0; q < S->m; q++) {
            if (S->lo[q] >= S->hi[q]) continue;
            v[q] = id_at(S->ids[q], S->id_bytes, S->lo[q] + (S->hi[q] - S->lo[q]) / 2);
            if (v[q] >= 0 && v[q] < S->num_nodes)
                __builtin_prefetch((const char *)S->node_time + S->time_bytes * v[q]);
            live = 1;
        }
        for (int q = 0; q < S->m; q++) {
            if (S->lo[q] >= S->hi[q]) continue;
            int64_t mid = S->lo[q] + (S->hi[q] - S->lo[q]) / 2, k;
            if (!node_time_key(S->node_time, S->time_bytes, S->type, S->num_nodes, v[q],
                               &k, &S->bad))
                S->hi[q] = S->lo[q];  /* no time: stop (refused after) */
            else if (k <= S->t[q])
                S->lo[q] = mid + 1;
            else
                S->hi[q] = mid;
        }
    }
    for (int q = 0; q < S->m; q++) *S->out[q] = S->lo[q];
    S->m = 0;
}

/* the list of n entries at `at` (its times, or node-level its neighbour ids): *out =
 * its entries whose time is <= the time whose 8 bytes are t, now or by search_flush */
static void search_add(struct searches *S, const char *at, int64_t n, int64_t t,
                       int64_t *out)
{
    if (!S->node_level) {
        *out = time_search(at, n, t, S->type, 1);
        return;
    }
    int q = S->m++;
    S->ids[q] = at;
    S->lo[q] = 0;
    S->hi[q] = n;
    S->t[q] = time_key(t, S->type);
    S->out[q] = out;
    if (S->m == SEARCH_GROUP) search_flush(S);
}

/* whether the reader's list i (len[i] entries) is long (sample_long_list, each list
 * counted as asked for once: a hop's frontier nodes are distinct) and of another member */
static inline int long_remote(const dds_tcsr *g, const struct list_reader *r,
                              const int64_t *len, int64_t i)
{
    return len[i] > 0 && sample_long_list(g, NEIGHBOR_WHOLE_MAX, len[i], 1) &&
           reader_remote(r, i);
}

/* The long lists of other members that sample_search_long has searched where they lie:
 * list at[q] of plen[q] entries from CSC row start[q], its node's time key key[q]. */
struct lying {
    int64_t n, *at, *start, *plen, *key, *pcut;
};

/* L = the reader's long lists of other members, when sample_search_long says so; each
 * taken from the reader before it reads anything (cut[i], its len, set to 0) */
static int take_lying(const dds_tcsr *g, const struct searches *S, struct list_reader *r,
                      int64_t *cut, const void *node_ts, struct lying *L)
{
    int64_t np = 0, n = r->n, bytes = 0;
    *L = (struct lying){0};
    for (int64_t i = 0; i < n; i++)
        if (long_remote(g, r, cut, i)) {
            np++;
            sample_add_bytes(&bytes, cut[i], r->bytes);
        }
    if (!np || !sample_search_long(g, bytes)) return DDS_OK;
    size_t m = (size_t)np;
    if (!(L->at = malloc(5 * sizeof(int64_t) * m))) return no_memory();  /* m <= n */
    L->start = L->at + m;
    L->plen = L->start + m;
    L->key = L->plen + m;
    L->pcut = L->key + m;
    for (int64_t i = 0; i < n; i++) {
        if (!long_remote(g, r, cut, i)) continue;
        L->at[L->n] = i;
        L->start[L->n] = g->indptr[r->nodes[i]];
        L->plen[L->n] = cut[i];
        L->key[L->n++] = time_key(time_bits(node_ts, i), S->type);
        cut[i] = 0;
    }
    return DDS_OK;
}

/* cut[at[q]] = the cut of L's lists, searched where they lie (probe_cuts) */
static int cut_lying(dds_store *s, const struct searches *S, const struct list_reader *r,
                     const struct lying *L, int64_t *cut, int64_t *bad)
{
    struct probe_lists pl = {r->var, S->id_bytes, S->type, 1,
                             S->node_level ? S->node_time : NULL, S->time_bytes,
                             S->num_nodes};
    int rc = probe_cuts(s, &pl, L->start, L->plen, L->key, L->n, L->pcut, bad, WHO);
    for (int64_t q = 0; q < L->n && rc == DDS_OK; q++) cut[L->at[q]] = L->pcut[q];
    return rc;
}

/* cut[i] = eligible entries of node i: its degree, or with times (a time per entry in
 * g->ts_var, or node-level: g->nbr_time of each entry's neighbour) the entries whose time
 * is <= node_ts[i]; the lists of other members are searched where they lie when long
 * (take_lying, cut_lying), else read in pieces (list_reader) and searched in memory */
static int eligible(dds_store *s, const dds_tcsr *g, const int64_t *nodes,
                    const void *node_ts, int64_t n, int64_t *cut)
{
    for (int64_t i = 0; i < n; i++) {
        if (i + 16 < n) __builtin_prefetch(&g->indptr[nodes[i + 16]]);
        cut[i] = g->indptr[nodes[i] + 1] - g->indptr[nodes[i]];
    }
    if (!node_ts) return DDS_OK;
    /* the variable searched: the times, or with node-level time the neighbour ids */
    int node_level = g->ts_var < 0, entry_bytes = 8, rc = DDS_OK;
    if (node_level)
        rc = sample_id_bytes(s, g->nbr_var, WHO, "nbr", &entry_bytes);
    if (rc != DDS_OK) return rc;
    struct searches S = {node_level, entry_bytes, g->time_type, g->nbr_time,
                         g->nbr_time_bytes == 4 ? 4 : 8, g->nbr_time_len, -1, 0};
    struct list_reader r;
    struct lying L = {0};
    rc = reader_open(&r, s, g, node_level ? g->nbr_var : g->ts_var, entry_bytes, nodes, cut,
                     n, PIECE_ENTRIES, PIECE_LISTS);
    if (rc == DDS_OK) rc = take_lying(g, &S, &r, cut, node_ts, &L);
    for (int64_t i = 0; i < n && rc == DDS_OK && S.bad < 0; i++) {
        if (cut[i] <= 0) continue;
        if (reader_refills(&r, i)) search_flush(&S);  /* they point into the piece held */
        const char *rows;
        rc = reader_list(&r, i, &rows);
        if (rc == DDS_OK) search_add(&S, rows, cut[i], time_bits(node_ts, i), &cut[i]);
    }
    search_flush(&S);  /* the lists still queued */
    if (rc == DDS_OK && S.bad < 0 && L.n) rc = cut_lying(s, &S, &r, &L, cut, &S.bad);
    reader_close(&r);
    free(L.at);
    if (rc == DDS_OK && S.bad >= 0)
        rc = dds_set_error(DDS_ERANGE, "neighbour sample: neighbour node %lld has no time "
                           "(node times cover [0, %lld))", (long long)S.bad,
                           (long long)g->nbr_time_len);
    return rc;
}

/* the entries a node with c eligible takes (see dds_neighbor.h) */
/* how many entries a list of c eligible ones gives for k (k < 0: all of them): k draws
 * with replacement (with last, among the min(c, k) latest, as pyg-lib's temporal "last"
 * narrows the list before it draws), else min(c, k) */
static int64_t take_of(int64_t c, int64_t k, int replace)
{
    if (c <= 0) return 0;
    if (k < 0) return c;
    if (replace) return k;
    return c <= k ? c : k;
}

#define return_error(...) do { rc = dds_set_error(__VA_ARGS__); goto done; } while (0)

/* the sampling loop asks for the lists of the node this many ahead (cache misses of
 * consecutive nodes overlap instead of following one another) */
#define PREFETCH_NODES 8

/* prefetch the first c entries (at most 4 cache lines) of node v's nbr and eid lists
 * when they are readable by load */
static inline void prefetch_list(const dds_tcsr *g, const struct members *view, int64_t v,
                                 int64_t c, int nb, int eb)
{
    if (c <= 0) return;
    int m = member_of_node(g, view, v);
    if (!member_chunk(view, m, 0)) return;
    int64_t at = g->indptr[v] - view->first[m];
    const char *ln = member_chunk(view, m, 0) + nb * at;
    const char *le = member_chunk(view, m, 1) + eb * at;
    int64_t lines_n = (nb * c + 63) / 64, lines_e = (eb * c + 63) / 64;
    for (int64_t q = 0; q < lines_n && q < 4; q++) __builtin_prefetch(ln + 64 * q);
    for (int64_t q = 0; q < lines_e && q < 4; q++) __builtin_prefetch(le + 64 * q);
}

/* the member views of the nbr and eid lists, and the reads of their picks */
static int open_lists(dds_store *s, const dds_tcsr *g, struct members *view)
{
    int vars[2] = {g->nbr_var, g->eid_var};
    return members_open(view, s, g, vars, 2, WHO);
}

static int read_picks(dds_store *s, const dds_tcsr *g, const struct picks *P, int nb,
                      int eb, int64_t *nbr, int64_t *eid)
{
    int vars[2] = {g->nbr_var, g->eid_var}, bytes[2] = {nb, eb};
    int64_t *outs[2] = {nbr, eid};
    return picks_read(s, P, nbr ? 2 : 1, vars + !nbr, bytes + !nbr, outs + !nbr, WHO);
}

int dds_neighbor_sample(dds_store *s, const dds_tcsr *g, const int64_t *nodes,
                        const void *node_ts, int64_t n, int64_t k, int flags,
                        uint64_t seed, int64_t cap, int64_t *row, int64_t *nbr,
                        int64_t *eid, int64_t *count)
{
    *count = 0;
    int rc = check_args(s, g, nodes, node_ts, n, cap);
    if (rc != DDS_OK) return rc;
    int replace = (flags & DDS_NEIGHBOR_REPLACE) != 0, last = (flags & DDS_NEIGHBOR_LAST) != 0;
    int64_t *cut = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    struct picks P = {0};
    struct table set = {NULL, 0};
    struct members view = {0};
    if (!cut) { rc = no_memory(); goto done; }
    int nb = 8, eb = 8; /* bytes per id of nbr and of eid */
    rc = sample_id_bytes(s, g->nbr_var, WHO, "nbr", &nb);
    if (rc == DDS_OK) rc = sample_id_bytes(s, g->eid_var, WHO, "eid", &eb);
    if (rc == DDS_OK) rc = eligible(s, g, nodes, node_ts, n, cut);
    if (rc != DDS_OK) goto done;
    /* what is taken, counted before any buffer is sized or any output written: buffers
     * follow what exists (at most c per node without replacement), never k alone */
    int64_t total = 0, floyd_k = 0; /* floyd_k: k when some list needs distinct draws */
    for (int64_t i = 0; i < n; i++) {
        int64_t take = take_of(cut[i], k, replace);
        if (__builtin_add_overflow(total, take, &total))
            return_error(DDS_ENOMEM, "neighbour sample: k=%lld from each of %lld nodes is "
                         "more than 2^63 entries", (long long)k, (long long)n);
        if (!replace && !last && k >= 0 && cut[i] > k) floyd_k = k;
    }
    if (total > cap)
        return_error(DDS_EINVAL, "neighbour sample: %lld entries taken, more than the "
                     "output capacity %lld", (long long)total, (long long)cap);
    /* the remote picks: at most one piece per pick */
    rc = picks_open(&P, total, WHO);
    /* Floyd's distinct draws: the positions drawn from list i are the set's keys in use
     * with base i (generation i: the earlier lists' keys count as absent) */
    if (rc == DDS_OK && floyd_k > 0) rc = table_open(&set, floyd_k, WHO);
    /* members whose rows this rank reads by load: picks are copied in place */
    if (rc == DDS_OK) rc = open_lists(s, g, &view);
    if (rc != DDS_OK) goto done;
    uint64_t base = splitmix64(seed);
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_NODES < n)
            prefetch_list(g, &view, nodes[i + PREFETCH_NODES], cut[i + PREFETCH_NODES], nb,
                          eb);
        int64_t c = cut[i], start = g->indptr[nodes[i]];
        int64_t take = take_of(c, k, replace);
        if (take <= 0) continue;  /* nothing eligible, or k == 0: no pick, nothing read */
        int m = member_of_node(g, &view, nodes[i]);
        const char *ln = member_chunk(&view, m, 0), *le = member_chunk(&view, m, 1);
        if (ln) {
            ln += nb * (start - view.first[m]);
            le += eb * (start - view.first[m]);
        }
        int whole = k < 0 || (c <= k && !replace);
        /* with last, the draws (with replacement) are among the min(c, k) latest */
        int64_t from = last && c > k ? c - k : 0;
        for (int64_t q = 0; q < take; q++) row[j + q] = i;
        if (whole || (last && !replace)) { /* one piece: all of them, or the k latest */
            if (ln) {
                copy_ids(nbr + j, ln + nb * (c - take), nb, take);
                copy_ids(eid + j, le + eb * (c - take), eb, take);
            } else {
                picks_piece(&P, j, start + c - take, take, -1);
            }
        } else {
            struct stream st = stream_of(base, (uint64_t)i + 1);
            int64_t lo = c, hi = -1, had;  /* the smallest and largest position drawn */
            int64_t *draw = picks_positions(&P);  /* P has room for every pick */
            for (int64_t q = 0; q < take; q++) {
                uint64_t r = stream_next(&st);
                int64_t pos;
                if (replace) {
                    pos = from + below(r, c - from);
                } else { /* Floyd: the q-th step draws from [0, c - k + q] */
                    int64_t top = c - k + q;
                    pos = below(r, top + 1);
                    if (!table_add(&set, i, pos, i, &had)) {
                        pos = top;
                        table_add(&set, i, pos, i, &had);
                    }
                }
                draw[q] = pos; /* the ids are read once the positions are drawn */
                lo = pos < lo ? pos : lo;
                hi = pos > hi ? pos : hi;
            }
            if (ln) {
                gather_ids(nbr + j, ln, nb, draw, take);
                gather_ids(eid + j, le, eb, draw, take);
            } else if ((hi - lo + 1) * (nb > eb ? nb : eb) <= 64 * (take + 1)) {
                /* the span holding the picks, read as one run: about the cache lines
                 * the picks touch anyway, one block of a get instead of take */
                for (int64_t q = 0; q < take; q++) draw[q] -= lo;
                picks_piece(&P, j, start + lo, hi - lo + 1, take);  /* keeps the draws */
            } else {
                for (int64_t q = 0; q < take; q++)
                    picks_piece(&P, j + q, start + draw[q], 1, -1);
            }
        }
        j += take;
    }
    /* the picks of other members' lists: one batched one-sided read per variable, then
     * each piece to its output slot (widened) */
    rc = read_picks(s, g, &P, nb, eb, nbr, eid);
    if (rc == DDS_OK) *count = j;
done:
    table_close(&set);
    picks_close(&P);
    free(cut);
    members_close(&view);
    return rc;
}

/* ------------------------------------------------------------------ weighted draws
 * dds_neighbor_sample_weighted (see dds_neighbor.h).  A list's weights are read with the
 * list: in place for members readable by load, else the eligible ranges of remote lists
 * in pieces (list_reader), list by list in one pass: the output holds what k could
 * take, or (rarely: a capacity below that) the entries taken are counted in a first
 * pass.  Each list's picks are taken as they are drawn (struct taker): their nbr and
 * eid by load, or planned as rows of other members, read after the last list as in
 * dds_neighbor_sample (one batched read per variable of the runs of consecutive
 * picked rows). */

/* max-heap on key of the k smallest keys seen (Efraimidis-Spirakis' top k) */
static void heap_down(double *key, int64_t *pos, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, top = i;
        if (l < n && key[l] > key[top]) top = l;
        if (r < n && key[r] > key[top]) top = r;
        if (top == i) return;
        double tk = key[i]; key[i] = key[top]; key[top] = tk;
        int64_t tp = pos[i]; pos[i] = pos[top]; pos[top] = tp;
        i = top;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* with replacement: cum[p] = w[0] + ... + w[p] (scaled by 1 / max w when the plain sum
 * overflows); returns the total */
static double cumulate(const double *w, int64_t c, double *cum)
{
    double t = 0;
    for (int64_t p = 0; p < c; p++) cum[p] = t += w[p];
    if (isfinite(t)) return t;
    double m = 0;
    for (int64_t p = 0; p < c; p++) if (w[p] > m) m = w[p];
    t = 0;
    for (int64_t p = 0; p < c; p++) cum[p] = t += w[p] / m;
    return t;
}

/* the first p in [0, c) with cum[p] > x, or the last p with a positive weight when
 * rounding left none (x within an ulp of the total) */
static int64_t draw_cum(const double *cum, const double *w, int64_t c, double x)
{
    int64_t lo = 0, hi = c;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cum[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    if (lo < c) return lo;
    lo = c - 1;
    while (lo > 0 && !(w[lo] > 0)) lo--;
    return lo;
}

/* the weight at entry p of a list of float32 (wb 4) or float64 (wb 8) weights, as a
 * double (float32 widens exactly) */
static inline double weight_at(const char *w, int64_t wb, int64_t p)
{
    return wb == 8 ? ((const double *)w)[p] : (double)((const float *)w)[p];
}

/* the entries a node with c eligible entries, `pos` of positive weight, takes (see
 * dds_neighbor.h: pyg-lib's rule) */
static int64_t weighted_take(int64_t c, int64_t pos, int64_t k, int replace)
{
    if (k < 0) return c;
    if (replace) return pos ? k : 0;
    return c < k ? c : k;
}

/* *pos = the positive weights among the c of a list (float32 or float64, wb bytes each)
 * starting at CSC row `start` of `node`, and (top not NULL) *top the largest weight and,
 * for a list at the ends of double's range (see scaled_list), *low the least positive
 * one (else 0); DDS_EINVAL naming the first negative, NaN or infinite one */
static int positive_weights(const char *w, int64_t wb, int64_t c, int64_t start,
                            int64_t node, int64_t *pos, double *top, double *low)
{
    int64_t count = 0;
    double m = 0;
    int tiny = 0;  /* a positive weight below 2^-1000 (no branch: 30 % zeros mispredict) */
    for (int64_t p = 0; p < c; p++) {
        double x = weight_at(w, wb, p);
        if (!(x >= 0) || !isfinite(x))
            return dds_set_error(DDS_EINVAL, "weighted neighbour sample: the weight at CSC "
                                 "row %lld (node %lld) is %g; weights must be finite and "
                                 ">= 0", (long long)(start + p), (long long)node, x);
        count += x > 0;
        if (x > m) m = x;
        tiny |= (x > 0) & (x < 0x1p-1000);
    }
    *pos = count;
    if (top) {  /* the least positive weight: only for a list at the ends of the range */
        *top = m;
        *low = 0;
        if (count && (tiny || m > 0x1p+900 || m < 0x1p-900)) {
            double l = INFINITY;
            for (int64_t p = 0; p < c; p++) {
                double x = weight_at(w, wb, p);
                if (x > 0 && x < l) l = x;
            }
            *low = l;
        }
    }
    return DDS_OK;
}

/* Whether a list whose largest weight is `top` and least positive one `low` is drawn
 * from its weights scaled by a power of two (ldexp(w, -ilogb(top)): the largest in [1,
 * 2)): only at the ends of double's range, where the keys E / w, the jumps E / tau or
 * the sums would overflow, or lose their bits as subnormals (a list of weights 1e-310,
 * or 1e308, was drawn nearly always at one end); other lists are drawn from their
 * weights as they are.  A scaled list whose weights still span more than 2^1000 (1
 * beside 1e-310) is drawn without replacement from keys in logs (see the draw). */
static inline int scaled_list(double top, double low)
{
    return top > 0x1p+900 || (top > 0 && top < 0x1p-900) || (low > 0 && low < 0x1p-1000);
}

/* Where a list's picks go: output slots from j on; the ids read by load from the
 * list's nbr and eid rows at ln / le, or (ln NULL: a list of another member) planned
 * as global CSC rows of P from `start` on. */
struct taker {
    struct picks *P;
    int64_t start, j;
    int nb, eb;
    int64_t *nbr, *eid;
    const char *ln, *le;
};

/* the list's q-th pick: its entry at list position p */
static inline void take_pick(const struct taker *t, int64_t q, int64_t p)
{
    if (t->ln) {
        t->nbr[t->j + q] = id_at(t->ln, t->nb, p);
        t->eid[t->j + q] = id_at(t->le, t->eb, p);
    } else {
        picks_row(t->P, t->j + q, t->start + p);
    }
}

int dds_neighbor_sample_weighted(dds_store *s, const dds_tcsr *g, int w_var,
                                 const int64_t *nodes, const void *node_ts, int64_t n,
                                 int64_t k, int flags, uint64_t seed, int64_t cap,
                                 int64_t *row, int64_t *nbr, int64_t *eid, int64_t *count)
{
    *count = 0;
    int rc = check_args(s, g, nodes, node_ts, n, cap);
    if (rc != DDS_OK) return rc;
    if (flags & ~DDS_NEIGHBOR_REPLACE)
        return dds_set_error(DDS_EINVAL, "weighted neighbour sample: flags %d: only "
                             "DDS_NEIGHBOR_REPLACE applies (the latest entries, LAST, "
                             "ignore weights)", flags);
    int replace = (flags & DDS_NEIGHBOR_REPLACE) != 0;
    int64_t wb = 0;
    rc = dds_row_bytes(s, w_var, &wb);
    if (rc != DDS_OK) return rc;
    if (wb != 4 && wb != 8)
        return dds_set_error(DDS_EINVAL, "weighted neighbour sample: the weight variable "
                             "has rows of %lld bytes, not float32 (4) or float64 (8)",
                             (long long)wb);
    int nb = 8, eb = 8;
    int64_t *cut = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    int64_t *hpos = NULL;
    double *scratch = NULL, *hkey = NULL, *wide = NULL;
    int64_t wide_cap = 0;
    struct members view = {0};
    struct picks P = {0};
    struct list_reader wr = {0};  /* the weights of the eligible ranges, in pieces */
    if (!cut) { rc = no_memory(); goto done; }
    rc = sample_id_bytes(s, g->nbr_var, WHO, "nbr", &nb);
    if (rc == DDS_OK) rc = sample_id_bytes(s, g->eid_var, WHO, "eid", &eb);
    if (rc == DDS_OK) rc = eligible(s, g, nodes, node_ts, n, cut);
    if (rc == DDS_OK) rc = open_lists(s, g, &view);
    if (rc == DDS_OK)
        rc = reader_open(&wr, s, g, w_var, wb, nodes, cut, n, PIECE_ENTRIES, PIECE_LISTS);
    if (rc != DDS_OK) goto done;
    /* what the nodes can take (without the weights: at most min(k, c) of c eligible, k
     * with replacement) and the scratch sizes: the longest list drawn with replacement,
     * k when a list may be drawn without, and with float32 weights the longest list
     * (widened to double once per entry, list by list, so that the draws are those of
     * float64) */
    int64_t bound = 0, most_c = 0, most_k = 0, most_w = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = cut[i];
        if (c <= 0) continue;
        if (__builtin_add_overflow(bound, k < 0 ? c : replace ? k : (c < k ? c : k), &bound))
            return_error(DDS_ENOMEM, "weighted neighbour sample: k=%lld from each of %lld "
                         "nodes is more than 2^63 entries", (long long)k, (long long)n);
        if (k >= 0 && replace && c > most_c) most_c = c;
        if (k >= 0 && !replace && c > k) most_k = k;
        if (wb != 8 && c > most_w) most_w = c;
    }
    /* more than the output holds is possible: the entries taken are counted first (and
     * the weights checked), every list read once more to draw */
    if (bound > cap) {
        int64_t total = 0;
        for (int64_t i = 0; i < n; i++) {
            const char *w;
            if (cut[i] <= 0) continue;
            int64_t pos = 0;
            rc = reader_list(&wr, i, &w);
            if (rc == DDS_OK) rc = positive_weights(w, wb, cut[i], g->indptr[nodes[i]],
                                                    nodes[i], &pos, NULL, NULL);
            if (rc != DDS_OK) goto done;
            total += weighted_take(cut[i], pos, k, replace);  /* <= bound: no overflow */
        }
        if (total > cap)
            return_error(DDS_EINVAL, "weighted neighbour sample: %lld entries taken, more "
                         "than the output capacity %lld", (long long)total, (long long)cap);
        bound = total;
        reader_close(&wr);
        rc = reader_open(&wr, s, g, w_var, wb, nodes, cut, n, PIECE_ENTRIES, PIECE_LISTS);
        if (rc != DDS_OK) goto done;
    }
    if (most_c) scratch = malloc(sizeof(double) * (size_t)most_c);
    if (most_w) wide = malloc(sizeof(double) * (size_t)most_w);
    if (wide) wide_cap = most_w;
    if (most_k) {  /* most_k < some list's length: it exists in memory */
        hkey = malloc(sizeof(double) * (size_t)most_k);
        hpos = malloc(sizeof(int64_t) * (size_t)most_k);
    }
    if ((most_c && !scratch) || (most_w && !wide) || (most_k && (!hkey || !hpos))) {
        rc = no_memory();
        goto done;
    }
    /* each list's weights checked, then its picks drawn (positions in the list) and
     * taken: their ids by load, or planned as rows of P (opened at the first remote
     * list, with room for every pick left: at most one piece each) */
    uint64_t base = splitmix64(seed);
    int64_t j = 0;  /* picks taken; at most bound in all */
    for (int64_t i = 0; i < n; i++) {
        int64_t c = cut[i], start = g->indptr[nodes[i]], pos = 0;
        if (c <= 0) continue;
        const char *wl;
        rc = reader_list(&wr, i, &wl);
        double top = 0, low = 0;
        if (rc == DDS_OK)
            rc = positive_weights(wl, wb, c, start, nodes[i], &pos, &top, &low);
        if (rc != DDS_OK) goto done;
        int64_t t = weighted_take(c, pos, k, replace);
        if (t == 0) continue;
        if (t > cap - j)  /* (never: the entries were bounded or counted) */
            return_error(DDS_EINVAL, "weighted neighbour sample: more entries taken than "
                         "the output capacity %lld", (long long)cap);
        struct taker tk = {&P, start, j, nb, eb, nbr, eid, NULL, NULL};
        int m = member_of_node(g, &view, nodes[i]);
        if (member_chunk(&view, m, 0)) {
            tk.ln = member_chunk(&view, m, 0) + nb * (start - view.first[m]);
            tk.le = member_chunk(&view, m, 1) + eb * (start - view.first[m]);
        } else if (!P.start && (rc = picks_open(&P, bound - j, WHO)) != DDS_OK) {
            goto done;
        }
        const double *w = (const double *)wl;
        int scale = scaled_list(top, low) && k >= 0 && (replace || (t < c && pos > t));
        if (scale && c > wide_cap) {  /* (float64 lists: room made when first needed) */
            double *grown = realloc(wide, sizeof(double) * (size_t)c);
            if (!grown) { rc = no_memory(); goto done; }
            wide = grown;
            wide_cap = c;
        }
        if (scale) {  /* every positive weight kept positive (at least 2^-1074) */
            int e = ilogb(top);
            for (int64_t p = 0; p < c; p++) {
                double x = weight_at(wl, wb, p);
                wide[p] = x > 0 ? fmax(ldexp(x, -e), 0x1p-1074) : 0;
            }
            w = wide;
        } else if (wb != 8) {  /* float32: the list widened to double, once per entry */
            const float *f = (const float *)wl;
            for (int64_t p = 0; p < c; p++) wide[p] = f[p];
            w = wide;
        }
        struct stream st = stream_of(base, (uint64_t)i + 1);
        for (int64_t q = 0; q < t; q++) row[j + q] = i;
        if (k < 0 || (!replace && t == c)) {  /* k < 0, or k >= c without: every entry */
            for (int64_t p = 0; p < c; p++) take_pick(&tk, p, p);
        } else if (!replace && pos <= t) {
            /* every positive entry, and t - pos of the c - pos zero-weight ones, each
             * subset alike (selection sampling: the z-th zero entry seen, with r still
             * wanted of the zl left, is taken with probability r / zl), in list order */
            int64_t q = 0, r = t - pos, zl = c - pos;
            for (int64_t p = 0; p < c; p++) {
                if (w[p] > 0) {
                    take_pick(&tk, q++, p);
                } else if (r > 0) {
                    if (unit_closed(stream_word(&st, (uint64_t)p + 1)) * (double)zl <
                            (double)r) {
                        take_pick(&tk, q++, p);
                        r--;
                    }
                    zl--;
                }
            }
        } else if (replace) {
            double tot = cumulate(w, c, scratch);
            for (int64_t q = 0; q < t; q++) {
                double x = unit_closed(stream_next(&st)) * tot;
                take_pick(&tk, q, draw_cum(scratch, w, c, x));
            }
        } else if (scale && ldexp(low, -ilogb(top)) < 0x1p-1000) {
            /* weights spanning more than 2^1000: a key E_p / w_p may overflow (ties at
             * inf drew the last entry), so the k smallest keys are found in logs,
             * log(E_p) - log(w_p), every positive entry drawn (no jumps) */
            int64_t h = 0;
            for (int64_t p = 0; p < c; p++) {
                if (!(w[p] > 0)) continue;
                double key = log(-log(unit_open(stream_word(&st, (uint64_t)p + 1)))) -
                             log(w[p]);
                if (h < t) {
                    hkey[h] = key;
                    hpos[h++] = p;
                    if (h == t)
                        for (int64_t a = t / 2; a-- > 0;) heap_down(hkey, hpos, t, a);
                } else if (key < hkey[0]) {
                    hkey[0] = key;
                    hpos[0] = p;
                    heap_down(hkey, hpos, t, 0);
                }
            }
            qsort(hpos, (size_t)t, sizeof *hpos, cmp_i64);  /* list order */
            for (int64_t q = 0; q < t; q++) take_pick(&tk, q, hpos[q]);
        } else {
            /* Efraimidis-Spirakis: the k smallest keys E_p / w_p (E_p exponential), with
             * their exponential jumps: once the heap holds k keys of largest tau, the
             * positive entries that a stretch of total weight S leaves out of it have
             * probability exp(-S tau), so the weight skipped before the next entry
             * that enters is E / tau, and that entry's key is E / w given E < w tau */
            int64_t h = 0, p = 0;
            for (; p < c && h < t; p++) {
                if (!(w[p] > 0)) continue;
                hkey[h] = -log(unit_open(stream_word(&st, (uint64_t)p + 1))) / w[p];
                hpos[h++] = p;
            }
            for (int64_t a = t / 2; a-- > 0;) heap_down(hkey, hpos, t, a);
            struct stream jump = stream_fork(st, 0xD1B54A32D192ED03ULL);
            double skip = -log(unit_open(stream_next(&jump))) / hkey[0];
            for (; p < c; p++) {
                if (!(w[p] > 0) || (skip -= w[p]) > 0) continue;
                double u = unit_open(stream_next(&jump));
                double e = -log1p(u * expm1(-w[p] * hkey[0]));  /* E < w tau */
                hkey[0] = e / w[p];
                hpos[0] = p;
                heap_down(hkey, hpos, t, 0);
                skip = -log(unit_open(stream_next(&jump))) / hkey[0];
            }
            qsort(hpos, (size_t)t, sizeof *hpos, cmp_i64);  /* list order */
            for (int64_t q = 0; q < t; q++) take_pick(&tk, q, hpos[q]);
        }
        j += t;
    }
    /* the ids of the picks of remote lists: runs of consecutive rows, one batched
     * one-sided read per variable */
    rc = read_picks(s, g, &P, nb, eb, nbr, eid);
    if (rc == DDS_OK) *count = j;
done:
    picks_close(&P);
    members_close(&view);
    reader_close(&wr);
    free(cut);
    free(hpos);
    free(hkey);
    free(scratch);
    free(wide);
    return rc;
}

/* ------------------------------------------------------------------ one hop, relabelled
 * dds_neighbor_hop (see dds_neighbor.h): the hop is drawn into the caller's outputs
 * (from = the frontier position, to = the global neighbour id), then relabelled in
 * place through the map (csrc/relabel.c). */

int dds_neighbor_hop(dds_store *s, const dds_tcsr *g, int w_var, const int64_t *nodes,
                     const int64_t *pos, const int64_t *sub, const void *node_ts, int64_t n,
                     int64_t k, int flags, uint64_t seed, dds_relabel *map, int64_t cap,
                     int64_t *from, int64_t *to, int64_t *eid, int64_t *new_nodes,
                     int64_t *new_sub, int64_t *count, int64_t *n_new)
{
    int64_t m = 0;
    *count = *n_new = 0;
    if (!map || (n > 0 && !pos))
        return dds_set_error(DDS_EINVAL, "neighbour hop: the map and pos must be given");
    if (n > 0 && ((sub != NULL) != (map->subgraphs != 0) || (sub && cap > 0 && !new_sub)))
        return dds_set_error(DDS_EINVAL, "neighbour hop: sub and new_sub are given "
                             "exactly with a disjoint map (subgraphs=%lld)",
                             (long long)map->subgraphs);
    int rc = w_var < 0
        ? dds_neighbor_sample(s, g, nodes, node_ts, n, k, flags, seed, cap, from, to, eid,
                              &m)
        : dds_neighbor_sample_weighted(s, g, w_var, nodes, node_ts, n, k, flags, seed, cap,
                                       from, to, eid, &m);
    if (rc != DDS_OK) return rc;
    if (sub)  /* each drawn neighbour's subgraph: its frontier node's */
        for (int64_t j = 0; j < m; j++) new_sub[j] = sub[from[j]];
    rc = relabel_map(map, to, sub ? new_sub : NULL, m, to, new_nodes, sub ? new_sub : NULL,
                     n_new);
    if (rc != DDS_OK) {
        *n_new = 0;
        return rc;
    }
    for (int64_t j = 0; j < m; j++) from[j] = pos[from[j]];
    *count = m;
    return DDS_OK;
}

/* ------------------------------------------------------------------ induced edges
 * dds_induced_edges (see dds_neighbor.h).  The source set becomes a relabelling map
 * from node id to the position of its first occurrence (csrc/relabel.c, its one rule
 * with the source count as the keys expected).  Every destination's whole list is then
 * filtered through it in list order: lists readable by load in place, the others' nbr
 * read in pieces of `chunk` entries (list_reader, in destination order, so the output
 * keeps that order), and only the edge ids of the entries kept are read from them (one
 * batched read of runs of consecutive rows). */

/* map the n ids (each in [0, bound), else DDS_ERANGE naming `what`) to the position of
 * their first occurrence */
static int first_pos_build(struct dds_relabel *m, const int64_t *ids, int64_t n,
                           int64_t bound, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= bound)
            return dds_set_error(DDS_ERANGE, "induced edges: %s node %lld (position %lld) "
                                 "out of range [0, %lld)", what, (long long)ids[i],
                                 (long long)i, (long long)bound);
    int rc = relabel_begin(m, bound, 0, n, DDS_RELABEL_DENSE_MAX);
    return rc == DDS_OK ? relabel_seed(m, ids, NULL, n) : rc;
}

int dds_induced_edges(dds_store *s, const dds_tcsr *g, const int64_t *dst, int64_t n_dst,
                      const int64_t *src, int64_t n_src, int64_t num_src, int64_t chunk,
                      int64_t cap, int64_t *row, int64_t *col, int64_t *eid, int64_t *count)
{
    *count = 0;
    int rc = check_args(s, g, dst, NULL, n_dst, cap);
    if (rc != DDS_OK) return rc;
    if (n_src < 0 || num_src < 0 || chunk < 1)
        return dds_set_error(DDS_EINVAL, "induced edges: n_src=%lld and num_src=%lld must "
                             "be >= 0, chunk=%lld >= 1", (long long)n_src,
                             (long long)num_src, (long long)chunk);
    struct dds_relabel smap = {0}, dmap_own = {0};
    const struct dds_relabel *dmap = &dmap_own;
    struct members view = {0};
    struct list_reader nr = {0};  /* the lists' source ids, in pieces */
    struct picks P = {0};         /* the kept entries of those lists */
    int64_t *len = NULL;
    int nb = 8, eb = 8;
    rc = first_pos_build(&smap, src, n_src, num_src, "source");
    if (rc != DDS_OK || n_dst == 0 || n_src == 0) goto done;
    if (src == dst && n_src == n_dst) {
        dmap = &smap;  /* one node set (homogeneous): its map serves both */
    } else {
        rc = first_pos_build(&dmap_own, dst, n_dst, g->num_nodes, "destination");
        if (rc != DDS_OK) goto done;
    }
    /* each destination's list at its first occurrence (a repeat takes none) */
    if (!(len = malloc(sizeof(int64_t) * (size_t)n_dst))) { rc = no_memory(); goto done; }
    for (int64_t q = 0; q < n_dst; q++)
        len[q] = relabel_find(dmap, dst[q], 0) == q ? g->indptr[dst[q] + 1] - g->indptr[dst[q]]
                                                  : 0;
    rc = sample_id_bytes(s, g->nbr_var, "induced edges", "nbr", &nb);
    if (rc == DDS_OK) rc = sample_id_bytes(s, g->eid_var, "induced edges", "eid", &eb);
    if (rc == DDS_OK) rc = open_lists(s, g, &view);
    if (rc == DDS_OK)  /* pieces of `chunk` entries, however many lists */
        rc = reader_open(&nr, s, g, g->nbr_var, nb, dst, len, n_dst, chunk, n_dst);
    if (rc != DDS_OK) goto done;
    int64_t j = 0;
    for (int64_t i = 0; i < n_dst; i++) {
        int64_t v = dst[i], start = g->indptr[v], deg = len[i];
        if (deg <= 0) continue;
        int m = member_of_node(g, &view, v);
        const char *ln = member_chunk(&view, m, 0), *le = member_chunk(&view, m, 1);
        if (ln) {  /* in place (the reader skips it: no piece to read) */
            ln += (size_t)nb * (size_t)(start - view.first[m]);
            le += (size_t)eb * (size_t)(start - view.first[m]);
        } else {  /* room for a piece per entry kept from it */
            rc = reader_list(&nr, i, &ln);
            if (rc == DDS_OK)
                rc = P.start ? picks_reserve(&P, deg, "induced edges")
                             : picks_open(&P, deg > 1024 ? deg : 1024, "induced edges");
            if (rc != DDS_OK) goto done;
        }
        for (int64_t p = 0; p < deg; p++) {
            int64_t u = id_at(ln, nb, p);
            if ((uint64_t)u >= (uint64_t)num_src)
                return_error(DDS_ERANGE, "induced edges: CSC row %lld holds source node "
                             "%lld, outside [0, %lld)", (long long)(start + p),
                             (long long)u, (long long)num_src);
            int64_t at = relabel_find(&smap, u, 0);
            if (at < 0) continue;
            if (j == cap)
                return_error(DDS_EINVAL, "induced edges: more than the output capacity "
                             "%lld edges", (long long)cap);
            row[j] = at;
            col[j] = i;
            if (le)
                eid[j] = id_at(le, eb, p);
            else  /* read below */
                picks_row(&P, j, start + p);
            j++;
        }
    }
    /* the edge ids of the entries kept from remote lists */
    rc = read_picks(s, g, &P, nb, eb, NULL, eid);
    if (rc == DDS_OK) *count = j;
done:
    picks_close(&P);
    relabel_release(&smap);
    relabel_release(&dmap_own);
    members_close(&view);
    reader_close(&nr);
    free(len);
    return rc;
}
