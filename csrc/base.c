/*
 * base.c - the bottom of the C core: what every other file calls, and which calls no
 * file of the core itself.  The error message (dds_set_error, dds_mpi_error,
 * dds_last_error), the fork guard (dds_forked) and the lookup of a variable by id.
 */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ errors */

/* The message of the last failure, per thread: a call fails and its caller reads the
 * message (dds_last_error) in the same thread, so concurrent readers (a prefetch thread
 * and the main thread) never see each other's text.  The only global state. */
static _Thread_local char dds_err[DDS_ERROR_BYTES];

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
    const char *words = strstr(msg, "Too many communicators");
    if (words) {  /* MPICH's words: told as memory, quoting its line (not its stack) */
        int len = (int)strcspn(words, "\n");
        return dds_set_error(DDS_ENOMEM, "%s failed: MPI has no communicator id left (MPICH "
                             "gives a process 2048, communicators and windows together: "
                             "a store takes 5, each of its variables 1, or 2 when its "
                             "group spans nodes): remove variables, free stores or "
                             "communicators, or store fewer and larger variables; MPI "
                             "said: %.*s", what, len < 300 ? len : 300, words);
    }
    return dds_set_error(DDS_EMPI, "%s failed: %s", what, msg);
}

const char *dds_last_error(void) { return dds_err; }

/* ------------------------------------------------------------------ fork guard */

/* Set in every process forked from this one after the library was loaded (a DataLoader
 * worker, os.fork): pthread_atfork's child handler, registered when the library is
 * loaded.  A forked process inherits the windows' memory (this rank's chunk and the
 * node-local members' chunks stay readable by load) but must make no MPI call: MPI
 * does not define a forked child's use of the parent's MPI state.  Every path that
 * would call MPI returns DDS_ESTATE there instead (dds_forked_refusal); reads by load
 * go on.  Written once, before the child runs anything else: no lock needed. */
static volatile int dds_forked_flag;

static void mark_forked(void) { dds_forked_flag = 1; }

__attribute__((constructor)) static void register_fork_guard(void)
{
    pthread_atfork(NULL, NULL, mark_forked);
}

int dds_forked(void) { return dds_forked_flag; }

int dds_forked_refusal(const char *what)
{
    return dds_set_error(DDS_ESTATE, "%s needs MPI, and this process was forked from an "
                         "MPI rank (a DataLoader worker with num_workers > 0, os.fork), "
                         "where no MPI call may be made; call it in the rank's own "
                         "process", what);
}

/* ------------------------------------------------------------------ variables table */

int dds_gone(const dds_store *s)
{
    return s && s->gone && *s->gone && dds_forked();
}

int dds_private_rows(const dds_store *s, int var_id)
{
    struct dds_var *v;
    return dds_get_var(s, var_id, &v) == DDS_OK && v->private_rows;
}

int dds_held(const dds_store *s, int var_id)
{
    if (!s || (s->gone && *s->gone) || var_id < 0 || var_id >= dds_nvars_published(s))
        return 0;
    if (s->removed && s->removed[var_id] && dds_forked()) return 0;
    return dds_var_at(s, var_id)->offsets != NULL;
}

int dds_get_var(const dds_store *s, int var_id, struct dds_var **v)
{
    *v = NULL;
    if (!s) return dds_set_error(DDS_ESTATE, "store has been freed");
    if (s->gone && *s->gone)
        return dds_forked()
                   ? dds_set_error(DDS_ESTATE, "store has been freed by the rank this "
                                   "process was forked from (a DataLoader worker that "
                                   "outlived it: persistent_workers=True across a free); "
                                   "nothing is read")
                   : dds_set_error(DDS_ESTATE, "store has been freed (by another thread "
                                   "of this process, during this read); nothing is read");
    if (var_id < 0 || var_id >= dds_nvars_published(s))
        return dds_set_error(DDS_ESTATE, "unknown variable id %d", var_id);
    const struct dds_var *w = dds_var_at(s, var_id);
    if (dds_forked_flag && s->removed && s->removed[var_id])  /* (the rank reads neither) */
        return dds_set_error(DDS_ESTATE, "variable '%s' (id %d) was removed by the rank "
                             "this process was forked from (a DataLoader worker that "
                             "outlived it: persistent_workers=True across a remove); "
                             "nothing is read", w->name, var_id);
    if (dds_forked_flag && w->private_rows && s->synced && s->synced[var_id] != w->syncs)
        return dds_set_error(DDS_ESTATE, "variable '%s' (id %d): the rank this process "
                             "was forked from wrote its rows since the fork, into memory "
                             "this process holds a copy of (a rank with no node-local "
                             "member: MPI gives it private memory, at width 1 or alone on "
                             "its node); the copy would be read: recreate the DataLoader "
                             "(its workers) after changing the store, or use "
                             "persistent_workers=False", w->name, var_id);
    if (!w->offsets) /* a reader built over it outlived it */
        return dds_set_error(DDS_ESTATE, "variable '%s' (id %d) was removed (by remove, "
                             "or by the rollback of the transaction that created it); "
                             "what was built over it cannot read it", w->name, var_id);
    *v = dds_var_at(s, var_id);
    return DDS_OK;
}
