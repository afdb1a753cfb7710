/* The raw allocator under a runner's torch memory pool: spans of the shared heap (cudagym/judge/split/heap.py).
 *
 * The trusted judge process owns the heap (a CUDA VMM allocation it exports to the runner); the runner maps it and
 * hands this allocator its range. torch's caching allocator asks it for whole segments; candidate outputs made
 * while the pool is active then lie in memory the trusted process reads itself. Once the heap is full, segments
 * come from cuMemAlloc (outputs there are copied into the heap by the runner, in the candidate's time).
 *
 * First fit over a free list sorted by address, neighbours merged on free; the spans handed out are kept, so a
 * free needs only the pointer. Everything here is the runner's own bookkeeping: the trusted side never relies on
 * it (it checks every offset it is given against the heap's bounds).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define HEAP_ALIGN 512u

typedef struct Span {
  uint64_t start, size;
  struct Span *next;
} Span;

typedef int (*mem_alloc_fn)(uint64_t *, size_t);
typedef int (*mem_free_fn)(uint64_t);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t heap_start, heap_end;
static Span *free_spans; /* sorted by start, never touching one another */
static Span *used_spans; /* handed out from the heap */
static Span *outside;    /* from cuMemAlloc */
static uint64_t in_use, peak, outside_bytes, outside_count, failed_count;
static mem_alloc_fn driver_alloc;
static mem_free_fn driver_free;
static int driver_tried;

static Span *span(uint64_t start, uint64_t size, Span *next) {
  Span *s = (Span *)malloc(sizeof(Span));
  if (s) {
    s->start = start;
    s->size = size;
    s->next = next;
  }
  return s;
}

/* Hand the allocator the heap [base, base + size); 0 on success, -1 if it has one already or cannot keep it. */
int cudagym_heap_init(uint64_t base, uint64_t size) {
  int rc = -1;
  pthread_mutex_lock(&lock);
  uint64_t start = (base + HEAP_ALIGN - 1) / HEAP_ALIGN * HEAP_ALIGN;
  if (!heap_end && size > start - base) {
    uint64_t usable = (size - (start - base)) / HEAP_ALIGN * HEAP_ALIGN;
    if (usable && (free_spans = span(start, usable, NULL)) != NULL) {
      heap_start = start;
      heap_end = start + usable;
      rc = 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static void load_driver(void) {
  if (driver_tried) return;
  driver_tried = 1;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return;
  driver_alloc = (mem_alloc_fn)dlsym(lib, "cuMemAlloc_v2");
  driver_free = (mem_free_fn)dlsym(lib, "cuMemFree_v2");
}

static void *alloc_outside(uint64_t size) {
  uint64_t ptr = 0;
  pthread_mutex_lock(&lock);
  load_driver();
  Span *record = span(0, size, outside);
  if (record && driver_alloc && driver_free && driver_alloc(&ptr, (size_t)size) == 0 && ptr) {
    record->start = ptr;
    outside = record;
    outside_bytes += size;
    outside_count++;
  } else {
    free(record);
    ptr = 0;
    failed_count++;
  }
  pthread_mutex_unlock(&lock);
  return (void *)(uintptr_t)ptr;
}

/* torch's CUDAPluggableAllocator alloc: a segment of at least `size` bytes (NULL: none to be had). */
void *cudagym_heap_alloc(ssize_t size, int device, void *stream) {
  (void)device;
  (void)stream;
  if (size < 0) return NULL;
  uint64_t need = ((uint64_t)size + HEAP_ALIGN - 1) / HEAP_ALIGN * HEAP_ALIGN;
  if (!need) need = HEAP_ALIGN;
  pthread_mutex_lock(&lock);
  for (Span **at = &free_spans; *at; at = &(*at)->next) {
    Span *s = *at;
    if (s->size < need) continue;
    Span *record = span(s->start, need, used_spans);
    if (!record) break;
    used_spans = record;
    s->start += need;
    s->size -= need;
    if (!s->size) {
      *at = s->next;
      free(s);
    }
    in_use += need;
    if (in_use > peak) peak = in_use;
    pthread_mutex_unlock(&lock);
    return (void *)(uintptr_t)record->start;
  }
  pthread_mutex_unlock(&lock);
  return alloc_outside(need);
}

static void give_back(uint64_t start, uint64_t size) {
  Span **at = &free_spans;
  while (*at && (*at)->start < start) at = &(*at)->next;
  Span *after = *at;
  Span *before = at == &free_spans ? NULL : (Span *)((char *)at - offsetof(Span, next));
  if (before && before->start + before->size == start) {
    before->size += size;
    if (after && before->start + before->size == after->start) {
      before->size += after->size;
      before->next = after->next;
      free(after);
    }
    return;
  }
  if (after && start + size == after->start) {
    after->start = start;
    after->size += size;
    return;
  }
  Span *s = span(start, size, after);
  if (s) *at = s; /* else the span is lost to this job: the heap only shrinks */
}

/* torch's CUDAPluggableAllocator free (the size and stream it passes are not needed: the spans are kept here). */
void cudagym_heap_free(void *ptr, size_t size, int device, void *stream) {
  (void)size;
  (void)device;
  (void)stream;
  uint64_t p = (uint64_t)(uintptr_t)ptr;
  pthread_mutex_lock(&lock);
  for (Span **at = &used_spans; *at; at = &(*at)->next) {
    Span *s = *at;
    if (s->start != p) continue;
    *at = s->next;
    in_use -= s->size;
    give_back(s->start, s->size);
    free(s);
    pthread_mutex_unlock(&lock);
    return;
  }
  for (Span **at = &outside; *at; at = &(*at)->next) {
    Span *s = *at;
    if (s->start != p) continue;
    *at = s->next;
    outside_bytes -= s->size;
    if (driver_free) driver_free(p);
    free(s);
    break;
  }
  pthread_mutex_unlock(&lock);
}

/* Bytes in use in the heap, their peak, bytes and segments taken outside it, failed allocations, free spans. */
void cudagym_heap_stats(uint64_t out[6]) {
  pthread_mutex_lock(&lock);
  uint64_t spans = 0;
  for (Span *s = free_spans; s; s = s->next) spans++;
  out[0] = in_use;
  out[1] = peak;
  out[2] = outside_bytes;
  out[3] = outside_count;
  out[4] = failed_count;
  out[5] = spans;
  pthread_mutex_unlock(&lock);
}
