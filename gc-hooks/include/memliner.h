/*
 * memliner.h: the C ABI between the memliner agent (libmemliner_agent.so) and GC-hook patched
 * HotSpot builds (gc-hooks/hotspot/jdk17). Mirrors gc-hooks/src/lib.rs; the Rust layout test
 * pins the offsets and names below.
 *
 * The patched JVM looks up MEMLINER_HOOKS_SYMBOL in each loaded JVMTI agent library (agents
 * are opened with local symbol scope, so the lookup is by library handle, not RTLD_DEFAULT)
 * when concurrent marking first starts. No agent, a NULL table or a version other than
 * MEMLINER_HOOKS_VERSION: the hooks stay off and the JVM behaves exactly like a stock one.
 *
 * Threading: every function may be called from any GC worker thread, concurrently, while the
 * application runs; none blocks on the network or takes a lock the JVM holds.
 */
#ifndef MEMLINER_H
#define MEMLINER_H

#include <stddef.h>
#include <stdint.h>

#define MEMLINER_ABI_VERSION 2
#define MEMLINER_HOOKS_VERSION MEMLINER_ABI_VERSION

/* The agent's view of the paged heap, valid from VMInit until the process exits. */
typedef struct memliner_heap_view {
  uint32_t abi_version;     /* offset 0: MEMLINER_ABI_VERSION */
  uint32_t page_shift;      /* offset 4: log2 of the page size (12) */
  uintptr_t base;           /* offset 8: first byte of the paged heap */
  size_t pages;             /* offset 16: pages in the residency map */
  const uint8_t *residency; /* offset 24: one byte per page: 1 = remote (a touch fetches
                               it over the network), 0 = a touch is served locally */
} memliner_heap_view;

/* What the patched collector counts; the agent owns the storage and reports it in its stats.
 * The JVM adds with relaxed atomic increments. */
typedef struct memliner_hook_counters {
  uint64_t recorded;          /* offset 0: store-log (SATB) entries marking processed */
  uint64_t lined_up;          /* offset 8: of those, objects marked and traced from there */
  uint64_t deferred;          /* offset 16: objects deferred (page not resident) */
  uint64_t deferred_resident; /* offset 24: of those, resident when traced at last */
  uint64_t hints;             /* offset 32: pages hinted to the agent */
  uint64_t mark_cycles;       /* offset 40: concurrent marking cycles with the hooks on */
} memliner_hook_counters;

/* GC phases the JVM reports. */
#define MEMLINER_PHASE_MARK_START 1 /* concurrent marking begins */
#define MEMLINER_PHASE_MARK_END 2   /* concurrent marking finished (or was aborted) */

/* Marking paths a concurrent GC thread reports (see mark_path below); G1's names. */
#define MEMLINER_MARK_NONE 0         /* none reported (other work of the thread) */
#define MEMLINER_MARK_ROOT_REGIONS 1 /* scanning the root regions (survivors) marking starts at */
#define MEMLINER_MARK_STORE_LOG 2    /* draining the store log (SATB buffers) */
#define MEMLINER_MARK_STACK 3        /* tracing objects popped from the mark stack, or stolen */
#define MEMLINER_MARK_ARRAY_SLICE 4  /* tracing a slice of a large object array */
#define MEMLINER_MARK_BITMAP_WALK 5  /* walking a region's mark bitmap past the finger */
#define MEMLINER_MARK_DEFERRED 6     /* tracing the objects marking deferred (page remote) */
#define MEMLINER_MARK_REBUILD 7      /* rebuilding remembered sets after remark */

typedef struct memliner_hooks {
  uint32_t version; /* offset 0: MEMLINER_HOOKS_VERSION */
  uint32_t size;    /* offset 4: sizeof(memliner_hooks) */
  /* offset 8: the heap view, or NULL before the heap is paged (or with policy=off). */
  const memliner_heap_view *(*heap_view)(void);
  /* offset 16: the GC will read these addresses soon: fetch their pages for the GC stream
   * (admitted cold, so they do not displace the application's pages). Called during a
   * stop-the-world pause (G1's mixed collections name their old regions' live pages), the
   * pages are read for the pause and their regions are taken as its collection set. Never
   * blocks; a hint the agent cannot take is dropped. */
  void (*prefetch)(const uintptr_t *addrs, size_t n);
  /* offset 24: a MEMLINER_PHASE_* event. */
  void (*gc_phase)(uint32_t phase);
  /* offset 32: counters the JVM adds to. */
  memliner_hook_counters *counters;
  /* offset 40: the collector freed [start, start + len) (a region): nothing there is read
   * again before it is written. Called before the range can be reused (the range stays
   * untouched until the call returns); the agent drops its pages, local and remote, so that
   * reusing them zero-fills locally instead of fetching garbage. Never blocks on the network. */
  void (*release)(uintptr_t start, size_t len);
  /* offset 48: a refinement pass (G1's refinement threads, or an application thread refining)
   * is about to read these pages (its cards' and, on G1, those it walks through to reach a
   * card from the block before it), in this order (each page once): the agent reads the
   * remote ones in the calling thread, in one request, before it returns (blocking for that
   * read, as the pass's first fault would); pages the agent cannot take are left to the
   * pass's own faults. */
  void (*refine)(const uintptr_t *pages, size_t n);
  /* offset 56: the calling thread's marking-path byte, valid for the thread's life: a
   * concurrent marking thread stores the MEMLINER_MARK_* path it is on there as its work
   * changes (a plain byte store), and the agent counts the thread's remote faults under that
   * path. Tables grow at their end: a JVM calls this only where `size` covers it. */
  uint8_t *(*mark_path)(void);
} memliner_hooks;

/* Returns the agent's table (never NULL once the agent is loaded). */
typedef const memliner_hooks *(*memliner_hooks_fn)(void);
#define MEMLINER_HOOKS_SYMBOL "memliner_hooks"

/* Kept for version 1 readers: returns the heap view directly. */
typedef const memliner_heap_view *(*memliner_heap_view_fn)(void);
#define MEMLINER_HEAP_VIEW_SYMBOL "memliner_heap_view"

#endif
