/* workspace.c - buffers (accel_buffer_alloc) and the scratch memory a device keeps from run to
 * run. */
#define _DEFAULT_SOURCE /* madvise */
#include <stdlib.h>
#include <sys/mman.h>

#include "kernels.h"

enum { HUGE_PAGE = 2 << 20 }; /* bytes: x86-64's transparent huge page */

void* accel_buffer_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  bytes = (bytes + 63) & ~(size_t)63;
  if (bytes < HUGE_PAGE) return aligned_alloc(64, bytes);
  void* buffer = NULL;
  if (posix_memalign(&buffer, HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE /* only advice: where refused (THP off), 4 KB pages as before */
  (void)madvise(buffer, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
  return buffer;
}

void accel_buffer_free(void* buffer) { free(buffer); }

void* workspace_get(workspace* ws, int slot, size_t bytes) {
  if (slot < 0 || slot >= WORKSPACE_SLOTS) return NULL;
  if (bytes == 0) bytes = 1;
  if (ws->bytes[slot] >= bytes) return ws->ptr[slot];
  /* Grow with headroom so that a network's slightly larger next layer does not reallocate. */
  size_t want = bytes + bytes / 4;
  want = (want + 63) & ~(size_t)63;
  void* fresh = accel_buffer_alloc(want);
  if (fresh == NULL) return NULL;
  accel_buffer_free(ws->ptr[slot]);
  ws->ptr[slot] = fresh;
  ws->bytes[slot] = want;
  return fresh;
}

void workspace_free(workspace* ws) {
  for (int i = 0; i < WORKSPACE_SLOTS; ++i) {
    accel_buffer_free(ws->ptr[i]);
    ws->ptr[i] = NULL;
    ws->bytes[i] = 0;
  }
}
