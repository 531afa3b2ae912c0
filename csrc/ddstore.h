/*
 * ddstore.h - the whole C API of the ddstore core: include this one header.  It
 * includes one header per concept, each with the functions of one C file:
 *
 *   dds_store.h     the store: variables spread over the ranks in groups, their reads
 *                   (csrc/ddstore.c); also the status codes and the rules every
 *                   function follows (errors, collective calls, outputs, threads)
 *   dds_tcsr.h      the T-CSR (time-sorted neighbour lists in three variables) and its
 *                   local build steps (csrc/tcsr.c)
 *   dds_temporal.h  temporal neighbour sampling over a T-CSR (csrc/temporal.c)
 *   dds_neighbor.h  PyG-style neighbour sampling over a CSC held as a T-CSR, uniform
 *                   or weighted (csrc/neighbor.c), and the one relabelling of the
 *                   sampled nodes, inside each hop's call (csrc/relabel.c)
 *   dds_dynamic.h   one dynamic-graph step: a snapshot plus an edge delta
 *                   (csrc/dynamic.c)
 *   dds_subgraph.h  transforms of a sampled batch's edges: PyG's to_bidirectional
 *                   (csrc/subgraph.c)
 *   dds_checks.h    input checks at memory speed: a 64-bit fingerprint (XXH64) of a
 *                   buffer, repeated ids through a bitmap (csrc/checks.c)
 *   dds_progress.h  the progress agent: a thread that lets MPI answer one-sided reads
 *                   while the rank computes (csrc/progress.c)
 *   dds_device.h    many host-to-device copies in one call, through a copy function
 *                   the caller hands over (csrc/device.c)
 *
 * The cffi bindings (python_bindings/build_ddstore.py) declare what these headers
 * declare, read in the order of the #include lines below.
 */
#ifndef DDSTORE_H
#define DDSTORE_H

#include "dds_store.h"
#include "dds_tcsr.h"
#include "dds_temporal.h"
#include "dds_neighbor.h"
#include "dds_dynamic.h"
#include "dds_subgraph.h"
#include "dds_checks.h"
#include "dds_progress.h"
#include "dds_device.h"

#endif /* DDSTORE_H */
