/*
 * temporal.c - temporal neighbour sampling over a T-CSR held in the store (see
 * dds_temporal.h).
 *
 * Lists of members this rank can read by load (its own chunk, node-local peers) are
 * read in place.  Lists of the other members are read with batched one-sided reads:
 * - a list that is short, or asked for by enough roots of the call to pay for itself,
 *   or (by default) long with the call's other long lists holding at most 1 MiB, is
 *   fetched whole (ts, nbr and eid: one batched dds_read each for all such lists,
 *   each distinct node once) and then sampled like a local one;
 * - the other long lists are binary-searched remotely (sampling.h's probe_cuts: all
 *   such roots in step, one batched dds_read of one timestamp each per step; the rule
 *   is sampling.h's "remote cuts", the neighbour sampler's too), and only the selected
 *   rows are read: one piece per root (the k latest, or the whole eligible range for
 *   uniform draws from at most range_factor * k entries), else one row per draw.
 * No state outlives the call: dds_temporal_sample runs the steps below in order (check
 * the arguments, open the members, place each root's list, fetch remote lists, cut the
 * eligible ranges, select, read the remote picks), every buffer owned by one struct
 * sampler and released by sampler_free.  Node and edge ids are stored as int32 or int64
 * (each variable's row bytes say which, see dds_tcsr.h) and widened to the int64
 * outputs as they are copied.  The argument checks, member views, the table of fetched
 * lists, the random stream, the remote picks and every remote read are those of the
 * samplers' unit (sampling.h).  Times are the graph's time type (doubles or int64),
 * compared as numbers of that type (times.h: a search per type, keys elsewhere) and
 * copied to the outputs as their 8 bytes.
 */
#include "internal.h"
#include "sampling.h"
#include "times.h"

#include <stdlib.h>
#include <string.h>

#define WHO "temporal sample" /* the messages' prefix */

/* the variables of the member views, in this order */
enum { V_NBR, V_TS, V_EID, NVARS };

/* default of dds_tcsr.range_factor */
#define DDS_RANGE_FACTOR 64
/* A remote list is fetched whole (16, 20 or 24 bytes an entry: its time and ids)
 * unless the rule of sampling.h ("remote cuts") says it is searched where it lies. */

static const int64_t no_entries = 0; /* list of a node without entries */

/* where a root's list is read: in place or in fetched copies (ts, nbr, eid), or by
 * remote search (ts == NULL) */
struct list_src {
    const int64_t *ts;
    const char *nbr, *eid; /* ids of sampler.nb / sampler.eb bytes */
};

/* Everything one call of dds_temporal_sample works with: its arguments, where each
 * member's lists are, and every buffer it allocates.  The buffers are owned here and
 * released together by sampler_free; none outlives the call. */
struct sampler {
    /* the call's arguments, defaults applied */
    dds_store *s;
    const dds_tcsr *g;
    const int64_t *roots;
    const int64_t *root_ts; /* the root times' 8 bytes, of type */
    int64_t n, k, range_factor;
    int strategy, type;
    int nb, eb; /* bytes per id of nbr and of eid: 4 (int32) or 8 (int64) */
    /* where each member's lists (V_NBR, V_TS, V_EID) are read by load */
    struct members view;
    /* [n] per root: where its list is read (ts NULL: searched remotely), and cut[i], the
     * number of its eligible entries (timestamp < root time) */
    struct list_src *src;
    int64_t *cut;
    /* remote lists fetched whole: distinct nodes d (map: node -> d) with the number of
     * roots asking (d_occ) and the offset of the copy in f_* (d_off, -1: searched) */
    struct table map;
    int64_t *d_node, *d_occ, *d_off, *req_start, *req_count;
    int64_t *f_ts;
    char *f_nbr, *f_eid;
    /* [nsearch] lists searched where they lie (probe_cuts): root position, first row,
     * length, the root time's key, the cut */
    int64_t nsearch;
    int64_t *sidx, *sstart, *slen, *skey, *scut;
    /* the rows selected from searched lists: one piece per root (the k latest, or the
     * range its draws come from), else one per draw */
    struct picks picks;
};

static void sampler_free(struct sampler *sp)
{
    void *owned[] = {sp->src, sp->cut, sp->d_node, sp->d_occ, sp->d_off, sp->req_start,
                     sp->req_count, sp->f_ts, sp->f_nbr, sp->f_eid, sp->sidx};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    members_close(&sp->view);
    table_close(&sp->map);
    picks_close(&sp->picks);
}

static int out_of_memory(void)
{
    return sample_no_memory(WHO);
}

/* n, k, strategy, the time type, and every root and root time */
static int check_args(dds_store *s, const dds_tcsr *g, const int64_t *roots,
                      const void *root_ts, int64_t n, int64_t k, int strategy)
{
    int rc = sample_check_graph(s, g, WHO);
    if (rc != DDS_OK) return rc;
    if (n < 0 || k < 1)
        return dds_set_error(DDS_EINVAL, "temporal sample: n=%lld must be >= 0 and k=%lld "
                             ">= 1", (long long)n, (long long)k);
    if (strategy != DDS_SAMPLE_RECENT && strategy != DDS_SAMPLE_UNIFORM)
        return dds_set_error(DDS_EINVAL, "temporal sample: strategy %d is not recent (0) "
                             "or uniform (1)", strategy);
    return sample_check_nodes(g, roots, root_ts, n, WHO, "root", "root time");
}

/* sp->view: each member's three chunks, readable in place or not */
static int open_members(struct sampler *sp)
{
    int vars[NVARS];
    vars[V_NBR] = sp->g->nbr_var;
    vars[V_TS] = sp->g->ts_var;
    vars[V_EID] = sp->g->eid_var;
    return members_open(&sp->view, sp->s, sp->g, vars, NVARS, WHO);
}

/* sp->src for every root whose list is empty or readable in place; *nremote = the
 * roots whose list is neither (left with src[i].ts == NULL) */
static int place_lists(struct sampler *sp, int64_t *nremote)
{
    const dds_tcsr *g = sp->g;
    size_t n = (size_t)(sp->n ? sp->n : 1);
    sp->src = malloc(sizeof *sp->src * n);
    sp->cut = malloc(sizeof(int64_t) * n);
    if (!sp->src || !sp->cut) return out_of_memory();
    *nremote = 0;
    for (int64_t i = 0; i < sp->n; i++) {
        int64_t v = sp->roots[i], start = g->indptr[v];
        int m = member_of_node(g, &sp->view, v);
        struct list_src *ls = &sp->src[i];
        ls->ts = NULL;
        if (g->indptr[v + 1] == start) {
            ls->ts = &no_entries; /* never read: the cut is 0 */
        } else if (member_chunk(&sp->view, m, V_NBR)) {
            int64_t local = start - sp->view.first[m];
            ls->ts = (const int64_t *)member_chunk(&sp->view, m, V_TS) + local;
            ls->nbr = member_chunk(&sp->view, m, V_NBR) + local * sp->nb;
            ls->eid = member_chunk(&sp->view, m, V_EID) + local * sp->eb;
        } else {
            (*nremote)++;
        }
    }
    return DDS_OK;
}

/* The `nremote` roots on remote lists: count the roots asking for each distinct node;
 * fetch whole (one batched read each of ts, nbr, eid) the short lists and the long ones
 * asked for by many roots, and point those roots at the copies; sp->nsearch = the roots
 * left to search remotely. */
static int fetch_remote_lists(struct sampler *sp, int64_t nremote)
{
    const dds_tcsr *g = sp->g;
    struct table *map = &sp->map;
    int64_t nd = 0, total = 0, nreq = 0, d;
    int rc = table_open(map, nremote, WHO);
    if (rc != DDS_OK) return rc;
    sp->d_node = malloc(sizeof(int64_t) * nremote);
    sp->d_occ = malloc(sizeof(int64_t) * nremote);
    sp->d_off = malloc(sizeof(int64_t) * nremote);
    sp->req_start = malloc(sizeof(int64_t) * nremote);
    sp->req_count = malloc(sizeof(int64_t) * nremote);
    if (!sp->d_node || !sp->d_occ || !sp->d_off || !sp->req_start || !sp->req_count)
        return out_of_memory();
    for (int64_t i = 0; i < sp->n; i++) {
        if (sp->src[i].ts) continue;
        if (table_add(map, 0, sp->roots[i], nd, &d)) {
            sp->d_node[nd] = sp->roots[i];
            sp->d_occ[nd++] = 0;
        }
        sp->d_occ[d]++;
    }
    /* lists fetched whole: short ones (and long ones asked for by many roots), and the
     * long ones too unless sample_search_long says they are searched */
    int64_t long_bytes = 0;
    for (d = 0; d < nd; d++) {
        int64_t v = sp->d_node[d], deg = g->indptr[v + 1] - g->indptr[v];
        if (sample_long_list(g, TEMPORAL_WHOLE_MAX, deg, sp->d_occ[d]))
            sample_add_bytes(&long_bytes, deg, 8 + sp->nb + sp->eb);
    }
    int search = sample_search_long(g, long_bytes);
    for (d = 0; d < nd; d++) {
        int64_t v = sp->d_node[d], deg = g->indptr[v + 1] - g->indptr[v];
        sp->d_off[d] = -1;
        if (!search || !sample_long_list(g, TEMPORAL_WHOLE_MAX, deg, sp->d_occ[d])) {
            sp->d_off[d] = total;
            sp->req_start[nreq] = g->indptr[v];
            sp->req_count[nreq++] = deg;
            total += deg;
        }
    }
    if (nreq) {
        sp->f_ts = malloc(sizeof(int64_t) * total);
        sp->f_nbr = malloc((size_t)sp->nb * (size_t)total);
        sp->f_eid = malloc((size_t)sp->eb * (size_t)total);
        if (!sp->f_ts || !sp->f_nbr || !sp->f_eid)
            return dds_set_error(DDS_ENOMEM, "temporal sample: out of memory for %lld "
                                 "remote list entries", (long long)total);
        int vars[3] = {g->ts_var, g->nbr_var, g->eid_var};
        void *outs[3] = {sp->f_ts, sp->f_nbr, sp->f_eid};
        int64_t bytes[3] = {(int64_t)sizeof(int64_t) * total, sp->nb * total,
                            sp->eb * total};
        rc = sample_read(sp->s, 3, vars, sp->req_start, sp->req_count, nreq, outs, bytes);
        if (rc != DDS_OK) return rc;
    }
    for (int64_t i = 0; i < sp->n; i++) {
        if (sp->src[i].ts) continue;
        int64_t off = sp->d_off[table_get(map, 0, sp->roots[i])];
        if (off >= 0) {
            sp->src[i].ts = sp->f_ts + off;
            sp->src[i].nbr = sp->f_nbr + off * sp->nb;
            sp->src[i].eid = sp->f_eid + off * sp->eb;
        } else {
            sp->nsearch++;
        }
    }
    return DDS_OK;
}

/* the number of entries of root i's list */
static int64_t degree(const struct sampler *sp, int64_t i)
{
    return sp->g->indptr[sp->roots[i] + 1] - sp->g->indptr[sp->roots[i]];
}

/* cut[i] of every root whose list is in memory (in place or fetched): binary search for
 * the entries strictly earlier than the root's time */
static void cut_lists_in_memory(struct sampler *sp)
{
    for (int64_t i = 0; i < sp->n; i++)
        if (sp->src[i].ts)
            sp->cut[i] = time_search(sp->src[i].ts, degree(sp, i), sp->root_ts[i],
                                     sp->type, 0);
}

/* cut[i] of the roots on long remote lists: searched where they lie, in step
 * (probe_cuts: the entries strictly earlier than the root's time) */
static int cut_lists_by_remote_search(struct sampler *sp)
{
    int64_t ns = 0, bad;
    size_t m = (size_t)sp->nsearch;
    if (m > SIZE_MAX / (5 * sizeof(int64_t))) return out_of_memory();
    if (!(sp->sidx = malloc(5 * sizeof(int64_t) * m))) return out_of_memory();
    sp->sstart = sp->sidx + m;
    sp->slen = sp->sstart + m;
    sp->skey = sp->slen + m;
    sp->scut = sp->skey + m;
    for (int64_t i = 0; i < sp->n; i++) {
        if (sp->src[i].ts) continue;
        sp->sidx[ns] = i;
        sp->sstart[ns] = sp->g->indptr[sp->roots[i]];
        sp->slen[ns] = degree(sp, i);
        sp->skey[ns++] = time_key(sp->root_ts[i], sp->type);
    }
    struct probe_lists pl = {sp->g->ts_var, 8, sp->type, 0, NULL, 0, 0};
    int rc = probe_cuts(sp->s, &pl, sp->sstart, sp->slen, sp->skey, ns, sp->scut, &bad,
                        WHO);
    for (int64_t q = 0; q < ns && rc == DDS_OK; q++) sp->cut[sp->sidx[q]] = sp->scut[q];
    return rc;
}

/* What one root takes from its `c` eligible entries: the positions lo .. lo + take - 1
 * (all of them, or the k latest for `recent`), or `take` = k uniform draws from the
 * stream `key` when more than k are eligible. */
struct pick {
    int64_t c, lo, take;
    int draw;
    struct stream st;
};

static struct pick choose(const struct sampler *sp, uint64_t base, int64_t i)
{
    struct pick p = {sp->cut[i], 0, sp->cut[i], 0, {0, 0}};
    if (p.c > sp->k) {
        if (sp->strategy == DDS_SAMPLE_RECENT) p.lo = p.c - sp->k;
        else p.draw = 1;
        p.take = sp->k;
    }
    if (p.draw) p.st = stream_of(base, (uint64_t)i);
    return p;
}

/* list position of the q-th entry a root takes: its q-th uniform draw, or lo + q */
static int64_t pick_position(const struct pick *p, int64_t q)
{
    if (!p->draw) return p->lo + q;
    return below(stream_word(&p->st, (uint64_t)q + 1), p->c);
}

/* Root i's list is in memory: write its picks to the outputs from j on. */
static int64_t write_picks(const struct sampler *sp, const struct pick *p, int64_t i,
                           int64_t j, int64_t *row, int64_t *nbr, int64_t *eid,
                           int64_t *ets)
{
    const struct list_src *ls = &sp->src[i];
    for (int64_t q = 0; q < p->take; q++, j++) {
        int64_t pos = pick_position(p, q);
        row[j] = i;
        ets[j] = ls->ts[pos];
        nbr[j] = id_at(ls->nbr, sp->nb, pos);
        eid[j] = id_at(ls->eid, sp->eb, pos);
    }
    return j;
}

/* Root i's list was searched remotely: write its rows' root position from j on and plan
 * the reads of its picks: one piece (the k latest, or the whole eligible range for draws
 * from at most range_factor * k entries, with the draws' positions in it), else one row
 * per draw. */
static int64_t plan_remote_picks(struct sampler *sp, const struct pick *p, int64_t i,
                                 int64_t j, int64_t *row)
{
    int64_t start = sp->g->indptr[sp->roots[i]];
    int64_t range; /* range_factor * k, saturated */
    if (__builtin_mul_overflow(sp->range_factor, sp->k, &range)) range = INT64_MAX;
    int singles = p->draw && p->c > range;
    if (p->draw && !singles) {  /* the positions in the range (lo is 0) */
        int64_t *at = picks_positions(&sp->picks);  /* room: the picks left */
        for (int64_t q = 0; q < p->take; q++) at[q] = pick_position(p, q);
    }
    if (!singles)
        picks_piece(&sp->picks, j, start + p->lo, p->draw ? p->c : p->take,
                    p->draw ? p->take : -1);
    for (int64_t q = 0; q < p->take; q++, j++) {
        row[j] = i;
        if (singles) picks_piece(&sp->picks, j, start + pick_position(p, q), 1, -1);
    }
    return j;
}

/* Every root's picks in root order: written for lists in memory, planned for searched
 * ones; *written = the number of output rows.  The picks are counted first: DDS_EINVAL,
 * nothing written, when they need more than `cap` rows. */
static int select_edges(struct sampler *sp, uint64_t seed, uint64_t epoch, int layer,
                        int64_t cap, int64_t *row, int64_t *nbr, int64_t *eid, int64_t *ets,
                        int64_t *written)
{
    /* count the picks (min(k, c) per root) before anything is sized or written */
    int64_t total = 0, remote = 0;
    for (int64_t i = 0; i < sp->n; i++) {
        int64_t take = sp->cut[i] < sp->k ? sp->cut[i] : sp->k;
        if (take <= 0) continue;
        if (__builtin_add_overflow(total, take, &total))
            return dds_set_error(DDS_ENOMEM, "temporal sample: the edges taken for %lld "
                                 "roots are more than 2^63", (long long)sp->n);
        if (!sp->src[i].ts) remote += take;
    }
    if (total > cap)
        return dds_set_error(DDS_EINVAL, "temporal sample: %lld edges taken, more than the "
                             "output capacity %lld", (long long)total, (long long)cap);
    if (remote) { /* pieces <= picks: one per root or per pick */
        int rc = picks_open(&sp->picks, remote, WHO);
        if (rc != DDS_OK) return rc;
    }
    uint64_t base = stream_mix(stream_mix(splitmix64(seed), epoch), (uint64_t)layer);
    int64_t j = 0;
    for (int64_t i = 0; i < sp->n; i++) {
        if (sp->cut[i] <= 0) continue;
        struct pick p = choose(sp, base, i);
        j = sp->src[i].ts ? write_picks(sp, &p, i, j, row, nbr, eid, ets)
                          : plan_remote_picks(sp, &p, i, j, row);
    }
    *written = j;
    return DDS_OK;
}

/* Read the planned pieces of searched lists (nbr, ts, eid: one batched read each) and
 * scatter each pick to its output slot. */
static int read_remote_picks(struct sampler *sp, int64_t *nbr, int64_t *eid, int64_t *ets)
{
    const dds_tcsr *g = sp->g;
    if (sp->picks.rows > INT64_MAX / (int64_t)sizeof(int64_t))
        return dds_set_error(DDS_ENOMEM, "temporal sample: the remote pieces to read hold "
                             "more than 2^60 entries");
    int vars[3] = {g->nbr_var, g->ts_var, g->eid_var}, bytes[3] = {sp->nb, 8, sp->eb};
    int64_t *outs[3] = {nbr, ets, eid};
    return picks_read(sp->s, &sp->picks, 3, vars, bytes, outs, WHO);
}

int dds_temporal_sample(dds_store *s, const dds_tcsr *g, const int64_t *roots,
                        const void *root_ts, int64_t n, int64_t k, int strategy,
                        uint64_t seed, uint64_t epoch, int layer, int64_t cap,
                        int64_t *row, int64_t *nbr, int64_t *eid, void *ets,
                        int64_t *count)
{
    *count = 0;
    int rc = check_args(s, g, roots, root_ts, n, k, strategy);
    if (rc != DDS_OK) return rc;
    struct sampler sp = {
        .s = s, .g = g, .roots = roots, .root_ts = root_ts, .n = n, .k = k,
        .strategy = strategy, .type = g->time_type,
        .range_factor = g->range_factor > 0 ? g->range_factor : DDS_RANGE_FACTOR,
    };
    int64_t nremote = 0, written = 0;
    rc = sample_id_bytes(s, g->nbr_var, WHO, "nbr", &sp.nb);
    if (rc == DDS_OK) rc = sample_id_bytes(s, g->eid_var, WHO, "eid", &sp.eb);
    if (rc == DDS_OK) rc = open_members(&sp);
    if (rc == DDS_OK) rc = place_lists(&sp, &nremote);
    if (rc == DDS_OK && nremote) rc = fetch_remote_lists(&sp, nremote);
    if (rc == DDS_OK) cut_lists_in_memory(&sp);
    if (rc == DDS_OK && sp.nsearch) rc = cut_lists_by_remote_search(&sp);
    if (rc == DDS_OK) rc = select_edges(&sp, seed, epoch, layer, cap, row, nbr, eid, ets,
                                        &written);
    if (rc == DDS_OK && sp.picks.n) rc = read_remote_picks(&sp, nbr, eid, ets);
    if (rc == DDS_OK) *count = written;
    sampler_free(&sp);
    return rc;
}
