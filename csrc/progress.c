/*
 * progress.c - the progress agent: see dds_progress.h.
 */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <stdint.h>
#include <sys/prctl.h>
#include <time.h>

static atomic_llong agent_polls, agent_busy_ns, agents_running;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The agent's loop: one poll (MPI_Iprobe, or a request answered when the store serves
 * reads by message), then a sleep of its period.  Nothing more, as measured over TCP on
 * a node whose cores all compute (docs/cluster.md, "Between nodes: reads of a computing
 * rank"): follow-up polls soon after a busy one (a read is several messages) or a short
 * spin made reads slower, not faster, each wake of a sleeping thread costing 20-30 us
 * on a virtual machine and its polls contending for MPI's lock.  While a thread of this
 * rank does the agent's work, the agent does not poll: it would only take MPI's lock
 * from it.  That is a thread waiting for replies by message (s->mpi_servers: it answers
 * requests meanwhile) or, where the store does not serve reads by message, a thread
 * flushing its gets (s->mpi_waiters: MPI's progress is all the agent would make).  A
 * flusher answers no request: in a store that serves the agent polls every
 * DDS_PROGRESS_FLUSH_EVERY periods through flushes (standing back for them, it left every
 * request to a rank whose threads read one-sided, one flush after another, waiting for
 * seconds; polling every period cost PyG's batches between nodes a few per cent). */
#define DDS_PROGRESS_SLACK_NS 1000
/* while a thread of a store that serves flushes, the agent polls every this many periods
 * (1 ms at the default 200 us): requests are answered, MPI's lock mostly left to it */
#define DDS_PROGRESS_FLUSH_EVERY 5

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
}

static void *agent_main(void *arg)
{
    dds_store *s = arg;
#ifdef PR_SET_TIMERSLACK
    /* sleep as long as asked: the default slack (50 us) would stretch every short nap of
     * a reply in flight (csrc/serve.c) */
    prctl(PR_SET_TIMERSLACK, DDS_PROGRESS_SLACK_NS, 0, 0, 0);
#endif
    int stood = 0;  /* periods stood back in a row for a flushing thread */
    while (!atomic_load(&s->progress_stop)) {
        int serve = atomic_load_explicit(&s->serve_on, memory_order_acquire);
        int skip = atomic_load_explicit(serve ? &s->mpi_servers : &s->mpi_waiters,
                                        memory_order_acquire) > 0;
        if (!skip && serve && atomic_load_explicit(&s->mpi_waiters, memory_order_acquire))
            skip = ++stood < DDS_PROGRESS_FLUSH_EVERY;  /* (a flush answers no request) */
        if (!skip) {
            stood = 0;
            int flag = 0, served = 0;
            int64_t t0 = now_ns();
            if (serve)
                dds_serve_poll(s, &s->agent_srv, &served);  /* failures: the reader's */
            else
                MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->progress_comm, &flag,
                           MPI_STATUS_IGNORE);
            atomic_fetch_add(&agent_busy_ns, now_ns() - t0);
            atomic_fetch_add(&agent_polls, 1);
        }
        sleep_ns(atomic_load(&s->progress_interval_ns));
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
    atomic_store(&s->serve_on, 0);
    dds_server_release(&s->agent_srv);
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
