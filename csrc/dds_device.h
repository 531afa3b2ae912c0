/*
 * dds_device.h - many copies from host memory to a device in one call (csrc/device.c):
 * the window loader's direct copies out of the store's page-locked memory
 * (ddstore.device.DeviceRows).  The core does not link CUDA: the caller finds a copy
 * function with cudaMemcpyAsync's signature (in the CUDA runtime its process loaded)
 * and hands over its address.  Part of the C API of the ddstore core (include
 * ddstore.h); the rules every function follows are at the top of dds_store.h.
 */
#ifndef DDSTORE_DEVICE_H
#define DDSTORE_DEVICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Local, no MPI, no store.  Issue `n` copies through `fn`, the address of a function
 * `int fn(void *dst, const void *src, size_t bytes, int kind, void *stream)` (0 on
 * success, as cudaMemcpyAsync): piece i copies `bytes[i]` bytes from address `src[i]`
 * to address `dst + dst_off[i]`, with `kind` and `stream` passed through.  Every piece is
 * checked before any is issued: `fn`, `dst` and each `src` not 0, `bytes[i] >= 0`, and
 * `[dst_off[i], dst_off[i] + bytes[i])` within the destination's `dst_bytes` (DDS_EINVAL
 * or DDS_ERANGE naming the piece; nothing issued).  The first copy `fn` refuses stops the
 * loop: DDS_EINVAL naming the piece and fn's code.  *issued is the number of pieces
 * whose copy `fn` accepted. */
int dds_copy_pieces(uintptr_t fn, uintptr_t dst, int64_t dst_bytes, const int64_t *dst_off,
                    const uintptr_t *src, const int64_t *bytes, int64_t n, int kind,
                    uintptr_t stream, int64_t *issued);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_DEVICE_H */
