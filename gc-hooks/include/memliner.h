/*
 * memliner.h: the C ABI between the memliner agent (libmemliner_agent.so) and GC-hook patched
 * HotSpot builds. Mirrors gc-hooks/src/lib.rs; the Rust layout test pins these offsets.
 *
 * A patched collector resolves the symbols with dlsym(RTLD_DEFAULT, ...) once the VM is up
 * (the agent is loaded before VM init); a missing symbol means no agent: the hook is a no-op.
 */
#ifndef MEMLINER_H
#define MEMLINER_H

#include <stddef.h>
#include <stdint.h>

#define MEMLINER_ABI_VERSION 1

typedef struct memliner_heap_view {
  uint32_t abi_version;     /* offset 0: MEMLINER_ABI_VERSION */
  uint32_t page_shift;      /* offset 4: log2 of the page size (12) */
  uintptr_t base;           /* offset 8: first byte of the paged heap */
  size_t pages;             /* offset 16: pages in the residency map */
  const uint8_t *residency; /* offset 24: one byte per page, 0 = resident */
} memliner_heap_view;

/* Returns the heap view, or NULL before the heap is paged (or with policy=off). */
typedef const memliner_heap_view *(*memliner_heap_view_fn)(void);
#define MEMLINER_HEAP_VIEW_SYMBOL "memliner_heap_view"

#endif
