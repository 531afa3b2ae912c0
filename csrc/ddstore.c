/*
 * ddstore.c - the C core of ddstore: chunked variables in MPI windows, replicated over
 * groups of `width` ranks, read with one-sided MPI (or plain loads from node-local
 * shared memory).  See dds_store.h for the API contract.
 */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux >= 5.14; older kernels refuse it with EINVAL */
#endif

/* largest byte count handed to one MPI_Get (MPI counts are int) */
#define DDS_MAX_GET_BYTES ((int64_t)1 << 30)

/* ------------------------------------------------------------------ errors */

/* The message of the last failure, per thread: a call fails and its caller reads the
 * message (dds_last_error) in the same thread, so concurrent readers (a prefetch thread
 * and the main thread) never see each other's text.  The only global state. */
static _Thread_local char dds_err[1024];

int dds_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dds_err, sizeof dds_err, fmt, ap);
    va_end(ap);
    return code;
}

int dds_mpi_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error code %d", rc);
    return dds_set_error(DDS_EMPI, "%s failed: %s", what, msg);
}

const char *dds_last_error(void) { return dds_err; }

/* ------------------------------------------------------------------ fork guard */

/* Set in every process forked from this one after the library was loaded (a DataLoader
 * worker, os.fork): pthread_atfork's child handler, registered when the library is
 * loaded.  A forked process inherits the windows' memory (this rank's chunk and the
 * node-local members' chunks stay readable by load) but must make no MPI call: MPI
 * does not define a forked child's use of the parent's MPI state.  Every path that
 * would call MPI returns DDS_ESTATE there instead (forked_refusal); reads by load go on.
 * Written once, before the child runs anything else: no lock needed. */
static volatile int dds_forked_flag;

static void mark_forked(void) { dds_forked_flag = 1; }

__attribute__((constructor)) static void register_fork_guard(void)
{
    pthread_atfork(NULL, NULL, mark_forked);
}

int dds_forked(void) { return dds_forked_flag; }

static int forked_refusal(const char *what)
{
    return dds_set_error(DDS_ESTATE, "%s needs MPI, and this process was forked from an "
                         "MPI rank (a DataLoader worker with num_workers > 0, os.fork), "
                         "where no MPI call may be made; call it in the rank's own "
                         "process", what);
}

/* DDS_OK when an MPI call returned MPI_SUCCESS, else its error (named `what`) */
static int mpi_check(int rc, const char *what)
{
    return rc == MPI_SUCCESS ? DDS_OK : dds_mpi_error(rc, what);
}

static int freed_store(void) { return dds_set_error(DDS_ESTATE, "store has been freed"); }

/* Collective over s->comm: every rank learns whether any rank failed (code != 0);
 * if so, all get the code and message of the lowest failing rank.  Returns the agreed
 * code.  If the agreement itself fails (an MPI error), the rank returns DDS_EMPI with
 * that error: ranks may then disagree, but MPI is no longer usable anyway. */
static int agree(dds_store *s, int code)
{
    int in[2] = {code != DDS_OK, code != DDS_OK ? -s->rank : -INT_MAX}, res[2];
    int max_bad = 0, first, rc;
    rc = MPI_Allreduce(&in[0], &max_bad, 1, MPI_INT, MPI_MAX, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Allreduce (agreeing on errors)");
    if (!max_bad) return DDS_OK;
    rc = MPI_Allreduce(&in[1], &res[1], 1, MPI_INT, MPI_MAX, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Allreduce (agreeing on errors)");
    first = -res[1];
    int agreed = code;
    rc = MPI_Bcast(&agreed, 1, MPI_INT, first, s->comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Bcast(dds_err, sizeof dds_err, MPI_CHAR, first, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Bcast (agreeing on errors)");
    char tmp[sizeof dds_err];
    memcpy(tmp, dds_err, sizeof tmp);
    snprintf(dds_err, sizeof dds_err, "rank %d: %.1000s", first, tmp);
    return agreed;
}

/* ------------------------------------------------------------------ variables table */

/* the variable in slot `id` (its block exists: id < nvars, or id == nvars in dds_add) */
static struct dds_var *var_at(const dds_store *s, int id)
{
    return &s->var_blocks[id / DDS_VAR_BLOCK][id % DDS_VAR_BLOCK];
}

static int nvars_published(const dds_store *s)
{
    return atomic_load_explicit(&((dds_store *)s)->nvars, memory_order_acquire);
}

int dds_get_var(const dds_store *s, int var_id, struct dds_var **v)
{
    *v = NULL;
    if (!s) return freed_store();
    if (var_id < 0 || var_id >= nvars_published(s) || !var_at(s, var_id)->offsets)
        return dds_set_error(DDS_ESTATE, "unknown variable id %d", var_id);
    *v = var_at(s, var_id);
    return DDS_OK;
}

/* ------------------------------------------------------------------ create / free */

static void free_var(struct dds_var *v, int mpi_usable)
{
    if (mpi_usable) {
        if (v->rma_win != MPI_WIN_NULL) {
            MPI_Win_unlock_all(v->rma_win);
            MPI_Win_free(&v->rma_win);
        }
        if (v->shm_win != MPI_WIN_NULL) {
            MPI_Win_unlock_all(v->shm_win);
            MPI_Win_free(&v->shm_win);
        }
    }
    free(v->offsets);
    free(v->peer_base);
    memset(v, 0, sizeof *v);
    v->rma_win = v->shm_win = MPI_WIN_NULL;
}

/* Release everything a store holds (MPI objects only while MPI is usable). */
static void destroy_store(dds_store *s, int mpi_usable)
{
    int n = nvars_published(s);
    dds_progress_halt(s);  /* before any window or communicator goes */
    for (int i = 0; i < n; i++) free_var(var_at(s, i), mpi_usable);
    for (int b = 0; b < DDS_VAR_BLOCKS; b++) free(s->var_blocks[b]);
    if (mpi_usable) {
        if (s->node_comm != MPI_COMM_NULL) MPI_Comm_free(&s->node_comm);
        if (s->host_comm != MPI_COMM_NULL) MPI_Comm_free(&s->host_comm);
        if (s->group_comm != MPI_COMM_NULL) MPI_Comm_free(&s->group_comm);
        if (s->progress_comm != MPI_COMM_NULL) MPI_Comm_free(&s->progress_comm);
        if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    }
    free(s->node_rank);
    free(s->member_off);
    free(s);
}

/* This rank's node-local group members (transport != RMA): s->node_comm, s->node_rank,
 * s->shm_peers; *all_local = every member of the group shares this node.  Collective
 * over s->group_comm (one MPI_Comm_split_type, made whatever failed before). */
static int find_node_peers(dds_store *s, int *all_local)
{
    int rc, code, node_size = 0, *ranks = NULL;
    MPI_Group gg = MPI_GROUP_NULL, ng = MPI_GROUP_NULL;
    *all_local = 0;
    rc = MPI_Comm_split_type(s->group_comm, MPI_COMM_TYPE_SHARED, s->group_rank,
                             MPI_INFO_NULL, &s->node_comm);
    code = mpi_check(rc, "MPI_Comm_split_type (group members on this node)");
    if (rc != MPI_SUCCESS) s->node_comm = MPI_COMM_NULL;
    if (code == DDS_OK) code = mpi_check(MPI_Comm_size(s->node_comm, &node_size),
                                         "MPI_Comm_size");
    if (code == DDS_OK) code = mpi_check(MPI_Comm_group(s->group_comm, &gg),
                                         "MPI_Comm_group");
    if (code == DDS_OK) code = mpi_check(MPI_Comm_group(s->node_comm, &ng),
                                         "MPI_Comm_group");
    if (code == DDS_OK) {
        ranks = malloc(sizeof(int) * s->width);
        if (!ranks) code = dds_set_error(DDS_ENOMEM, "out of memory creating the store");
    }
    if (code == DDS_OK) {
        for (int g = 0; g < s->width; g++) ranks[g] = g;
        code = mpi_check(MPI_Group_translate_ranks(gg, s->width, ranks, ng, s->node_rank),
                         "MPI_Group_translate_ranks");
    }
    if (code == DDS_OK) {
        for (int g = 0; g < s->width; g++) {
            if (s->node_rank[g] == MPI_UNDEFINED) s->node_rank[g] = -1;
            else if (g != s->group_rank) s->shm_peers++;
        }
        *all_local = node_size == s->width;
    } else {
        for (int g = 0; g < s->width; g++) s->node_rank[g] = -1;
        s->shm_peers = 0;
    }
    if (gg != MPI_GROUP_NULL) MPI_Group_free(&gg);
    if (ng != MPI_GROUP_NULL) MPI_Group_free(&ng);
    free(ranks);
    return code;
}

int dds_create(const MPI_Comm *comm, int width, int transport, dds_store **out)
{
    int rc, code, initialized = 0, finalized = 0;
    *out = NULL;
    if (dds_forked_flag) return forked_refusal("creating a store (collective)");
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        return dds_set_error(DDS_ESTATE, "MPI is not initialized (or finalized)");
    if (transport < DDS_TRANSPORT_AUTO || transport > DDS_TRANSPORT_SHM)
        return dds_set_error(DDS_EINVAL, "transport=%d out of range [0, 2]", transport);

    dds_store *s = calloc(1, sizeof *s);
    if (!s) return dds_set_error(DDS_ENOMEM, "out of memory creating the store");
    s->comm = s->group_comm = s->node_comm = s->host_comm = MPI_COMM_NULL;
    s->progress_comm = MPI_COMM_NULL;
    s->transport = transport;
    atomic_init(&s->nvars, 0);

    /* a failure here is this rank's alone: there is no communicator to agree over yet */
    rc = MPI_Comm_dup(*comm, &s->comm);
    if (rc != MPI_SUCCESS) {
        s->comm = MPI_COMM_NULL;
        destroy_store(s, 1);
        return dds_mpi_error(rc, "MPI_Comm_dup");
    }
    /* rank and size of a communicator just duplicated: if even these fail, this rank
     * alone returns (there is nothing to agree over) */
    code = mpi_check(MPI_Comm_rank(s->comm, &s->rank), "MPI_Comm_rank");
    if (code == DDS_OK) code = mpi_check(MPI_Comm_size(s->comm, &s->size), "MPI_Comm_size");
    if (code != DDS_OK) {
        destroy_store(s, 1);
        return code;
    }
    if (width <= 0) width = s->size;
    if (width > s->size || s->size % width != 0) {
        int size = s->size;
        destroy_store(s, 1);
        return dds_set_error(DDS_EINVAL, "width=%d must divide the communicator size %d "
                             "(1 <= width <= %d)", width, size, size);
    }
    s->width = width;
    s->ngroups = s->size / width;

    /* groups and node communicators: every rank makes both splits over s->comm, then
     * all agree before anything uses them */
    code = mpi_check(MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN),
                     "MPI_Comm_set_errhandler");
    rc = MPI_Comm_split(s->comm, s->rank / width, s->rank, &s->group_comm);
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Comm_split (groups)");
    if (rc != MPI_SUCCESS) s->group_comm = MPI_COMM_NULL;
    rc = MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL,
                             &s->host_comm);
    if (rc != MPI_SUCCESS) s->host_comm = MPI_COMM_NULL;
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Comm_split_type (ranks on this node)");
    if (code == DDS_OK) code = mpi_check(MPI_Comm_rank(s->group_comm, &s->group_rank),
                                         "MPI_Comm_rank");
    /* the progress agent's own communicator, which the message path's requests and
     * replies use too: a duplicate of the group's (every rank: the dup is collective) */
    rc = s->group_comm != MPI_COMM_NULL ? MPI_Comm_dup(s->group_comm, &s->progress_comm)
                                        : MPI_ERR_COMM;
    if (rc != MPI_SUCCESS) s->progress_comm = MPI_COMM_NULL;
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Comm_dup (progress agent)");
    if (code == DDS_OK) {
        s->node_rank = malloc(sizeof(int) * width);
        s->member_off = calloc((size_t)width, 1);
        if (!s->node_rank || !s->member_off)
            code = dds_set_error(DDS_ENOMEM, "out of memory creating the store");
        else for (int g = 0; g < width; g++) s->node_rank[g] = -1;
    }
    code = agree(s, code);
    if (code != DDS_OK) {
        destroy_store(s, 1);
        return code;
    }

    /* group members on other nodes (whatever the transport): the progress agent's
     * decision (csrc/progress.c) */
    {
        MPI_Comm here = MPI_COMM_NULL;
        int on_node = s->width;
        rc = MPI_Comm_split_type(s->group_comm, MPI_COMM_TYPE_SHARED, s->group_rank,
                                 MPI_INFO_NULL, &here);
        if (rc == MPI_SUCCESS) {
            MPI_Comm_size(here, &on_node);
            /* which members: those of the group that `here` does not hold */
            MPI_Group gg = MPI_GROUP_NULL, hg = MPI_GROUP_NULL;
            int *in = malloc(sizeof(int) * 2 * (size_t)s->width);
            if (in && MPI_Comm_group(s->group_comm, &gg) == MPI_SUCCESS &&
                MPI_Comm_group(here, &hg) == MPI_SUCCESS) {
                for (int g = 0; g < s->width; g++) in[g] = g;
                if (MPI_Group_translate_ranks(gg, s->width, in, hg, in + s->width) ==
                    MPI_SUCCESS)
                    for (int g = 0; g < s->width; g++)
                        s->member_off[g] = in[s->width + g] == MPI_UNDEFINED;
            }
            if (gg != MPI_GROUP_NULL) MPI_Group_free(&gg);
            if (hg != MPI_GROUP_NULL) MPI_Group_free(&hg);
            free(in);
            MPI_Comm_free(&here);
        }
        s->off_node = s->width - on_node;
        code = mpi_check(rc, "MPI_Comm_split_type (group members on this node)");
    }
    int all_local = 0; /* every member of my group shares my node */
    if (transport != DDS_TRANSPORT_RMA) {  /* collective: made whatever failed before */
        int c2 = find_node_peers(s, &all_local);
        if (code == DDS_OK) code = c2;
    }
    /* agree within the group: is any member unreachable by load for anyone? */
    int group_all_local = all_local;
    rc = MPI_Allreduce(&all_local, &group_all_local, 1, MPI_INT, MPI_MIN, s->group_comm);
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Allreduce (node-local groups)");
    s->need_rma = !group_all_local;
    code = agree(s, code);
    if (code != DDS_OK) {
        destroy_store(s, 1);
        return code;
    }

    if (transport == DDS_TRANSPORT_SHM) {
        int ok = group_all_local, all_ok = 0;
        rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s->comm);
        if (rc != MPI_SUCCESS) {
            code = dds_mpi_error(rc, "MPI_Allreduce (transport='shm' check)");
        } else if (!all_ok) {
            code = dds_set_error(DDS_EINVAL,
                                 "transport='shm' needs every member of a group on one "
                                 "node, but with width=%d some group spans several nodes; "
                                 "use transport='auto' or a width <= ranks per node", width);
        }
        if (code != DDS_OK) {
            destroy_store(s, 1);
            return code;
        }
        s->need_rma = 0;
    }
    *out = s;
    return DDS_OK;
}

int dds_free(dds_store **store)
{
    if (!store || !*store) return DDS_OK;
    int finalized = 0;
    if (!dds_forked_flag) MPI_Finalized(&finalized);
    /* a forked process releases its copy of the memory only: the windows are the
     * parent's, and MPI may not be called here */
    destroy_store(*store, !finalized && !dds_forked_flag);
    *store = NULL;
    return DDS_OK;
}

int dds_group_rank(const dds_store *s) { return s->group_rank; }
int dds_group_size(const dds_store *s) { return s->width; }
int dds_ngroups(const dds_store *s) { return s->ngroups; }
int dds_shm_peers(const dds_store *s) { return s->shm_peers; }
int dds_off_node(const dds_store *s) { return s->off_node; }

/* ------------------------------------------------------------------ page mappings */

/* What the system's pages are: the base page size, and the 2 MiB of a transparent huge
 * page on x86-64 and arm64 with 4 KiB pages (the advice below is harmless elsewhere). */
#define DDS_HUGE_PAGE ((uintptr_t)2 << 20)

static uintptr_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096;
}

/* madvise(MADV_HUGEPAGE) on the 2 MiB-aligned part of [p, p + n): memory first touched
 * afterwards may come as transparent huge pages where the system allows it
 * (/sys/kernel/mm/transparent_hugepage: 'madvise' mode, and for shared memory
 * shmem_enabled 'advise'), so a sampler's scattered reads of a multi-GB chunk take one
 * TLB entry and one fault per 2 MiB instead of per 4 KiB.  Advice only: a refusal
 * (EINVAL where THP is off or the memory cannot have them) changes nothing. */
static void advise_huge(char *p, int64_t n)
{
    if (!p || n <= 0) return;
    uintptr_t a = (uintptr_t)p, lo = (a + DDS_HUGE_PAGE - 1) & ~(DDS_HUGE_PAGE - 1);
    uintptr_t hi = (a + (uintptr_t)n) & ~(DDS_HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
}

/* Map every page of [p, p + n) into this process's page tables, reading nothing it
 * changes: madvise(MADV_POPULATE_READ) on the whole pages holding the range (they lie in
 * one window's mapping, itself whole pages), else (`touch`, or the kernel refused: older
 * than 5.14, EINTR, EFAULT...) one volatile read of a byte in every page. */
static void populate(const char *p, int64_t n, int touch)
{
    if (!p || n <= 0 || (uint64_t)n > SIZE_MAX / 2) return; /* (not one mapping) */
    uintptr_t page = page_size(), a = (uintptr_t)p, lo = a & ~(page - 1);
    if (!touch && madvise((void *)lo, (size_t)(a - lo) + (size_t)n, MADV_POPULATE_READ) == 0)
        return;
    const volatile char *q = p;
    (void)q[0];
    for (uintptr_t off = lo + page - a; off < (uintptr_t)n; off += page) (void)q[off];
}

int dds_prefault(dds_store *s, int var_id, int flags, int64_t *bytes)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (flags & ~(DDS_PREFAULT_OWN | DDS_PREFAULT_PEERS | DDS_PREFAULT_TOUCH))
        return dds_set_error(DDS_EINVAL, "variable '%s': prefault flags %d outside the "
                             "known ones (own %d | peers %d | touch %d)", v->name, flags,
                             DDS_PREFAULT_OWN, DDS_PREFAULT_PEERS, DDS_PREFAULT_TOUCH);
    int touch = (flags & DDS_PREFAULT_TOUCH) != 0;
    int64_t done = 0;
    for (int g = 0; g < s->width; g++) {
        int own = g == s->group_rank;
        if (!(flags & (own ? DDS_PREFAULT_OWN : DDS_PREFAULT_PEERS))) continue;
        const char *base = own ? v->base : v->peer_base[g];
        /* each member's chunk fits int64 bytes: dds_add checked it on its owner */
        int64_t n = (v->offsets[g + 1] - v->offsets[g]) * v->row_bytes;
        if (!base || n <= 0) continue;
        populate(base, n, touch);
        done += n;
    }
    if (bytes) *bytes = done;
    return DDS_OK;
}

/* ------------------------------------------------------------------ variables */

static int64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return INT64_MAX;
    return (int64_t)pages * (int64_t)page;
}

/* Bytes a node can still give to new windows: MPI allocates them in shared memory
 * (/dev/shm on Linux), so the smaller of its free space and the kernel's MemAvailable.
 * Writing past either would kill the process (SIGBUS or the OOM killer), not fail. */
static int64_t node_memory_available(void)
{
    int64_t limit = INT64_MAX;
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0) {
        int64_t shm = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
        if (shm < limit) limit = shm;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
                if (kb * 1024 < limit) limit = kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    return limit;
}

/* Local checks of a new variable (sizes, this node's memory, a free slot, the metadata
 * arrays of *v); *bytes = this rank's chunk size.  Collective over s->host_comm (one
 * MPI_Allreduce, made whatever failed before). */
static int prepare_var(dds_store *s, const char *name, int64_t n_local, int64_t row_bytes,
                       struct dds_var *v, int64_t *bytes)
{
    int code = DDS_OK, rc;
    int64_t phys = physical_memory();
    *bytes = 0;
    if (n_local < 0 || row_bytes < 0)
        code = dds_set_error(DDS_EINVAL, "variable '%s': n_local=%lld and row_bytes=%lld "
                             "must be >= 0", name, (long long)n_local, (long long)row_bytes);
    else if (row_bytes > 0 && n_local > phys / row_bytes)
        code = dds_set_error(DDS_ENOMEM, "variable '%s': %lld rows of %lld bytes need "
                             "%.4g GB, more than this node's %.4g GB of physical memory",
                             name, (long long)n_local, (long long)row_bytes,
                             (double)n_local * (double)row_bytes / 1e9, (double)phys / 1e9);
    else
        *bytes = n_local * row_bytes;
    /* all ranks of this node allocate at once: their total must fit the node */
    int64_t node_bytes = 0;
    rc = MPI_Allreduce(bytes, &node_bytes, 1, MPI_INT64_T, MPI_SUM, s->host_comm);
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Allreduce (bytes asked on this node)");
    if (code == DDS_OK && node_bytes > 0) {
        int64_t avail = node_memory_available();
        if (node_bytes > avail)
            code = dds_set_error(DDS_ENOMEM, "variable '%s': the ranks on this node ask "
                                 "for %.4g GB in all (this rank %.4g GB), more than the "
                                 "%.4g GB the node has available (free shared memory / "
                                 "MemAvailable)", name, (double)node_bytes / 1e9,
                                 (double)*bytes / 1e9, (double)avail / 1e9);
    }
    /* the slot: blocks are allocated once and never move (see internal.h) */
    int id = nvars_published(s);
    if (code == DDS_OK && id >= DDS_MAX_VARS)
        code = dds_set_error(DDS_ENOMEM, "variable '%s': a store holds at most %d "
                             "variables (ids are never reused)", name, DDS_MAX_VARS);
    if (code == DDS_OK && !s->var_blocks[id / DDS_VAR_BLOCK]) {
        s->var_blocks[id / DDS_VAR_BLOCK] = calloc(DDS_VAR_BLOCK, sizeof(struct dds_var));
        if (!s->var_blocks[id / DDS_VAR_BLOCK])
            code = dds_set_error(DDS_ENOMEM, "out of memory adding variable '%s'", name);
    }
    if (code == DDS_OK) {
        v->offsets = calloc(s->width + 1, sizeof(int64_t));
        v->peer_base = calloc(s->width, sizeof(char *));
        if (!v->offsets || !v->peer_base)
            code = dds_set_error(DDS_ENOMEM, "out of memory adding variable '%s'", name);
    }
    return code;
}

/* The windows of *v (bytes of this rank's chunk): shared memory among node-local
 * members and an RMA window over the group when some member needs one, or one RMA
 * window.  Collective over s->node_comm / s->group_comm: every window call is made
 * whatever failed locally before, so the ranks stay in step. */
static int allocate_windows(dds_store *s, struct dds_var *v, int64_t bytes)
{
    int rc, code = DDS_OK;
    if (s->node_comm != MPI_COMM_NULL) {
        MPI_Info info;
        if (MPI_Info_create(&info) != MPI_SUCCESS) info = MPI_INFO_NULL; /* a hint only */
        else MPI_Info_set(info, "alloc_shared_noncontig", "true");
        rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, s->node_comm, &v->base,
                                     &v->shm_win);
        if (info != MPI_INFO_NULL) MPI_Info_free(&info);
        if (rc != MPI_SUCCESS) {
            code = dds_mpi_error(rc, "MPI_Win_allocate_shared");
            v->shm_win = MPI_WIN_NULL;
            v->base = NULL;
        } else {
            code = mpi_check(MPI_Win_set_errhandler(v->shm_win, MPI_ERRORS_RETURN),
                             "MPI_Win_set_errhandler");
            for (int g = 0; g < s->width && code == DDS_OK; g++) {
                if (s->node_rank[g] < 0) continue;
                MPI_Aint sz;
                int du;
                char *ptr = NULL;
                code = mpi_check(MPI_Win_shared_query(v->shm_win, s->node_rank[g], &sz, &du,
                                                      &ptr), "MPI_Win_shared_query");
                v->peer_base[g] = ptr;
            }
            rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, v->shm_win);
            if (code == DDS_OK) code = mpi_check(rc, "MPI_Win_lock_all");
        }
        if (s->need_rma) {
            /* made even when the shared window failed, with no memory behind it */
            int ok = v->shm_win != MPI_WIN_NULL;
            rc = MPI_Win_create(ok ? v->base : NULL, ok ? (MPI_Aint)bytes : 0, 1,
                                MPI_INFO_NULL, s->group_comm, &v->rma_win);
            if (rc != MPI_SUCCESS) {
                if (code == DDS_OK) code = dds_mpi_error(rc, "MPI_Win_create");
                v->rma_win = MPI_WIN_NULL;
            }
        }
    } else {
        rc = MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, s->group_comm, &v->base,
                              &v->rma_win);
        if (rc != MPI_SUCCESS) {
            code = dds_mpi_error(rc, "MPI_Win_allocate");
            v->rma_win = MPI_WIN_NULL;
            v->base = NULL;
        }
    }
    if (v->rma_win != MPI_WIN_NULL) {
        rc = MPI_Win_set_errhandler(v->rma_win, MPI_ERRORS_RETURN);
        if (code == DDS_OK) code = mpi_check(rc, "MPI_Win_set_errhandler");
        /* one passive-target epoch for the variable's lifetime; reads flush */
        rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, v->rma_win);
        if (code == DDS_OK) code = mpi_check(rc, "MPI_Win_lock_all");
    }
    return code;
}

int dds_add(dds_store *s, const char *name, int64_t n_local, int64_t row_bytes,
            int *var_id)
{
    if (!s) return freed_store();
    if (dds_forked_flag) return forked_refusal("adding a variable (collective)");
    int64_t bytes = 0;
    struct dds_var v;
    memset(&v, 0, sizeof v);
    v.rma_win = v.shm_win = MPI_WIN_NULL;
    int code = agree(s, prepare_var(s, name, n_local, row_bytes, &v, &bytes));
    if (code != DDS_OK) {
        free(v.offsets);
        free(v.peer_base);
        return code;
    }
    snprintf(v.name, sizeof v.name, "%s", name);
    v.n_local = n_local;
    v.row_bytes = row_bytes;

    code = allocate_windows(s, &v, bytes);
    int rc = MPI_Allgather(&n_local, 1, MPI_INT64_T, v.offsets + 1, 1, MPI_INT64_T,
                           s->group_comm);
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Allgather");
    code = agree(s, code);
    if (code != DDS_OK) {
        free_var(&v, 1);
        return code;
    }
    for (int g = 0; g < s->width; g++) v.offsets[g + 1] += v.offsets[g];
    v.nrows = v.offsets[s->width];
    /* before this rank first writes its chunk (and reads the peers'): huge pages where
     * the system gives them (advice; see advise_huge) */
    for (int g = 0; g < s->width; g++)
        advise_huge(g == s->group_rank ? v.base : v.peer_base[g],
                    (v.offsets[g + 1] - v.offsets[g]) * v.row_bytes);
    /* fill the slot, then publish it: a reader that sees the new count sees the slot */
    int id = nvars_published(s);
    *var_at(s, id) = v;
    atomic_store_explicit(&s->nvars, id + 1, memory_order_release);
    *var_id = id;
    return DDS_OK;
}

int dds_remove(dds_store *s, int var_id)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (dds_forked_flag) return forked_refusal("removing a variable (collective)");
    free_var(v, 1);
    return DDS_OK;
}

int dds_write_local(dds_store *s, int var_id, int64_t offset, const void *src,
                    int64_t nrows)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (offset < 0 || nrows < 0 || offset > v->n_local - nrows)
        return dds_set_error(DDS_ERANGE, "variable '%s': local rows [%lld, %lld) outside "
                             "the local chunk [0, %lld)", v->name, (long long)offset,
                             (long long)(offset + nrows), (long long)v->n_local);
    /* rows of 0 bytes have no memory behind them (base may be NULL): nothing to copy */
    if (nrows && v->row_bytes)
        memcpy(v->base + offset * v->row_bytes, src, (size_t)(nrows * v->row_bytes));
    return DDS_OK;
}

int dds_member_ptr(dds_store *s, int var_id, int member, void **ptr, int64_t *nrows)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (member < 0 || member >= s->width)
        return dds_set_error(DDS_ERANGE, "variable '%s': member %d out of range [0, %d)",
                    v->name, member, s->width);
    *ptr = member == s->group_rank ? v->base : v->peer_base[member];
    *nrows = v->offsets[member + 1] - v->offsets[member];
    return DDS_OK;
}

/* MPI_Win_sync on every window of every variable; returns the first failure */
/* MPI_Win_sync of one variable's windows (the local half of a sync) */
static int sync_var(const struct dds_var *v)
{
    int code = DDS_OK;
    if (v->shm_win != MPI_WIN_NULL)
        code = mpi_check(MPI_Win_sync(v->shm_win), "MPI_Win_sync");
    if (v->rma_win != MPI_WIN_NULL && code == DDS_OK)
        code = mpi_check(MPI_Win_sync(v->rma_win), "MPI_Win_sync");
    return code;
}

static int sync_windows(dds_store *s)
{
    int code = DDS_OK, n = nvars_published(s);
    for (int i = 0; i < n && code == DDS_OK; i++) code = sync_var(var_at(s, i));
    return code;
}

int dds_sync(dds_store *s)
{
    if (!s) return freed_store();
    if (dds_forked_flag) return forked_refusal("sync (collective)");
    int code = sync_windows(s);
    int rc = MPI_Barrier(s->comm); /* made whatever failed before: ranks stay in step */
    if (code == DDS_OK) code = mpi_check(rc, "MPI_Barrier");
    if (code == DDS_OK) code = sync_windows(s);
    return code;
}

int dds_sync_windows(dds_store *s, const int *var_ids, int64_t n)
{
    if (!s) return freed_store();
    if (n < 0) return dds_set_error(DDS_EINVAL, "dds_sync_windows: n = %lld < 0", (long long)n);
    if (n && !var_ids) return dds_set_error(DDS_EINVAL, "dds_sync_windows: var_ids is NULL");
    struct dds_var *v;
    for (int64_t i = 0; i < n; i++) { /* every id checked before any MPI call */
        int rc = dds_get_var(s, var_ids[i], &v);
        if (rc) return rc;
    }
    if (dds_forked_flag && n) return forked_refusal("MPI_Win_sync of a variable's windows");
    int code = DDS_OK;
    for (int64_t i = 0; i < n && code == DDS_OK; i++) {
        dds_get_var(s, var_ids[i], &v);
        code = sync_var(v);
    }
    return code;
}

int dds_nrows(const dds_store *s, int var_id, int64_t *nrows)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    *nrows = v->nrows;
    return DDS_OK;
}

int dds_row_bytes(const dds_store *s, int var_id, int64_t *row_bytes)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    *row_bytes = v->row_bytes;
    return DDS_OK;
}

int dds_chunk_offsets(const dds_store *s, int var_id, int64_t *offsets, int64_t cap)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (cap < (int64_t)s->width + 1)
        return dds_set_error(DDS_EINVAL, "variable '%s': chunk offsets need %d entries, "
                             "the output holds %lld", v->name, s->width + 1,
                             (long long)cap);
    memcpy(offsets, v->offsets, sizeof(int64_t) * (s->width + 1));
    return DDS_OK;
}

int64_t dds_local_bytes(const dds_store *s)
{
    int64_t total = 0;
    if (!s) return 0;
    int n = nvars_published(s);
    for (int i = 0; i < n; i++) total += var_at(s, i)->n_local * var_at(s, i)->row_bytes;
    return total;
}

/* ------------------------------------------------------------------ reads */

/* a contiguous copy waiting to be issued, so adjacent pieces merge into one */
struct pending {
    int owner;        /* -1: none */
    int64_t disp;     /* byte offset in the owner's chunk */
    char *dst;
    int64_t bytes;
};

/* Targets with gets in flight during one dds_read call.  Per call (not per store), so
 * that reads from several threads never flush or skip each other's targets. */
#define DDS_TOUCHED_ON_STACK 256

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

/* What one read call shares across its requests: the members whose pieces go by
 * message (boxes: NULL when the store does not serve), and the request being walked. */
struct call {
    struct dds_outbox *boxes;  /* [width], or NULL until needed */
    int req;
    int serve;                 /* the store serves reads by message, and this call may */
};

static int issue(dds_store *s, struct dds_var *v, struct pending *p, int per_row,
                 char *touched, char *out, struct gathered *gath, struct call *call)
{
    if (p->owner < 0 || p->bytes == 0) return DDS_OK;
    const char *src = p->owner == s->group_rank ? v->base : v->peer_base[p->owner];
    if (src) {
        memcpy(p->dst, src + p->disp, (size_t)p->bytes);
        p->owner = -1;
        return DDS_OK;
    }
    if (dds_forked_flag) {
        int owner = p->owner;
        p->owner = -1;
        char what[256];
        snprintf(what, sizeof what, "variable '%s': reading rows of group member %d "
                 "(not in this node's shared memory: MPI_Get)", v->name, owner);
        return forked_refusal(what);
    }
    if (call->serve && s->member_off[p->owner] && !per_row) {
        int owner = p->owner;
        p->owner = -1;
        if (!call->boxes) {
            call->boxes = calloc((size_t)s->width, sizeof(struct dds_outbox));
            if (!call->boxes) return dds_set_error(DDS_ENOMEM, "out of memory reading");
        }
        return dds_outbox_add(&call->boxes[owner], call->req, p->disp, p->bytes, p->dst);
    }
    if (gath && !per_row) {
        int code = gather_piece(v, out, p->owner, &gath[p->owner], p->dst, p->disp,
                                p->bytes);
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

/* Every range inside [0, nrows); *total = rows in all (no overflow: each count <= nrows
 * and the sum is checked against the largest buffer a process can address). */
static int check_ranges(const struct dds_var *v, const int64_t *starts,
                        const int64_t *counts, int64_t n, int64_t *total)
{
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t count = counts ? counts[i] : 1;
        if (count < 0)
            return dds_set_error(DDS_EINVAL, "variable '%s': count %lld (request %lld) "
                                 "must be >= 0", v->name, (long long)count, (long long)i);
        if (starts[i] < 0 || starts[i] > v->nrows - count) {
            /* start + count may overflow int64: print it as a double when it would */
            if (starts[i] > INT64_MAX - count)
                return dds_set_error(DDS_ERANGE, "variable '%s': rows [%lld, %.0f) (request "
                                     "%lld) out of range [0, %lld)", v->name,
                                     (long long)starts[i],
                                     (double)starts[i] + (double)count, (long long)i,
                                     (long long)v->nrows);
            return dds_set_error(DDS_ERANGE, "variable '%s': rows [%lld, %lld) (request "
                                 "%lld) out of range [0, %lld)", v->name,
                                 (long long)starts[i], (long long)(starts[i] + count),
                                 (long long)i, (long long)v->nrows);
        }
        if (count > INT64_MAX / 2 - sum)
            return dds_set_error(DDS_ENOMEM, "variable '%s': %lld requests ask for more "
                                 "than 2^62 rows in all", v->name, (long long)n);
        sum += count;
    }
    if (v->row_bytes > 0 && sum > (INT64_MAX / 2) / v->row_bytes)
        return dds_set_error(DDS_ENOMEM, "variable '%s': %lld rows of %lld bytes do not fit "
                             "in one buffer", v->name, (long long)sum,
                             (long long)v->row_bytes);
    *total = sum;
    return DDS_OK;
}

int dds_ranges_total(dds_store *s, int var_id, const int64_t *starts,
                     const int64_t *counts, int64_t n, int64_t *total)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    return check_ranges(v, starts, counts, n, total);
}

int dds_read_range(dds_store *s, int var_id, int64_t start, int64_t count, void *out,
                   int64_t out_bytes)
{
    return dds_read(s, var_id, &start, &count, 1, out, out_bytes, 0);
}

/* Rows of one-row requests whose source is prefetched ahead of the copy: a batch of
 * random rows (a loader's features) is bound by cache and TLB misses, one row at a time
 * without it.  At most DDS_PREFETCH_LINES cache lines of each row are asked for. */
#define DDS_PREFETCH_AHEAD 12
#define DDS_PREFETCH_LINES 8

static void prefetch_row(const dds_store *s, const struct dds_var *v, int64_t row)
{
#if defined(__GNUC__)
    int owner = dds_member_of(v->offsets, s->width, row);
    const char *src = owner == s->group_rank ? v->base : v->peer_base[owner];
    if (!src || v->row_bytes <= 0) return;
    uintptr_t first = (uintptr_t)(src + (row - v->offsets[owner]) * v->row_bytes);
    uintptr_t last = first + (uintptr_t)v->row_bytes - 1;
    int lines = 0;
    for (uintptr_t a = first & ~(uintptr_t)63; a <= last && lines < DDS_PREFETCH_LINES;
         a += 64, lines++)
        __builtin_prefetch((const void *)a, 0, 0);
#else
    (void)s; (void)v; (void)row;
#endif
}

/* Check request r of a call: its variable, its ranges and its output's size. */
static int check_request(dds_store *s, const dds_read_req *r, struct dds_var **v)
{
    int rc = dds_get_var(s, r->var_id, v);
    if (rc) return rc;
    if (r->n < 0)
        return dds_set_error(DDS_EINVAL, "variable '%s': n=%lld requests must be >= 0",
                             (*v)->name, (long long)r->n);
    if (r->n > 0 && !r->starts)
        return dds_set_error(DDS_EINVAL, "variable '%s': NULL starts", (*v)->name);
    int64_t total;
    rc = check_ranges(*v, r->starts, r->counts, r->n, &total);
    if (rc) return rc;
    /* no overflow: check_ranges bounds total * row_bytes by 2^62 */
    if (total * (*v)->row_bytes > r->out_bytes || (!r->out && total * (*v)->row_bytes > 0))
        return dds_set_error(DDS_EINVAL, "variable '%s': %lld rows of %lld bytes need "
                             "%lld bytes, the output holds %lld", (*v)->name,
                             (long long)total, (long long)(*v)->row_bytes,
                             (long long)(total * (*v)->row_bytes),
                             (long long)r->out_bytes);
    return DDS_OK;
}

/* Walk request `call->req` (checked): copy what is readable by load, issue the gets
 * (gathered per owner) of what is not, or add it to the owner's outbox.  touched[g]:
 * member g has gets of this variable in flight. */
static int walk_request(dds_store *s, struct dds_var *v, const dds_read_req *r,
                        int per_row, char *touched, struct call *call)
{
    char *out = r->out;
    struct gathered *gath = NULL;
    if (v->rma_win != MPI_WIN_NULL && !per_row && r->n > 1) {
        gath = calloc(s->width, sizeof(struct gathered));
        if (!gath) return dds_set_error(DDS_ENOMEM, "out of memory reading '%s'", v->name);
    }
    const int64_t *starts = r->starts, *counts = r->counts;
    int64_t n = r->n;
    char *dst = out;
    struct pending p = {-1, 0, NULL, 0};
    int code = DDS_OK;
    int ahead = !counts;  /* one-row requests (get_batch's): prefetch their sources */
    if (ahead)
        for (int64_t i = 0; i < n && i < DDS_PREFETCH_AHEAD; i++)
            prefetch_row(s, v, starts[i]);
    for (int64_t i = 0; i < n && code == DDS_OK; i++) {
        if (ahead && i + DDS_PREFETCH_AHEAD < n)
            prefetch_row(s, v, starts[i + DDS_PREFETCH_AHEAD]);
        int64_t row = starts[i], left = counts ? counts[i] : 1;
        while (left > 0) {
            int owner = dds_member_of(v->offsets, s->width, row);
            int64_t take = v->offsets[owner + 1] - row;
            if (take > left) take = left;
            int64_t disp = (row - v->offsets[owner]) * v->row_bytes;
            int64_t bytes = take * v->row_bytes;
            if (p.owner == owner && p.disp + p.bytes == disp && p.dst + p.bytes == dst) {
                p.bytes += bytes;
            } else {
                code = issue(s, v, &p, per_row, touched, out, gath, call);
                if (code != DDS_OK) break;
                p.owner = owner;
                p.disp = disp;
                p.dst = dst;
                p.bytes = bytes;
            }
            dst += bytes;
            row += take;
            left -= take;
        }
    }
    if (code == DDS_OK) code = issue(s, v, &p, per_row, touched, out, gath, call);
    if (gath) {
        for (int g = 0; g < s->width; g++) {
            if (code == DDS_OK) code = get_gathered(v, out, g, &gath[g]);
            free(gath[g].odisp);
            free(gath[g].len);
        }
        free(gath);
    }
    return code;
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

static int read_many(dds_store *s, const dds_read_req *reqs, int64_t nreq, int per_row)
{
    if (!s) return freed_store();
    if (nreq < 0 || (nreq > 0 && !reqs))
        return dds_set_error(DDS_EINVAL, "dds_read_many: %lld requests (NULL: %d)",
                             (long long)nreq, !reqs);
    if (nreq > INT_MAX / 2)
        return dds_set_error(DDS_EINVAL, "dds_read_many: %lld requests, at most %d",
                             (long long)nreq, INT_MAX / 2);
    struct dds_var *v;
    int any_rma = 0;
    for (int64_t r = 0; r < nreq; r++) {
        int rc = check_request(s, &reqs[r], &v);
        if (rc) return rc;
        any_rma |= v->rma_win != MPI_WIN_NULL;
    }
    per_row = per_row && any_rma;
    if (per_row && dds_forked_flag) {
        char what[256];
        snprintf(what, sizeof what, "variable '%s': a read with DDS_READ_PER_ROW_LOCK",
                 v->name);
        return forked_refusal(what);
    }
    /* touched[r * width + g]: gets of request r's variable in flight at member g */
    char touched_stack[DDS_TOUCHED_ON_STACK], *touched = touched_stack;
    int64_t ntouched = any_rma ? nreq * s->width : 0;
    if (ntouched > DDS_TOUCHED_ON_STACK) {
        touched = calloc((size_t)ntouched, 1);
        if (!touched) return dds_set_error(DDS_ENOMEM, "out of memory reading");
    } else if (ntouched) {
        memset(touched, 0, (size_t)ntouched);
    }
    /* the outboxes are allocated by the first piece of a member on another node */
    struct call call = {NULL, 0, atomic_load_explicit(&s->serve_on, memory_order_acquire) &&
                                 !per_row && s->off_node > 0 && !dds_forked_flag};
    int code = DDS_OK;
    if (per_row) {
        /* the per-row path locks each row itself: leave the variable's shared epoch */
        int rc = MPI_Win_unlock_all(v->rma_win);
        if (rc != MPI_SUCCESS) code = dds_mpi_error(rc, "MPI_Win_unlock_all");
        else per_row = 2;  /* relock below */
    }
    for (int64_t r = 0; r < nreq && code == DDS_OK; r++) {
        dds_get_var(s, reqs[r].var_id, &v);
        call.req = (int)r;
        code = walk_request(s, v, &reqs[r], per_row, touched + (any_rma ? r * s->width : 0),
                            &call);
    }
    if (call.boxes) {
        for (int g = 0; g < s->width && code == DDS_OK; g++) {
            struct dds_outbox *o = &call.boxes[g];
            if (o->n == 0) continue;
            code = o->n < s->serve_min_pieces ? get_small_box(s, o, g, reqs, touched)
                                              : dds_outbox_send(s, o, g, reqs);
        }
    }
    if (per_row == 2) {
        int rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, v->rma_win);
        if (rc != MPI_SUCCESS && code == DDS_OK)
            code = dds_mpi_error(rc, "MPI_Win_lock_all");
    } else {
        /* while this thread flushes, the agent (if any) leaves MPI's lock to it */
        int waiting = 0, agent = s->progress_on;
        for (int64_t i = 0; i < ntouched; i++) {
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
        for (int g = 0; g < s->width && ntouched; g++) {
            int any = 0;
            for (int64_t r = 0; r < nreq && !any; r++) any = touched[r * s->width + g];
            if (any) atomic_fetch_add_explicit(&rma_flushes, 1, memory_order_relaxed);
        }
    }
    if (call.boxes) {
        /* sent requests are always waited for: their receives write into the output */
        int c = dds_wait_outboxes(s, call.boxes, s->width, reqs);
        if (code == DDS_OK) code = c;
        for (int g = 0; g < s->width; g++) dds_outbox_free(&call.boxes[g]);
        free(call.boxes);
    }
    if (touched != touched_stack) free(touched);
    return code;
}

int dds_read_many(dds_store *s, const dds_read_req *reqs, int64_t nreq)
{
    return read_many(s, reqs, nreq, 0);
}

int dds_read(dds_store *s, int var_id, const int64_t *starts, const int64_t *counts,
             int64_t n, void *out, int64_t out_bytes, int flags)
{
    dds_read_req r = {var_id, starts, counts, n, out, out_bytes};
    return read_many(s, &r, 1, (flags & DDS_READ_PER_ROW_LOCK) != 0);
}
