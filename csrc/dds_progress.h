/*
 * dds_progress.h - the progress agent (csrc/progress.c): a thread per store that lets
 * MPI answer one-sided reads aimed at this rank while the rank's own threads make no
 * MPI call (a training step: gradients go through torch.distributed, not MPI).
 *
 * Over a network without hardware RMA (TCP: MPICH's ch4:ofi with libfabric's tcp
 * provider) a passive-target MPI_Get is served by the target's MPI progress engine,
 * which runs only inside the target's MPI calls: a rank computing for seconds makes
 * every reader wait seconds.  The agent wakes every `interval_us` microseconds, calls
 * MPI_Iprobe on the store's own duplicate of its communicator (which runs the progress
 * engine: pending reads are answered; a probe on MPI_COMM_SELF would not) and sleeps
 * again.  Needs MPI_THREAD_MULTIPLE (the caller checks).  Local calls.  dds_free stops
 * and joins the agent (at most one period later) before it frees anything.
 */
#ifndef DDS_PROGRESS_H
#define DDS_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Start the store's agent with period `interval_us` in [1, 1000000]; a running agent
 * takes the new period.  DDS_OK, DDS_EINVAL (period), DDS_ESTATE (forked process or
 * freed store) or DDS_ENOMEM (no thread). */
int dds_progress_start(dds_store *s, int64_t interval_us);
/* Whether the store's agent runs (0/1). */
int dds_progress_running(const dds_store *s);
/* What the agents of this process did so far: polls made, nanoseconds spent inside
 * MPI_Iprobe, agents running now. */
int dds_progress_stats(int64_t *polls, int64_t *busy_ns, int64_t *running);

#ifdef __cplusplus
}
#endif
#endif /* DDS_PROGRESS_H */
