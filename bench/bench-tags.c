/* bench-tags.c: what tags cost PyTorch's entry points.  The pair
 * cuemm_torch_alloc + cuemm_torch_free on one stream, at 4 KiB .. 8 MiB,
 * in the order a process meets them: before any tag exists (the path
 * without tags), with tags made and the default tag current (a free then
 * asks which manager handed the block out), inside a tag, and inside the
 * tag after a suspension and resumption of it.  Medians of several rounds,
 * ns per pair.
 *
 *   bench-tags [--quick]
 */
#define BENCH_NAME "bench-tags"
#include "bench.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static const size_t sizes[] = { 4 * KIB, 64 * KIB, 1 * MIB, 8 * MIB };
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define ROUNDS 7

static double pair_ns(size_t size, CUstream s, int n)
{
  double r[ROUNDS];
  for (int k = 0; k < ROUNDS; k++) {
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
      void *p = cuemm_torch_alloc(size, 0, s);
      if (!p) {
        cuemm_adapter_stats st;
        CHECK(cuemm_adapter_get_stats(&st));
        fprintf(stderr, BENCH_NAME ": cuemm_torch_alloc(%zu) failed: %s\n", size, st.last_failure);
        exit(1);
      }
      cuemm_torch_free(p, size, 0, s);
    }
    r[k] = (now_ns() - t0) / n;
  }
  return median(r, ROUNDS);
}

static void measure(double *out, CUstream s, int n)
{
  for (size_t i = 0; i < NSIZES; i++) {
    pair_ns(sizes[i], s, n / 10); /* warm: the stream's cache of the size */
    out[i] = pair_ns(sizes[i], s, n);
  }
}

int main(int argc, char **argv)
{
  CUdevice dev;
  CUcontext ctx;
  int quick = bench_start(argc, argv, &dev, &ctx);
  int n = quick ? 2000 : 200000;
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  double none[NSIZES], tagged[NSIZES], inside[NSIZES], after[NSIZES];

  measure(none, s, n);
  /* Three tags with managers, each holding a block. */
  const char *names[] = { "weights", "kv", "act" };
  void *held[3];
  for (int t = 0; t < 3; t++) {
    CHECK(cuemm_adapter_set_tag(names[t], NULL));
    held[t] = cuemm_torch_alloc(MIB, 0, s);
  }
  CHECK(cuemm_adapter_set_tag(NULL, NULL));
  measure(tagged, s, n);
  CHECK(cuemm_adapter_set_tag("act", NULL));
  measure(inside, s, n);
  CHECK(cuemm_adapter_suspend("act", 0, CUEMM_SUSPEND_KEEP));
  CHECK(cuemm_adapter_resume("act", 0));
  measure(after, s, n);
  CHECK(cuemm_adapter_set_tag(NULL, NULL));
  for (int t = 0; t < 3; t++)
    cuemm_torch_free(held[t], MIB, 0, s);

  cuemm_adapter_stats st;
  CHECK(cuemm_adapter_get_stats(&st));
  printf("# cuemm_torch_alloc + cuemm_torch_free on one stream, ns per pair (median of %d rounds of %d)\n", ROUNDS,
         n);
  printf("%-8s %10s %14s %12s %14s\n", "size", "no tags", "tags, default", "inside tag", "after cycle");
  for (size_t i = 0; i < NSIZES; i++)
    printf("%-8s %10.1f %14.1f %12.1f %14.1f\n",
           sizes[i] < MIB ? (sizes[i] == 4 * KIB ? "4KiB" : "64KiB") : (sizes[i] == MIB ? "1MiB" : "8MiB"), none[i],
           tagged[i], inside[i], after[i]);
  printf("failures %llu\n", (unsigned long long)(st.alloc_failures + st.free_failures));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuemm_adapter_stream_release(0, s));
  CHECK(cuStreamDestroy(s));
  bench_end(dev);
  return st.alloc_failures + st.free_failures ? 1 : 0;
}
