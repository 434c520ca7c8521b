/* cuemm-tracegen.c: synthetic allocation logs in RMM's CSV format, one per
 * named shape, for tools/cuemm-replay and the trace corpus
 * (tests/test-corpus.sh).  It owns the shapes: models of what real programs
 * ask a device allocator for (PyTorch training and serving, a KV cache that
 * grows block by block, generate() growing its cache by concatenation, CuPy
 * temporaries, Numba device arrays, a server of several threads), each
 * driven by a seeded generator so that one seed and one set of parameters
 * always give the same bytes.
 *
 * The program is not installed: its logs are a yardstick for cuemm's
 * placement (tests, benchmarks, the GPU scripts run it from the build tree),
 * not something a user of the library needs on their machine.
 *
 * The whole log is built in memory before a byte is written, so a run that
 * would pass --max-events, or a parameter out of range, fails with a message
 * and an empty standard output rather than a truncated log.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cuemm-tracegen"
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

/* ---- the log being built ------------------------------------------------- */

typedef size_t blk; /* an allocation of the log, by number */
#define NO_BLK ((blk)-1)

struct alloc_rec {
  uint64_t ptr, size;
  int thread, stream, live;
};

struct param {
  const char *name;
  long long def, min, max;
  const char *help;
};

struct gen {
  uint64_t rng;
  uint64_t clock_us, next_addr;
  struct alloc_rec *a;
  size_t na, cap;
  char *out;
  size_t len, outcap;
  size_t events, max_events, allocs;
  uint64_t live, peak;
  int round512;  /* sizes as PyTorch's and CuPy's pools hand them out */
  uint64_t streams_used, threads_used; /* bit i: stream or thread i appears */
  const struct param *params; /* the shape's table, values in val[] */
  long long val[32];
  int failed;
};

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
  if (need <= *cap)
    return p;
  size_t n = *cap ? *cap : 1024;
  while (n < need)
    n *= 2;
  void *q = realloc(p, n * elem);
  if (!q)
    die("out of host memory");
  *cap = n;
  return q;
}

/* splitmix64: small, fast and the same on every platform */
static uint64_t rnd(struct gen *g)
{
  uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double unif(struct gen *g) { return (double)(rnd(g) >> 11) * (1.0 / 9007199254740992.0); }

static long long irange(struct gen *g, long long lo, long long hi) /* [lo, hi] */
{
  if (hi <= lo)
    return lo;
  return lo + (long long)(rnd(g) % (uint64_t)(hi - lo + 1));
}

static int chance(struct gen *g, long long pct) { return unif(g) * 100.0 < (double)pct; }

/* Log-uniform in [lo, hi]: array sizes and request lengths spread over
 * orders of magnitude, the small ones far more common. */
static long long logrange(struct gen *g, long long lo, long long hi)
{
  if (lo < 1)
    lo = 1;
  if (hi <= lo)
    return lo;
  double l = log((double)lo), h = log((double)hi + 1.0);
  long long v = (long long)exp(l + (h - l) * unif(g));
  return v < lo ? lo : v > hi ? hi : v;
}

static long long P(const struct gen *g, const char *name)
{
  for (int i = 0; g->params[i].name; i++)
    if (strcmp(g->params[i].name, name) == 0)
      return g->val[i];
  die("internal error: no parameter '%s'", name);
  return 0;
}

static void emit(struct gen *g, const struct alloc_rec *r, const char *action)
{
  if (++g->events > g->max_events) {
    g->failed = 1;
    return;
  }
  g->clock_us += 1 + rnd(g) % 40;
  uint64_t s = g->clock_us / 1000000, us = g->clock_us % 1000000;
  uint64_t stream = r->stream ? 0x7f5a00000000ull + (uint64_t)r->stream * 0x10000ull : 0;
  char line[160];
  int n = snprintf(line, sizeof line, "%d,%02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ".%06" PRIu64 ",%s,0x%" PRIx64
                   ",%" PRIu64 ",0x%" PRIx64 "\n",
                   140000 + r->thread, (10 + s / 3600) % 24, s / 60 % 60, s % 60, us, action, r->ptr, r->size, stream);
  g->out = grow(g->out, &g->outcap, g->len + (size_t)n + 1, 1);
  memcpy(g->out + g->len, line, (size_t)n);
  g->len += (size_t)n;
}

/* One allocation of SIZE bytes by THREAD on STREAM (0: the legacy default
 * stream).  Pointers are never reused, so a log reads unambiguously. */
static blk al_on(struct gen *g, int thread, int stream, uint64_t size)
{
  if (size == 0)
    size = 1;
  if (g->round512)
    size = (size + 511) / 512 * 512;
  g->a = grow(g->a, &g->cap, g->na + 1, sizeof *g->a);
  struct alloc_rec *r = &g->a[g->na];
  r->ptr = g->next_addr;
  r->size = size;
  r->thread = thread;
  r->stream = stream;
  r->live = 1;
  g->next_addr += (size + 511) / 512 * 512 + 512;
  g->live += size;
  if (g->live > g->peak)
    g->peak = g->live;
  g->allocs++;
  g->streams_used |= 1ull << (stream & 63);
  g->threads_used |= 1ull << (thread & 63);
  emit(g, r, "allocate");
  return g->na++;
}

static blk al(struct gen *g, int stream, uint64_t size) { return al_on(g, 0, stream, size); }

/* Freed on the stream it was allocated on, as PyTorch's and RMM's logs
 * write it. */
static void fr(struct gen *g, blk b)
{
  if (b == NO_BLK)
    return;
  struct alloc_rec *r = &g->a[b];
  if (!r->live)
    die("internal error: allocation %zu freed twice", b);
  r->live = 0;
  g->live -= r->size;
  emit(g, r, "free");
}

/* ---- a list of allocations ------------------------------------------------ */

struct blist {
  blk *v;
  size_t n, cap;
};

static void push(struct blist *l, blk b)
{
  l->v = grow(l->v, &l->cap, l->n + 1, sizeof *l->v);
  l->v[l->n++] = b;
}

static void free_all(struct gen *g, struct blist *l, int reverse)
{
  for (size_t i = 0; i < l->n; i++)
    fr(g, l->v[reverse ? l->n - 1 - i : i]);
  l->n = 0;
}

/* ---- training: a tape of ops, as autograd keeps one ----------------------- */

/* One op of the forward pass: its output, what else it saved for backward,
 * the bytes of its input (the gradient backward makes), its parameters and
 * the workspace it borrows (cuDNN, cuBLAS) while it runs. */
struct op {
  blk out, extra[3];
  int nextra;
  uint64_t in_bytes, ws;
  int param0, nparam;
};

struct prm {
  uint64_t bytes;
  blk w, grad, state[2];
};

struct train {
  struct gen *g;
  struct op *ops;
  size_t nops, opcap;
  struct prm *p;
  size_t np, pcap;
  int amp, act; /* bytes of an activation element: 2 under bf16 autocast, else 4 */
  int nocast;   /* the next op reads its weight as it is (an embedding lookup) */
  int stream;
  struct blist held; /* buffers held for the run (running statistics) */
};

static int add_param(struct train *t, uint64_t elems)
{
  t->p = grow(t->p, &t->pcap, t->np + 1, sizeof *t->p);
  struct prm *p = &t->p[t->np];
  p->bytes = elems * 4;
  p->w = al(t->g, t->stream, p->bytes);
  p->grad = p->state[0] = p->state[1] = NO_BLK;
  return (int)t->np++;
}

/* Forward of one op: the workspace for the kernel, then the output and the
 * tensors saved beside it; under autocast each weight is cast to bf16 and
 * the copy is saved for the backward matmul. */
static void fwd(struct train *t, uint64_t out, uint64_t in, int param0, int nparam, uint64_t ws, int nextra, ...)
{
  struct gen *g = t->g;
  t->ops = grow(t->ops, &t->opcap, t->nops + 1, sizeof *t->ops);
  struct op *o = &t->ops[t->nops++];
  memset(o, 0, sizeof *o);
  o->in_bytes = in;
  o->ws = ws;
  o->param0 = param0;
  o->nparam = nparam;
  blk w = ws ? al(g, t->stream, ws) : NO_BLK;
  o->out = out ? al(g, t->stream, out) : NO_BLK;
  fr(g, w);
  va_list ap;
  va_start(ap, nextra);
  for (int i = 0; i < nextra && i < 2; i++)
    o->extra[o->nextra++] = al(g, t->stream, va_arg(ap, uint64_t));
  va_end(ap);
  if (t->amp && !t->nocast && nparam > 0 && param0 >= 0 && t->p[param0].bytes >= 64 * KIB)
    o->extra[o->nextra++] = al(g, t->stream, t->p[param0].bytes / 2);
}

/* Backward walks the tape in reverse: each op makes the gradient of its
 * input, borrows its workspace again, makes its parameters' gradients the
 * first time they are reached, and lets go of what it saved and of the
 * gradient it consumed. */
static void backward(struct train *t, uint64_t loss_grad)
{
  struct gen *g = t->g;
  blk grad = al(g, t->stream, loss_grad);
  for (size_t i = t->nops; i-- > 0;) {
    struct op *o = &t->ops[i];
    blk gin = o->in_bytes ? al(g, t->stream, o->in_bytes) : NO_BLK;
    if (o->ws) {
      blk w = al(g, t->stream, o->ws);
      fr(g, w);
    }
    for (int k = 0; k < o->nparam; k++) {
      struct prm *p = &t->p[o->param0 + k];
      if (p->grad == NO_BLK)
        p->grad = al(g, t->stream, p->bytes);
    }
    for (int k = o->nextra; k-- > 0;)
      fr(g, o->extra[k]);
    fr(g, o->out);
    fr(g, grad);
    grad = gin;
  }
  fr(g, grad);
  t->nops = 0;
}

/* optimizer.step() with foreach kernels, then zero_grad(set_to_none=True):
 * the states are made at the first step and held; each step a foreach op
 * makes a list of temporaries as large as the parameters (AdamW's
 * torch._foreach_sqrt of exp_avg_sq, SGD's gradients plus weight decay),
 * all live at once since torch._foreach_* takes every parameter of a
 * device and dtype in one list; then the gradients go. */
static void opt_step(struct train *t, int nstate)
{
  struct gen *g = t->g;
  for (size_t i = 0; i < t->np; i++)
    for (int k = 0; k < nstate; k++)
      if (t->p[i].state[k] == NO_BLK)
        t->p[i].state[k] = al(g, t->stream, t->p[i].bytes);
  struct blist tmp = {0};
  for (size_t i = 0; i < t->np; i++)
    push(&tmp, al(g, t->stream, t->p[i].bytes));
  free_all(g, &tmp, 0);
  free(tmp.v);
  for (size_t i = 0; i < t->np; i++)
    if (t->p[i].grad != NO_BLK) {
      fr(g, t->p[i].grad);
      t->p[i].grad = NO_BLK;
    }
}

static void train_end(struct train *t)
{
  for (size_t i = 0; i < t->np; i++) {
    fr(t->g, t->p[i].w);
    fr(t->g, t->p[i].state[0]);
    fr(t->g, t->p[i].state[1]);
  }
  free_all(t->g, &t->held, 0);
  free(t->held.v);
  free(t->p);
  free(t->ops);
}

/* ---- transformers: GPT-2, BERT, a mixture of experts ---------------------- */

struct tf {
  int layers, hidden, heads, ffn, vocab, maxpos;
  int experts, topk, math_attn, mlm;
};

struct tf_layer {
  int ln1, qkv, proj, ln2, fc1, fc2, router;
};

static int tf_build(struct train *t, const struct tf *m, struct tf_layer *L)
{
  uint64_t h = (uint64_t)m->hidden, f = (uint64_t)m->ffn;
  int emb = add_param(t, (uint64_t)m->vocab * h);
  add_param(t, (uint64_t)m->maxpos * h);
  for (int l = 0; l < m->layers; l++) {
    L[l].ln1 = add_param(t, h);
    add_param(t, h);
    L[l].qkv = add_param(t, 3 * h * h);
    add_param(t, 3 * h);
    L[l].proj = add_param(t, h * h);
    add_param(t, h);
    L[l].ln2 = add_param(t, h);
    add_param(t, h);
    int ne = m->experts > 0 ? m->experts : 1;
    if (m->experts > 0)
      L[l].router = add_param(t, (uint64_t)m->experts * h);
    L[l].fc1 = (int)t->np;
    for (int e = 0; e < ne; e++) {
      add_param(t, f * h);
      add_param(t, f);
      add_param(t, h * f);
      add_param(t, h);
    }
    L[l].fc2 = L[l].fc1 + 2;
  }
  add_param(t, h); /* final layer norm */
  add_param(t, h);
  return emb;
}

/* One training step of batch B at sequence length S. */
static void tf_step(struct train *t, const struct tf *m, const struct tf_layer *L, int emb, uint64_t B, uint64_t S)
{
  struct gen *g = t->g;
  uint64_t T = B * S, h = (uint64_t)m->hidden, f = (uint64_t)m->ffn, a = (uint64_t)t->act;
  uint64_t nh = (uint64_t)m->heads, V = (uint64_t)m->vocab;
  blk ids = al(g, t->stream, T * 8), labels = al(g, t->stream, T * 8);
  blk amask = m->mlm ? al(g, t->stream, B * S * 8) : NO_BLK;
  t->nocast = 1;
  fwd(t, T * h * a, 0, emb, 2, 0, 0);
  t->nocast = 0;
  for (int l = 0; l < m->layers; l++) {
    const struct tf_layer *y = &L[l];
    fwd(t, T * h * a, T * h * a, y->ln1, 2, 0, 1, T * 8);
    fwd(t, T * 3 * h * a, T * h * a, y->qkv, 2, 0, 0);
    if (m->math_attn) {
      uint64_t sc = B * nh * S * S;
      fwd(t, sc * a, T * 3 * h * a, -1, 0, T * h * a, 0); /* q @ k^T, k made contiguous */
      fwd(t, sc * a, sc * a, -1, 0, 0, 0);                  /* softmax */
      fwd(t, sc * a, sc * a, -1, 0, 0, 1, sc);              /* dropout and its mask */
      fwd(t, T * h * a, sc * a, -1, 0, 0, 0);               /* @ v */
    } else {
      fwd(t, T * h * a, T * 3 * h * a, -1, 0, 0, 1, B * nh * S * 4); /* flash: output and logsumexp */
    }
    fwd(t, T * h * a, T * h * a, y->proj, 2, 0, 0);
    fwd(t, T * h * a, T * h * a, -1, 0, 0, 1, T * h); /* dropout, residual */
    fwd(t, T * h * a, T * h * a, y->ln2, 2, 0, 1, T * 8);
    if (m->experts > 0) {
      uint64_t E = (uint64_t)m->experts, k = (uint64_t)m->topk;
      fwd(t, T * E * 4, T * h * a, y->router, 1, 0, 1, T * k * 8); /* router logits (fp32), top-k */
      fwd(t, T * k * h * a, T * h * a, -1, 0, 0, 1, T * k * 8);   /* tokens sorted by expert */
      /* tokens per expert: uneven, and different every step */
      double w[64], sum = 0;
      for (uint64_t e = 0; e < E; e++)
        sum += (w[e] = 0.2 + unif(g) * unif(g) * 3.0);
      uint64_t left = T * k;
      for (uint64_t e = 0; e < E; e++) {
        uint64_t n = e + 1 == E ? left : (uint64_t)((double)(T * k) * w[e] / sum);
        if (n > left)
          n = left;
        left -= n;
        if (n == 0)
          continue;
        int p = y->fc1 + (int)e * 4;
        fwd(t, n * f * a, n * h * a, p, 2, 0, 0);
        fwd(t, n * f * a, n * f * a, -1, 0, 0, 0);
        fwd(t, n * h * a, n * f * a, p + 2, 2, 0, 0);
      }
      fwd(t, T * h * a, T * k * h * a, -1, 0, 0, 0); /* weighted combine */
    } else {
      fwd(t, T * f * a, T * h * a, y->fc1, 2, 0, 0);
      fwd(t, T * f * a, T * f * a, -1, 0, 0, 0); /* gelu */
      fwd(t, T * h * a, T * f * a, y->fc2, 2, 0, 0);
    }
    fwd(t, T * h * a, T * h * a, -1, 0, 0, 1, T * h); /* dropout, residual */
  }
  fwd(t, T * h * a, T * h * a, (int)t->np - 2, 2, 0, 1, T * 8);
  uint64_t R = T;
  if (m->mlm) { /* BERT: the head runs on the masked 15% of tokens only */
    R = T * (10 + (uint64_t)irange(g, 0, 10)) / 100;
    if (R == 0)
      R = 1;
    fwd(t, R * h * a, T * h * a, -1, 0, 0, 1, R * 8);
  }
  fwd(t, R * V * a, R * h * a, emb, 1, 0, 0);  /* logits, tied to the embedding */
  fwd(t, R * V * 4, R * V * a, -1, 0, 0, 0);   /* log_softmax in fp32 */
  fwd(t, 4, R * V * 4, -1, 0, 0, 0);           /* the loss */
  backward(t, 4);
  fr(g, amask);
  fr(g, labels);
  fr(g, ids);
}

static uint64_t seqlen(struct gen *g, long long lo, long long hi)
{
  uint64_t s = (uint64_t)irange(g, lo, hi);
  return (s + 7) / 8 * 8; /* padded to a multiple of 8, as tokenizers are asked to */
}

static void tf_train(struct gen *g, struct tf *m)
{
  struct train t = {.g = g, .amp = (int)P(g, "amp"), .stream = 0};
  t.act = t.amp ? 2 : 4;
  struct tf_layer *L = calloc((size_t)m->layers, sizeof *L);
  if (!L)
    die("out of host memory");
  m->maxpos = (int)P(g, "seq-max");
  int emb = tf_build(&t, m, L);
  for (long long s = 0; s < P(g, "steps") && !g->failed; s++) {
    uint64_t B = (uint64_t)irange(g, P(g, "batch-min"), P(g, "batch-max"));
    tf_step(&t, m, L, emb, B, seqlen(g, P(g, "seq-min"), P(g, "seq-max")));
    opt_step(&t, 2); /* AdamW: exp_avg, exp_avg_sq */
  }
  train_end(&t);
  free(L);
}

static void shape_gpt2(struct gen *g)
{
  struct tf m = {.layers = (int)P(g, "layers"), .hidden = (int)P(g, "hidden"), .heads = (int)P(g, "heads"),
                 .vocab = (int)P(g, "vocab"), .math_attn = (int)P(g, "math-attn")};
  m.ffn = 4 * m.hidden;
  tf_train(g, &m);
}

static void shape_bert(struct gen *g)
{
  struct tf m = {.layers = (int)P(g, "layers"), .hidden = (int)P(g, "hidden"), .heads = (int)P(g, "heads"),
                 .vocab = (int)P(g, "vocab"), .mlm = 1};
  m.ffn = 4 * m.hidden;
  tf_train(g, &m);
}

static void shape_moe(struct gen *g)
{
  struct tf m = {.layers = (int)P(g, "layers"), .hidden = (int)P(g, "hidden"), .heads = (int)P(g, "heads"),
                 .vocab = (int)P(g, "vocab"), .ffn = (int)P(g, "ffn"), .experts = (int)P(g, "experts"),
                 .topk = (int)P(g, "topk")};
  if (m.topk > m.experts)
    die("moe-train: --topk %d is more than --experts %d", m.topk, m.experts);
  tf_train(g, &m);
}

/* ---- ResNet-50 ------------------------------------------------------------ */

/* cuDNN's workspace for a convolution: depends on the algorithm its
 * heuristics pick for the shape, so it is a fixed function of the shape,
 * zero for some, up to the size of the output for others. */
static uint64_t conv_ws(uint64_t cin, uint64_t cout, uint64_t k, uint64_t hw, uint64_t out)
{
  uint64_t x = cin * 1000003u ^ cout * 7919u ^ k * 31u ^ hw * 131u;
  x ^= x >> 13;
  x *= 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  switch (x % 4) {
  case 0: return 0;
  case 1: return out / 4;
  case 2: return out;
  default: return (uint64_t)(1 + x % 64) * MIB;
  }
}

struct cnn {
  struct train *t;
  uint64_t B, H, W, C;
};

static void conv_bn(struct cnn *c, uint64_t cout, uint64_t k, uint64_t stride, const int *p)
{
  struct train *t = c->t;
  uint64_t a = (uint64_t)t->act, in = c->B * c->C * c->H * c->W * a;
  uint64_t H = (c->H + stride - 1) / stride, W = (c->W + stride - 1) / stride;
  uint64_t out = c->B * cout * H * W * a;
  fwd(t, out, in, p[0], 1, conv_ws(c->C, cout, k, H, out), 0);
  fwd(t, out, out, p[1], 2, 0, 2, cout * 4, cout * 4); /* batch norm: save_mean, save_invstd; ReLU in place */
  c->C = cout;
  c->H = H;
  c->W = W;
}

static void shape_resnet(struct gen *g)
{
  struct train t = {.g = g, .amp = (int)P(g, "amp")};
  t.act = t.amp ? 2 : 4;
  static const int blocks[4] = {3, 4, 6, 3};
  uint64_t width = (uint64_t)P(g, "width");
  /* parameters in module order: a conv's weight, then its batch norm's
   * weight and bias; the running statistics are buffers held for the run */
  int p[200][2], np = 0;
  uint64_t cin = 3;
#define CONV(ci, co, k)                                                        \
  do {                                                                         \
    p[np][0] = add_param(&t, (uint64_t)(co) * (ci) * (k) * (k));              \
    p[np][1] = add_param(&t, (co));                                            \
    add_param(&t, (co));                                                       \
    push(&t.held, al(g, 0, (uint64_t)(co) * 4));                               \
    push(&t.held, al(g, 0, (uint64_t)(co) * 4));                               \
    np++;                                                                      \
  } while (0)
  CONV(cin, width, 7);
  cin = width;
  for (int s = 0; s < 4; s++) {
    uint64_t w = width << s;
    for (int b = 0; b < blocks[s]; b++) {
      CONV(cin, w, 1);
      CONV(w, w, 3);
      CONV(w, 4 * w, 1);
      if (b == 0)
        CONV(cin, 4 * w, 1);
      cin = 4 * w;
    }
  }
#undef CONV
  int fc = add_param(&t, cin * 1000);
  add_param(&t, 1000);
  for (long long step = 0; step < P(g, "steps") && !g->failed; step++) {
    uint64_t B = (uint64_t)irange(g, P(g, "batch-min"), P(g, "batch-max"));
    uint64_t img = (uint64_t)irange(g, P(g, "img-min") / 32, P(g, "img-max") / 32) * 32;
    struct cnn c = {.t = &t, .B = B, .H = img, .W = img, .C = 3};
    uint64_t a = (uint64_t)t.act;
    blk x = al(g, 0, B * 3 * img * img * a), labels = al(g, 0, B * 8);
    int k = 0;
    conv_bn(&c, width, 7, 2, p[k++]);
    uint64_t pin = c.B * c.C * c.H * c.W * a;
    c.H = (c.H + 1) / 2;
    c.W = (c.W + 1) / 2;
    fwd(&t, c.B * c.C * c.H * c.W * a, pin, -1, 0, 0, 1, c.B * c.C * c.H * c.W * 8); /* max pool and its indices */
    for (int s = 0; s < 4; s++) {
      uint64_t w = width << s;
      for (int b = 0; b < blocks[s]; b++) {
        struct cnn in = c;
        uint64_t stride = s > 0 && b == 0 ? 2 : 1;
        conv_bn(&c, w, 1, 1, p[k++]);
        conv_bn(&c, w, 3, stride, p[k++]);
        conv_bn(&c, 4 * w, 1, 1, p[k++]);
        if (b == 0)
          conv_bn(&in, 4 * w, 1, stride, p[k++]); /* the downsampled identity; the add is in place */
      }
    }
    fwd(&t, B * c.C * a, B * c.C * c.H * c.W * a, -1, 0, 0, 0); /* average pool */
    fwd(&t, B * 1000 * a, B * c.C * a, fc, 2, 0, 0);
    fwd(&t, B * 1000 * 4, B * 1000 * a, -1, 0, 0, 0);
    fwd(&t, 4, B * 1000 * 4, -1, 0, 0, 0);
    backward(&t, 4);
    fr(g, labels);
    fr(g, x);
    opt_step(&t, 1); /* SGD with momentum: one buffer a parameter */
  }
  train_end(&t);
}

/* ---- serving: continuous batching over a model held for the run ----------- */

struct req {
  uint64_t prompt, done_prefill, out, made;
};

struct lm {
  uint64_t layers, h, ffn, vocab, kvd; /* kvd: width of k and v together (grouped-query) */
};

/* The weights, bf16, loaded on the model's stream S. */
static void lm_weights(struct gen *g, const struct lm *m, int s, struct blist *w)
{
  push(w, al(g, s, m->vocab * m->h * 2));
  for (uint64_t l = 0; l < m->layers; l++) {
    push(w, al(g, s, m->h * 2));
    push(w, al(g, s, m->h * (m->h + m->kvd) * 2));
    push(w, al(g, s, m->h * m->h * 2));
    push(w, al(g, s, m->h * 2));
    push(w, al(g, s, 2 * m->ffn * m->h * 2));
    push(w, al(g, s, m->h * m->ffn * 2));
  }
  push(w, al(g, s, m->h * 2));
  push(w, al(g, s, m->vocab * m->h * 2));
}

/* One forward pass over T tokens of N sequences on stream S, inference
 * style: each layer's output replaces its input.  Returns the logits of
 * the N last tokens (fp32), still live. */
static blk lm_forward(struct gen *g, const struct lm *m, int s, uint64_t T, uint64_t N, int prefill)
{
  blk x = al(g, s, T * m->h * 2), res = al(g, s, T * m->h * 2);
  for (uint64_t l = 0; l < m->layers; l++) {
    blk n1 = al(g, s, T * m->h * 2);
    blk qkv = al(g, s, T * (m->h + m->kvd) * 2);
    fr(g, n1);
    if (prefill) { /* split-KV attention's partial results */
      blk ws = al(g, s, N * 32 * 128 * 4 * 4 + T * 64);
      fr(g, ws);
    }
    blk att = al(g, s, T * m->h * 2);
    fr(g, qkv);
    blk o = al(g, s, T * m->h * 2);
    fr(g, att);
    fr(g, x);
    blk n2 = al(g, s, T * m->h * 2);
    blk gu = al(g, s, T * 2 * m->ffn * 2);
    fr(g, n2);
    blk act = al(g, s, T * m->ffn * 2);
    fr(g, gu);
    x = al(g, s, T * m->h * 2);
    fr(g, act);
    fr(g, o);
  }
  blk last = al(g, s, N * m->h * 2);
  fr(g, x);
  fr(g, res);
  blk logits = al(g, s, N * m->vocab * 4);
  fr(g, last);
  return logits;
}

/* Sampling with top-p: probabilities, a sort of each row (values and
 * indices), the chosen ids. */
static blk sample(struct gen *g, const struct lm *m, int s, uint64_t N)
{
  blk probs = al(g, s, N * m->vocab * 4);
  blk sv = al(g, s, N * m->vocab * 4), si = al(g, s, N * m->vocab * 8);
  blk ids = al(g, s, N * 8);
  fr(g, si);
  fr(g, sv);
  fr(g, probs);
  return ids;
}

static uint64_t req_prompt(struct gen *g)
{
  if (chance(g, P(g, "long-pct")))
    return (uint64_t)logrange(g, P(g, "long-min"), P(g, "long-max"));
  return (uint64_t)logrange(g, P(g, "prompt-min"), P(g, "prompt-max"));
}

static void shape_serve(struct gen *g)
{
  struct lm m = {.layers = (uint64_t)P(g, "layers"), .h = (uint64_t)P(g, "hidden"), .vocab = 32000};
  m.ffn = m.h * 11 / 4;
  m.kvd = m.h / 4;
  int streams = (int)P(g, "streams");
  struct blist w = {0}, kv = {0};
  lm_weights(g, &m, 1, &w);
  /* the paged KV cache: one tensor a layer, allocated once at start */
  for (uint64_t l = 0; l < m.layers; l++)
    push(&kv, al(g, 1, (uint64_t)P(g, "kv-mib") * MIB / m.layers));
  struct req *run = calloc((size_t)P(g, "max-seqs"), sizeof *run);
  if (!run)
    die("out of host memory");
  size_t nrun = 0, waiting = 0;
  uint64_t budget = (uint64_t)P(g, "max-tokens");
  blk prev_ids = NO_BLK;
  for (long long step = 0; step < P(g, "steps") && !g->failed; step++) {
    for (long long r = 0; r < P(g, "rate-pct") / 100 + 1; r++)
      if (r < P(g, "rate-pct") / 100 || chance(g, P(g, "rate-pct") % 100))
        waiting++;
    while (waiting > 0 && nrun < (size_t)P(g, "max-seqs")) {
      run[nrun].prompt = req_prompt(g);
      run[nrun].done_prefill = 0;
      run[nrun].out = (uint64_t)logrange(g, P(g, "output-min"), P(g, "output-max"));
      run[nrun].made = 0;
      nrun++;
      waiting--;
    }
    if (nrun == 0)
      continue;
    /* the batch: a token for each decoding sequence, then prefill chunks
     * (chunked prefill) up to the token budget */
    uint64_t T = 0, N = 0;
    int prefill = 0;
    for (size_t i = 0; i < nrun; i++)
      if (run[i].done_prefill == run[i].prompt) {
        T++;
        N++;
      }
    for (size_t i = 0; i < nrun && T < budget; i++)
      if (run[i].done_prefill < run[i].prompt) {
        uint64_t c = run[i].prompt - run[i].done_prefill;
        if (c > budget - T)
          c = budget - T;
        run[i].done_prefill += c;
        T += c;
        N++;
        prefill = 1;
      }
    if (T == 0)
      continue;
    /* streams: 1 the model; 2 sampling; 3 the inputs' copies; 4 a second
     * model stream, steps alternating between the two (overlapped
     * scheduling) */
    int fs = streams >= 4 && step % 2 ? 4 : 1;
    int ss = streams >= 2 ? 2 : 1, cs = streams >= 3 ? 3 : fs;
    struct blist in = {0};
    push(&in, al(g, cs, T * 8));     /* input ids */
    push(&in, al(g, cs, T * 8));     /* positions */
    push(&in, al(g, cs, T * 8));     /* slot mapping */
    push(&in, al(g, cs, N * 4));     /* sequence lengths */
    push(&in, al(g, cs, N * 4 * ((uint64_t)P(g, "long-max") / 16 + 1))); /* block tables */
    blk logits = lm_forward(g, &m, fs, T, N, prefill);
    blk ids = sample(g, &m, ss, N);
    fr(g, logits);
    free_all(g, &in, 0);
    free(in.v);
    if (prev_ids != NO_BLK) /* last step's ids, copied to the host by now */
      fr(g, prev_ids);
    prev_ids = ids;
    for (size_t i = 0; i < nrun;)
      if (run[i].done_prefill == run[i].prompt && ++run[i].made >= run[i].out)
        run[i] = run[--nrun];
      else
        i++;
  }
  fr(g, prev_ids);
  free_all(g, &kv, 0);
  free_all(g, &w, 0);
  free(kv.v);
  free(w.v);
  free(run);
}

/* ---- a KV cache that grows block by block ---------------------------------- */

struct kseq {
  struct blist blocks;
  uint64_t len, out, made;
  int stream;
};

static void shape_kv(struct gen *g)
{
  struct lm m = {.layers = (uint64_t)P(g, "layers"), .h = (uint64_t)P(g, "hidden"), .vocab = 32000};
  m.kvd = m.h / 4;
  uint64_t bt = (uint64_t)P(g, "block-tokens");
  uint64_t bbytes = bt * m.layers * m.kvd * 2; /* k and v of every layer, bf16 */
  size_t maxs = (size_t)P(g, "max-seqs");
  int streams = (int)P(g, "streams");
  struct kseq *q = calloc(maxs, sizeof *q);
  if (!q)
    die("out of host memory");
  size_t n = 0;
  struct blist w = {0};
  /* the model, bf16: the embedding, then a layer's q, k and v, o and an
   * MLP of three h x 2h matrices in one tensor each */
  push(&w, al(g, 0, m.vocab * m.h * 2));
  for (uint64_t l = 0; l < m.layers; l++)
    push(&w, al(g, 0, m.h * (m.h + m.kvd + m.h + 6 * m.h) * 2));
  for (long long step = 0; step < P(g, "steps") && !g->failed; step++) {
    /* arrivals: the prompt's blocks at once */
    while (n < maxs && chance(g, P(g, "arrive-pct"))) {
      struct kseq *s = &q[n++];
      memset(s, 0, sizeof *s);
      s->len = (uint64_t)logrange(g, P(g, "prompt-min"), P(g, "prompt-max"));
      s->out = (uint64_t)logrange(g, P(g, "output-min"), P(g, "output-max"));
      s->stream = streams > 1 ? 1 + (int)(rnd(g) % (uint64_t)streams) : 0;
      for (uint64_t b = 0; b < (s->len + bt - 1) / bt; b++)
        push(&s->blocks, al(g, s->stream, bbytes));
      blk act = al(g, s->stream, s->len * m.h * 2 * 4); /* the prefill's activations */
      fr(g, act);
    }
    if (n == 0)
      continue;
    /* a decode step per stream over its sequences */
    for (int st = streams > 1 ? 1 : 0; st <= (streams > 1 ? streams : 0); st++) {
      uint64_t N = 0;
      for (size_t i = 0; i < n; i++)
        N += q[i].stream == st;
      if (!N)
        continue;
      blk x = al(g, st, N * m.h * 2), y = al(g, st, N * m.h * 2 * 4);
      fr(g, y);
      blk lg = al(g, st, N * m.vocab * 4);
      fr(g, x);
      blk ids = al(g, st, N * 8);
      fr(g, lg);
      fr(g, ids);
    }
    for (size_t i = 0; i < n;) {
      struct kseq *s = &q[i];
      if (s->len % bt == 0)
        push(&s->blocks, al(g, s->stream, bbytes)); /* the next token starts a block */
      s->len++;
      /* done at its length, or stopped early at random (a stop token) */
      if (++s->made >= s->out || chance(g, P(g, "stop-pct"))) {
        free_all(g, &s->blocks, 0);
        free(s->blocks.v);
        q[i] = q[--n];
      } else {
        i++;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    free_all(g, &q[i].blocks, 0);
    free(q[i].blocks.v);
  }
  free_all(g, &w, 0);
  free(w.v);
  free(q);
}

/* ---- generate() with a cache grown by concatenation ------------------------ */

/* Hugging Face transformers' generate() with its dynamic cache: each step
 * a layer's keys and values are concatenated with the step's (torch.cat:
 * a new tensor one token longer, then the old one freed), and so are the
 * token ids and the attention mask; a batch runs to its length, padded to
 * its longest prompt, then the next batch starts. */
struct hf {
  const struct lm *m;
  uint64_t B, kw; /* sequences; bytes of one token's keys (or values) in a layer */
  blk *K, *V;
};

/* One layer over T new tokens, the cache LEN tokens long after it; X is
 * the hidden state, replaced by the layer's output. */
static void hf_layer(struct gen *g, struct hf *c, uint64_t l, uint64_t T, uint64_t len, blk *x)
{
  const struct lm *m = c->m;
  blk n = al(g, 0, T * m->h * 2);
  blk q = al(g, 0, T * m->h * 2), k = al(g, 0, T * c->kw), v = al(g, 0, T * c->kw);
  fr(g, n);
  if (c->K[l] == NO_BLK) { /* the prompt's keys and values are the cache */
    c->K[l] = k;
    c->V[l] = v;
  } else {
    blk nk = al(g, 0, c->B * len * c->kw);
    fr(g, c->K[l]);
    fr(g, k);
    c->K[l] = nk;
    blk nv = al(g, 0, c->B * len * c->kw);
    fr(g, c->V[l]);
    fr(g, v);
    c->V[l] = nv;
  }
  blk a = al(g, 0, T * m->h * 2);
  fr(g, q);
  blk o = al(g, 0, T * m->h * 2); /* output projection plus the residual */
  fr(g, a);
  fr(g, *x);
  blk act = al(g, 0, T * m->ffn * 2); /* SiLU(gate) * up */
  blk d = al(g, 0, T * m->h * 2);     /* down projection plus the residual */
  fr(g, act);
  fr(g, o);
  *x = d;
}

static void shape_hf(struct gen *g)
{
  struct lm m = {.layers = (uint64_t)P(g, "layers"), .h = (uint64_t)P(g, "hidden"), .vocab = 32000};
  m.ffn = m.h * 11 / 4;
  uint64_t kv_heads_div = (uint64_t)P(g, "kv-div");
  m.kvd = 2 * m.h / kv_heads_div;
  struct blist w = {0};
  lm_weights(g, &m, 0, &w);
  struct hf c = {.m = &m, .kw = m.h / kv_heads_div * 2};
  c.K = calloc(m.layers, sizeof *c.K);
  c.V = calloc(m.layers, sizeof *c.V);
  if (!c.K || !c.V)
    die("out of host memory");
  for (long long bi = 0; bi < P(g, "batches") && !g->failed; bi++) {
    c.B = (uint64_t)irange(g, P(g, "batch-min"), P(g, "batch-max"));
    uint64_t len = 0;
    for (uint64_t i = 0; i < c.B; i++) { /* padded to the longest prompt */
      uint64_t p = (uint64_t)logrange(g, P(g, "prompt-min"), P(g, "prompt-max"));
      if (p > len)
        len = p;
    }
    uint64_t gen_n = (uint64_t)irange(g, P(g, "new-min"), P(g, "new-max"));
    for (uint64_t l = 0; l < m.layers; l++)
      c.K[l] = c.V[l] = NO_BLK;
    blk ids = al(g, 0, c.B * len * 8), mask = al(g, 0, c.B * len * 8);
    for (uint64_t t = 0; t <= gen_n; t++) {
      uint64_t T = t == 0 ? c.B * len : c.B; /* the prompt, then a token a sequence */
      if (t > 0)
        len++;
      blk x = al(g, 0, T * m.h * 2);
      for (uint64_t l = 0; l < m.layers; l++)
        hf_layer(g, &c, l, T, len, &x);
      blk last = al(g, 0, c.B * m.h * 2);
      fr(g, x);
      blk logits = al(g, 0, c.B * m.vocab * 4); /* the last token's, in fp32 */
      fr(g, last);
      /* sampling: top-p sorts each row, then a cumulative sum */
      blk probs = al(g, 0, c.B * m.vocab * 4);
      blk sv = al(g, 0, c.B * m.vocab * 4), si = al(g, 0, c.B * m.vocab * 8);
      blk cs = al(g, 0, c.B * m.vocab * 4);
      fr(g, cs);
      fr(g, si);
      fr(g, sv);
      fr(g, logits);
      blk next = al(g, 0, c.B * 8);
      fr(g, probs);
      if (t == gen_n) {
        fr(g, next);
        break;
      }
      /* the ids and the mask grow by a column */
      blk nids = al(g, 0, c.B * (len + 1) * 8);
      fr(g, ids);
      fr(g, next);
      ids = nids;
      blk nmask = al(g, 0, c.B * (len + 1) * 8);
      fr(g, mask);
      mask = nmask;
    }
    for (uint64_t l = 0; l < m.layers; l++) {
      fr(g, c.K[l]);
      fr(g, c.V[l]);
    }
    fr(g, mask);
    fr(g, ids);
  }
  free(c.K);
  free(c.V);
  free_all(g, &w, 0);
  free(w.v);
}

/* ---- CuPy-like array code --------------------------------------------------- */

static void shape_cupy(struct gen *g)
{
  size_t nf = (size_t)P(g, "arrays");
  uint64_t *len = calloc(nf, sizeof *len);
  blk *arr = calloc(nf, sizeof *arr);
  if (!len || !arr)
    die("out of host memory");
  long long lo = P(g, "elems-min"), hi = P(g, "elems-max");
  for (size_t i = 0; i < nf; i++) {
    len[i] = (uint64_t)logrange(g, lo, hi) * (chance(g, 50) ? 8 : 4);
    arr[i] = al(g, 0, len[i]);
  }
  for (long long it = 0; it < P(g, "steps") && !g->failed; it++) {
    size_t i = (size_t)(rnd(g) % nf);
    uint64_t n = len[i];
    if (chance(g, P(g, "resize-pct"))) {
      /* concatenate, slice or a new data set: the array changes size */
      uint64_t nn = chance(g, 60) ? n + n * (uint64_t)irange(g, 1, 50) / 100 : (uint64_t)logrange(g, lo, hi) * 4;
      blk b = al(g, 0, nn);
      fr(g, arr[i]);
      arr[i] = b;
      len[i] = n = nn;
    }
    /* an element-wise chain: every operator makes a temporary and lets go
     * of the one before */
    long long chain = irange(g, 1, P(g, "chain"));
    blk t = al(g, 0, n);
    for (long long c = 1; c < chain; c++) {
      blk u = chance(g, 25) ? al(g, 0, n / (uint64_t)irange(g, 2, 64)) : NO_BLK; /* a broadcast operand */
      blk nt = al(g, 0, n);
      fr(g, u);
      fr(g, t);
      t = nt;
    }
    if (chance(g, 40)) { /* a reduction: a partial per block, then the result */
      blk part = al(g, 0, (n / 4 + 255) / 256 * 8);
      blk r = al(g, 0, chance(g, 50) ? 8 : n / (uint64_t)irange(g, 16, 1024));
      fr(g, part);
      fr(g, r);
    }
    if (chance(g, 20)) { /* boolean mask and fancy indexing: a result of data-dependent size */
      blk mask = al(g, 0, n / 4), nz = al(g, 0, 8);
      blk sel = al(g, 0, n * (uint64_t)irange(g, 1, 100) / 100);
      fr(g, nz);
      fr(g, mask);
      fr(g, sel);
    }
    if (chance(g, 50)) { /* the result is kept in place of the array */
      fr(g, arr[i]);
      arr[i] = t;
    } else {
      fr(g, t);
    }
  }
  for (size_t i = 0; i < nf; i++)
    fr(g, arr[i]);
  free(len);
  free(arr);
}

/* ---- Numba-like kernels' device arrays --------------------------------------- */

static void shape_numba(struct gen *g)
{
  size_t ng = (size_t)P(g, "grids");
  int streams = (int)P(g, "streams");
  uint64_t *gb = calloc(ng, sizeof *gb);
  blk *grid = calloc(ng, sizeof *grid);
  if (!gb || !grid)
    die("out of host memory");
  for (size_t i = 0; i < ng; i++) { /* cuda.to_device of an nx by ny float64 grid: exact bytes, no rounding */
    uint64_t nx = (uint64_t)irange(g, P(g, "nx-min"), P(g, "nx-max"));
    uint64_t ny = (uint64_t)irange(g, P(g, "nx-min"), P(g, "nx-max"));
    gb[i] = nx * ny * 8;
    grid[i] = al(g, (int)(i % (size_t)streams), gb[i]);
  }
  long long np = irange(g, P(g, "particles-min"), P(g, "particles-max"));
  blk pos = al(g, 0, (uint64_t)np * 24), vel = al(g, 0, (uint64_t)np * 24);
  for (long long step = 0; step < P(g, "steps") && !g->failed; step++) {
    for (size_t i = 0; i < ng; i++) {
      int s = (int)(i % (size_t)streams);
      blk out = al(g, s, gb[i]); /* cuda.device_array_like: the stencil's output, then the buffers swap */
      if (chance(g, 30)) {       /* a reduction over the grid: partial sums per block */
        blk part = al(g, s, (gb[i] / 8 + 255) / 256 * 8);
        fr(g, part);
      }
      fr(g, grid[i]);
      grid[i] = out;
    }
    /* particles: a sort by cell (keys and a permutation), now and then
     * rebuilt at a new count as particles enter and leave */
    blk keys = al(g, 0, (uint64_t)np * 8), perm = al(g, 0, (uint64_t)np * 4);
    fr(g, keys);
    fr(g, perm);
    if (chance(g, P(g, "rebuild-pct"))) {
      np += irange(g, -np / 10, np / 10);
      if (np < P(g, "particles-min"))
        np = P(g, "particles-min");
      blk p2 = al(g, 0, (uint64_t)np * 24), v2 = al(g, 0, (uint64_t)np * 24);
      fr(g, pos);
      fr(g, vel);
      pos = p2;
      vel = v2;
    }
    if (step % 10 == 9) { /* a host-side check: a small result array */
      blk r = al(g, 0, 8 * (uint64_t)irange(g, 1, 64));
      fr(g, r);
    }
  }
  fr(g, pos);
  fr(g, vel);
  for (size_t i = 0; i < ng; i++)
    fr(g, grid[i]);
  free(gb);
  free(grid);
}

/* ---- a server of several threads, each on its own stream --------------------- */

/* Each thread's work is a script of steps (allocate into a slot, free a
 * slot) made ahead; the log interleaves the threads' scripts at random, as
 * a scheduler would. */
struct mstep {
  int alloc, slot;
  uint64_t size;
};

struct mthread {
  struct mstep *s;
  size_t n, cap, at;
  blk slot[64];
};

static void ms(struct mthread *t, int alloc, int slot, uint64_t size)
{
  t->s = grow(t->s, &t->cap, t->n + 1, sizeof *t->s);
  t->s[t->n++] = (struct mstep){alloc, slot, size};
}

static void shape_mt(struct gen *g)
{
  int nt = (int)P(g, "threads"), layers = (int)P(g, "layers");
  struct mthread *th = calloc((size_t)nt, sizeof *th);
  if (!th)
    die("out of host memory");
  /* the model, loaded once by the main thread on the default stream */
  struct blist w = {0};
  uint64_t width = (uint64_t)P(g, "width");
  for (int l = 0; l < layers; l++) {
    uint64_t c = width << (l * 4 / layers);
    push(&w, al_on(g, 0, 0, c * c * 9 * 2));
    push(&w, al_on(g, 0, 0, c * 4 * 2));
  }
  for (int i = 0; i < nt; i++) {
    struct mthread *t = &th[i];
    for (long long r = 0; r < P(g, "requests"); r++) {
      uint64_t B = (uint64_t)irange(g, P(g, "batch-min"), P(g, "batch-max"));
      uint64_t img = (uint64_t)irange(g, P(g, "img-min") / 32, P(g, "img-max") / 32) * 32;
      ms(t, 1, 0, B * 3 * img * img * 2); /* the request's input, fp16 */
      int cur = 0;
      for (int l = 0; l < layers; l++) {
        uint64_t c = width << (l * 4 / layers), hw = img >> (1 + l * 4 / layers);
        uint64_t out = B * c * hw * hw * 2;
        uint64_t ws = conv_ws(c, c, 3, hw, out);
        if (ws) {
          ms(t, 1, 2, ws);
          ms(t, 0, 2, 0);
        }
        ms(t, 1, 1 - cur, out);
        ms(t, 0, cur, 0);
        cur = 1 - cur;
      }
      ms(t, 1, 3, B * 1000 * 4); /* logits, then the top-5 */
      ms(t, 0, cur, 0);
      ms(t, 1, 4, B * 5 * 8);
      ms(t, 0, 3, 0);
      ms(t, 0, 4, 0);
    }
    for (int k = 0; k < 64; k++)
      t->slot[k] = NO_BLK;
  }
  for (;;) {
    int live = 0, pick;
    for (int i = 0; i < nt; i++)
      live += th[i].at < th[i].n;
    if (!live || g->failed)
      break;
    do
      pick = (int)(rnd(g) % (uint64_t)nt);
    while (th[pick].at >= th[pick].n);
    struct mthread *t = &th[pick];
    struct mstep *s = &t->s[t->at++];
    if (s->alloc) {
      t->slot[s->slot] = al_on(g, pick + 1, pick + 1, s->size);
    } else {
      fr(g, t->slot[s->slot]);
      t->slot[s->slot] = NO_BLK;
    }
  }
  for (int i = 0; i < nt; i++) {
    for (int k = 0; k < 64; k++)
      if (th[i].slot[k] != NO_BLK && g->a[th[i].slot[k]].live)
        fr(g, th[i].slot[k]);
    free(th[i].s);
  }
  free_all(g, &w, 0);
  free(w.v);
  free(th);
}

/* ---- the shapes and their parameters ------------------------------------- */

#define STEPS(d) {"steps", d, 1, 1000000, "steps (training steps, scheduler steps, iterations)"}
#define END {NULL, 0, 0, 0, NULL}

static const struct param p_gpt2[] = {
  STEPS(16),
  {"layers", 12, 1, 96, "transformer blocks"},
  {"hidden", 768, 64, 8192, "model width (the MLP is 4x)"},
  {"heads", 12, 1, 128, "attention heads"},
  {"vocab", 50257, 256, 300000, "vocabulary (the logits are tokens x vocab)"},
  {"batch-min", 2, 1, 4096, "smallest batch"},
  {"batch-max", 6, 1, 4096, "largest batch"},
  {"seq-min", 64, 8, 65536, "shortest sequence (padded to a multiple of 8)"},
  {"seq-max", 512, 8, 65536, "longest sequence"},
  {"math-attn", 1, 0, 1, "1: attention as matmul, softmax, dropout (scores saved, S x S); 0: a fused kernel"},
  {"amp", 1, 0, 1, "1: bf16 autocast (activations 2 bytes, weights cast each step); 0: fp32"},
  END};

static const struct param p_bert[] = {
  STEPS(24),
  {"layers", 12, 1, 96, "encoder blocks"},
  {"hidden", 768, 64, 8192, "model width (the MLP is 4x)"},
  {"heads", 12, 1, 128, "attention heads"},
  {"vocab", 30522, 256, 300000, "vocabulary (the masked-LM head runs on 10-20% of tokens)"},
  {"batch-min", 8, 1, 4096, "smallest batch"},
  {"batch-max", 32, 1, 4096, "largest batch"},
  {"seq-min", 32, 8, 65536, "shortest sequence"},
  {"seq-max", 512, 8, 65536, "longest sequence"},
  {"amp", 1, 0, 1, "1: bf16 autocast; 0: fp32"},
  END};

static const struct param p_moe[] = {
  STEPS(12),
  {"layers", 8, 1, 96, "transformer blocks, each with a mixture-of-experts MLP"},
  {"hidden", 512, 64, 8192, "model width"},
  {"heads", 8, 1, 128, "attention heads"},
  {"ffn", 1408, 64, 65536, "each expert's MLP width"},
  {"experts", 8, 1, 64, "experts a layer"},
  {"topk", 2, 1, 64, "experts a token is routed to"},
  {"vocab", 32000, 256, 300000, "vocabulary"},
  {"batch-min", 4, 1, 4096, "smallest batch"},
  {"batch-max", 16, 1, 4096, "largest batch"},
  {"seq-min", 128, 8, 65536, "shortest sequence"},
  {"seq-max", 768, 8, 65536, "longest sequence"},
  {"amp", 1, 0, 1, "1: bf16 autocast; 0: fp32"},
  END};

static const struct param p_resnet[] = {
  STEPS(16),
  {"width", 64, 8, 512, "channels of the stem (the stages are 1, 2, 4 and 8 times it, bottlenecks 4x)"},
  {"batch-min", 8, 1, 4096, "smallest batch"},
  {"batch-max", 48, 1, 4096, "largest batch"},
  {"img-min", 160, 32, 2048, "smallest image side (multi-scale training; a multiple of 32)"},
  {"img-max", 256, 32, 2048, "largest image side"},
  {"amp", 1, 0, 1, "1: bf16 autocast; 0: fp32"},
  END};

/* The three serving shapes differ in their defaults only. */
#define SERVE_PARAMS(steps, streams, hidden, kv, maxtok, pmin, pmax, lpct, lmin, lmax, omin, omax, rate)       \
  STEPS(steps),                                                                                            \
    {"streams", streams, 1, 4, "streams: 1 the model, 2 sampling, 3 input copies, 4 a second model stream"}, \
    {"layers", 12, 1, 128, "decoder blocks"},                                                              \
    {"hidden", hidden, 256, 16384, "model width (MLP 2.75x, k and v 1/4)"},                                \
    {"kv-mib", kv, 0, 1048576, "the paged KV cache, allocated at start, one tensor a layer"},               \
    {"max-seqs", 64, 1, 4096, "sequences running at once"},                                                \
    {"max-tokens", maxtok, 16, 1048576, "tokens a step (decode tokens, then chunks of prefill)"},           \
    {"prompt-min", pmin, 1, 1048576, "shortest prompt"},                                                   \
    {"prompt-max", pmax, 1, 1048576, "longest prompt"},                                                    \
    {"long-pct", lpct, 0, 100, "percent of requests with a long prompt instead"},                          \
    {"long-min", lmin, 1, 1048576, "shortest long prompt"},                                                \
    {"long-max", lmax, 1, 1048576, "longest long prompt"},                                                 \
    {"output-min", omin, 1, 1048576, "fewest tokens generated"},                                           \
    {"output-max", omax, 1, 1048576, "most tokens generated"},                                             \
    {"rate-pct", rate, 1, 100000, "requests arriving per 100 steps"}, END

static const struct param p_chat[] = {SERVE_PARAMS(100, 2, 2048, 1024, 2048, 20, 1500, 5, 2000, 6000, 20, 600, 150)};
static const struct param p_rag[] = {SERVE_PARAMS(120, 3, 1536, 512, 8192, 1000, 6000, 0, 6000, 8000, 10, 200, 80)};
static const struct param p_mixed[] = {SERVE_PARAMS(110, 4, 1024, 256, 4096, 8, 400, 25, 1500, 12000, 1, 1000, 200)};

static const struct param p_kv[] = {
  STEPS(1500),
  {"streams", 2, 1, 8, "streams the sequences are spread over"},
  {"layers", 16, 1, 128, "layers whose k and v a block holds"},
  {"hidden", 2048, 256, 16384, "model width (k and v together 1/4 of it, bf16)"},
  {"block-tokens", 32, 1, 4096, "tokens a block of the cache holds"},
  {"max-seqs", 48, 1, 4096, "sequences at once"},
  {"arrive-pct", 30, 1, 100, "chance a step that a new sequence arrives (repeated while it does)"},
  {"prompt-min", 16, 1, 1048576, "shortest prompt"},
  {"prompt-max", 2048, 1, 1048576, "longest prompt"},
  {"output-min", 8, 1, 1048576, "fewest tokens generated"},
  {"output-max", 1024, 1, 1048576, "most tokens generated"},
  {"stop-pct", 1, 0, 100, "chance a step that a sequence stops early"},
  END};

static const struct param p_hf[] = {
  {"batches", 3, 1, 100000, "batches generated one after the other"},
  {"layers", 6, 1, 128, "decoder blocks"},
  {"hidden", 2048, 256, 16384, "model width (MLP 2.75x)"},
  {"kv-div", 1, 1, 64, "attention heads over key-value heads (1: every head its own keys and values)"},
  {"batch-min", 4, 1, 4096, "fewest sequences in a batch"},
  {"batch-max", 16, 1, 4096, "most sequences in a batch"},
  {"prompt-min", 16, 1, 1048576, "shortest prompt (a batch is padded to its longest)"},
  {"prompt-max", 1500, 1, 1048576, "longest prompt"},
  {"new-min", 32, 1, 1048576, "fewest tokens a batch generates"},
  {"new-max", 112, 1, 1048576, "most tokens a batch generates"},
  END};

static const struct param p_cupy[] = {
  STEPS(3000),
  {"arrays", 24, 1, 4096, "arrays held across iterations"},
  {"elems-min", 256, 1, 1LL << 32, "fewest elements of an array (float32 or float64)"},
  {"elems-max", 16000000, 1, 1LL << 32, "most elements of an array"},
  {"chain", 6, 1, 64, "most operators in an element-wise expression"},
  {"resize-pct", 10, 0, 100, "chance an iteration changes its array's size"},
  END};

static const struct param p_numba[] = {
  STEPS(2000),
  {"grids", 6, 1, 256, "float64 grids updated each step (double-buffered)"},
  {"nx-min", 300, 1, 65536, "shortest side of a grid"},
  {"nx-max", 2500, 1, 65536, "longest side of a grid"},
  {"particles-min", 100000, 1, 1LL << 30, "fewest particles (position and velocity, 3 float64 each)"},
  {"particles-max", 2000000, 1, 1LL << 30, "most particles at start"},
  {"rebuild-pct", 20, 0, 100, "chance a step that the particle arrays are rebuilt at a new count"},
  {"streams", 2, 1, 16, "streams the grids are spread over (0 is the default stream)"},
  END};

static const struct param p_mt[] = {
  {"requests", 150, 1, 1000000, "requests each thread serves"},
  {"threads", 4, 1, 60, "server threads, each with its own stream"},
  {"layers", 16, 1, 60, "conv layers of the model"},
  {"width", 32, 4, 1024, "channels of the first layer (doubling four times)"},
  {"batch-min", 1, 1, 4096, "smallest batch of a request"},
  {"batch-max", 32, 1, 4096, "largest batch"},
  {"img-min", 128, 32, 2048, "smallest image side"},
  {"img-max", 384, 32, 2048, "largest image side"},
  END};

struct shape {
  const char *name, *what;
  const struct param *params;
  void (*run)(struct gen *);
  int round512;
};

static const struct shape shapes[] = {
  {"gpt2-train", "GPT-2-like decoder trained with AdamW: weights, grads (set to None each step) and optimizer "
                 "states; activations saved in forward, freed in reverse in backward; batch and length vary",
   p_gpt2, shape_gpt2, 1},
  {"bert-train", "BERT-like encoder, masked-LM head on a varying share of tokens, fused attention", p_bert,
   shape_bert, 1},
  {"moe-train", "decoder with mixture-of-experts MLPs: tokens per expert differ each step", p_moe, shape_moe, 1},
  {"resnet50-train", "ResNet-50-like CNN trained with SGD and momentum, multi-scale images, cuDNN workspaces",
   p_resnet, shape_resnet, 1},
  {"serve-chat", "LLM serving, continuous batching: short prompts, long answers; 2 streams", p_chat, shape_serve, 1},
  {"serve-rag", "LLM serving: long prompts (retrieved context) in chunked prefill, short answers; 3 streams", p_rag,
   shape_serve, 1},
  {"serve-mixed", "LLM serving: a mix of tiny and very long prompts; 4 streams, two model streams alternating",
   p_mixed, shape_serve, 1},
  {"kv-cache", "a KV cache allocated block by block as sequences grow; sequences stop at random and release "
               "their blocks",
   p_kv, shape_kv, 1},
  {"hf-generate", "Hugging Face generate() in batches: keys, values, token ids and mask grown a token at a "
                  "time by concatenation (a new tensor, then the old one freed)",
   p_hf, shape_hf, 1},
  {"cupy-array", "CuPy-like array code: a working set of arrays, element-wise chains of temporaries, "
                 "reductions, masks, arrays that change size",
   p_cupy, shape_cupy, 1},
  {"numba-kernels", "Numba-like device arrays: double-buffered stencil grids (exact byte sizes), particle "
                    "arrays rebuilt at new counts, sort scratch",
   p_numba, shape_numba, 0},
  {"mt-server", "a server of several threads, each on its own stream, running a CNN on requests of varying batch",
   p_mt, shape_mt, 1},
  {NULL, NULL, NULL, NULL, 0}};

static void usage(FILE *f)
{
  fprintf(f, "Usage: " PROG " SHAPE [--seed N] [--max-events N] [--summary] [--PARAM VALUE]...\n"
             "       " PROG " --list | --help | --version\n"
             "Writes one allocation log in RMM's CSV format (Thread,Time,Action,Pointer,Size,Stream) to\n"
             "standard output, as tools/cuemm-replay reads it.  The same shape, seed and parameters give\n"
             "the same bytes.\n\n"
             "  --seed N         the generator's seed (default 1)\n"
             "  --max-events N   fail rather than write more than N events (default 50000)\n"
             "  --summary        print events, allocations, streams and peak live bytes to stderr\n"
             "  --list           the shapes' names, one a line\n\n"
             "Every allocation is freed by the end of the log.  Sizes are rounded up to 512 bytes as\n"
             "PyTorch's and CuPy's pools round them, except numba-kernels (exact nbytes).\n"
             "Values are whole numbers; each shape's parameters, with default [range]:\n");
  for (const struct shape *s = shapes; s->name; s++) {
    fprintf(f, "\n%s: %s\n", s->name, s->what);
    for (const struct param *p = s->params; p->name; p++)
      fprintf(f, "  --%-14s %s (%lld [%lld..%lld])\n", p->name, p->help, p->def, p->min, p->max);
  }
  fprintf(f, "\nExit status: 0 done; 1 more events than --max-events; 2 a usage error.\n");
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry '" PROG " --help' for more.\n", stderr);
  return 2;
}

static int parse_ll(const char *s, long long *v)
{
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end)
    return -1;
  *v = x;
  return 0;
}

int main(int argc, char **argv)
{
  const struct shape *sh = NULL;
  struct gen g = {0};
  long long seed = 1, max_events = 50000;
  int summary = 0;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf(PROG " (cuemm) %s\n", PACKAGE_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--list") == 0) {
      for (const struct shape *s = shapes; s->name; s++)
        puts(s->name);
      return 0;
    }
  if (argc < 2 || argv[1][0] == '-')
    return usage_error("%s", argc < 2 ? "no SHAPE named" : "the SHAPE comes first");
  for (const struct shape *s = shapes; s->name; s++)
    if (strcmp(s->name, argv[1]) == 0)
      sh = s;
  if (!sh)
    return usage_error("unknown shape '%s' (--list names them)", argv[1]);
  g.params = sh->params;
  int np = 0;
  for (; sh->params[np].name; np++)
    g.val[np] = sh->params[np].def;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (strncmp(a, "--", 2) != 0)
      return usage_error("unexpected argument '%s'", a);
    char name[64];
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (n >= sizeof name)
      return usage_error("unknown option '%s'", a);
    memcpy(name, a + 2, n);
    name[n] = 0;
    if (strcmp(name, "summary") == 0 && !eq) {
      summary = 1;
      continue;
    }
    if (eq)
      v = eq + 1;
    else if (i + 1 < argc)
      v = argv[++i];
    else
      return usage_error("option '%s' needs a value", a);
    long long x;
    if (parse_ll(v, &x) != 0) {
      fprintf(stderr, PROG ": --%s: '%s' is not a whole number\n", name, v);
      return 2;
    }
    if (strcmp(name, "seed") == 0) {
      seed = x;
      continue;
    }
    if (strcmp(name, "max-events") == 0) {
      if (x < 1) {
        fprintf(stderr, PROG ": --max-events: %lld is not at least 1\n", x);
        return 2;
      }
      max_events = x;
      continue;
    }
    int k = 0;
    while (k < np && strcmp(sh->params[k].name, name) != 0)
      k++;
    if (k == np) {
      fprintf(stderr, PROG ": %s has no parameter --%s (--help lists each shape's)\n", sh->name, name);
      return 2;
    }
    if (x < sh->params[k].min || x > sh->params[k].max) {
      fprintf(stderr, PROG ": %s --%s: %lld is outside %lld..%lld\n", sh->name, name, x, sh->params[k].min,
              sh->params[k].max);
      return 2;
    }
    g.val[k] = x;
  }
  /* pairs of bounds the others cannot check alone */
  static const char *const pairs[][2] = {{"batch-min", "batch-max"},         {"seq-min", "seq-max"},
                                         {"img-min", "img-max"},             {"prompt-min", "prompt-max"},
                                         {"long-min", "long-max"},           {"output-min", "output-max"},
                                         {"elems-min", "elems-max"},         {"nx-min", "nx-max"},
                                         {"particles-min", "particles-max"},
                                         {"new-min", "new-max"}};
  for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
    int lo = -1, hi = -1;
    for (int k = 0; k < np; k++) {
      if (strcmp(sh->params[k].name, pairs[p][0]) == 0)
        lo = k;
      if (strcmp(sh->params[k].name, pairs[p][1]) == 0)
        hi = k;
    }
    if (lo >= 0 && hi >= 0 && g.val[lo] > g.val[hi]) {
      fprintf(stderr, PROG ": %s: --%s %lld is more than --%s %lld\n", sh->name, pairs[p][0], g.val[lo], pairs[p][1],
              g.val[hi]);
      return 2;
    }
  }
  g.rng = (uint64_t)seed * 0x2545f4914f6cdd1dull + 0x1234567ull;
  g.next_addr = 0x7f0000000000ull;
  g.max_events = (size_t)max_events;
  g.round512 = sh->round512;
  sh->run(&g);
  if (g.failed) {
    fprintf(stderr, PROG ": %s makes more than %zu events with these parameters; lower --steps (or the like) "
                    "or raise --max-events\n",
            sh->name, g.max_events);
    free(g.out);
    free(g.a);
    return 1;
  }
  for (size_t i = 0; i < g.na; i++)
    if (g.a[i].live)
      die("internal error: %s leaves allocation %zu live", sh->name, i);
  fputs("Thread,Time,Action,Pointer,Size,Stream\n", stdout);
  if (fwrite(g.out, 1, g.len, stdout) != g.len || fflush(stdout) != 0)
    die("write error: %s", strerror(errno));
  if (summary)
    fprintf(stderr, "%s seed %lld: %zu events, %zu allocations, %d threads, %d streams, peak live %" PRIu64
                    " bytes (%.1f MiB)\n",
            sh->name, seed, g.events, g.allocs, __builtin_popcountll(g.threads_used),
            __builtin_popcountll(g.streams_used), g.peak, (double)g.peak / (double)MIB);
  free(g.out);
  free(g.a);
  return 0;
}
