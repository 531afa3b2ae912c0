/*
 * device.c - many host-to-device copies in one call (see dds_device.h).  Local: no MPI,
 * no store.  One pass checks every piece against the destination's size, a second
 * hands each to the caller's copy function: a batch of 64 windows is 128 copies, and
 * issuing them from here costs the copy function's own time alone (no interpreter
 * between two of them).
 */
#include "internal.h"

typedef int (*copy_fn)(void *dst, const void *src, size_t bytes, int kind, void *stream);

int dds_copy_pieces(uintptr_t fn, uintptr_t dst, int64_t dst_bytes, const int64_t *dst_off,
                    const uintptr_t *src, const int64_t *bytes, int64_t n, int kind,
                    uintptr_t stream, int64_t *issued)
{
    if (issued) *issued = 0;
    if (!issued || n < 0 || (n > 0 && (!dst_off || !src || !bytes)))
        return dds_set_error(DDS_EINVAL, "copy pieces: n=%lld with a null array or "
                             "output", (long long)n);
    if (n > 0 && (!fn || !dst))
        return dds_set_error(DDS_EINVAL, "copy pieces: null %s",
                             !fn ? "copy function" : "destination");
    if (dst_bytes < 0)
        return dds_set_error(DDS_EINVAL, "copy pieces: destination of %lld bytes",
                             (long long)dst_bytes);
    for (int64_t i = 0; i < n; i++) {
        if (bytes[i] < 0 || (bytes[i] > 0 && !src[i]))
            return dds_set_error(DDS_EINVAL, "copy pieces: piece %lld has %lld bytes from "
                                 "address %#llx", (long long)i, (long long)bytes[i],
                                 (unsigned long long)src[i]);
        if (dst_off[i] < 0 || dst_off[i] > dst_bytes || bytes[i] > dst_bytes - dst_off[i])
            return dds_set_error(DDS_ERANGE, "copy pieces: piece %lld writes bytes [%lld, "
                                 "%lld + %lld) of a destination of %lld", (long long)i,
                                 (long long)dst_off[i], (long long)dst_off[i],
                                 (long long)bytes[i], (long long)dst_bytes);
    }
    copy_fn copy = (copy_fn)fn;
    for (int64_t i = 0; i < n; i++) {
        if (bytes[i] == 0) {
            (*issued)++;
            continue;
        }
        int rc = copy((void *)(dst + (uintptr_t)dst_off[i]), (const void *)src[i],
                      (size_t)bytes[i], kind, (void *)stream);
        if (rc != 0)
            return dds_set_error(DDS_EINVAL, "copy pieces: the copy function refused piece "
                                 "%lld of %lld (%lld bytes): code %d", (long long)i,
                                 (long long)n, (long long)bytes[i], rc);
        (*issued)++;
    }
    return DDS_OK;
}
