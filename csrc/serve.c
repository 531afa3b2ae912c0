/*
 * serve.c - the message path: rows of a member on another node read by asking that
 * member, which packs them and answers with one reply (see dds_serve in dds_store.h).
 *
 * Why.  Over a network without RDMA reads (TCP: MPICH's ch4:ofi with libfabric's tcp
 * provider) the target's MPI answers a one-sided MPI_Get piece by piece: a batch of
 * scattered 400-byte rows reads at 0.4-0.6 GB/s where one contiguous get of the same
 * bytes reads at 1.5-3 GB/s (measured on the loopback, docs/cluster.md).  Asked by
 * message, the owner copies the rows into a buffer at memory speed and streams them.
 *
 * The protocol, on the store's progress communicator (a duplicate of the group's):
 *   request  (tag DDS_TAG_REQUEST, int64 words, reader -> owner):
 *            reply tag, total bytes, number of groups, then per group: variable id,
 *            pieces, and per piece (byte offset in the owner's chunk, bytes)
 *   reply    (the request's reply tag, owner -> reader): one int64 status (0: every
 *            piece packed; else a DDS_* code: an unknown variable, a piece outside the
 *            chunk), then the total bytes (zeros after a failure) in messages of at most
 *            DDS_SERVE_CHUNK bytes, in order.
 * A reader posts every receive before it sends its request, so the owner's sends never
 * wait for the reader to arrive.  Each call of a reader takes a reply tag of its own
 * (a process-wide counter), so concurrent reads from several threads never match each
 * other's replies.  Requests are answered by the owner's progress agent
 * (csrc/progress.c), and by any of the owner's threads while it waits for replies of its
 * own (dds_wait_outboxes), so two ranks reading from each other never wait on each
 * other's agent.
 */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define DDS_TAG_REQUEST 1
#define DDS_TAG_FIRST_REPLY 16
/* a reply's parts: 4 MiB (each answering thread has two).  Over TCP each part costs
 * the answering thread a wait for the previous one, a nap when its reader is slow to
 * drain it; 4 MiB parts made PyG batches between nodes 14 % faster than 256 KiB ones
 * (scale 0.25, 5 alternated rounds, docs/cluster.md) */
#define DDS_SERVE_CHUNK ((int64_t)1 << 22)
#define DDS_SERVE_NAP_NS 5000
/* polls of a waiting reader before it naps between polls */
#define DDS_SERVE_SPINS 200

static atomic_llong serve_sent, serve_asked, serve_served, serve_bytes;
static atomic_int next_tag;

int dds_serve_stats(int64_t *sent, int64_t *asked, int64_t *served, int64_t *bytes)
{
    if (!sent || !asked || !served || !bytes)
        return dds_set_error(DDS_EINVAL, "dds_serve_stats: NULL output");
    *sent = atomic_load(&serve_sent);
    *asked = atomic_load(&serve_asked);
    *served = atomic_load(&serve_served);
    *bytes = atomic_load(&serve_bytes);
    return DDS_OK;
}

/* ------------------------------------------------------------------ the owner's side */

void dds_server_release(struct dds_server *srv)
{
    free(srv->pack[0]);
    free(srv->pack[1]);
    free(srv->words);
    memset(srv, 0, sizeof *srv);
}

/* DDS_OK when every piece of the request lies in this rank's chunks of known
 * variables and their bytes add up to the total it announced. */
static int check_asked(const dds_store *s, const int64_t *w, int64_t nw)
{
    if (nw < 3 || w[1] < 0 || w[2] < 0) return DDS_EINVAL;
    int64_t at = 3, sum = 0;
    for (int64_t g = 0; g < w[2]; g++) {
        if (at + 2 > nw) return DDS_EINVAL;
        struct dds_var *v;
        if (w[at] < 0 || w[at] > INT_MAX || dds_get_var(s, (int)w[at], &v) != DDS_OK)
            return DDS_ESTATE;
        int64_t np = w[at + 1], chunk = v->n_local * v->row_bytes;
        at += 2;
        if (np < 0 || np > (nw - at) / 2) return DDS_EINVAL;
        for (int64_t i = 0; i < np; i++, at += 2) {
            int64_t disp = w[at], len = w[at + 1];
            if (disp < 0 || len < 0 || disp > chunk || len > chunk - disp) return DDS_ERANGE;
            if (len > INT64_MAX / 2 - sum) return DDS_EINVAL;
            sum += len;
        }
    }
    return at == nw && sum == w[1] ? DDS_OK : DDS_EINVAL;
}

/* Sleep DDS_SERVE_NAP_NS.  With `slack` (a waiting reader's: its thread's timer slack
 * before its first nap, -1 until then), the first nap sets this thread's slack to 1 us
 * (the default 50 us would stretch every nap; the reader puts it back when done); the
 * agent's thread has its slack set once (csrc/progress.c). */
static void nap(int *slack)
{
    if (slack && *slack < 0) {
        int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
        *slack = old > 0 ? old : 0;
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    }
    struct timespec ts = {0, DDS_SERVE_NAP_NS};
    nanosleep(&ts, NULL);
}

/* Wait for a request (a send, the request's receive).  The agent (patient) tests and
 * naps between tests: a blocking MPI call's progress loop yields its core and may
 * then wait a whole time slice of the rank's computing thread (measured: 3-15 ms). */
static int wait_request(MPI_Request *req, int patient)
{
    if (!patient) return MPI_Wait(req, MPI_STATUS_IGNORE);
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        nap(NULL);
    }
}

/* Send what is in pack[*cur] (bytes) and switch buffers, first waiting for the send
 * that used the other one. */
static int send_part(dds_store *s, struct dds_server *srv, int *cur, MPI_Request *req,
                     int64_t bytes, int to, int tag)
{
    int rc = MPI_Isend(srv->pack[*cur], (int)bytes, MPI_BYTE, to, tag, s->progress_comm,
                       &req[*cur]);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Isend (reply)");
    *cur ^= 1;
    rc = wait_request(&req[*cur], srv->patient);
    return rc == MPI_SUCCESS ? DDS_OK : dds_mpi_error(rc, "MPI_Wait (reply)");
}

static int answer(dds_store *s, struct dds_server *srv, int64_t nw, int to)
{
    const int64_t *w = srv->words;
    int tag = (int)w[0];
    int64_t status = check_asked(s, w, nw);
    int64_t total = nw >= 2 && w[1] > 0 ? w[1] : 0;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int rc = MPI_Isend(&status, 1, MPI_INT64_T, to, tag, s->progress_comm, &req[1]);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Isend (reply status)");
    int cur = 0, code = DDS_OK;
    int64_t fill = 0;  /* bytes in pack[cur] */
    if (status != DDS_OK) {
        /* the reader has posted receives for `total` bytes: send zeros */
        size_t zero = (size_t)(total < DDS_SERVE_CHUNK ? total : DDS_SERVE_CHUNK);
        memset(srv->pack[0], 0, zero);
        memset(srv->pack[1], 0, zero);
        for (int64_t done = 0; done < total && code == DDS_OK; done += DDS_SERVE_CHUNK) {
            int64_t n = total - done < DDS_SERVE_CHUNK ? total - done : DDS_SERVE_CHUNK;
            code = send_part(s, srv, &cur, req, n, to, tag);
        }
    } else {
        int64_t at = 3;
        for (int64_t g = 0; g < w[2] && code == DDS_OK; g++) {
            struct dds_var *v;
            dds_get_var(s, (int)w[at], &v);  /* checked above */
            int64_t np = w[at + 1];
            at += 2;
            for (int64_t i = 0; i < np && code == DDS_OK; i++, at += 2) {
                const char *src = v->base + w[at];
                int64_t left = w[at + 1];
                while (left > 0 && code == DDS_OK) {
                    int64_t n = DDS_SERVE_CHUNK - fill < left ? DDS_SERVE_CHUNK - fill : left;
                    memcpy(srv->pack[cur] + fill, src, (size_t)n);
                    fill += n;
                    src += n;
                    left -= n;
                    if (fill == DDS_SERVE_CHUNK) {
                        code = send_part(s, srv, &cur, req, fill, to, tag);
                        fill = 0;
                    }
                }
            }
        }
        if (fill > 0 && code == DDS_OK) code = send_part(s, srv, &cur, req, fill, to, tag);
        atomic_fetch_add(&serve_bytes, total);
    }
    for (int k = 0; k < 2; k++) {
        rc = wait_request(&req[k], srv->patient);
        if (rc != MPI_SUCCESS && code == DDS_OK) code = dds_mpi_error(rc, "MPI_Wait (reply)");
    }
    atomic_fetch_add(&serve_served, 1);
    return code;
}

int dds_server_prepare(struct dds_server *srv)
{
    if (!srv->pack[0]) srv->pack[0] = malloc((size_t)DDS_SERVE_CHUNK);
    if (!srv->pack[1]) srv->pack[1] = malloc((size_t)DDS_SERVE_CHUNK);
    if (!srv->pack[0] || !srv->pack[1])
        return dds_set_error(DDS_ENOMEM, "out of memory for the buffers that answer reads "
                             "(2 x %lld bytes)", (long long)DDS_SERVE_CHUNK);
    return DDS_OK;
}

int dds_serve_poll(dds_store *s, struct dds_server *srv, int *served)
{
    *served = 0;
    if (dds_server_prepare(srv) != DDS_OK) return DDS_OK;  /* the agent answers instead */
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, DDS_TAG_REQUEST, s->progress_comm, &flag, &msg,
                         &st);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Improbe (read requests)");
    if (!flag) return DDS_OK;
    int count = 0;
    MPI_Get_count(&st, MPI_INT64_T, &count);
    if (count > srv->words_cap) {
        int64_t *w = realloc(srv->words, sizeof(int64_t) * (size_t)count);
        if (!w) {
            /* the request is taken off the queue with this probe and cannot be put
             * back: its reader would wait for ever, so the job ends, saying why */
            fprintf(stderr, "[ddstore] rank %d of its group: out of memory (%lld bytes) "
                    "for a read request of member %d; ending the job\n", s->group_rank,
                    (long long)count * 8, st.MPI_SOURCE);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        srv->words = w;
        srv->words_cap = count;
    }
    MPI_Request req;
    rc = MPI_Imrecv(srv->words, count, MPI_INT64_T, &msg, &req);
    if (rc == MPI_SUCCESS) rc = wait_request(&req, srv->patient);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Imrecv (read request)");
    *served = 1;
    return answer(s, srv, count, st.MPI_SOURCE);
}

/* ------------------------------------------------------------------ the reader's side */

void dds_outbox_free(struct dds_outbox *o)
{
    free(o->req);
    free(o->disp);
    free(o->len);
    free(o->dst);
    free(o->words);
    free(o->tmp);
    free(o->mpi);
    memset(o, 0, sizeof *o);
}

int dds_outbox_add(struct dds_outbox *o, int req, int64_t disp, int64_t len, char *dst)
{
    int64_t k = o->n - 1;
    if (k >= 0 && o->req[k] == req && o->disp[k] + o->len[k] == disp &&
        o->dst[k] + o->len[k] == dst) {
        o->len[k] += len;
        o->bytes += len;
        return DDS_OK;
    }
    if (o->n == o->cap) {
        int64_t cap = o->cap ? 2 * o->cap : 64;
        int *r = realloc(o->req, sizeof(int) * (size_t)cap);
        if (r) o->req = r;
        int64_t *d = realloc(o->disp, sizeof(int64_t) * (size_t)cap);
        if (d) o->disp = d;
        int64_t *l = realloc(o->len, sizeof(int64_t) * (size_t)cap);
        if (l) o->len = l;
        char **p = realloc(o->dst, sizeof(char *) * (size_t)cap);
        if (p) o->dst = p;
        if (!r || !d || !l || !p) return dds_set_error(DDS_ENOMEM, "out of memory reading");
        o->cap = cap;
    }
    o->req[o->n] = req;
    o->disp[o->n] = disp;
    o->len[o->n] = len;
    o->dst[o->n] = dst;
    o->n++;
    o->bytes += len;
    return DDS_OK;
}

int dds_outbox_send(dds_store *s, struct dds_outbox *o, int owner, const dds_read_req *reqs)
{
    int64_t groups = 0;
    for (int64_t i = 0; i < o->n; i++) groups += i == 0 || o->req[i] != o->req[i - 1];
    int64_t nw = 3 + 2 * groups + 2 * o->n;
    if (nw > INT_MAX) return dds_set_error(DDS_ENOMEM, "a read of %lld pieces from one "
                                           "member is too large for one request",
                                           (long long)o->n);
    o->words = malloc(sizeof(int64_t) * (size_t)nw);
    /* the rows land straight in the output when the pieces follow each other there */
    int direct = 1;
    for (int64_t i = 1; i < o->n && direct; i++)
        direct = o->dst[i] == o->dst[i - 1] + o->len[i - 1];
    if (!direct) o->tmp = malloc((size_t)o->bytes);
    int64_t parts = (o->bytes + DDS_SERVE_CHUNK - 1) / DDS_SERVE_CHUNK;
    o->mpi = malloc(sizeof(MPI_Request) * (size_t)(parts + 2));
    if (!o->words || (!direct && !o->tmp) || !o->mpi)
        return dds_set_error(DDS_ENOMEM, "out of memory reading %lld bytes of member %d",
                             (long long)o->bytes, owner);
    int tag = DDS_TAG_FIRST_REPLY + (int)(atomic_fetch_add(&next_tag, 1) % (1 << 20));
    int64_t *w = o->words, at = 3;
    w[0] = tag;
    w[1] = o->bytes;
    w[2] = groups;
    for (int64_t i = 0; i < o->n; i++) {
        if (i == 0 || o->req[i] != o->req[i - 1]) {
            int64_t np = 1;
            while (i + np < o->n && o->req[i + np] == o->req[i]) np++;
            w[at++] = reqs[o->req[i]].var_id;
            w[at++] = np;
        }
        w[at++] = o->disp[i];
        w[at++] = o->len[i];
    }
    char *into = direct ? o->dst[0] : o->tmp;
    o->nmpi = 0;
    int rc = MPI_Irecv(&o->status, 1, MPI_INT64_T, owner, tag, s->progress_comm,
                       &o->mpi[o->nmpi++]);
    for (int64_t p = 0; p < parts && rc == MPI_SUCCESS; p++) {
        int64_t off = p * DDS_SERVE_CHUNK;
        int64_t n = o->bytes - off < DDS_SERVE_CHUNK ? o->bytes - off : DDS_SERVE_CHUNK;
        rc = MPI_Irecv(into + off, (int)n, MPI_BYTE, owner, tag, s->progress_comm,
                       &o->mpi[o->nmpi++]);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(o->words, (int)nw, MPI_INT64_T, owner, DDS_TAG_REQUEST,
                       s->progress_comm, &o->mpi[o->nmpi++]);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Irecv/MPI_Isend (read request)");
    atomic_fetch_add(&serve_sent, 1);
    atomic_fetch_add(&serve_asked, o->bytes);
    o->sent = 1;
    return DDS_OK;
}

/* A waiting reader's server: one per thread, kept from call to call (its buffers are
 * allocated on its first request) and released when the thread ends. */
static pthread_key_t reader_key;
static pthread_once_t reader_once = PTHREAD_ONCE_INIT;

static void reader_server_end(void *p)
{
    dds_server_release(p);
    free(p);
}

static void reader_key_make(void) { pthread_key_create(&reader_key, reader_server_end); }

static struct dds_server *reader_server(void)
{
    pthread_once(&reader_once, reader_key_make);
    struct dds_server *srv = pthread_getspecific(reader_key);
    if (!srv) {
        srv = calloc(1, sizeof *srv);
        if (srv && pthread_setspecific(reader_key, srv) != 0) {
            free(srv);
            srv = NULL;
        }
    }
    return srv;
}

int dds_wait_outboxes(dds_store *s, struct dds_outbox *boxes, int nboxes,
                      const dds_read_req *reqs)
{
    int code = DDS_OK;
    int slack = -1;  /* this thread's timer slack before its first nap */
    struct dds_server *srv = reader_server();  /* NULL: the agent answers instead */
    if (srv && dds_server_prepare(srv) != DDS_OK) srv = NULL;
    /* while this thread waits it answers requests itself, and the agent leaves them
     * (and MPI's lock) to it; without buffers of its own it leaves them to the agent */
    if (srv) atomic_fetch_add(&s->mpi_servers, 1);
    for (int b = 0; b < nboxes; b++) {
        struct dds_outbox *o = &boxes[b];
        if (!o->sent) continue;
        for (int64_t idle = 0;; idle++) {
            int done = 0;
            int rc = MPI_Testall(o->nmpi, o->mpi, &done, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS) {
                if (code == DDS_OK) code = dds_mpi_error(rc, "MPI_Testall (read replies)");
                break;
            }
            if (done) break;
            /* answer the requests of others while waiting: two ranks reading from
             * each other must not wait for each other's agent */
            int served = 0, c = srv ? dds_serve_poll(s, srv, &served) : DDS_OK;
            if (c != DDS_OK && code == DDS_OK) code = c;
            if (served) idle = 0;
            /* a reply slow to come (its owner computes, its agent answers) is waited
             * for in naps: the agent may need this core (on a node with as many busy
             * threads as cores) */
            if (idle >= DDS_SERVE_SPINS) nap(&slack);
        }
        if (code == DDS_OK && o->status != DDS_OK) {
            struct dds_var *v = NULL;
            dds_get_var(s, reqs[o->req[0]].var_id, &v);
            code = dds_set_error((int)o->status, "group member %d could not answer a read "
                                 "of '%s' (status %lld: a variable removed or a range "
                                 "outside its chunk)", b, v ? v->name : "?",
                                 (long long)o->status);
        }
        if (code == DDS_OK && o->tmp) {
            const char *p = o->tmp;
            for (int64_t i = 0; i < o->n; i++) {
                memcpy(o->dst[i], p, (size_t)o->len[i]);
                p += o->len[i];
            }
        }
    }
    if (srv) atomic_fetch_sub(&s->mpi_servers, 1);
    if (slack >= 0) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    return code;
}
