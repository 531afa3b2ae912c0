/*
 * progress.c - the progress agent: see dds_progress.h.
 */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <sched.h>
#include <stdint.h>
#include <time.h>

static atomic_llong agent_polls, agent_busy_ns, agents_running;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The agent's loop.  A poll that answered something (it took clearly longer than an
 * idle poll: the least time seen so far, plus 2 us) is followed by more polls without
 * sleeping, for up to DDS_PROGRESS_LINGER_NS after the last such poll: a read over
 * TCP is several messages (request, reply, completion), each needing a poll, and
 * lingering serves them in one wake instead of one per period.  Otherwise it sleeps
 * its period. */
#define DDS_PROGRESS_LINGER_NS 200000

static void *agent_main(void *arg)
{
    dds_store *s = arg;
    int64_t idle_ns = INT64_MAX, last_work = 0;
    while (!atomic_load(&s->progress_stop)) {
        int flag = 0;
        int64_t t0 = now_ns();
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->progress_comm, &flag, MPI_STATUS_IGNORE);
        int64_t t1 = now_ns(), dt = t1 - t0;
        atomic_fetch_add(&agent_busy_ns, dt);
        atomic_fetch_add(&agent_polls, 1);
        if (dt < idle_ns) idle_ns = dt;
        if (dt > idle_ns + 2000) last_work = t1;
        if (t1 - last_work < DDS_PROGRESS_LINGER_NS) {
            sched_yield();
            continue;
        }
        int64_t ns = atomic_load(&s->progress_interval_ns);
        struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int dds_progress_start(dds_store *s, int64_t interval_us)
{
    if (!s) return dds_set_error(DDS_ESTATE, "store has been freed");
    if (interval_us < 1 || interval_us > 1000000)
        return dds_set_error(DDS_EINVAL, "progress interval %lld us out of range: allowed "
                             "1 to 1000000", (long long)interval_us);
    if (dds_forked())
        return dds_set_error(DDS_ESTATE, "the progress agent cannot start in a process "
                             "forked from an MPI rank");
    if (s->progress_comm == MPI_COMM_NULL)
        return dds_set_error(DDS_ESTATE, "the store has no progress communicator");
    atomic_store(&s->progress_interval_ns, (long long)interval_us * 1000);
    if (s->progress_on) return DDS_OK;
    atomic_store(&s->progress_stop, 0);
    if (pthread_create(&s->progress_thread, NULL, agent_main, s) != 0)
        return dds_set_error(DDS_ENOMEM, "the progress agent's thread could not be "
                             "created");
    s->progress_on = 1;
    atomic_fetch_add(&agents_running, 1);
    return DDS_OK;
}

void dds_progress_halt(dds_store *s)
{
    if (!s->progress_on) return;
    s->progress_on = 0;
    if (dds_forked()) return;  /* the thread stayed in the parent */
    atomic_store(&s->progress_stop, 1);
    pthread_join(s->progress_thread, NULL);
    atomic_fetch_sub(&agents_running, 1);
}

int dds_progress_running(const dds_store *s) { return s ? s->progress_on : 0; }

int dds_progress_stats(int64_t *polls, int64_t *busy_ns, int64_t *running)
{
    if (!polls || !busy_ns || !running)
        return dds_set_error(DDS_EINVAL, "dds_progress_stats: NULL output");
    *polls = atomic_load(&agent_polls);
    *busy_ns = atomic_load(&agent_busy_ns);
    *running = atomic_load(&agents_running);
    return DDS_OK;
}
