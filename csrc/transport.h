/*
 * transport.h - how the bytes of a read travel (csrc/transport.c), below the store
 * (csrc/ddstore.c), which walks a read's rows and hands each contiguous piece here.
 * The one place that decides, per owner and call, whether a piece is a plain load from
 * node-local shared memory, a one-sided MPI_Get, or part of a request by message
 * (csrc/serve.c): transport_route.  Internal: not for bindings.
 */
#ifndef DDSTORE_TRANSPORT_H
#define DDSTORE_TRANSPORT_H

#include "internal.h"

#include <string.h>

/* The address of member `owner`'s chunk of `v` when this process reads it by plain
 * loads (its own chunk, or a node-local member's in the shared-memory window), else
 * NULL.  The one test of the local route (transport_route, the prefetch of a read,
 * dds_member_ptr). */
static inline char *transport_load_base(const dds_store *s, const struct dds_var *v,
                                        int owner)
{
    return owner == s->group_rank ? v->base : v->peer_base[owner];
}

enum transport_route {
    TRANSPORT_LOCAL,    /* plain loads (memcpy) */
    TRANSPORT_RMA,      /* one-sided MPI_Get under the variable's shared lock */
    TRANSPORT_MESSAGE,  /* a request to the owner, answered by its agent (serve.c) */
    TRANSPORT_NONE      /* none: a forked process may not call MPI */
};

/* Targets with gets in flight, per call: on the stack up to this many entries. */
#define DDS_TOUCHED_ON_STACK 256

struct gathered;

/* One read call (dds_read / dds_read_many): what its requests share while their pieces
 * travel.  Filled by transport_open, released by transport_close. */
struct transport_call {
    const dds_read_req *reqs;
    int64_t nreq;
    int per_row;       /* 0; 1: each row in its own lock epoch; 2: the same, the
                        * variable's shared epoch left (relocked by transport_close) */
    int serve;         /* this call may read members on other nodes by message */
    int any_rma;       /* some request's variable has an RMA window */
    int serial;        /* its MPI calls take turns (s->mpi_serial, not forked) */
    int turn;          /* ... and it holds the turn (from its first MPI piece to close) */
    struct dds_outbox *boxes;  /* [width]: pieces going by message; NULL until needed */
    /* touched[r * width + g]: gets of request r's variable in flight at member g */
    char touched_stack[DDS_TOUCHED_ON_STACK], *touched;
    int64_t ntouched;
    struct dds_var *rma_var;   /* the variable whose epoch per_row leaves */
    /* the request being walked (transport_begin .. transport_end) */
    int req;
    struct dds_var *v;
    struct gathered *gath;     /* its gets gathered per owner, or NULL */
    char *req_touched;         /* its row of touched */
    /* local pieces left for copy_threads threads (copy_threads > 1), copied by
     * transport_close; NULL: each copied as it is walked */
    int copy_threads;
    struct transport_copy *copies;
    int64_t ncopies, capcopies;
};

/* A local piece whose copy waits for transport_close's threads. */
struct transport_copy {
    char *dst;
    const char *src;
    int64_t bytes;
};

/* Keep the local piece `src` -> `dst` (`bytes`) of call `c` for transport_close's copy
 * threads; copied here at once when the list cannot grow. */
void transport_defer_copy(struct transport_call *c, char *dst, const char *src,
                          int64_t bytes) __attribute__((visibility("hidden")));

/* A contiguous piece of a request waiting to travel: `bytes` at offset `disp` of
 * member `owner`'s chunk, bound for `dst`; owner -1: none.  The store's walk merges
 * adjacent rows into one piece before handing it to transport_piece. */
struct transport_piece {
    int owner;
    int64_t disp;
    char *dst;
    int64_t bytes;
};

/* How the bytes of member `owner` travel in call `c`: the one decision of the route.
 * `v`: the variable read (NULL when deciding for all of the owner's pieces of the call
 * at once, which are never local).  `pieces`: how many pieces the call reads from
 * `owner` when known (after the walk: fewer than the store's min_pieces go by MPI_Get,
 * not by message), else -1.  Inline: it runs for every piece of a read. */
static inline enum transport_route transport_route(const dds_store *s,
                                                   const struct dds_var *v, int owner,
                                                   const struct transport_call *c,
                                                   int64_t pieces)
{
    if (v && transport_load_base(s, v, owner)) return TRANSPORT_LOCAL;
    if (dds_forked()) return TRANSPORT_NONE;
    if (c->serve && s->member_off[owner] && (pieces < 0 || pieces >= s->serve_min_pieces))
        return TRANSPORT_MESSAGE;
    return TRANSPORT_RMA;
}

/* Start call `c` over the checked requests reqs[nreq] (`per_row`: each row in its own
 * lock epoch, for a call whose variable `rma_var` has an RMA window).  After a failure
 * (DDS_ENOMEM) there is nothing to close; after any other, transport_close still runs
 * (it relocks or flushes what this call left). */
int transport_open(dds_store *s, struct transport_call *c, const dds_read_req *reqs,
                   int64_t nreq, int per_row, int any_rma, struct dds_var *rma_var)
    __attribute__((visibility("hidden")));
/* Request `req` of the call, of variable `v`, starts / ends (its gathered gets issued;
 * `code`: the walk's result, returned unless it was DDS_OK and issuing failed). */
int transport_begin(dds_store *s, struct transport_call *c, int req, struct dds_var *v)
    __attribute__((visibility("hidden")));
int transport_end(dds_store *s, struct transport_call *c, int code)
    __attribute__((visibility("hidden")));
/* Send piece `p` of the current request on a route other than the local one (gets
 * gathered per owner, pieces by message queued in the owner's outbox); p->owner is -1
 * after. */
int transport_far(dds_store *s, struct transport_call *c, struct transport_piece *p,
                  enum transport_route route) __attribute__((visibility("hidden")));

/* Send piece `p` of the current request on its route: a local piece is copied here
 * (inline: the walk of a read from shared memory is a copy per row), any other goes to
 * transport_far.  p->owner is -1 after. */
static inline int transport_piece(dds_store *s, struct transport_call *c,
                                  struct transport_piece *p)
{
    if (p->owner < 0 || p->bytes == 0) return DDS_OK;
    enum transport_route route = transport_route(s, c->v, p->owner, c, -1);
    if (route != TRANSPORT_LOCAL) return transport_far(s, c, p, route);
    const char *src = transport_load_base(s, c->v, p->owner) + p->disp;
    if (c->copy_threads > 1)
        transport_defer_copy(c, p->dst, src, p->bytes);
    else
        memcpy(p->dst, src, (size_t)p->bytes);
    p->owner = -1;
    return DDS_OK;
}

/* End the call: its requests by message sent (or read by gets when small), its gets
 * flushed (or the per-row epoch relocked), the replies waited for and copied into
 * place; everything released.  Returns `code` unless it was DDS_OK and this failed. */
int transport_close(dds_store *s, struct transport_call *c, int code)
    __attribute__((visibility("hidden")));

#endif /* DDSTORE_TRANSPORT_H */
