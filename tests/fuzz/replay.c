/* replay.c: a main() for a fuzz target built without libFuzzer.  It feeds
 * the target every file of its seed corpus, or the files named on the
 * command line, one check each; a target that aborts stops the program and
 * fails the test.  The corpus directory is $top_srcdir/tests/fuzz/corpus/
 * FUZZ_TARGET_NAME (top_srcdir as `make check` exports it). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tap.h"

#ifndef FUZZ_TARGET_NAME
#error "FUZZ_TARGET_NAME names the target's corpus directory"
#endif

static int by_name(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      unsigned char *more = realloc(buf, cap *= 2);
      if (!more) {
        free(buf);
        buf = NULL;
      }
      buf = more;
    }
  }
  fclose(f);
  if (!buf)
    return -1;
  /* A copy of exactly n bytes, so that a read past the input is caught
   * under AddressSanitizer and valgrind as it is by libFuzzer. */
  unsigned char *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

int main(int argc, char **argv)
{
  char **files = NULL;
  size_t nfiles = 0;
  if (argc > 1) {
    files = argv + 1;
    nfiles = (size_t)argc - 1;
  } else {
    const char *top = getenv("top_srcdir");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", top ? top : ".", FUZZ_TARGET_NAME);
    DIR *d = opendir(dir);
    if (!d)
      tap_skip_all("no seed corpus at %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char **more = realloc(files, (nfiles + 1) * sizeof *files);
      size_t len = strlen(dir) + strlen(e->d_name) + 2;
      if (!more || !(more[nfiles] = malloc(len))) {
        printf("Bail out! out of memory\n");
        return 1;
      }
      files = more;
      snprintf(files[nfiles++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(files, nfiles, sizeof *files, by_name);
  }
  tap_plan((int)nfiles);
  for (size_t i = 0; i < nfiles; i++) {
    const char *base = strrchr(files[i], '/');
    ok(run_file(files[i]) == 0, "%s: %s", FUZZ_TARGET_NAME, base ? base + 1 : files[i]);
  }
  if (argc <= 1) {
    for (size_t i = 0; i < nfiles; i++)
      free(files[i]);
    free(files);
  }
  return tap_done();
}
