/*
 * transport.c - how the bytes of a read travel: see transport.h.  Below the store
 * (ddstore.c walks a read's rows and hands each contiguous piece here), above the
 * progress agent (progress.c) and the message path (serve.c), which call nothing here.
 *
 * The routes, decided in one function (transport_route, transport.h), per owner and
 * call:
 *   local    the owner is this rank or a member on this node whose chunk is mapped in
 *            the shared-memory window: a memcpy.
 *   message  the owner is on another node, the store serves reads by message
 *            (dds_serve), the call is batched, and the call reads at least min_pieces
 *            pieces from it: one request, answered by the owner (serve.c).
 *   rma      anything else: MPI_Get under the variable's shared lock (gathered per
 *            owner into one get of two hindexed types; per row with its own lock for
 *            DDS_READ_PER_ROW_LOCK), flushed once per owner at the end of the call.
 * A process forked from a rank reads the local route only (no MPI call is allowed).
 */
#define _GNU_SOURCE  /* sched_getaffinity, CPU_COUNT */
#include "transport.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the local copies of a large read (dds_set_copy_threads, at most DDS_MAX_COPY_THREADS
 * threads): this many when choosing, and each a share of at least this many bytes */
#define DDS_AUTO_COPY_THREADS 8
#define DDS_COPY_SHARE_BYTES ((int64_t)1 << 20)
/* ... and only for pieces of at least copy_min_bytes / this on average (4 KiB by default):
 * small pieces (rows of a few hundred bytes gathered at random) are bound by memory
 * latency, and keeping them for the threads made such reads slower than one thread
 * (1.44x for 8 MiB of 256-byte rows, 1.00x at 1 KiB, 0.91x at 64 KiB: one rank, 2 cores) */
#define DDS_COPY_PIECE_DIVISOR 1024

/* largest byte count handed to one MPI_Get (MPI counts are int) */
#define DDS_MAX_GET_BYTES ((int64_t)1 << 30)

/* ------------------------------------------------------------------ the message route */

/* The message route's switch: see dds_serve in dds_store.h. */
int dds_serve(dds_store *s, int on, int64_t min_pieces)
{
    if (!s) return dds_set_error(DDS_ESTATE, "store has been freed");
    if (min_pieces < 1)
        return dds_set_error(DDS_EINVAL, "min_pieces=%lld must be >= 1",
                             (long long)min_pieces);
    if (on && !dds_progress_running(s))
        return dds_set_error(DDS_ESTATE, "reads by message need the progress agent, which "
                             "does not run on this rank");
    if (on) {
        int code = dds_server_prepare(&s->agent_srv);
        if (code != DDS_OK) return code;
        s->agent_srv.patient = 1;
    }
    s->serve_min_pieces = min_pieces;
    atomic_store_explicit(&s->serve_on, on ? 1 : 0, memory_order_release);
    return DDS_OK;
}

int dds_serving(const dds_store *s)
{
    return s ? atomic_load_explicit(&((dds_store *)s)->serve_on, memory_order_acquire) : 0;
}

/* ------------------------------------------------------------------ turns */

/* Below MPI_THREAD_MULTIPLE (s->mpi_serial), the reads of every store of the process
 * that call MPI take turns under this one lock: a read takes it at its first piece that
 * is not a plain load and keeps it until transport_close (reads of node-local rows alone
 * never wait for it). */
static pthread_mutex_t mpi_turn = PTHREAD_MUTEX_INITIALIZER;

static void take_turn(struct transport_call *c)
{
    if (c->serial && !c->turn) {
        pthread_mutex_lock(&mpi_turn);
        c->turn = 1;
    }
}

/* ------------------------------------------------------------------ one-sided gets */

/* RMA pieces of one owner gathered into one MPI_Get of two hindexed datatypes (the
 * pieces' places in the output and in the owner's chunk), so that a batch of scattered
 * rows costs one get per DDS_GET_BLOCKS rows and owner, not one per row. */
#define DDS_GET_BLOCKS 4096

struct gathered {
    MPI_Aint *odisp, *tdisp;  /* DDS_GET_BLOCKS each; NULL until the owner is read */
    int *len;
    int n;
    int64_t bytes;
    uint64_t bits;  /* every odisp, tdisp and len OR-ed: their common alignment */
};

/* The widest of 8, 4, 2, 1 bytes dividing every displacement and length of g and the
 * output's address, with its MPI type: the pieces are copied in units of it.  MPICH
 * copies a hindexed type of MPI_BYTE one byte at a time; of 8-byte integers, 8 at a
 * time (measured: the times of a batch's remote lists read 3-4x faster). */
static MPI_Datatype gather_unit(const struct gathered *g, const char *out, int *unit)
{
    uint64_t bits = g->bits | (uint64_t)(uintptr_t)out;
    if (!(bits & 7)) { *unit = 8; return MPI_INT64_T; }
    if (!(bits & 3)) { *unit = 4; return MPI_INT32_T; }
    if (!(bits & 1)) { *unit = 2; return MPI_INT16_T; }
    *unit = 1;
    return MPI_BYTE;
}

/* RMA traffic of this process (dds_rma_stats): MPI_Get calls, their bytes, and
 * flushes (one per owner per read call: the round trips a read waits for) */
static atomic_llong rma_gets, rma_bytes, rma_flushes;

int dds_rma_stats(int64_t *gets, int64_t *bytes, int64_t *flushes)
{
    if (!gets || !bytes || !flushes)
        return dds_set_error(DDS_EINVAL, "dds_rma_stats: NULL output");
    *gets = atomic_load_explicit(&rma_gets, memory_order_relaxed);
    *bytes = atomic_load_explicit(&rma_bytes, memory_order_relaxed);
    *flushes = atomic_load_explicit(&rma_flushes, memory_order_relaxed);
    return DDS_OK;
}

static void count_get(int64_t bytes)
{
    atomic_fetch_add_explicit(&rma_gets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rma_bytes, bytes, memory_order_relaxed);
}

static int get_gathered(struct dds_var *v, char *out, int owner, struct gathered *g)
{
    if (g->n == 0) return DDS_OK;
    int rc;
    count_get(g->bytes);
    if (g->n == 1) {
        rc = MPI_Get(out + g->odisp[0], g->len[0], MPI_BYTE, owner, g->tdisp[0], g->len[0],
                     MPI_BYTE, v->rma_win);
    } else {
        MPI_Datatype ot = MPI_DATATYPE_NULL, tt = MPI_DATATYPE_NULL;
        int unit = 1;
        MPI_Datatype elem = gather_unit(g, out, &unit);
        if (unit > 1)  /* lengths in units (each a multiple of it) */
            for (int i = 0; i < g->n; i++) g->len[i] /= unit;
        rc = MPI_Type_create_hindexed(g->n, g->len, g->odisp, elem, &ot);
        if (rc == MPI_SUCCESS)
            rc = MPI_Type_create_hindexed(g->n, g->len, g->tdisp, elem, &tt);
        if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&ot);
        if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&tt);
        if (rc == MPI_SUCCESS) rc = MPI_Get(out, 1, ot, owner, 0, 1, tt, v->rma_win);
        /* freeing a datatype leaves the operations using it intact */
        if (ot != MPI_DATATYPE_NULL) MPI_Type_free(&ot);
        if (tt != MPI_DATATYPE_NULL) MPI_Type_free(&tt);
    }
    g->n = 0;
    g->bytes = 0;
    g->bits = 0;
    return rc == MPI_SUCCESS ? DDS_OK : dds_mpi_error(rc, "MPI_Get (gathered rows)");
}

/* Add `bytes` at offset `disp` of member `owner`'s chunk, bound for `dst` in `out`, to
 * g (its arrays allocated on its first piece): in pieces of at most DDS_MAX_GET_BYTES,
 * issuing g's get first whenever it holds DDS_GET_BLOCKS pieces or would pass
 * DDS_MAX_GET_BYTES.  The caller issues what is left (get_gathered) and frees g's
 * arrays. */
static int gather_piece(struct dds_var *v, char *out, int owner, struct gathered *g,
                        char *dst, int64_t disp, int64_t bytes)
{
    if (!g->odisp) {
        g->odisp = malloc(sizeof(MPI_Aint) * 2 * DDS_GET_BLOCKS);
        g->len = malloc(sizeof(int) * DDS_GET_BLOCKS);
        if (!g->odisp || !g->len)
            return dds_set_error(DDS_ENOMEM, "out of memory reading '%s'", v->name);
        g->tdisp = g->odisp + DDS_GET_BLOCKS;
    }
    for (int64_t done = 0; done < bytes; done += DDS_MAX_GET_BYTES) {
        int64_t n = bytes - done < DDS_MAX_GET_BYTES ? bytes - done : DDS_MAX_GET_BYTES;
        if (g->n == DDS_GET_BLOCKS || g->bytes + n > DDS_MAX_GET_BYTES) {
            int rc = get_gathered(v, out, owner, g);
            if (rc != DDS_OK) return rc;
        }
        g->odisp[g->n] = (MPI_Aint)(dst + done - out);
        g->tdisp[g->n] = (MPI_Aint)(disp + done);
        g->len[g->n] = (int)n;
        g->bits |= (uint64_t)g->odisp[g->n] | (uint64_t)g->tdisp[g->n] | (uint64_t)n;
        g->n++;
        g->bytes += n;
    }
    return DDS_OK;
}

int transport_far(dds_store *s, struct transport_call *c, struct transport_piece *p,
                  enum transport_route route)
{
    struct dds_var *v = c->v;
    int per_row = c->per_row;
    char *touched = c->req_touched;
    if (route == TRANSPORT_RMA || route == TRANSPORT_MESSAGE) take_turn(c);
    switch (route) {
    case TRANSPORT_LOCAL:  /* transport_piece copies these */
    case TRANSPORT_RMA:
        break;
    case TRANSPORT_NONE: {
        int owner = p->owner;
        p->owner = -1;
        char what[256];
        snprintf(what, sizeof what, "variable '%s': reading rows of group member %d "
                 "(not in this node's shared memory: MPI_Get)", v->name, owner);
        return dds_forked_refusal(what);
    }
    case TRANSPORT_MESSAGE: {
        int owner = p->owner;
        p->owner = -1;
        if (!c->boxes) {
            c->boxes = calloc((size_t)s->width, sizeof(struct dds_outbox));
            if (!c->boxes) return dds_set_error(DDS_ENOMEM, "out of memory reading");
        }
        return dds_outbox_add(&c->boxes[owner], c->req, p->disp, p->bytes, p->dst);
    }
    }
    if (c->gath && !per_row) {
        int code = gather_piece(v, c->reqs[c->req].out, p->owner, &c->gath[p->owner],
                                p->dst, p->disp, p->bytes);
        if (code == DDS_OK) touched[p->owner] = 1;
        p->owner = -1;
        return code;
    }
    /* RMA: in pieces of at most DDS_MAX_GET_BYTES (MPI counts are int); with per_row,
     * each row in its own lock/unlock epoch (a row may itself need several pieces) */
    int64_t row = per_row ? v->row_bytes : p->bytes;
    for (int64_t first = 0; first < p->bytes; first += row) {
        int64_t end = first + row < p->bytes ? first + row : p->bytes;
        int rc = per_row ? MPI_Win_lock(MPI_LOCK_SHARED, p->owner, 0, v->rma_win)
                         : MPI_SUCCESS;
        int locked = per_row && rc == MPI_SUCCESS;
        for (int64_t done = first; done < end && rc == MPI_SUCCESS;
             done += DDS_MAX_GET_BYTES) {
            int64_t n = end - done < DDS_MAX_GET_BYTES ? end - done : DDS_MAX_GET_BYTES;
            rc = MPI_Get(p->dst + done, (int)n, MPI_BYTE, p->owner,
                         (MPI_Aint)(p->disp + done), (int)n, MPI_BYTE, v->rma_win);
            count_get(n);
        }
        if (locked) {
            int rc2 = MPI_Win_unlock(p->owner, v->rma_win);
            if (rc == MPI_SUCCESS) rc = rc2;
        } else if (!per_row) {
            touched[p->owner] = 1;
        }
        if (rc != MPI_SUCCESS) {
            p->owner = -1;
            return dds_mpi_error(rc, "MPI_Get");
        }
    }
    p->owner = -1;
    return DDS_OK;
}

/* Outboxes with fewer than the store's min_pieces pieces are read by one-sided gets
 * instead of a message, as a walk reads them: gathered, one get per request (and per
 * DDS_GET_BLOCKS pieces). */
static int get_small_box(dds_store *s, struct dds_outbox *o, int owner,
                         const dds_read_req *reqs, char *touched)
{
    int code = DDS_OK;
    for (int64_t i = 0; i < o->n && code == DDS_OK;) {
        int r = o->req[i];
        struct dds_var *v;
        struct gathered g = {NULL, NULL, NULL, 0, 0, 0};
        code = dds_get_var(s, reqs[r].var_id, &v);
        for (; i < o->n && o->req[i] == r && code == DDS_OK; i++)
            code = gather_piece(v, reqs[r].out, owner, &g, o->dst[i], o->disp[i], o->len[i]);
        if (code == DDS_OK) code = get_gathered(v, reqs[r].out, owner, &g);
        free(g.odisp);
        free(g.len);
        touched[(int64_t)r * s->width + owner] = 1;
    }
    return code;
}

/* ------------------------------------------------------------------ local copies */

int dds_set_copy_threads(dds_store *s, int threads, int64_t min_bytes)
{
    if (!s) return dds_set_error(DDS_ESTATE, "store has been freed");
    if (threads < 0 || threads > DDS_MAX_COPY_THREADS)
        return dds_set_error(DDS_EINVAL, "copy threads=%d: allowed 0 (choose) to %d",
                             threads, DDS_MAX_COPY_THREADS);
    if (min_bytes < 1)
        return dds_set_error(DDS_EINVAL, "copy min_bytes=%lld must be >= 1",
                             (long long)min_bytes);
    if (threads == 0) {
        /* a process bound to some of the node's CPUs (a batch system's binding: its
         * own share) uses those; an unbound one its share of the node's CPUs */
        cpu_set_t set;
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        int ranks = 1;
        if (online > 0 && cpus >= online && s->host_comm != MPI_COMM_NULL && !dds_forked())
            MPI_Comm_size(s->host_comm, &ranks);
        threads = cpus / (ranks > 0 ? ranks : 1);
        if (threads > DDS_AUTO_COPY_THREADS) threads = DDS_AUTO_COPY_THREADS;
        if (threads < 1) threads = 1;
    }
    s->copy_threads = threads;
    s->copy_min_bytes = min_bytes;
    return DDS_OK;
}

int dds_copy_threads(const dds_store *s)
{
    return s ? s->copy_threads : 0;
}

void transport_defer_copy(struct transport_call *c, char *dst, const char *src,
                          int64_t bytes)
{
    if (c->ncopies == c->capcopies) {
        int64_t cap = c->capcopies ? 2 * c->capcopies : 256;
        struct transport_copy *grown = realloc(c->copies, (size_t)cap * sizeof *grown);
        if (!grown) {  /* no room to keep it: copied now, as without threads */
            memcpy(dst, src, (size_t)bytes);
            return;
        }
        c->copies = grown;
        c->capcopies = cap;
    }
    c->copies[c->ncopies++] = (struct transport_copy){dst, src, bytes};
}

/* Bytes [lo, hi) of the pieces laid end to end: one thread's share. */
struct copy_share {
    const struct transport_copy *pieces;
    int64_t n, lo, hi;
};

static void *copy_share(void *arg)
{
    const struct copy_share *sh = arg;
    int64_t at = 0;
    for (int64_t i = 0; i < sh->n && at < sh->hi; i++) {
        int64_t a = at, b = at + sh->pieces[i].bytes;
        at = b;
        if (b <= sh->lo) continue;
        int64_t from = a > sh->lo ? a : sh->lo, to = b < sh->hi ? b : sh->hi;
        memcpy(sh->pieces[i].dst + (from - a), sh->pieces[i].src + (from - a),
               (size_t)(to - from));
    }
    return NULL;
}

/* Copy pieces[n] with up to `threads` threads (at least DDS_COPY_SHARE_BYTES each), the
 * calling thread taking the first share; a thread that cannot start leaves its share
 * to the caller.  The threads block every signal (the process's handlers run in its
 * other threads). */
static void copy_pieces(const struct transport_copy *pieces, int64_t n, int threads)
{
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += pieces[i].bytes;
    int64_t most = total / DDS_COPY_SHARE_BYTES;
    if (threads > most) threads = most > 1 ? (int)most : 1;
    struct copy_share share[DDS_MAX_COPY_THREADS];
    pthread_t tid[DDS_MAX_COPY_THREADS];
    char started[DDS_MAX_COPY_THREADS] = {0};
    for (int t = 0; t < threads; t++)
        share[t] = (struct copy_share){pieces, n, total / threads * t,
                                       t + 1 == threads ? total : total / threads * (t + 1)};
    sigset_t all, old;
    sigfillset(&all);
    int masked = threads > 1 && pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&tid[t], NULL, copy_share, &share[t]) == 0;
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    copy_share(&share[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            copy_share(&share[t]);
    }
}

/* ------------------------------------------------------------------ a call */

int transport_open(dds_store *s, struct transport_call *c, const dds_read_req *reqs,
                   int64_t nreq, int per_row, int any_rma, struct dds_var *rma_var)
{
    c->copies = NULL;
    c->ncopies = c->capcopies = 0;
    c->copy_threads = 1;
    if (s->copy_threads > 1) {  /* a large read of large pieces: copied by threads */
        int64_t want = 0, pieces = 0;
        for (int64_t r = 0; r < nreq && want < s->copy_min_bytes; r++)
            if (reqs[r].out_bytes > 0) {
                want += reqs[r].out_bytes;
                pieces += reqs[r].n > 0 ? reqs[r].n : 1;
            }
        if (want >= s->copy_min_bytes &&
            want / (pieces > 0 ? pieces : 1) >= s->copy_min_bytes / DDS_COPY_PIECE_DIVISOR)
            c->copy_threads = s->copy_threads;
    }
    c->reqs = reqs;
    c->nreq = nreq;
    c->per_row = per_row;
    c->any_rma = any_rma;
    c->rma_var = rma_var;
    c->touched = c->touched_stack;
    c->gath = NULL;
    c->req_touched = NULL;
    c->v = NULL;
    c->req = 0;
    c->boxes = NULL;
    c->serial = s->mpi_serial && !dds_forked();  /* (a forked process calls no MPI) */
    c->turn = 0;
    /* Targets with gets in flight during one call: per call (not per store), so that
     * reads from several threads never flush or skip each other's targets */
    c->ntouched = any_rma ? nreq * s->width : 0;
    if (c->ntouched > DDS_TOUCHED_ON_STACK) {
        c->touched = calloc((size_t)c->ntouched, 1);
        if (!c->touched) {
            c->touched = c->touched_stack;  /* transport_close has nothing to do */
            c->ntouched = 0;
            c->per_row = 0;
            return dds_set_error(DDS_ENOMEM, "out of memory reading");
        }
    } else if (c->ntouched) {
        memset(c->touched, 0, (size_t)c->ntouched);
    }
    /* the outboxes are allocated by the first piece of a member on another node */
    c->serve = atomic_load_explicit(&s->serve_on, memory_order_acquire) && !per_row &&
               s->off_node > 0 && !dds_forked();
    if (per_row) {
        /* the per-row path locks each row itself: leave the variable's shared epoch */
        take_turn(c);
        int rc = MPI_Win_unlock_all(rma_var->rma_win);
        if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Win_unlock_all");
        c->per_row = 2;  /* relock in transport_close */
    }
    return DDS_OK;
}

int transport_begin(dds_store *s, struct transport_call *c, int req, struct dds_var *v)
{
    c->req = req;
    c->v = v;
    c->req_touched = c->touched + (c->any_rma ? (int64_t)req * s->width : 0);
    c->gath = NULL;
    if (v->rma_win != MPI_WIN_NULL && !c->per_row && c->reqs[req].n > 1) {
        c->gath = calloc(s->width, sizeof(struct gathered));
        if (!c->gath) return dds_set_error(DDS_ENOMEM, "out of memory reading '%s'", v->name);
    }
    return DDS_OK;
}

int transport_end(dds_store *s, struct transport_call *c, int code)
{
    if (c->gath) {
        for (int g = 0; g < s->width; g++) {
            if (code == DDS_OK) code = get_gathered(c->v, c->reqs[c->req].out, g, &c->gath[g]);
            free(c->gath[g].odisp);
            free(c->gath[g].len);
        }
        free(c->gath);
        c->gath = NULL;
    }
    return code;
}

int transport_close(dds_store *s, struct transport_call *c, int code)
{
    const dds_read_req *reqs = c->reqs;
    int64_t nreq = c->nreq;
    char *touched = c->touched;
    if (c->boxes) {
        for (int g = 0; g < s->width && code == DDS_OK; g++) {
            struct dds_outbox *o = &c->boxes[g];
            if (o->n == 0) continue;
            code = transport_route(s, NULL, g, c, o->n) == TRANSPORT_MESSAGE
                       ? dds_outbox_send(s, o, g, reqs)
                       : get_small_box(s, o, g, reqs, touched);
        }
    }
    if (c->copies) {  /* the local pieces, while the remote ones travel (gets issued,
                       * requests by message sent) */
        if (code == DDS_OK) copy_pieces(c->copies, c->ncopies, c->copy_threads);
        free(c->copies);
        c->copies = NULL;
        c->ncopies = c->capcopies = 0;
    }
    if (c->per_row == 2) {
        int rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, c->rma_var->rma_win);
        if (rc != MPI_SUCCESS && code == DDS_OK)
            code = dds_mpi_error(rc, "MPI_Win_lock_all");
    } else {
        /* while this thread flushes, the agent (if any) leaves MPI's lock to it */
        struct dds_var *v;
        int waiting = 0, agent = s->progress_on;
        for (int64_t i = 0; i < c->ntouched; i++) {
            if (!touched[i]) continue;
            if (agent && !waiting++) atomic_fetch_add(&s->mpi_waiters, 1);
            dds_get_var(s, reqs[i / s->width].var_id, &v);
            int rc = MPI_Win_flush((int)(i % s->width), v->rma_win);
            if (rc != MPI_SUCCESS && code == DDS_OK)
                code = dds_mpi_error(rc, "MPI_Win_flush");
        }
        if (waiting) atomic_fetch_sub(&s->mpi_waiters, 1);
        /* the round trips waited for: one per owner, whatever its variables (their
         * gets were all issued before the first flush) */
        for (int g = 0; g < s->width && c->ntouched; g++) {
            int any = 0;
            for (int64_t r = 0; r < nreq && !any; r++) any = touched[r * s->width + g];
            if (any) atomic_fetch_add_explicit(&rma_flushes, 1, memory_order_relaxed);
        }
    }
    if (c->boxes) {
        /* sent requests are always waited for: their receives write into the output */
        int w = dds_wait_outboxes(s, c->boxes, s->width, reqs);
        if (code == DDS_OK) code = w;
        for (int g = 0; g < s->width; g++) dds_outbox_free(&c->boxes[g]);
        free(c->boxes);
        c->boxes = NULL;
    }
    if (c->touched != c->touched_stack) free(c->touched);
    c->touched = NULL;
    if (c->turn) {
        c->turn = 0;
        pthread_mutex_unlock(&mpi_turn);
    }
    return code;
}
