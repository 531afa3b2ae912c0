/*
 * ddstore.c - the C core of ddstore: chunked variables in MPI windows, replicated over
 * groups of `width` ranks, read with one-sided MPI (or plain loads from node-local
 * shared memory).  See dds_store.h for the API contract.
 */
#define _DEFAULT_SOURCE
#include "transport.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux >= 5.14; older kernels refuse it with EINVAL */
#endif

/* DDS_OK when an MPI call returned MPI_SUCCESS, else its error (named `what`) */
static int mpi_check(int rc, const char *what)
{
    return rc == MPI_SUCCESS ? DDS_OK : dds_mpi_error(rc, what);
}

static int freed_store(void) { return dds_set_error(DDS_ESTATE, "store has been freed"); }

/* Collective over s->comm: every rank learns whether any rank failed (code != 0);
 * if so, all get the code and message of the lowest failing rank.  Returns the agreed
 * code.  If the agreement itself fails (an MPI error), the rank returns DDS_EMPI with
 * that error: ranks may then disagree, but MPI is no longer usable anyway.  `*agreed`
 * (when not NULL) says which: 1 for the agreed code, 0 for this rank's MPI error. */
static int agree(dds_store *s, int code, int *agreed)
{
    int ignored;
    if (!agreed) agreed = &ignored;
    *agreed = 0;
    int in[2] = {code != DDS_OK, code != DDS_OK ? -s->rank : -INT_MAX}, res[2];
    int max_bad = 0, first, rc;
    rc = MPI_Allreduce(&in[0], &max_bad, 1, MPI_INT, MPI_MAX, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Allreduce (agreeing on errors)");
    *agreed = !max_bad;
    if (!max_bad) return DDS_OK;
    rc = MPI_Allreduce(&in[1], &res[1], 1, MPI_INT, MPI_MAX, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Allreduce (agreeing on errors)");
    first = -res[1];
    int code_of_first = code;
    char msg[DDS_ERROR_BYTES];
    memcpy(msg, dds_last_error(), sizeof msg);
    rc = MPI_Bcast(&code_of_first, 1, MPI_INT, first, s->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, s->comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Bcast (agreeing on errors)");
    *agreed = 1;
    return dds_set_error(code_of_first, "rank %d: %.1000s", first, msg);
}

/* ------------------------------------------------------------------ create / free */

/* Whether address `p` lies in a shared mapping ('s' in its line of /proc/self/maps): a
 * process forked from this one sees later writes there.  0 where it cannot be told. */
static int in_shared_mapping(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[256];
    int shared = 0, at_start = 1;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        unsigned long lo, hi;
        char perms[8];
        if (at_start && sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
            lo <= (uintptr_t)p && (uintptr_t)p < hi) {
            shared = perms[3] == 's';
            break;
        }
        at_start = len > 0 && line[len - 1] == '\n';  /* a long line's rest is no line */
    }
    fclose(f);
    return shared;
}

/* The windows of variables this process holds, every store's: each takes one of the
 * communicator ids MPI hands out (MPICH: 2048 a process, communicators included). */
static atomic_int windows_held;

static void free_var(struct dds_var *v, int mpi_usable)
{
    if (mpi_usable) {
        if (v->rma_win != MPI_WIN_NULL) {
            MPI_Win_unlock_all(v->rma_win);
            MPI_Win_free(&v->rma_win);
            atomic_fetch_sub(&windows_held, 1);
        }
        if (v->shm_win != MPI_WIN_NULL) {
            MPI_Win_unlock_all(v->shm_win);
            MPI_Win_free(&v->shm_win);
            atomic_fetch_sub(&windows_held, 1);
        }
    }
    free(v->offsets);
    free(v->peer_base);
    char name[sizeof v->name];
    memcpy(name, v->name, sizeof name);
    memset(v, 0, sizeof *v);
    memcpy(v->name, name, sizeof name); /* kept: an error can name a removed variable */
    v->rma_win = v->shm_win = MPI_WIN_NULL;
}

/* Release everything a store holds (MPI objects only while MPI is usable). */
static void destroy_store(dds_store *s, int mpi_usable)
{
    int n = dds_nvars_published(s);
    dds_progress_halt(s);  /* before any window or communicator goes */
    for (int i = 0; i < n; i++) free_var(dds_var_at(s, i), mpi_usable);
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
    free(s->live);
    if (s->gone) munmap((void *)s->gone, DDS_SHARED_BYTES);
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

int dds_create(const MPI_Comm *comm, int width, int transport, dds_store **out,
               int *agreed)
{
    int rc, code, initialized = 0, finalized = 0, ignored;
    *out = NULL;
    if (!agreed) agreed = &ignored;
    *agreed = 0;
    if (dds_forked()) return dds_forked_refusal("creating a store (collective)");
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
    s->copy_threads = 1;  /* dds_set_copy_threads */
    s->private_chunks = -1;
    s->copy_min_bytes = INT64_MAX;
    atomic_init(&s->nvars, 0);
    atomic_init(&s->local_bytes, 0);
    char *shared = mmap(NULL, DDS_SHARED_BYTES, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) {  /* (zeroed) */
        s->gone = (volatile int *)shared;
        s->removed = (volatile unsigned char *)shared + 64;
        s->synced = (volatile uint32_t *)(shared + 64 + DDS_MAX_VARS);
    }

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
    code = agree(s, code, agreed);
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
    code = agree(s, code, agreed);
    if (code != DDS_OK) {
        destroy_store(s, 1);
        return code;
    }

    if (transport == DDS_TRANSPORT_SHM) {
        int ok = group_all_local, all_ok = 0;
        rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s->comm);
        *agreed = rc == MPI_SUCCESS;  /* every rank holds the same `all_ok` */
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
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    s->mpi_serial = s->need_rma && provided < MPI_THREAD_MULTIPLE;
    *out = s;
    return DDS_OK;
}

int dds_free(dds_store **store)
{
    if (!store || !*store) return DDS_OK;
    int finalized = 0;
    if (!dds_forked()) MPI_Finalized(&finalized);
    /* a forked process releases its copy of the memory only: the windows are the
     * parent's, and MPI may not be called here; the parent tells its forked processes
     * that the store is gone (they read it no more) */
    if (!dds_forked() && (*store)->gone) *(*store)->gone = 1;
    destroy_store(*store, !finalized && !dds_forked());
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
        const char *base = transport_load_base(s, v, g);
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
    else if (row_bytes == 0 && n_local > phys)
        /* rows of no bytes: as many as bytes of memory at most (their counts, offsets and
         * reads are sized by rows; 2**62 of them overflowed the group's total) */
        code = dds_set_error(DDS_EINVAL, "variable '%s': %lld rows of 0 bytes; allowed: at "
                             "most %lld (one per byte of this node's physical memory)",
                             name, (long long)n_local, (long long)phys);
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
    int id = dds_nvars_published(s);
    if (code == DDS_OK && id >= DDS_MAX_VARS)
        code = dds_set_error(DDS_ENOMEM, "variable '%s': a store holds at most %d "
                             "variables (ids are never reused)", name, DDS_MAX_VARS);
    if (code == DDS_OK && s->nlive == s->live_cap) { /* room to list it as held */
        int cap = s->live_cap ? 2 * s->live_cap : 64;
        int *live = realloc(s->live, (size_t)cap * sizeof *live);
        if (!live)
            code = dds_set_error(DDS_ENOMEM, "out of memory adding variable '%s'", name);
        else {
            s->live = live;
            s->live_cap = cap;
        }
    }
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

/* Collective over s->group_comm, before the windows of variable `name` are made: whether
 * MPI has the communicator ids they take (and one more), by duplicating their
 * communicators (each dup takes an id, and fails with an error where none is left) and
 * freeing the duplicates; the answer agreed over the group.  Out of ids, MPICH 5.0.2's
 * MPI_Win_allocate_shared crashed the process (a segfault at a node's 2,040th variable,
 * or sooner where the program holds communicators of its own) where MPI_Win_create
 * returned an error.  Made at every add: 7-17 us inside a node, 170 us between nodes
 * (on adds of 150 and 320 us; the thirty-first session). */
static int check_window_ids(dds_store *s, const char *name)
{
    int held = atomic_load(&windows_held), rc;
    /* the ids of the windows to make, and one spare: up to three duplicates held at once */
    MPI_Comm dup[3] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
    MPI_Comm of[3];
    int n = 0, bad = 0, windows = 0;
    if (s->node_comm != MPI_COMM_NULL) of[n++] = s->node_comm;
    if (s->node_comm == MPI_COMM_NULL || s->need_rma) of[n++] = s->group_comm;
    windows = n;
    of[n++] = s->group_comm;
    for (int i = 0; i < n; i++)  /* every call made, whatever failed before: in step */
        if (MPI_Comm_dup(of[i], &dup[i]) != MPI_SUCCESS) {
            bad = 1;
            dup[i] = MPI_COMM_NULL;
        }
    for (int i = 0; i < n; i++)
        if (dup[i] != MPI_COMM_NULL) MPI_Comm_free(&dup[i]);
    int any = bad;
    rc = MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, s->group_comm);
    if (rc != MPI_SUCCESS) return dds_mpi_error(rc, "MPI_Allreduce (communicator ids)");
    if (!any) return DDS_OK;
    return dds_set_error(DDS_ENOMEM, "variable '%s': MPI has no communicator id left for "
                         "its %d window%s (this process holds %d windows of ddstore "
                         "variables: one a variable whose group is on one node, two when "
                         "it spans nodes; MPICH gives a process 2048 ids, its "
                         "communicators' included): remove variables, free communicators "
                         "the program holds, or store fewer and larger variables (a "
                         "record set takes one a key)", name,
                         windows, windows == 1 ? "" : "s", held);
}

/* The windows of *v (bytes of this rank's chunk): shared memory among node-local
 * members and an RMA window over the group when some member needs one, or one RMA
 * window.  Collective over s->node_comm / s->group_comm: every window call is made
 * whatever failed locally before, so the ranks stay in step. */
static int allocate_windows(dds_store *s, struct dds_var *v, int64_t bytes)
{
    int rc, code = check_window_ids(s, v->name);
    if (code != DDS_OK) return code;  /* (agreed over the group: no window call made) */
    if (s->node_comm != MPI_COMM_NULL) {
        MPI_Info info;
        if (MPI_Info_create(&info) != MPI_SUCCESS) info = MPI_INFO_NULL; /* a hint only */
        else MPI_Info_set(info, "alloc_shared_noncontig", "true");
        rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, s->node_comm, &v->base,
                                     &v->shm_win);
        if (info != MPI_INFO_NULL) MPI_Info_free(&info);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];  /* with the variable and the size */
            int n = 0;
            if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS)
                snprintf(msg, sizeof msg, "error code %d", rc);
            code = dds_set_error(DDS_EMPI, "variable '%s': MPI_Win_allocate_shared of %lld "
                                 "bytes on this rank failed (is the shared memory, "
                                 "/dev/shm, or the address space ulimit -v allows too "
                                 "small?): %s", v->name, (long long)bytes, msg);
            v->shm_win = MPI_WIN_NULL;
            v->base = NULL;
        } else {
            atomic_fetch_add(&windows_held, 1);
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
        atomic_fetch_add(&windows_held, 1);
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
    if (dds_forked()) return dds_forked_refusal("adding a variable (collective)");
    int64_t bytes = 0;
    struct dds_var v;
    memset(&v, 0, sizeof v);
    v.rma_win = v.shm_win = MPI_WIN_NULL;
    int code = agree(s, prepare_var(s, name, n_local, row_bytes, &v, &bytes), NULL);
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
    for (int g = 0; code == DDS_OK && g < s->width; g++) { /* the group's prefix sums */
        if (v.offsets[g + 1] > INT64_MAX - v.offsets[g])
            code = dds_set_error(DDS_EINVAL, "variable '%s': the group's rows add up to "
                                 "more than 2**63 - 1", name);
        else
            v.offsets[g + 1] += v.offsets[g];
    }
    code = agree(s, code, NULL);
    if (code != DDS_OK) {
        free_var(&v, 1);
        return code;
    }
    v.nrows = v.offsets[s->width];
    if (v.n_local > 0 && v.row_bytes > 0 && s->private_chunks < 0)
        s->private_chunks = !in_shared_mapping(v.base);
    v.private_rows = v.n_local > 0 && v.row_bytes > 0 && s->private_chunks == 1;
    /* before this rank first writes its chunk (and reads the peers'): huge pages where
     * the system gives them (advice; see advise_huge) */
    for (int g = 0; g < s->width; g++)
        advise_huge(g == s->group_rank ? v.base : v.peer_base[g],
                    (v.offsets[g + 1] - v.offsets[g]) * v.row_bytes);
    /* fill the slot, then publish it: a reader that sees the new count sees the slot */
    int id = dds_nvars_published(s);
    *dds_var_at(s, id) = v;
    atomic_store_explicit(&s->nvars, id + 1, memory_order_release);
    s->live[s->nlive++] = id;  /* (room made by prepare_var) */
    atomic_fetch_add(&s->local_bytes, (long long)(v.n_local * v.row_bytes));
    *var_id = id;
    return DDS_OK;
}

int dds_remove(dds_store *s, int var_id)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    if (dds_forked()) return dds_forked_refusal("removing a variable (collective)");
    if (s->removed) s->removed[var_id] = 1;  /* for the processes forked from this one */
    atomic_fetch_sub(&s->local_bytes, (long long)(v->n_local * v->row_bytes));
    for (int i = 0; i < s->nlive; i++)
        if (s->live[i] == var_id) {
            s->live[i] = s->live[--s->nlive];
            break;
        }
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
    if (nrows && v->row_bytes) {
        memcpy(v->base + offset * v->row_bytes, src, (size_t)(nrows * v->row_bytes));
        v->written = 1;
    }
    return DDS_OK;
}

int dds_mark_written(dds_store *s, int var_id)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    v->written = 1;
    return DDS_OK;
}

int dds_zero_private(dds_store *s, int var_id)
{
    struct dds_var *v;
    int rc = dds_get_var(s, var_id, &v);
    if (rc) return rc;
    /* (a shared chunk is a new mapping of a new file: zero pages already, left untouched
     * so that the memory is taken when the rows are written, not twice) */
    if (v->private_rows) memset(v->base, 0, (size_t)(v->n_local * v->row_bytes));
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
    *ptr = transport_load_base(s, v, member);
    *nrows = v->offsets[member + 1] - v->offsets[member];
    return DDS_OK;
}

/* MPI_Win_sync of variable `id`'s windows (the local half of a sync); where its rows are
 * private memory and were `changed`, the change is counted for the processes forked from
 * this one (dds_get_var). */
static int sync_var(dds_store *s, int id, int changed)
{
    struct dds_var *v = dds_var_at(s, id);
    if (v->private_rows && s->synced && changed) s->synced[id] = ++v->syncs;
    v->written = 0;
    int code = DDS_OK;
    if (v->shm_win != MPI_WIN_NULL)
        code = mpi_check(MPI_Win_sync(v->shm_win), "MPI_Win_sync");
    if (v->rma_win != MPI_WIN_NULL && code == DDS_OK)
        code = mpi_check(MPI_Win_sync(v->rma_win), "MPI_Win_sync");
    return code;
}

static int sync_windows(dds_store *s)
{
    int code = DDS_OK;
    for (int i = 0; i < s->nlive && code == DDS_OK; i++)
        code = sync_var(s, s->live[i], dds_var_at(s, s->live[i])->written);
    return code;
}

int dds_sync(dds_store *s)
{
    if (!s) return freed_store();
    if (dds_forked()) return dds_forked_refusal("sync (collective)");
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
    if (dds_forked() && n) return dds_forked_refusal("MPI_Win_sync of a variable's windows");
    int code = DDS_OK;
    for (int64_t i = 0; i < n && code == DDS_OK; i++) {
        code = sync_var(s, var_ids[i], 1);
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
    if (!s) return 0;
    return (int64_t)atomic_load(&((dds_store *)s)->local_bytes);
}

/* ------------------------------------------------------------------ reads */

/* Every range inside [0, nrows); *total = rows in all (no overflow: each count <= nrows
 * and the sum is checked against the largest buffer a process can address). */
static int check_ranges(const struct dds_var *v, const int64_t *starts,
                        const int64_t *counts, int64_t n, int64_t *total)
{
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t count = counts ? counts[i] : 1;
        if (count < 0)
            return dds_set_error(DDS_EINVAL, "variable '%s': count %lld (range %lld) "
                                 "must be >= 0", v->name, (long long)count, (long long)i);
        if (starts[i] < 0 || starts[i] > v->nrows - count) {
            /* start + count may overflow int64: both are >= 0 there, so their sum
             * is exact in uint64 */
            if (starts[i] > INT64_MAX - count)
                return dds_set_error(DDS_ERANGE, "variable '%s': rows [%lld, %llu) (range "
                                     "%lld) out of range [0, %lld)", v->name,
                                     (long long)starts[i],
                                     (unsigned long long)starts[i] +
                                         (unsigned long long)count,
                                     (long long)i, (long long)v->nrows);
            return dds_set_error(DDS_ERANGE, "variable '%s': rows [%lld, %lld) (range "
                                 "%lld) out of range [0, %lld)", v->name,
                                 (long long)starts[i], (long long)(starts[i] + count),
                                 (long long)i, (long long)v->nrows);
        }
        if (count > INT64_MAX / 2 - sum)
            return dds_set_error(DDS_ENOMEM, "variable '%s': %lld ranges ask for more "
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

/* The rows of one-row requests (a loader's random rows) are copied in request order,
 * each row's first DDS_PREFETCH_LINES cache lines prefetched DDS_PREFETCH_AHEAD rows
 * before its copy: such a read is otherwise bound by the misses of one row at a time.
 * Measured by bench.gather (fresh random rows each call, 8 MB to 512 MB of rows, 1 and
 * 2 ranks, an AMD EPYC): rows of 4 B to 512 B were 1.3-2x faster with the prefetches
 * than without; 24 rows ahead beat 12 by 1.1-1.4x for rows under 512 B, 48 was no
 * better (docs/benchmarks.md, the thirty-first session; the same rows read again and
 * again, in the caches, had made the prefetches look slower for small rows). */
#define DDS_PREFETCH_AHEAD 24
#define DDS_PREFETCH_LINES 8

static inline void prefetch_lines(const char *src, int64_t bytes)
{
#if defined(__GNUC__)
    uintptr_t a = (uintptr_t)src & ~(uintptr_t)63, end = (uintptr_t)src + (uintptr_t)bytes;
    for (int lines = 0; a < end && lines < DDS_PREFETCH_LINES; a += 64, lines++)
        __builtin_prefetch((const void *)a, 0, 0);
#else
    (void)src; (void)bytes;
#endif
}

/* Prefetch row `row` of *v if its owner's chunk is readable here by loads. */
static void prefetch_row(const dds_store *s, const struct dds_var *v, int64_t row)
{
    int owner = dds_member_of(v->offsets, s->width, row);
    const char *src = transport_load_base(s, v, owner);
    if (src) prefetch_lines(src + (row - v->offsets[owner]) * v->row_bytes, v->row_bytes);
}

/* Whether every member holding rows of *v is readable here by loads. */
static int all_loadable(const dds_store *s, const struct dds_var *v)
{
    for (int g = 0; g < s->width; g++)
        if (v->offsets[g + 1] > v->offsets[g] && !transport_load_base(s, v, g)) return 0;
    return 1;
}

/* The address of row `row` of *v (checked; its owner readable by loads). */
static inline const char *row_source(const dds_store *s, const struct dds_var *v,
                                     int64_t row)
{
    int g = dds_member_of(v->offsets, s->width, row);
    return transport_load_base(s, v, g) + (row - v->offsets[g]) * v->row_bytes;
}

/* One-row requests `rows[n]` of *v, every owner readable by loads (all_loadable), into
 * `dst` (checked: n rows fit): each row's address found once, DDS_PREFETCH_AHEAD rows
 * before its copy, and rows that continue each other in memory copied as one:
 * walk_request's walk without its pieces and routes. */
static void copy_rows_here(const dds_store *s, const struct dds_var *v, const int64_t *rows,
                           int64_t n, char *dst)
{
    const int64_t rb = v->row_bytes;
    const char *next[DDS_PREFETCH_AHEAD];  /* rows i .. i + AHEAD - 1, as a ring */
    for (int64_t i = 0; i < n && i < DDS_PREFETCH_AHEAD; i++) {
        next[i] = row_source(s, v, rows[i]);
        prefetch_lines(next[i], rb);
    }
    uintptr_t run = 0, run_end = 0;  /* the source bytes of the copy being merged */
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *src = next[k];
        if (i + DDS_PREFETCH_AHEAD < n) {
            next[k] = row_source(s, v, rows[i + DDS_PREFETCH_AHEAD]);
            prefetch_lines(next[k], rb);
        }
        if (++k == DDS_PREFETCH_AHEAD) k = 0;
        if ((uintptr_t)src == run_end && run_end) {
            run_end += (uintptr_t)rb;
            continue;
        }
        if (run_end > run) {
            memcpy(dst, (const void *)run, run_end - run);
            dst += run_end - run;
        }
        run = (uintptr_t)src;
        run_end = run + (uintptr_t)rb;
    }
    if (run_end > run) memcpy(dst, (const void *)run, run_end - run);
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

/* Walk request `req` of call `c` (checked): its rows, cut at the owners' chunk
 * boundaries and merged where they continue each other in both places, handed to the
 * transport piece by piece (which copies, gets or asks for them: csrc/transport.c). */
static int walk_request(dds_store *s, struct dds_var *v, int req, struct transport_call *c)
{
    const dds_read_req *r = &c->reqs[req];
    if (!r->counts && c->copy_threads <= 1 && !c->per_row && all_loadable(s, v)) {
        copy_rows_here(s, v, r->starts, r->n, r->out);
        return DDS_OK;
    }
    int code = transport_begin(s, c, req, v);
    if (code != DDS_OK) return code;
    const int64_t *starts = r->starts, *counts = r->counts;
    int64_t n = r->n;
    char *dst = r->out;
    struct transport_piece p = {-1, 0, NULL, 0};
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
                code = transport_piece(s, c, &p);
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
    if (code == DDS_OK) code = transport_piece(s, c, &p);
    return transport_end(s, c, code);
}

/* A request's output as a byte interval, for read_overlaps. */
struct out_span {
    uintptr_t lo, hi;
    int64_t req;
};

static int span_by_lo(const void *a, const void *b)
{
    uintptr_t x = ((const struct out_span *)a)->lo, y = ((const struct out_span *)b)->lo;
    return (x > y) - (x < y);
}

/* Whether bytes [lo, hi) lie in rows of `v` this process maps (its own chunk, a
 * node-local member's): an output there would be read from while it is written. */
static int in_mapped_rows(const dds_store *s, const struct dds_var *v, uintptr_t lo,
                          uintptr_t hi)
{
    int every = s->node_comm != MPI_COMM_NULL && v->peer_base;  /* else its own only */
    for (int g = every ? 0 : s->group_rank; g < (every ? s->width : s->group_rank + 1);
         g++) {
        const char *b = g == s->group_rank ? v->base : v->peer_base[g];
        if (!b) continue;
        uintptr_t a = (uintptr_t)b;
        uintptr_t e = a + (uintptr_t)((v->offsets[g + 1] - v->offsets[g]) * v->row_bytes);
        if (lo < e && a < hi) return 1;
    }
    return 0;
}

/* The requests' buffers against each other (checked requests).  Two outputs that overlap
 * are refused: which rows would be left there depends on where they live (a local copy
 * is made at once, a remote one when its round trip ends).  An output that overlaps an
 * index or count array (ids read into the array that holds them) sets *copy: the walk
 * reads those arrays after earlier requests wrote, so the caller copies them first. */
static int read_overlaps(dds_store *s, const dds_read_req *reqs, int64_t nreq, int *copy)
{
    *copy = 0;
    for (int64_t r = 0; r < nreq; r++) {
        struct dds_var *v = NULL;
        if (!reqs[r].out || reqs[r].out_bytes <= 0 || reqs[r].n <= 0 ||
            dds_get_var(s, reqs[r].var_id, &v) != DDS_OK)
            continue;
        uintptr_t lo = (uintptr_t)reqs[r].out;
        if (in_mapped_rows(s, v, lo, lo + (uintptr_t)reqs[r].out_bytes))
            return dds_set_error(DDS_EINVAL, "variable '%s': the output (request %lld) "
                                 "lies in the variable's own rows on this node (a view of "
                                 "the store's memory, read while it is written): read "
                                 "into another buffer", v->name, (long long)r);
    }
    if (nreq == 1) {  /* one read (get, get_batch): its output against its own arrays */
        const dds_read_req *q = reqs;
        uintptr_t lo = (uintptr_t)q->out, hi = lo + (uintptr_t)q->out_bytes;
        uintptr_t a = (uintptr_t)q->starts, c = (uintptr_t)q->counts;
        uintptr_t len = (uintptr_t)q->n * sizeof(int64_t);
        *copy = q->out && q->n > 0 && q->out_bytes > 0 &&
                ((lo < a + len && a < hi) || (q->counts && lo < c + len && c < hi));
        return DDS_OK;
    }
    struct out_span few[8];  /* (a read's usual count: no allocation on the hot path) */
    struct out_span *outs = nreq <= 8 ? few : malloc(sizeof *outs * (size_t)nreq);
    if (!outs) return dds_set_error(DDS_ENOMEM, "dds_read_many: out of memory");
    int64_t m = 0;
    for (int64_t r = 0; r < nreq; r++)
        if (reqs[r].out && reqs[r].out_bytes > 0 && reqs[r].n > 0)
            outs[m++] = (struct out_span){(uintptr_t)reqs[r].out,
                                          (uintptr_t)reqs[r].out +
                                              (uintptr_t)reqs[r].out_bytes, r};
    qsort(outs, (size_t)m, sizeof *outs, span_by_lo);
    for (int64_t i = 1; i < m; i++)
        if (outs[i].lo < outs[i - 1].hi) {
            int64_t a = outs[i - 1].req, b = outs[i].req;
            if (outs != few) free(outs);
            return dds_set_error(DDS_EINVAL, "dds_read_many: the outputs of requests %lld "
                                 "and %lld overlap (give each request its own output)",
                                 (long long)(a < b ? a : b), (long long)(a < b ? b : a));
        }
    /* the outputs do not overlap: sorted by start, their ends rise too */
    for (int64_t r = 0; r < nreq && !*copy; r++)
        for (int k = 0; k < 2 && !*copy; k++) {
            const int64_t *p = k ? reqs[r].counts : reqs[r].starts;
            if (!p || reqs[r].n <= 0) continue;
            uintptr_t a = (uintptr_t)p, b = a + (uintptr_t)reqs[r].n * sizeof(int64_t);
            int64_t lo = 0, hi = m;  /* the first output that ends after a */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (outs[mid].hi <= a) lo = mid + 1;
                else hi = mid;
            }
            *copy = lo < m && outs[lo].lo < b;
        }
    if (outs != few) free(outs);
    return DDS_OK;
}

/* Copies of `reqs` whose index and count arrays are copies too (in `*held`): what the
 * walk reads stays what was checked whatever the outputs receive. */
static dds_read_req *held_requests(const dds_read_req *reqs, int64_t nreq, int64_t **held)
{
    int64_t total = 0;
    for (int64_t r = 0; r < nreq; r++)
        total += reqs[r].n * (reqs[r].counts ? 2 : 1);
    dds_read_req *own = malloc(sizeof *own * (size_t)nreq);
    *held = malloc(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
    if (!own || !*held) {
        free(own);
        free(*held);
        *held = NULL;
        return NULL;
    }
    int64_t at = 0;
    for (int64_t r = 0; r < nreq; r++) {
        own[r] = reqs[r];
        if (reqs[r].n > 0) {
            memcpy(*held + at, reqs[r].starts, sizeof(int64_t) * (size_t)reqs[r].n);
            own[r].starts = *held + at;
            at += reqs[r].n;
            if (reqs[r].counts) {
                memcpy(*held + at, reqs[r].counts, sizeof(int64_t) * (size_t)reqs[r].n);
                own[r].counts = *held + at;
                at += reqs[r].n;
            }
        }
    }
    return own;
}

static int read_walk(dds_store *s, const dds_read_req *reqs, int64_t nreq, int per_row,
                     int any_rma, struct dds_var *v);

static int read_many(dds_store *s, const dds_read_req *reqs, int64_t nreq, int per_row)
{
    if (!s) return freed_store();
    if (nreq < 0 || (nreq > 0 && !reqs))
        return dds_set_error(DDS_EINVAL, "dds_read_many: %lld requests (NULL: %d)",
                             (long long)nreq, !reqs);
    if (nreq > INT_MAX / 2)
        return dds_set_error(DDS_EINVAL, "dds_read_many: %lld requests, at most %d",
                             (long long)nreq, INT_MAX / 2);
    struct dds_var *v = NULL;
    int any_rma = 0;
    for (int64_t r = 0; r < nreq; r++) {
        int rc = check_request(s, &reqs[r], &v);
        if (rc) return rc;
        any_rma |= v->rma_win != MPI_WIN_NULL;
    }
    int copy;
    int rc = read_overlaps(s, reqs, nreq, &copy);
    if (rc) return rc;
    dds_read_req *own = NULL;
    int64_t *held = NULL;
    if (copy) {
        own = held_requests(reqs, nreq, &held);
        if (!own) return dds_set_error(DDS_ENOMEM, "dds_read_many: out of memory");
        reqs = own;
    }
    rc = read_walk(s, reqs, nreq, per_row && any_rma, any_rma, v);
    free(own);
    free(held);
    return rc;
}

/* read_many's walk over checked requests (`v` the last one's variable). */
static int read_walk(dds_store *s, const dds_read_req *reqs, int64_t nreq, int per_row,
                     int any_rma, struct dds_var *v)
{
    if (per_row && dds_forked()) {
        char what[256];
        snprintf(what, sizeof what, "variable '%s': a read with DDS_READ_PER_ROW_LOCK",
                 v->name);
        return dds_forked_refusal(what);
    }
    struct transport_call call;
    int code = transport_open(s, &call, reqs, nreq, per_row, any_rma, v);
    for (int64_t r = 0; r < nreq && code == DDS_OK; r++) {
        /* checked before the walk, but in a forked process the rank may remove or
         * rewrite the variable meanwhile (its flags in the shared page): refused then,
         * as at the check (v is NULL: the walk would crash) */
        code = dds_get_var(s, reqs[r].var_id, &v);
        if (code == DDS_OK) code = walk_request(s, v, (int)r, &call);
    }
    return transport_close(s, &call, code);
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
