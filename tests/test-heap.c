/* test-heap.c: a thread heap's tables on their own (src/stream/heap.c), against a
 * shadow model: random inserts, pops, caches on several streams, takes out
 * of bins (oldest and any), and removals, with the heap's own invariant
 * check (records, pointer map, bins newest first, the list of cached blocks
 * in the order they were freed, counters) after every step.  Built from
 * src/stream/heap.c and src/base/lock.c directly: no driver involved.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stream/heap.h"
#include "tap.h"

#define BLOCKS 300
#define STREAMS 4
#define SIZES 6

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct shadow {
  int state;      /* 0 not in the heap, 1 live, 2 cached */
  uint32_t rec;
  uint32_t hs;
  size_t req;
  uint64_t order; /* when it was cached */
} shadow;

static uintptr_t ptr_of(int k) { return (uintptr_t)0x7f0000000000u + (uintptr_t)(k + 1) * 4096; }
/* Every third block large: the streams' lists of large cached blocks
 * follow them too. */
static size_t size_of(int k) { return (size_t)(1 + k % SIZES) * 256 + (k % 3 == 0 ? CUEMM__HEAP_LARGE : 0); }

int main(void)
{
  cuemm__heap h;
  cuemm__heap_init(&h, NULL, 0);
  static shadow sh[BLOCKS];
  uint32_t hs[STREAMS];
  for (int i = 0; i < STREAMS; i++)
    hs[i] = cuemm__heap_add_stream(&h, (CUstream)(uintptr_t)(0x1000 * (i + 1)));
  ok(hs[0] == 0 && hs[3] == 3, "four streams added");
  is(cuemm__heap_stream(&h, (CUstream)(uintptr_t)0x3000), 2, "a stream found by its handle");
  is(cuemm__heap_stream(&h, NULL), CUEMM__HEAP_NIL, "the legacy stream is not there yet");

  const char *bad = NULL;
  long bad_step = -1;
  uint64_t order = 0;
  unsigned long pops = 0, caches = 0, takes = 0, removes = 0, inserts = 0, oldest_ok = 0;
  for (long step = 0; step < 200000 && !bad; step++) {
    int k = (int)(next_rand() % BLOCKS);
    shadow *s = &sh[k];
    uint64_t r = next_rand();
    if (s->state == 0) {
      uint32_t st = (uint32_t)(r % STREAMS);
      uint32_t rec = cuemm__heap_insert(&h, ptr_of(k), size_of(k), (uint32_t)k, st, 100 + (size_t)k);
      if (rec == CUEMM__HEAP_NIL) {
        bad = "insert failed";
        break;
      }
      *s = (shadow){ 1, rec, st, 100 + (size_t)k, 0 };
      inserts++;
    } else if (s->state == 1) {
      if (r % 5 == 0) {
        cuemm__heap_remove(&h, s->rec);
        s->state = 0;
        removes++;
      } else {
        uint32_t st = (uint32_t)((r >> 8) % STREAMS);
        if (cuemm__heap_cache(&h, s->rec, st) != 0) {
          bad = "cache failed";
          break;
        }
        s->state = 2;
        s->hs = st;
        s->order = ++order;
        caches++;
      }
    } else {
      /* A cached block: its bin's newest goes back to live (what an alloc
       * on its stream gets), or this one is taken out of the bin. */
      uint32_t bin = cuemm__heap_bin(&h, s->hs, size_of(k));
      if (bin == CUEMM__HEAP_NIL) {
        bad = "a cached block's bin is missing";
        break;
      }
      if (r % 3 == 0) {
        uint32_t got = cuemm__heap_pop(&h, bin, s->hs, 7);
        int owner = -1;
        for (int j = 0; j < BLOCKS; j++)
          if (sh[j].state == 2 && sh[j].rec == got)
            owner = j;
        if (owner < 0 || sh[owner].hs != s->hs || cuemm__heap_class(size_of(owner)) != cuemm__heap_class(size_of(k))) {
          bad = "pop gave a block of another bin";
          break;
        }
        /* The newest of the bin: none of the same bin was cached later. */
        for (int j = 0; j < BLOCKS; j++)
          if (sh[j].state == 2 && j != owner && sh[j].hs == s->hs &&
              cuemm__heap_class(size_of(j)) == cuemm__heap_class(size_of(k)) &&
              sh[j].order > sh[owner].order)
            bad = "pop did not give the newest block";
        sh[owner].state = 1;
        sh[owner].req = 7;
        pops++;
      } else {
        /* The heap's oldest cached block is the model's oldest. */
        int oldest = -1;
        for (int j = 0; j < BLOCKS; j++)
          if (sh[j].state == 2 && (oldest < 0 || sh[j].order < sh[oldest].order))
            oldest = j;
        if (h.oldest != sh[oldest].rec) {
          bad = "the list's oldest is not the first cached";
          break;
        }
        oldest_ok++;
        cuemm__heap_unbin(&h, s->rec);
        cuemm__heap_remove(&h, s->rec);
        s->state = 0;
        takes++;
      }
    }
    const char *why = cuemm__heap_check(&h);
    if (why && !bad)
      bad = why;
    if (bad)
      bad_step = step;
  }
  ok(bad == NULL, "200000 random steps keep every invariant%s%s (step %ld)", bad ? ": " : "", bad ? bad : "",
     bad_step);
  ok(pops > 1000 && caches > 10000 && takes > 1000 && removes > 1000 && inserts > 10000,
     "every operation ran (%lu inserts, %lu caches, %lu pops, %lu takes, %lu removes)", inserts, caches, pops,
     takes, removes);
  ok(oldest_ok > 1000, "the oldest cached block agreed with the model %lu times", oldest_ok);
  size_t live = 0, cached = 0;
  for (int j = 0; j < BLOCKS; j++) {
    live += sh[j].state == 1;
    cached += sh[j].state == 2;
  }
  ok(h.live_count == live && h.cached_count == cached, "counts agree with the model (%zu live, %zu cached)", live,
     cached);
  int found = 0, inheap = 0;
  for (int j = 0; j < BLOCKS; j++)
    if (sh[j].state) {
      inheap++;
      found += cuemm__heap_find(&h, ptr_of(j)) == sh[j].rec;
    }
  is(found, inheap, "every block in the heap is found through the pointer map");
  is(cuemm__heap_find(&h, ptr_of(BLOCKS + 5)), CUEMM__HEAP_NIL, "a pointer never inserted is not found");
  cuemm__heap_fini(&h);

  /* Size classes: exact below 16 KiB, eight to a power of two above. */
  const size_t M = (size_t)1 << 20;
  ok(cuemm__heap_class(16128) == 63 && cuemm__heap_class(16384) == 64 &&
     cuemm__heap_class(M + 128 * 1024 - 256) == cuemm__heap_class(M) &&
     cuemm__heap_class(M + 128 * 1024) == cuemm__heap_class(M) + 1 &&
     cuemm__heap_class(2 * M) == cuemm__heap_class(M) + 8,
     "size classes: 63 exact ones below 16 KiB, then eight per power of two");

  /* A bin of one class holds blocks of several sizes: a request takes its
   * own size if one is among the newest, else the smallest that is large
   * enough, else none. */
  cuemm__heap_init(&h, NULL, 0);
  uint32_t s0 = cuemm__heap_add_stream(&h, (CUstream)0x10);
  size_t sz[3] = { M + 4 * 256, M + 100 * 256, M };
  uint32_t rec[3];
  for (int i = 0; i < 3; i++) {
    rec[i] = cuemm__heap_insert(&h, 0x900000 + (uintptr_t)i * 2 * M, sz[i], (uint32_t)i, s0, 1);
    cuemm__heap_cache(&h, rec[i], s0);
  }
  uint32_t bin = cuemm__heap_bin(&h, s0, M + 50 * 256);
  ok(bin != CUEMM__HEAP_NIL && h.bins[bin].head == rec[2], "three sizes of one class share a bin, the newest first");
  is(cuemm__heap_pop_fit(&h, bin, s0, M + 4 * 256, 11), rec[0], "a request takes its own size past the head");
  is(cuemm__heap_pop_fit(&h, bin, s0, M + 200 * 256, 12), CUEMM__HEAP_NIL,
     "a request larger than every block of its class gets none");
  is(cuemm__heap_pop_fit(&h, bin, s0, M + 50 * 256, 13), rec[1], "else it takes the smallest large enough");
  ok(h.live_count == 2 && h.cached_count == 1 && h.live_bytes == 1 + 11 + 13 - 1 && h.b[rec[1]].req == 13 &&
     h.b[rec[1]].state == CUEMM__HB_LIVE && cuemm__heap_check(&h) == NULL,
     "the blocks taken are live with their requests, the counts follow (%zu live, %zu cached)", h.live_count,
     h.cached_count);
  cuemm__heap_fini(&h);

  /* From CUEMM__HEAP_LARGE up, a request near the top of its class may
   * take a block of the next class within an eighth of its size (the
   * waste its own class allows), even where its own class has no bin;
   * none further up, and none below CUEMM__HEAP_LARGE. */
  cuemm__heap_init(&h, NULL, 0);
  s0 = cuemm__heap_add_stream(&h, (CUstream)0x10);
  const size_t K = 1024;
  size_t top = M + 128 * K - 256, next = M + 192 * K;
  ok(cuemm__heap_class(next) == cuemm__heap_class(top) + 1 && cuemm__heap_class_top(top) == M + 128 * K - 1 &&
     cuemm__heap_class_top(M) == M + 128 * K - 1 && cuemm__heap_class(cuemm__heap_class_top(M) + 1) ==
     cuemm__heap_class(M) + 1, "the last byte of a class, and the next class");
  uint32_t a = cuemm__heap_insert(&h, 0x900000, next, 1, s0, 1);
  cuemm__heap_cache(&h, a, s0);
  is(cuemm__heap_bin(&h, s0, top), CUEMM__HEAP_NIL, "the request's own class has no bin");
  is(cuemm__heap_pop_fit(&h, CUEMM__HEAP_NIL, s0, M + 256, 2), CUEMM__HEAP_NIL,
     "a block of the next class more than an eighth larger is not taken");
  is(cuemm__heap_pop_fit(&h, CUEMM__HEAP_NIL, s0, top, 3), a, "one within an eighth is");
  ok(h.b[a].state == CUEMM__HB_LIVE && h.b[a].req == 3 && h.cached_count == 0 && cuemm__heap_check(&h) == NULL,
     "it is live with the request's size, and the heap is sound");
  size_t small = 72 * K - 256;
  uint32_t c = cuemm__heap_insert(&h, 0xa00000, 72 * K + 256, 2, s0, 1);
  cuemm__heap_cache(&h, c, s0);
  is(cuemm__heap_pop_fit(&h, cuemm__heap_bin(&h, s0, small), s0, small, 4), CUEMM__HEAP_NIL,
     "below CUEMM__HEAP_LARGE a request keeps to its class");
  cuemm__heap_fini(&h);
  return tap_done();
}
