/*
 * relabel.c - the one relabelling of the samplers (see dds_neighbor.h, "the relabelling
 * map"): global node ids, or (subgraph, node) pairs in disjoint mode, to the positions
 * of a batch's node list, in order of first appearance.
 *
 * One rule picks the map per batch (relabel_rule): a dense array (an int32 per key of
 * the key space, position + 1, 0 for none) when the key space holds at most
 * max(dense_max, 16 * expected keys) keys and below 2^31; else an open-addressing hash
 * of (node, subgraph, position) slots.  Neither is cleared between batches: the dense
 * array's entries of the batch's keys are set back to 0 (the keys are the node list),
 * the hash's slots go stale by generation (a slot is in use when its value is >= base;
 * a new batch raises base above every value).  The hash doubles when 3/4 full of the
 * batch's distinct keys, rebuilt from the node list: it is sized by the keys it holds,
 * never by the keys asked about.
 */
#include "internal.h"
#include "sampling.h"

#include <stdlib.h>
#include <string.h>

#define WHO "relabel"

/* the one rule: whether a batch over a key space of `bound` keys, with about
 * `expected` keys (0: unknown), is mapped densely */
static int relabel_rule(int64_t bound, int64_t expected, int64_t dense_max)
{
    int64_t most = dense_max;
    if (expected > 0 && expected < INT64_MAX / 16 && 16 * expected > most)
        most = 16 * expected;
    return bound >= 0 && bound <= most && bound < INT32_MAX;
}

static inline int64_t dense_key(const struct dds_relabel *m, int64_t node, int64_t sub)
{
    return sub * m->num_nodes + node;  /* < bound: checked by the caller */
}

static inline uint64_t hash_of(int64_t node, int64_t sub)
{
    return splitmix64((uint64_t)node + (uint64_t)sub * STREAM_GOLDEN);  /* sub 0: node's */
}

/* the slot of (node, sub) among those in use, or the empty slot where it would go */
static inline uint64_t hash_find(const struct dds_relabel *m, int64_t node, int64_t sub)
{
    const int64_t *slot = m->slot;
    uint64_t h = hash_of(node, sub) & m->mask;
    while (slot[3 * h + 2] >= m->base && (slot[3 * h] != node || slot[3 * h + 1] != sub))
        h = (h + 1) & m->mask;
    return h;
}

/* a hash of `size` (a power of two) empty slots, this batch's keys put back at their
 * first positions */
static int hash_build(struct dds_relabel *m, uint64_t size)
{
    if (size > SIZE_MAX / (3 * sizeof(int64_t))) return sample_no_memory(WHO);
    int64_t *slot = malloc(3 * sizeof(int64_t) * (size_t)size);
    if (!slot) return sample_no_memory(WHO);
    memset(slot, 0xff, 3 * sizeof(int64_t) * (size_t)size);  /* values -1: empty */
    free(m->slot);
    m->slot = slot;
    m->mask = size - 1;
    m->base = 0;
    m->used = 0;
    for (int64_t p = 0; p < m->count; p++) {
        int64_t node = m->nodes[p], sub = m->subs ? m->subs[p] : 0;
        uint64_t h = hash_find(m, node, sub);
        if (slot[3 * h + 2] < 0) {  /* the first occurrence keeps its position */
            slot[3 * h] = node;
            slot[3 * h + 1] = sub;
            slot[3 * h + 2] = p;
            m->used++;
        }
    }
    return DDS_OK;
}

/* a dense map's positions (stored + 1 in int32) stay below 2^31 - 1 */
static int dense_room(const struct dds_relabel *m)
{
    if (m->count < INT32_MAX - 1) return DDS_OK;
    return dds_set_error(DDS_EINVAL, "relabel: more than %d nodes in a batch of a dense "
                         "map", INT32_MAX - 2);
}

/* room in the node list for one more */
static int list_room(struct dds_relabel *m)
{
    if (m->count < m->held) return DDS_OK;
    int64_t held = m->held ? 2 * m->held : 1024;
    if (held > INT64_MAX / 16) return sample_no_memory(WHO);
    int64_t *nodes = realloc(m->nodes, sizeof(int64_t) * (size_t)held);
    if (!nodes) return sample_no_memory(WHO);
    m->nodes = nodes;
    if (m->subgraphs) {
        int64_t *subs = realloc(m->subs, sizeof(int64_t) * (size_t)held);
        if (!subs) return sample_no_memory(WHO);
        m->subs = subs;
    }
    m->held = held;
    return DDS_OK;
}

void relabel_reset(struct dds_relabel *m)
{
    if (m->dense_pos) {
        for (int64_t p = 0; p < m->count; p++)
            m->dense_pos[dense_key(m, m->nodes[p], m->subs && m->subgraphs ? m->subs[p]
                                                                           : 0)] = 0;
    } else if (m->slot) {
        m->base += m->count;  /* every value of this batch is below: all stale */
    }
    m->count = 0;
    m->used = 0;
}

void relabel_release(struct dds_relabel *m)
{
    free(m->nodes);
    free(m->subs);
    free(m->dense_all);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

int relabel_begin(struct dds_relabel *m, int64_t num_nodes, int64_t subgraphs,
                  int64_t expected, int64_t dense_max)
{
    if (num_nodes < 0 || subgraphs < 0 || expected < 0)
        return dds_set_error(DDS_EINVAL, "relabel: num_nodes=%lld, subgraphs=%lld and "
                             "expected=%lld must be >= 0", (long long)num_nodes,
                             (long long)subgraphs, (long long)expected);
    relabel_reset(m);
    int64_t bound = num_nodes;
    if (subgraphs && __builtin_mul_overflow(subgraphs, num_nodes, &bound))
        bound = -1;  /* beyond int64: hashed */
    int had_subs = m->subgraphs != 0;
    m->num_nodes = num_nodes;
    m->subgraphs = subgraphs;
    if (subgraphs && !had_subs && m->held) {  /* the node list gains its subgraphs */
        free(m->subs);
        m->subs = malloc(sizeof(int64_t) * (size_t)m->held);
        if (!m->subs) {
            m->held = 0;
            return sample_no_memory(WHO);
        }
    }
    m->dense_pos = NULL;
    if (relabel_rule(bound, expected, dense_max)) {
        if (m->dense_len < bound || !m->dense_all) {  /* zeroed pages, faulted in on use */
            free(m->dense_all);
            m->dense_all = calloc((size_t)(bound ? bound : 1), sizeof(int32_t));
            m->dense_len = m->dense_all ? bound : 0;
            if (!m->dense_all) return sample_no_memory(WHO);
        }
        m->dense_pos = m->dense_all;
        return DDS_OK;
    }
    if (!m->slot) {
        uint64_t size = 16;
        while (size / 4 * 3 < (uint64_t)expected && size < ((uint64_t)1 << 60)) size *= 2;
        return hash_build(m, size);
    }
    return DDS_OK;
}

/* the key (node, sub) in this batch's key space, else DDS_EINVAL naming position i */
static int check_key(const struct dds_relabel *m, int64_t node, int64_t sub, int64_t i)
{
    if (node < 0 || node >= m->num_nodes)
        return dds_set_error(DDS_EINVAL, "relabel: node %lld (position %lld) outside "
                             "[0, %lld)", (long long)node, (long long)i,
                             (long long)m->num_nodes);
    if (m->subgraphs && (sub < 0 || sub >= m->subgraphs))
        return dds_set_error(DDS_EINVAL, "relabel: subgraph %lld (position %lld) outside "
                             "[0, %lld)", (long long)sub, (long long)i,
                             (long long)m->subgraphs);
    return DDS_OK;
}

int64_t relabel_find(const struct dds_relabel *m, int64_t node, int64_t sub)
{
    if (m->dense_pos) return (int64_t)m->dense_pos[dense_key(m, node, sub)] - 1;
    int64_t v = m->slot[3 * hash_find(m, node, sub) + 2];
    return v >= m->base ? v - m->base : -1;
}

/* (node, sub): *at its position, adding it at the next one when new; returns 1 when
 * added, 0 when known, -1 on an error (set; *rc its code) */
static inline int put(struct dds_relabel *m, int64_t node, int64_t sub, int64_t *at,
                      int *rc)
{
    if (m->dense_pos) {
        int32_t *e = &m->dense_pos[dense_key(m, node, sub)];
        if (*e) {
            *at = *e - 1;
            return 0;
        }
        if ((*rc = dense_room(m)) != DDS_OK || (*rc = list_room(m)) != DDS_OK) return -1;
        *e = (int32_t)(m->count + 1);
    } else {
        uint64_t h = hash_find(m, node, sub);
        if (m->slot[3 * h + 2] >= m->base) {
            *at = m->slot[3 * h + 2] - m->base;
            return 0;
        }
        if ((*rc = list_room(m)) != DDS_OK) return -1;
        if ((uint64_t)(m->used + 1) > (m->mask + 1) / 4 * 3) {
            if ((*rc = hash_build(m, 2 * (m->mask + 1))) != DDS_OK) return -1;
            h = hash_find(m, node, sub);
        }
        m->slot[3 * h] = node;
        m->slot[3 * h + 1] = sub;
        m->slot[3 * h + 2] = m->base + m->count;
        m->used++;
    }
    m->nodes[m->count] = node;
    if (m->subgraphs) m->subs[m->count] = sub;
    *at = m->count++;
    return 1;
}

int relabel_check(const struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                  int64_t n)
{
    if ((subs != NULL) != (m->subgraphs != 0) && n > 0)
        return dds_set_error(DDS_EINVAL, "relabel: subgraphs %s for a map begun with "
                             "subgraphs=%lld", subs ? "given" : "missing",
                             (long long)m->subgraphs);
    /* checked first: nothing mapped on a bad key (one pass, the message on a miss) */
    const uint64_t nodes_end = (uint64_t)m->num_nodes, subs_end = (uint64_t)m->subgraphs;
    int64_t bad = -1;
    if (subs) {
        for (int64_t i = 0; i < n && bad < 0; i++)
            if ((uint64_t)nodes[i] >= nodes_end || (uint64_t)subs[i] >= subs_end) bad = i;
    } else {
        for (int64_t i = 0; i < n && bad < 0; i++)
            if ((uint64_t)nodes[i] >= nodes_end) bad = i;
    }
    return bad < 0 ? DDS_OK : check_key(m, nodes[bad], subs ? subs[bad] : 0, bad);
}

int relabel_seed(struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                 int64_t n)
{
    int rc = relabel_check(m, nodes, subs, n);
    for (int64_t i = 0; i < n && rc == DDS_OK; i++) {
        int64_t node = nodes[i], sub = subs ? subs[i] : 0, at;
        int added = put(m, node, sub, &at, &rc);
        if (added == 0) {  /* a repeat: a position of its own, the map keeps the first */
            if (m->dense_pos && (rc = dense_room(m)) != DDS_OK) break;
            if ((rc = list_room(m)) != DDS_OK) break;
            m->nodes[m->count] = node;
            if (m->subgraphs) m->subs[m->count] = sub;
            m->count++;
        }
    }
    return rc;
}

/* relabel_map over the dense array: one tight loop, the map's fields in locals */
static int map_dense(struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                     int64_t n, int64_t *pos, int64_t *new_nodes, int64_t *new_sub,
                     int64_t *n_new)
{
    int32_t *d = m->dense_pos;
    const int64_t width = m->num_nodes;
    int64_t count = m->count, nn = 0;
    int rc = DDS_OK;
    for (int64_t i = 0; i < n; i++) {
        if (i + 16 < n)
            __builtin_prefetch(&d[subs ? subs[i + 16] * width + nodes[i + 16]
                                       : nodes[i + 16]], 1);
        int64_t node = nodes[i], sub = subs ? subs[i] : 0;  /* read before any write */
        int32_t *e = &d[sub * width + node];
        int64_t at = (int64_t)*e - 1;
        if (at < 0) {
            m->count = count;
            if ((rc = dense_room(m)) != DDS_OK || (rc = list_room(m)) != DDS_OK) break;
            at = count++;
            *e = (int32_t)count;
            m->nodes[at] = node;
            if (subs) m->subs[at] = sub;
            new_nodes[nn] = node;
            if (new_sub) new_sub[nn] = sub;
            nn++;
        }
        pos[i] = at;
    }
    m->count = count;
    *n_new = nn;
    return rc;
}

int relabel_map(struct dds_relabel *m, const int64_t *nodes, const int64_t *subs,
                int64_t n, int64_t *pos, int64_t *new_nodes, int64_t *new_sub,
                int64_t *n_new)
{
    *n_new = 0;
    int rc = relabel_check(m, nodes, subs, n);
    if (rc != DDS_OK) return rc;
    if (m->dense_pos) return map_dense(m, nodes, subs, n, pos, new_nodes, new_sub, n_new);
    int64_t nn = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + 8 < n)
            __builtin_prefetch(&m->slot[3 * (hash_of(nodes[i + 8], subs ? subs[i + 8] : 0)
                                             & m->mask)], 1);
        int64_t node = nodes[i], sub = subs ? subs[i] : 0, at;
        int added = put(m, node, sub, &at, &rc);  /* nodes[i], subs[i] read first */
        if (added < 0) break;
        if (added) {
            new_nodes[nn] = node;
            if (new_sub) new_sub[nn] = sub;
            nn++;
        }
        pos[i] = at;
    }
    *n_new = nn;
    return rc;
}

/* ------------------------------------------------------------------ the C API */

int dds_relabel_open(dds_relabel **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DDS_OK : sample_no_memory(WHO);
}

void dds_relabel_free(dds_relabel *m)
{
    if (!m) return;
    relabel_release(m);
    free(m);
}

int dds_relabel_begin(dds_relabel *m, int64_t num_nodes, int64_t subgraphs,
                      int64_t expected, int64_t dense_max)
{
    return relabel_begin(m, num_nodes, subgraphs, expected, dense_max);
}

void dds_relabel_reset(dds_relabel *m)
{
    relabel_reset(m);
}

int dds_relabel_seed(dds_relabel *m, const int64_t *nodes, const int64_t *subs, int64_t n)
{
    if (n < 0) return dds_set_error(DDS_EINVAL, "relabel: n=%lld must be >= 0",
                                    (long long)n);
    return relabel_seed(m, nodes, subs, n);
}

int dds_relabel_add(dds_relabel *m, const int64_t *nodes, const int64_t *subs, int64_t n,
                    int64_t cap, int64_t *pos, int64_t *new_nodes, int64_t *new_sub,
                    int64_t *n_new)
{
    *n_new = 0;
    if (n < 0 || cap < n)
        return dds_set_error(DDS_EINVAL, "relabel: n=%lld keys must be >= 0 and at most "
                             "the output capacity %lld", (long long)n, (long long)cap);
    if (m->subgraphs && n > 0 && !new_sub)
        return dds_set_error(DDS_EINVAL, "relabel: new_sub is NULL for a map begun with "
                             "subgraphs=%lld", (long long)m->subgraphs);
    return relabel_map(m, nodes, subs, n, pos, new_nodes, m->subgraphs ? new_sub : NULL,
                       n_new);
}

int64_t dds_relabel_count(const dds_relabel *m)
{
    return m->count;
}

int dds_relabel_is_dense(const dds_relabel *m)
{
    return m->dense_pos != NULL;
}

int64_t dds_relabel_slots(const dds_relabel *m)
{
    return m->dense_pos ? m->dense_len : (m->slot ? (int64_t)(m->mask + 1) : 0);
}
