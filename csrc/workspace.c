/* workspace.c - scratch memory a device keeps from run to run. */
#include <stdlib.h>

#include "kernels.h"

void* workspace_get(workspace* ws, int slot, size_t bytes) {
  if (slot < 0 || slot >= WORKSPACE_SLOTS) return NULL;
  if (bytes == 0) bytes = 1;
  if (ws->bytes[slot] >= bytes) return ws->ptr[slot];
  /* Grow with headroom so that a network's slightly larger next layer does not reallocate. */
  size_t want = bytes + bytes / 4;
  want = (want + 63) & ~(size_t)63;
  void* fresh = aligned_alloc(64, want);
  if (fresh == NULL) return NULL;
  free(ws->ptr[slot]);
  ws->ptr[slot] = fresh;
  ws->bytes[slot] = want;
  return fresh;
}

void workspace_free(workspace* ws) {
  for (int i = 0; i < WORKSPACE_SLOTS; ++i) {
    free(ws->ptr[i]);
    ws->ptr[i] = NULL;
    ws->bytes[i] = 0;
  }
}
