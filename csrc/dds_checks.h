/*
 * dds_checks.h - checks of a user's input at memory speed (csrc/checks.c): a 64-bit
 * fingerprint of a buffer (ddstore._core.fingerprint: are the ranks of a collective call
 * handed the same data?) and repeated ids through a bitmap (ddstore._core.mark_ids: does
 * a split list a node twice?).  Part of the C API of the ddstore core (include
 * ddstore.h); the rules every function follows are at the top of dds_store.h.
 */
#ifndef DDSTORE_CHECKS_H
#define DDSTORE_CHECKS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Local, no MPI, no store.  *out = XXH64 (Yann Collet's xxHash, 64-bit variant) of the
 * `nbytes` bytes at `data` (NULL allowed when nbytes == 0) with `seed`; DDS_EINVAL for
 * nbytes < 0 or data NULL with nbytes > 0.  Not a cryptographic hash: two different
 * buffers collide with probability about 2**-64 unless they were made to.  Words are
 * read in the machine's byte order (the same value on every rank of one architecture;
 * XXH64's own value on little-endian machines); one pass over the memory (about
 * 10 GB/s). */
int dds_fingerprint(const void *data, int64_t nbytes, uint64_t seed, uint64_t *out);

/* Local, no MPI, no store.  `bits` is a bitmap of `nbits` bits (id v is bit v % 64 of
 * word v / 64; (nbits + 63) / 64 words).  With `mark` != 0, sets the bit of ids[0..n) in
 * order and stops at the first id whose bit was already set (set before the call, or by
 * an earlier id of this call); with `mark` == 0, only tests, and stops at the first id
 * whose bit is set.  *first is that id's position, or -1 (every bit was clear).  An id
 * outside [0, nbits) is DDS_ERANGE naming its position (the ids before it processed). */
int dds_mark_ids(uint64_t *bits, int64_t nbits, const int64_t *ids, int64_t n, int mark,
                 int64_t *first);

#ifdef __cplusplus
}
#endif
#endif /* DDSTORE_CHECKS_H */
