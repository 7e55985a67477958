/* Support code of nbxla's ahead-of-time objects (codegen/aot.py): what the jit runtime does
 * from Python, in C.  It is pasted at the top of every generated driver, so that everything
 * here is static to that one object: two AOT objects linked into one program do not clash
 * (the jit's native loops compile it separately: see "the interface" below).
 *
 *  - nbxla_parallel / nbxla_full_reduce: split a kernel's [begin, end) range over threads
 *    (threads started per call and joined before returning: no global state, so the entry
 *    point stays reentrant; only kernels large enough to amortize a thread start are split).
 *  - nbxla_transpose / GEMM: ``dot`` (the jit runtime calls NumPy's BLAS).
 *  - nbxla_conv: ``convolution``, directly (the jit runtime: im2col + NumPy's BLAS).
 *  - nbxla_sort_keys: a stable radix / insertion sort on keys the comparator was recognized to
 *    order by; nbxla_sort: a stable merge sort driven by the comparator compiled as a kernel (the jit
 *    runtime calls NumPy's argsort); nbxla_topk on top of it (the jit: the evaluator).
 *  - nbxla_select_and_scatter: with its selection and combiner compiled as kernels (the jit:
 *    the evaluator).
 *  - nbxla_fft: a direct DFT in double precision (the jit: the evaluator, NumPy's FFT).
 *  - nbxla_potrf: LAPACK's Cholesky custom call (the jit: the evaluator, NumPy's cholesky).
 *  - nbxla_solve: ``nbxla_linalg_solve`` through NumPy's LAPACKE ?gesv, only in the jit's native
 *    loops (nbxla_set_lapack; an AOT object has no LAPACK and refuses the call when built).
 *  - nbxla_masked_dot: ``nbxla_masked_dot``, a dot of sub-matrices at run-time sizes: through
 *    NumPy's OpenBLAS where the jit runtime hands its dgemm/sgemm over (nbxla_set_blas), in
 *    plain C otherwise (and always in AOT objects, which must not depend on NumPy).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <complex.h>
#include <math.h>
#include <stdbool.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*nbxla_kernel)(void **buffers, int64_t begin, int64_t end);

/* ---- the interface: what the generated driver calls ----
 * NBXLA_API(name) is such a routine's linkage.  Pasted in front of the driver (an AOT object)
 * everything is static.  The jit's native loops compile this file on its own into an object
 * (kept in the persistent cache) and each driver against the text up to "end of interface"
 * only, both with -DNBXLA_WANT_<name>=~,NBXLA_HIDDEN for the routines that driver calls: those
 * are hidden (linked into the loop library, not exported) and the others stay static, so the C
 * compiler drops them unread (all twelve types of GEMM and convolution took it 10 s).
 * (NBXLA_PICK takes the second of "~, NBXLA_HIDDEN, static" when NBXLA_WANT_<name> is defined,
 * of "NBXLA_WANT_<name>, static" when it is not.) */
#define NBXLA_HIDDEN __attribute__((visibility("hidden")))
#define NBXLA_PICK2(a, b, ...) b
#define NBXLA_PICK(...) NBXLA_PICK2(__VA_ARGS__)
#define NBXLA_API(name) NBXLA_PICK(NBXLA_WANT_##name, static, ~)

struct nbxla_conv {
    int64_t nsp, n_out, o, cpg, opg, obg, xs_b, xs_f, ws_o, ws_i, os_b, os_f;
    int64_t xs[8], ws[8], os[8], in_size[8], k_size[8], out_size[8];
    int64_t stride[8], pad_low[8], base_dil[8], win_dil[8], rev[8];
};

struct nbxla_window {
    int64_t rank, in_dims[8], in_strides[8], src_dims[8], size[8], stride[8], pad_low[8], base_dil[8], win_dil[8];
};

NBXLA_API(nbxla_parallel) void nbxla_parallel(nbxla_kernel fn, void **buffers, int64_t extent);
NBXLA_API(nbxla_full_reduce) void nbxla_full_reduce(nbxla_kernel partial, nbxla_kernel finish, void **buffers, int n_in,
                                    int n_out, int64_t extent, int64_t max_parts, int64_t slots, char *scratch);
NBXLA_API(nbxla_transpose) void nbxla_transpose(const char *src, char *dst, int rank, const int64_t *dims,
                                  const int64_t *perm, int64_t esize);
#define NBXLA_TYPED(API)                                                                          \
    API(f32, float, float) API(f64, double, double) API(c64, float complex, float complex)        \
    API(c128, double complex, double complex) API(s8, int8_t, uint32_t) API(s16, int16_t, uint32_t) \
    API(s32, int32_t, uint32_t) API(s64, int64_t, uint64_t) API(u8, uint8_t, uint32_t)          \
    API(u16, uint16_t, uint32_t) API(u32, uint32_t, uint32_t) API(u64, uint64_t, uint64_t)
#define NBXLA_GEMM_API(S, T, U)                                                                   \
    NBXLA_API(nbxla_gemm_##S) void nbxla_gemm_##S(int64_t batch, int64_t m, int64_t n, int64_t k, const T *a,  \
                                     const T *b, T *c, T *packed);                                \
    NBXLA_API(nbxla_gemm_##S##_prepacked) void nbxla_gemm_##S##_prepacked(int64_t batch, int64_t m, int64_t n, int64_t k,  \
                                                 const T *a, const T *packed, T *c);
#define NBXLA_CONV_API(S, T, U)                                                                   \
    NBXLA_API(nbxla_conv_##S) void nbxla_conv_##S(const T *x, const T *w, T *out, const struct nbxla_conv *d);
NBXLA_TYPED(NBXLA_GEMM_API)
NBXLA_TYPED(NBXLA_CONV_API)
#define NBXLA_MASKED_DOT_API(S, T)                                                                \
    NBXLA_API(nbxla_masked_dot_##S) void nbxla_masked_dot_##S(const T *a, const T *b, T *c, int64_t m, int64_t k,    \
                                           int64_t n, const int64_t *r);
NBXLA_MASKED_DOT_API(f64, double) NBXLA_MASKED_DOT_API(f32, float)
NBXLA_MASKED_DOT_API(c128, double complex) NBXLA_MASKED_DOT_API(c64, float complex)
NBXLA_API(nbxla_solve) int nbxla_solve(int kind, const char *a, const char *b, char *x, int64_t batch, int64_t n,
                             int64_t nrhs, int64_t esize, char *work);
NBXLA_API(nbxla_sort) void nbxla_sort(int n_ops, char *const *in, char *const *out, const int64_t *esize,
                             int64_t outer, int64_t n, int64_t inner, nbxla_kernel less,
                             int64_t less_extent, int64_t *perm);
/* a key of nbxla_sort_keys: the values of one operand, as one of the types below */
struct nbxla_sort_key { int32_t operand, type, flags; };
enum { NBXLA_KEY_F32, NBXLA_KEY_F64, NBXLA_KEY_S8, NBXLA_KEY_S16, NBXLA_KEY_S32, NBXLA_KEY_S64,
       NBXLA_KEY_U8, NBXLA_KEY_U16, NBXLA_KEY_U32, NBXLA_KEY_U64 };
#define NBXLA_KEY_DESCENDING 1
#define NBXLA_KEY_NANS_LAST 2
#define NBXLA_KEY_NANS_FIRST 4
#define NBXLA_KEY_TOTAL_ORDER 8
NBXLA_API(nbxla_sort_keys) int nbxla_sort_keys(int n_ops, char *const *in, char *const *out, const int64_t *esize,
                                int64_t outer, int64_t n, int64_t inner, int n_keys,
                                const struct nbxla_sort_key *keys, int64_t keep, uint64_t *scratch);
NBXLA_API(nbxla_topk) void nbxla_topk(const char *x, char *values, int32_t *positions, int64_t rows, int64_t n,
                             int64_t k, int64_t esize, nbxla_kernel before, int64_t before_extent,
                             char *scratch);
NBXLA_API(nbxla_select_and_scatter) void nbxla_select_and_scatter(const char *operand, const char *source, const char *init,
                                           char *out, int64_t esize, const struct nbxla_window *w,
                                           nbxla_kernel select, int64_t select_extent,
                                           nbxla_kernel scatter, int64_t scatter_extent);
NBXLA_API(nbxla_fft) void nbxla_fft(const char *in, char *out, int kind, int in_type, int out_type, int64_t batch,
                            int nd, const int64_t *len, double complex *work, double complex *line);
NBXLA_API(nbxla_potrf_f32) void nbxla_potrf_f32(const float *a, float *factor, int32_t *info, int64_t batch, int64_t n,
                                  int lower, double *work);
NBXLA_API(nbxla_potrf_f64) void nbxla_potrf_f64(const double *a, double *factor, int32_t *info, int64_t batch, int64_t n,
                                  int lower, double *work);
/* ---- end of interface ---- */

#define NBXLA_MAX_THREADS 64

static int nbxla_workers(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n > NBXLA_MAX_THREADS ? NBXLA_MAX_THREADS : n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > NBXLA_MAX_THREADS ? NBXLA_MAX_THREADS : (int)n;
}

struct nbxla_task { nbxla_kernel fn; void **buffers; int64_t begin, end; };

static void *nbxla_task_run(void *arg) {
    struct nbxla_task *t = arg;
    t->fn(t->buffers, t->begin, t->end);
    return NULL;
}

/* Run tasks[0..n) with tasks 1.. on new threads and task 0 here (a task whose thread cannot
 * be started runs here too: correct, only slower). */
static void nbxla_run_tasks(struct nbxla_task *tasks, int n) {
    pthread_t threads[NBXLA_MAX_THREADS];
    int started[NBXLA_MAX_THREADS];
    for (int i = 1; i < n; i++)
        started[i] = pthread_create(&threads[i], NULL, nbxla_task_run, &tasks[i]) == 0;
    nbxla_task_run(&tasks[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else nbxla_task_run(&tasks[i]);
    }
}

/* ``fn`` over [0, extent), split into one contiguous part per worker. */
NBXLA_API(nbxla_parallel) void nbxla_parallel(nbxla_kernel fn, void **buffers, int64_t extent) {
    int64_t n = nbxla_workers();
    if (n > extent) n = extent;
    if (n <= 1) { fn(buffers, 0, extent); return; }
    struct nbxla_task tasks[NBXLA_MAX_THREADS];
    for (int64_t i = 0; i < n; i++)
        tasks[i] = (struct nbxla_task){fn, buffers, extent * i / n, extent * (i + 1) / n};
    nbxla_run_tasks(tasks, (int)n);
}

/* A full reduction (as the jit runtime's FullReductionThunk): ``partial`` reduces part c of
 * [0, extent) into ``slots`` 8-byte slots at scratch + 8*slots*c, then ``finish`` combines the
 * parts (called with begin = the number of parts).  ``buffers`` holds the n_in inputs, then
 * the outputs, then room for one pointer; ``scratch`` has room for NBXLA_MAX_THREADS parts. */
NBXLA_API(nbxla_full_reduce) void nbxla_full_reduce(nbxla_kernel partial, nbxla_kernel finish, void **buffers, int n_in,
                              int n_out, int64_t extent, int64_t max_parts, int64_t slots, char *scratch) {
    int64_t parts = nbxla_workers();
    if (parts > max_parts) parts = max_parts;
    if (parts > extent) parts = extent;
    if (parts < 1) parts = 1;
    void *part_buffers[NBXLA_MAX_THREADS][n_in + 1];
    struct nbxla_task tasks[NBXLA_MAX_THREADS];
    for (int64_t c = 0; c < parts; c++) {
        memcpy(part_buffers[c], buffers, sizeof(void *) * n_in);
        part_buffers[c][n_in] = scratch + 8 * slots * c;
        tasks[c] = (struct nbxla_task){partial, part_buffers[c], extent * c / parts, extent * (c + 1) / parts};
    }
    nbxla_run_tasks(tasks, (int)parts);
    buffers[n_in + n_out] = scratch;
    finish(buffers, parts, 0);
}

/* dst = src transposed: dst's dimension i is src's dimension perm[i] (row-major, any element
 * size).  Puts a dot's operands in [batch, rows, columns] order. */
NBXLA_API(nbxla_transpose) void nbxla_transpose(const char *src, char *dst, int rank, const int64_t *dims,
                            const int64_t *perm, int64_t esize) {
    int64_t src_strides[16], out_dims[16], step[16], index[16], total = 1;
    for (int i = rank - 1, s = esize; i >= 0; i--) { src_strides[i] = s; s *= dims[i]; }
    for (int i = 0; i < rank; i++) {
        out_dims[i] = dims[perm[i]];
        step[i] = src_strides[perm[i]];
        index[i] = 0;
        total *= out_dims[i];
    }
    int64_t offset = 0;
    for (int64_t k = 0; k < total; k++) {
        memcpy(dst + k * esize, src + offset, esize);
        for (int i = rank - 1; i >= 0; i--) {       /* next index, row-major */
            offset += step[i];
            if (++index[i] < out_dims[i]) break;
            offset -= step[i] * out_dims[i];
            index[i] = 0;
        }
    }
}

/* C[b] = A[b] (m x k) @ B[b] (k x n), row-major.  B is packed into panels of NBXLA_NR columns
 * (zero-padded; ``packed`` has room for k * round_up(n, NBXLA_NR) elements), and each block of
 * 4 rows x NBXLA_NR columns of C is accumulated in registers over all of k: plain C that the C
 * compiler vectorizes across the panel's columns.  Rows are split over threads when the
 * product is large.  Integer types compute in an unsigned type: wrap-around, as NumPy's. */
#define NBXLA_NR 16
#define NBXLA_GEMM(NAME, T, U)                                                                    \
    static void NAME##_pack(const T *b, T *packed, int64_t k, int64_t n) {                        \
        for (int64_t j0 = 0; j0 < n; j0 += NBXLA_NR) {                                            \
            T *panel = packed + j0 * k;                                                           \
            int64_t w = n - j0 < NBXLA_NR ? n - j0 : NBXLA_NR;                                    \
            for (int64_t p = 0; p < k; p++) {                                                     \
                for (int64_t j = 0; j < w; j++) panel[p * NBXLA_NR + j] = b[p * n + j0 + j];      \
                for (int64_t j = w; j < NBXLA_NR; j++) panel[p * NBXLA_NR + j] = (T)0;            \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    static void NAME##_block4(const T *a, const T *panel, T *c, int64_t n, int64_t k, int64_t w) { \
        U acc[4][NBXLA_NR] = {{0}};                                                               \
        for (int64_t p = 0; p < k; p++) {                                                         \
            const T *bp = panel + p * NBXLA_NR;                                                   \
            U a0 = (U)a[p], a1 = (U)a[k + p], a2 = (U)a[2 * k + p], a3 = (U)a[3 * k + p];         \
            for (int j = 0; j < NBXLA_NR; j++) {                                                  \
                U bj = (U)bp[j];                                                                  \
                acc[0][j] += a0 * bj; acc[1][j] += a1 * bj;                                       \
                acc[2][j] += a2 * bj; acc[3][j] += a3 * bj;                                       \
            }                                                                                     \
        }                                                                                         \
        for (int r = 0; r < 4; r++)                                                               \
            for (int64_t j = 0; j < w; j++) c[r * n + j] = (T)acc[r][j];                          \
    }                                                                                             \
    static void NAME##_block1(const T *a, const T *panel, T *c, int64_t k, int64_t w) {           \
        U acc[NBXLA_NR] = {0};                                                                    \
        for (int64_t p = 0; p < k; p++) {                                                         \
            U ap = (U)a[p];                                                                       \
            for (int j = 0; j < NBXLA_NR; j++) acc[j] += ap * (U)panel[p * NBXLA_NR + j];         \
        }                                                                                         \
        for (int64_t j = 0; j < w; j++) c[j] = (T)acc[j];                                         \
    }                                                                                             \
    struct NAME##_job { const T *a, *packed; T *c; int64_t m0, m1, n, k; };                      \
    static void *NAME##_rows(void *arg) {                                                         \
        struct NAME##_job *jb = arg;                                                              \
        const T *a = jb->a;                                                                       \
        int64_t n = jb->n, k = jb->k;                                                             \
        for (int64_t j0 = 0; j0 < n; j0 += NBXLA_NR) {                                            \
            const T *panel = jb->packed + j0 * k;                                                 \
            int64_t w = n - j0 < NBXLA_NR ? n - j0 : NBXLA_NR, i = jb->m0;                        \
            for (; i + 4 <= jb->m1; i += 4) NAME##_block4(a + i * k, panel, jb->c + i * n + j0, n, k, w); \
            for (; i < jb->m1; i++) NAME##_block1(a + i * k, panel, jb->c + i * n + j0, k, w);    \
        }                                                                                         \
        return NULL;                                                                              \
    }                                                                                             \
    static void NAME##_one(int64_t m, int64_t n, int64_t k, const T *a, const T *packed, T *c) {  \
        int64_t threads = m * n * k >= ((int64_t)1 << 22) ? nbxla_workers() : 1;                  \
        if (threads > (m + 3) / 4) threads = (m + 3) / 4;                                         \
        if (threads < 1) threads = 1;                                                             \
        pthread_t th[NBXLA_MAX_THREADS];                                                          \
        int started[NBXLA_MAX_THREADS];                                                           \
        struct NAME##_job jobs[NBXLA_MAX_THREADS];                                                \
        for (int64_t t = 0; t < threads; t++) /* row blocks of whole 4-row groups */              \
            jobs[t] = (struct NAME##_job){a, packed, c, (m + 3) / 4 * t / threads * 4,            \
                                          t + 1 == threads ? m : (m + 3) / 4 * (t + 1) / threads * 4, n, k}; \
        for (int64_t t = 1; t < threads; t++)                                                     \
            started[t] = pthread_create(&th[t], NULL, NAME##_rows, &jobs[t]) == 0;                \
        NAME##_rows(&jobs[0]);                                                                    \
        for (int64_t t = 1; t < threads; t++) {                                                   \
            if (started[t]) pthread_join(th[t], NULL);                                            \
            else NAME##_rows(&jobs[t]);                                                           \
        }                                                                                         \
    }                                                                                             \
    /* matrix x vector: four partial sums per row (the compiler keeps the order it is given); \
     * vector x matrix: rows of b scaled and added, a loop the compiler vectorizes */            \
    static void NAME##_vector(int64_t batch, int64_t m, int64_t n, int64_t k, const T *a,        \
                              const T *b, T *c) {                                                 \
        for (int64_t s = 0; s < batch; s++, a += m * k, b += k * n, c += m * n) {                 \
            if (n == 1) {                                                                         \
                for (int64_t i = 0; i < m; i++) {                                                 \
                    const T *row = a + i * k;                                                     \
                    U acc[4] = {0};                                                               \
                    int64_t p = 0;                                                                \
                    for (; p + 4 <= k; p += 4)                                                    \
                        for (int q = 0; q < 4; q++) acc[q] += (U)row[p + q] * (U)b[p + q];        \
                    for (; p < k; p++) acc[0] += (U)row[p] * (U)b[p];                             \
                    c[i] = (T)((acc[0] + acc[1]) + (acc[2] + acc[3]));                            \
                }                                                                                 \
            } else {                                                                              \
                for (int64_t j = 0; j < n; j++) c[j] = (T)0;                                      \
                for (int64_t p = 0; p < k; p++) {                                                 \
                    T ap = a[p];                                                                  \
                    const T *bp = b + p * n;                                                      \
                    for (int64_t j = 0; j < n; j++) c[j] = (T)((U)c[j] + (U)ap * (U)bp[j]);       \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    NBXLA_API(NAME) void NAME(int64_t batch, int64_t m, int64_t n, int64_t k, const T *a, const T *b,\
                     T *c, T *packed) {                                                           \
        if (n == 1 || m == 1) { /* vector forms: no packing, which would cost more than the work */ \
            NAME##_vector(batch, m, n, k, a, b, c);                                               \
            return;                                                                               \
        }                                                                                         \
        for (int64_t s = 0; s < batch; s++) {                                                     \
            NAME##_pack(b + s * k * n, packed, k, n);                                             \
            NAME##_one(m, n, k, a + s * m * k, packed, c + s * m * n);                            \
        }                                                                                         \
    }                                                                                             \
    /* B packed at compile time (a constant): batch blocks of k * round_up(n, NBXLA_NR) */      \
    NBXLA_API(NAME##_prepacked) void NAME##_prepacked(int64_t batch, int64_t m, int64_t n, int64_t k, const T *a,\
                                 const T *packed, T *c) {                                         \
        int64_t panels = (n + NBXLA_NR - 1) / NBXLA_NR * NBXLA_NR * k;                            \
        for (int64_t s = 0; s < batch; s++)                                                       \
            NAME##_one(m, n, k, a + s * m * k, packed + s * panels, c + s * m * n);               \
    }

NBXLA_GEMM(nbxla_gemm_f32, float, float)
NBXLA_GEMM(nbxla_gemm_f64, double, double)
/* The complex GEMMs at -O2: GCC's -O3 vectorizes their complex multiply-adds into shuffles that
 * run slower and take twice as long to compile (GCC 12, AVX-512, one thread, side by side:
 * c128 64^3 78 -> 57 us, 100^3 329 -> 235 us; c64 64^3 40 -> 32 us; the support code for one
 * c128 GEMM 0.33 -> 0.15 s of compiler CPU); the real ones stay at -O3 (f64 64^3: 18 us at -O3,
 * 25 at -O2). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O2")
#endif
NBXLA_GEMM(nbxla_gemm_c64, float complex, float complex)
NBXLA_GEMM(nbxla_gemm_c128, double complex, double complex)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
NBXLA_GEMM(nbxla_gemm_s8, int8_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_s16, int16_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_s32, int32_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_s64, int64_t, uint64_t)
NBXLA_GEMM(nbxla_gemm_u8, uint8_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_u16, uint16_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_u32, uint32_t, uint32_t)
NBXLA_GEMM(nbxla_gemm_u64, uint64_t, uint64_t)

/* cblas_?gemm / cblas_?gemv of an OpenBLAS with 64-bit integers (NumPy's scipy-openblas64): set
 * by the jit runtime after loading a native loop library; NULL in AOT objects. */
typedef void (*nbxla_dgemm_fn)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t,
                               const double *, int64_t, double, double *, int64_t);
typedef void (*nbxla_sgemm_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                               const float *, int64_t, float, float *, int64_t);
typedef void (*nbxla_dgemv_fn)(int, int, int64_t, int64_t, double, const double *, int64_t, const double *,
                               int64_t, double, double *, int64_t);
typedef void (*nbxla_sgemv_fn)(int, int, int64_t, int64_t, float, const float *, int64_t, const float *,
                               int64_t, float, float *, int64_t);
static nbxla_dgemm_fn nbxla_blas_dgemm;
static nbxla_sgemm_fn nbxla_blas_sgemm;
static nbxla_dgemv_fn nbxla_blas_dgemv;
static nbxla_sgemv_fn nbxla_blas_sgemv;

void nbxla_set_blas(void *dgemm, void *sgemm, void *dgemv, void *sgemv) {
    nbxla_blas_dgemm = (nbxla_dgemm_fn)dgemm;
    nbxla_blas_sgemm = (nbxla_sgemm_fn)sgemm;
    nbxla_blas_dgemv = (nbxla_dgemv_fn)dgemv;
    nbxla_blas_sgemv = (nbxla_sgemv_fn)sgemv;
}

/* LAPACKE_?gesv (row-major, 64-bit integers) of s, d, c, z: set with nbxla_set_lapack. */
typedef int64_t (*nbxla_gesv_fn)(int, int64_t, int64_t, void *, int64_t, int64_t *, void *, int64_t);
static nbxla_gesv_fn nbxla_lapack_gesv[4];

void nbxla_set_lapack(void *s, void *d, void *c, void *z) {
    nbxla_lapack_gesv[0] = (nbxla_gesv_fn)s;
    nbxla_lapack_gesv[1] = (nbxla_gesv_fn)d;
    nbxla_lapack_gesv[2] = (nbxla_gesv_fn)c;
    nbxla_lapack_gesv[3] = (nbxla_gesv_fn)z;
}

/* x[s] = solve(a[s], b[s]) for each of ``batch`` systems (a: n x n, b and x: n x nrhs, row-major,
 * elements of ``esize`` bytes); ``work`` has room for n * n elements and n int64 pivots.
 * Returns 0, 2 for a singular matrix (NumPy raises LinAlgError), 3 without LAPACK. */
NBXLA_API(nbxla_solve) int nbxla_solve(int kind, const char *a, const char *b, char *x, int64_t batch, int64_t n, int64_t nrhs,
                       int64_t esize, char *work) {
    nbxla_gesv_fn gesv = nbxla_lapack_gesv[kind];
    if (gesv == NULL) return 3;
    int64_t *pivots = (int64_t *)(work + n * n * esize);
    for (int64_t s = 0; s < batch; s++) {
        memcpy(work, a + s * n * n * esize, (size_t)(n * n * esize));
        memcpy(x + s * n * nrhs * esize, b + s * n * nrhs * esize, (size_t)(n * nrhs * esize));
        if (n == 0 || nrhs == 0) continue;
        int64_t info = gesv(101, n, nrhs, work, n, pivots, x + s * n * nrhs * esize, nrhs);
        if (info > 0) return 2;
        if (info < 0) return 3;
    }
    return 0;
}

/* Below this many multiply-adds a sub-matrix product runs in C: a BLAS call costs more than
 * the work (a dot of two short vectors in a Cholesky's inner loop). */
#define NBXLA_BLAS_MIN_WORK 4096

/* c (m x n, row-major) = a (m x k) @ b (k x n), read only in the window r = {m0, m1, k0, k1, n0,
 * n1} (run-time bounds, already clamped); c is zero outside rows [m0, m1) x columns [n0, n1). */
#define NBXLA_MASKED_DOT(NAME, T, GEMM_CALL)                                                       \
    NBXLA_API(NAME) void NAME(const T *a, const T *b, T *c, int64_t m, int64_t k, int64_t n,          \
                           const int64_t *r) {                                                \
        int64_t m0 = r[0], m1 = r[1], k0 = r[2], k1 = r[3], n0 = r[4], n1 = r[5];                  \
        memset(c, 0, (size_t)(m * n) * sizeof(T));                                                \
        if (m1 <= m0 || n1 <= n0 || k1 <= k0) return;                                             \
        int64_t work = (m1 - m0) * (n1 - n0) * (k1 - k0);                                         \
        if (work >= NBXLA_BLAS_MIN_WORK && (m1 - m0 > 1 || n1 - n0 > 1)) {                        \
            GEMM_CALL /* (returns when there is a BLAS) */                                        \
        }                                                                                         \
        for (int64_t i = m0; i < m1; i++) {                                                       \
            const T *ai = a + i * k;                                                              \
            T *ci = c + i * n;                                                                    \
            if (n1 - n0 == 1) { /* a dot product: four partial sums, as the GEMM's vector form */ \
                const T *bj = b + n0;                                                             \
                T acc[4] = {0, 0, 0, 0};                                                          \
                int64_t p = k0;                                                                   \
                if (n == 1) { /* (a vector: unit stride, which the compiler can see) */          \
                    for (; p + 4 <= k1; p += 4)                                                   \
                        for (int q = 0; q < 4; q++) acc[q] += ai[p + q] * bj[p + q];              \
                } else {                                                                          \
                    for (; p + 4 <= k1; p += 4)                                                   \
                        for (int q = 0; q < 4; q++) acc[q] += ai[p + q] * bj[(p + q) * n];        \
                }                                                                                 \
                for (; p < k1; p++) acc[0] += ai[p] * bj[p * n];                                  \
                ci[n0] = (acc[0] + acc[1]) + (acc[2] + acc[3]);                                   \
                continue;                                                                         \
            }                                                                                     \
            for (int64_t p = k0; p < k1; p++) { /* rows of b scaled and added: vectorized */      \
                T ap = ai[p];                                                                     \
                const T *bp = b + p * n;                                                          \
                for (int64_t j = n0; j < n1; j++) ci[j] += ap * bp[j];                            \
            }                                                                                     \
        }                                                                                         \
    }

/* row-major (101), no transposes (111), transposed (112): the window's corner and the full
 * rows' strides.  A window of one row or one column is a GEMV (as NumPy calls it: GEMM kernels
 * pack their operands, which costs more than the product there). */
#define NBXLA_BLAS_WINDOW(GEMM, GEMV, ONE, ZERO)                                                  \
    if (GEMV != NULL && m1 - m0 == 1) { /* row vector @ matrix: (b's window)^T @ a's row */       \
        GEMV(101, 112, k1 - k0, n1 - n0, ONE, b + k0 * n + n0, n, a + m0 * k + k0, 1, ZERO,       \
             c + m0 * n + n0, 1);                                                                 \
        return;                                                                                   \
    }                                                                                             \
    if (GEMV != NULL && n1 - n0 == 1) { /* matrix @ column vector */                              \
        GEMV(101, 111, m1 - m0, k1 - k0, ONE, a + m0 * k + k0, k, b + k0 * n + n0, n, ZERO,       \
             c + m0 * n + n0, n);                                                                 \
        return;                                                                                   \
    }                                                                                             \
    if (GEMM != NULL) {                                                                           \
        GEMM(101, 111, 111, m1 - m0, n1 - n0, k1 - k0, ONE, a + m0 * k + k0, k, b + k0 * n + n0, n, \
             ZERO, c + m0 * n + n0, n);                                                           \
        return;                                                                                   \
    }

NBXLA_MASKED_DOT(nbxla_masked_dot_f64, double, NBXLA_BLAS_WINDOW(nbxla_blas_dgemm, nbxla_blas_dgemv, 1.0, 0.0))
NBXLA_MASKED_DOT(nbxla_masked_dot_f32, float, NBXLA_BLAS_WINDOW(nbxla_blas_sgemm, nbxla_blas_sgemv, 1.0f, 0.0f))
NBXLA_MASKED_DOT(nbxla_masked_dot_c128, double complex, ;)
NBXLA_MASKED_DOT(nbxla_masked_dot_c64, float complex, ;)

/* A direct convolution, as the evaluator defines it: output (b, o, spatial...) sums
 * x[b + bg*n_out, g*cpg + c, position] * w[o, c, kernel index] over the cpg input features of
 * output feature o's group g = o / opg (batch group bg = o / obg) and the kernel window.  Per
 * spatial dim: position q = out*stride + k*win_dil - pad_low in the base-dilated input reads
 * element q / base_dil when that divides and lands inside (else a zero of the padding); a
 * reversed dim reads kernel index size-1-k.  Strides are in elements. */
/* (struct nbxla_conv: in the interface above) */

#define NBXLA_CONV(NAME, T, U)                                                                    \
    NBXLA_API(NAME) void NAME(const T *x, const T *w, T *out, const struct nbxla_conv *d) {          \
        int64_t out_total = 1, k_total = 1, oi[8], ki[8];                                         \
        for (int64_t s = 0; s < d->nsp; s++) { out_total *= d->out_size[s]; k_total *= d->k_size[s]; } \
        for (int64_t b = 0; b < d->n_out; b++)                                                    \
            for (int64_t o = 0; o < d->o; o++) {                                                  \
                int64_t g = o / d->opg, xb = b + (o / d->obg) * d->n_out;                         \
                for (int64_t s = 0; s < d->nsp; s++) oi[s] = 0;                                   \
                for (int64_t p = 0; p < out_total; p++) {                                         \
                    U acc = (U)0;                                                                 \
                    for (int64_t c = 0; c < d->cpg; c++) {                                        \
                        const T *xc = x + xb * d->xs_b + (g * d->cpg + c) * d->xs_f;              \
                        const T *wc = w + o * d->ws_o + c * d->ws_i;                              \
                        for (int64_t s = 0; s < d->nsp; s++) ki[s] = 0;                           \
                        for (int64_t q = 0; q < k_total; q++) {                                   \
                            int64_t xo = 0, wo = 0, inside = 1;                                   \
                            for (int64_t s = 0; s < d->nsp && inside; s++) {                      \
                                int64_t at = oi[s] * d->stride[s] + ki[s] * d->win_dil[s] - d->pad_low[s]; \
                                if (at < 0 || at % d->base_dil[s]) { inside = 0; break; }         \
                                at /= d->base_dil[s];                                             \
                                if (at >= d->in_size[s]) { inside = 0; break; }                   \
                                xo += at * d->xs[s];                                              \
                                wo += (d->rev[s] ? d->k_size[s] - 1 - ki[s] : ki[s]) * d->ws[s];  \
                            }                                                                     \
                            if (inside) acc += (U)xc[xo] * (U)wc[wo];                             \
                            for (int64_t s = d->nsp - 1; s >= 0; s--) {                           \
                                if (++ki[s] < d->k_size[s]) break;                                \
                                ki[s] = 0;                                                        \
                            }                                                                     \
                        }                                                                         \
                    }                                                                             \
                    int64_t at = b * d->os_b + o * d->os_f;                                       \
                    for (int64_t s = 0; s < d->nsp; s++) at += oi[s] * d->os[s];                  \
                    out[at] = (T)acc;                                                             \
                    for (int64_t s = d->nsp - 1; s >= 0; s--) {                                   \
                        if (++oi[s] < d->out_size[s]) break;                                      \
                        oi[s] = 0;                                                                \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
    }

NBXLA_CONV(nbxla_conv_f32, float, float)
NBXLA_CONV(nbxla_conv_f64, double, double)
NBXLA_CONV(nbxla_conv_c64, float complex, float complex)
NBXLA_CONV(nbxla_conv_c128, double complex, double complex)
NBXLA_CONV(nbxla_conv_s8, int8_t, uint32_t)
NBXLA_CONV(nbxla_conv_s16, int16_t, uint32_t)
NBXLA_CONV(nbxla_conv_s32, int32_t, uint32_t)
NBXLA_CONV(nbxla_conv_s64, int64_t, uint64_t)
NBXLA_CONV(nbxla_conv_u8, uint8_t, uint32_t)
NBXLA_CONV(nbxla_conv_u16, uint16_t, uint32_t)
NBXLA_CONV(nbxla_conv_u32, uint32_t, uint32_t)
NBXLA_CONV(nbxla_conv_u64, uint64_t, uint64_t)

/* A stable sort of n_ops arrays along one axis (viewed as [outer, n, inner]), ordered by a
 * comparator kernel taking (lhs0, rhs0, lhs1, rhs1, ..., result) scalar buffers.  Bottom-up
 * merge sort of a permutation: an element of the right run goes first only when it compares
 * less than the left one, so equal elements keep their order (a stable sort: for a strict
 * weak order the same result as the evaluator's merge sort).  ``perm`` has room for 2n. */
NBXLA_API(nbxla_sort) void nbxla_sort(int n_ops, char *const *in, char *const *out, const int64_t *esize,
                       int64_t outer, int64_t n, int64_t inner, nbxla_kernel less,
                       int64_t less_extent, int64_t *perm) {
    void *args[2 * n_ops + 1];
    unsigned char result;
    args[2 * n_ops] = &result;
    int64_t *tmp = perm + n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            int64_t *src = perm, *dst = tmp;
            for (int64_t k = 0; k < n; k++) src[k] = k;
            for (int64_t width = 1; width < n; width *= 2) {
                for (int64_t lo = 0; lo < n; lo += 2 * width) {
                    int64_t mid = lo + width < n ? lo + width : n;
                    int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
                    int64_t l = lo, r = mid, d = lo;
                    while (l < mid && r < hi) {
                        for (int j = 0; j < n_ops; j++) {
                            args[2 * j] = in[j] + (base + src[r] * inner) * esize[j];
                            args[2 * j + 1] = in[j] + (base + src[l] * inner) * esize[j];
                        }
                        less(args, 0, less_extent);
                        dst[d++] = result ? src[r++] : src[l++];
                    }
                    while (l < mid) dst[d++] = src[l++];
                    while (r < hi) dst[d++] = src[r++];
                }
                int64_t *swap = src; src = dst; dst = swap;
            }
            for (int j = 0; j < n_ops; j++)
                for (int64_t k = 0; k < n; k++)
                    memcpy(out[j] + (base + k * inner) * esize[j], in[j] + (base + src[k] * inner) * esize[j],
                           esize[j]);
        }
}

/* A stable sort of n_ops arrays along one axis (viewed as [outer, n, inner]) by the keys its
 * comparator was recognized to order by (hlo/sort_keys.py), in place of nbxla_sort's calls of
 * the comparator: each key, the values of one operand, becomes an unsigned integer whose
 * ascending order is the key's order (equal keys equal), and the row is sorted stably by the
 * keys, least significant key first: an insertion sort for short rows, a least-significant-byte
 * radix sort beyond (passes over a byte all keys share skipped).  Several operands: the keys
 * carry their positions, by which every operand is gathered.  One operand sorted by itself
 * (np.sort): the keys alone are sorted and mapped back to values (half the radix sort's
 * traffic), the values a key does not tell apart (-0 and +0, NaNs: equal under a float
 * comparison) put back in their input order.
 * Where only the first ``keep`` elements of each row are read (keep = n: all), few of a long row
 * and one key: the stable selection of the keep least keys instead of a sort.
 * Returns 1 when a float key under a plain comparison meets a NaN (no strict weak order: the
 * caller then runs nbxla_sort, the comparator's merge sort, on the whole sort); 0 when sorted.
 * ``scratch``: 24n bytes (struct nbxla_sort_key and its codes: in the interface). */
/* The typed sort without gcc's loop vectorizer: with it, -O3 spent ~2.1 s on the per-type key
 * loops and radix passes, and the support object is compiled in a loop program's first call
 * (knn_smooth's first call 2.7 s, cache off); without, 0.5 s.  Measured in knn_smooth's loop:
 * 0.64 ms a call against 0.35 vectorized and 0.70 at -O2 (NumPy 7.1). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-tree-loop-vectorize")
#endif
#define NBXLA_SORT_SHORT 64     /* rows up to this long: insertion sort (measured: 0.9 us at 64 f64,
                                  radix 1.7; at 128 radix 2.4, insertion 2.8) */

static const int nbxla_key_width[] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};

/* The key of the element at p as an unsigned integer of the key's width; *unordered set for a
 * NaN the comparison does not order.  Without branches on the value: the loops over a row's
 * elements vectorize. */
static inline __attribute__((always_inline)) uint64_t nbxla_key_bits(int type, int flags, const char *p,
                                                                     int *unordered) {
    int width = nbxla_key_width[type];
    uint64_t mask = width == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * width)) - 1;
    uint64_t sign = (uint64_t)1 << (8 * width - 1), bits;
    uint64_t flip = flags & NBXLA_KEY_DESCENDING ? mask : 0;
    if (type <= NBXLA_KEY_F64) {
        int nan, zero;
        if (type == NBXLA_KEY_F32) {
            float v; memcpy(&v, p, 4);
            uint32_t b; memcpy(&b, &v, 4);
            nan = v != v; zero = v == 0; bits = b;
        } else {
            double v; memcpy(&v, p, 8);
            memcpy(&bits, &v, 8);
            nan = v != v; zero = v == 0;
        }
        if (flags & NBXLA_KEY_TOTAL_ORDER)      /* -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN */
            return (((bits & sign) ? ~bits & mask : bits | sign) ^ flip);
        bits = zero ? 0 : bits;                 /* -0 == +0 */
        /* sign-magnitude to offset order (numbers never map to 0 or the mask: NaNs, all equal,
         * take the one their place says) */
        uint64_t key = ((bits & sign) ? ~bits & mask : bits | sign) ^ flip;
        *unordered |= nan & !(flags & (NBXLA_KEY_NANS_LAST | NBXLA_KEY_NANS_FIRST));
        return nan ? (flags & NBXLA_KEY_NANS_LAST ? mask : 0) : key;
    }
    switch (width) {
        case 1: { uint8_t v; memcpy(&v, p, 1); bits = v; break; }
        case 2: { uint16_t v; memcpy(&v, p, 2); bits = v; break; }
        case 4: { uint32_t v; memcpy(&v, p, 4); bits = v; break; }
        default: memcpy(&bits, p, 8);
    }
    if (type <= NBXLA_KEY_S64) bits ^= sign;        /* two's complement to offset order */
    return bits ^ flip;
}

/* The keys of n elements (stride step bytes) in key[k] = key of values[pos[k]] (pos NULL: of
 * values[k]); 1 for a NaN the comparison does not order.  A loop per type (and for contiguous
 * rows): no switch per element, vectorized. */
static int nbxla_keys_of(int type, int flags, const char *values, int64_t step, const uint32_t *pos,
                         int64_t n, uint64_t *key) {
    int unordered = 0;
#define NBXLA_KEYS_OF(T, W)                                                                       \
    case T:                                                                                     \
        if (pos)                                                                                \
            for (int64_t j = 0; j < n; j++) key[j] = nbxla_key_bits(T, flags, values + pos[j] * step, &unordered); \
        else if (step == W)                                                                     \
            for (int64_t j = 0; j < n; j++) key[j] = nbxla_key_bits(T, flags, values + j * W, &unordered); \
        else                                                                                    \
            for (int64_t j = 0; j < n; j++) key[j] = nbxla_key_bits(T, flags, values + j * step, &unordered); \
        break;
    switch (type) {
        NBXLA_KEYS_OF(NBXLA_KEY_F32, 4) NBXLA_KEYS_OF(NBXLA_KEY_F64, 8) NBXLA_KEYS_OF(NBXLA_KEY_S8, 1)
        NBXLA_KEYS_OF(NBXLA_KEY_S16, 2) NBXLA_KEYS_OF(NBXLA_KEY_S32, 4) NBXLA_KEYS_OF(NBXLA_KEY_S64, 8)
        NBXLA_KEYS_OF(NBXLA_KEY_U8, 1) NBXLA_KEYS_OF(NBXLA_KEY_U16, 2) NBXLA_KEYS_OF(NBXLA_KEY_U32, 4)
        default: NBXLA_KEYS_OF(NBXLA_KEY_U64, 8)
    }
#undef NBXLA_KEYS_OF
    return unordered;
}

/* The value (width bytes at p) whose key is ``key`` (for the values a key tells apart). */
static void nbxla_value_of(int type, int flags, uint64_t key, char *p) {
    int width = nbxla_key_width[type];
    uint64_t mask = width == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * width)) - 1;
    uint64_t sign = (uint64_t)1 << (8 * width - 1);
    uint64_t bits = flags & NBXLA_KEY_DESCENDING ? ~key & mask : key;
    if (type <= NBXLA_KEY_F64) bits = (bits & sign) ? bits ^ sign : ~bits & mask;
    else if (type <= NBXLA_KEY_S64) bits ^= sign;
    switch (width) {
        case 1: { uint8_t v = (uint8_t)bits; memcpy(p, &v, 1); break; }
        case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
        case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
        default: memcpy(p, &bits, 8);
    }
}

/* Stable sort of key[0..n) (pos, when not NULL, moved along); the result ends in *key / *pos,
 * which the radix passes swap with *key2 / *pos2. */
static inline __attribute__((always_inline)) void nbxla_sort_row_of(uint64_t **key_, uint32_t **pos_,
                                                                   uint64_t **key2_, uint32_t **pos2_, int64_t n,
                                                                   int width) {
    uint64_t *key = *key_, *key2 = *key2_;
    uint32_t *pos = *pos_, *pos2 = *pos2_;
    if (n <= NBXLA_SORT_SHORT) {
        for (int64_t j = 1; j < n; j++) {
            uint64_t kj = key[j];
            uint32_t pj = pos ? pos[j] : 0;
            int64_t m = j;
            for (; m > 0 && key[m - 1] > kj; m--) {
                key[m] = key[m - 1];
                if (pos) pos[m] = pos[m - 1];
            }
            key[m] = kj;
            if (pos) pos[m] = pj;
        }
        return;
    }
    uint32_t count[8][256];
    memset(count, 0, sizeof(count[0]) * width);
    for (int64_t j = 0; j < n; j++)
        for (int b = 0; b < width; b++) count[b][(key[j] >> (8 * b)) & 255]++;
    for (int b = 0; b < width; b++) {
        uint32_t *c = count[b], sum = 0;
        if (c[(key[0] >> (8 * b)) & 255] == (uint32_t)n) continue;     /* one byte for all */
        for (int d = 0; d < 256; d++) { uint32_t here = c[d]; c[d] = sum; sum += here; }
        if (pos)
            for (int64_t j = 0; j < n; j++) {
                uint32_t at = c[(key[j] >> (8 * b)) & 255]++;
                key2[at] = key[j];
                pos2[at] = pos[j];
            }
        else
            for (int64_t j = 0; j < n; j++) key2[c[(key[j] >> (8 * b)) & 255]++] = key[j];
        uint64_t *tk = key; key = key2; key2 = tk;
        uint32_t *tp = pos; pos = pos2; pos2 = tp;
    }
    *key_ = key; *key2_ = key2; *pos_ = pos; *pos2_ = pos2;
}

/* (one copy per key width: the byte loops unrolled, ~25% faster at 500 f64 keys) */
static void nbxla_sort_row(uint64_t **key, uint32_t **pos, uint64_t **key2, uint32_t **pos2, int64_t n, int width) {
    switch (width) {
        case 1: nbxla_sort_row_of(key, pos, key2, pos2, n, 1); break;
        case 2: nbxla_sort_row_of(key, pos, key2, pos2, n, 2); break;
        case 4: nbxla_sort_row_of(key, pos, key2, pos2, n, 4); break;
        default: nbxla_sort_row_of(key, pos, key2, pos2, n, 8);
    }
}

/* Elements [0, n) of one array moved to out in the order pos (element size esize). */
static void nbxla_gather_row(char *out, const char *in, const uint32_t *pos, int64_t n, int64_t inner,
                             int64_t esize) {
#define NBXLA_GATHER(T) for (int64_t k = 0; k < n; k++) ((T *)out)[k * inner] = ((const T *)in)[pos[k] * inner]
    switch (esize) {
        case 1: NBXLA_GATHER(uint8_t); break;
        case 2: NBXLA_GATHER(uint16_t); break;
        case 4: NBXLA_GATHER(uint32_t); break;
        case 8: NBXLA_GATHER(uint64_t); break;
        default:
            for (int64_t k = 0; k < n; k++) memcpy(out + k * inner * esize, in + pos[k] * inner * esize, esize);
    }
#undef NBXLA_GATHER
}

/* The first k of sorted key[0..n) with key[k] >= want. */
static int64_t nbxla_lower_bound(const uint64_t *key, int64_t n, uint64_t want) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (key[mid] < want) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The values of a key class (the zeros, or the NaNs) copied from the input (n elements), in its
 * order, to out from position at on (past the keys sorted, where only the first are kept: the
 * row has room for all). */
static void nbxla_class_in_order(char *out, const char *in, int64_t at, int64_t n, int64_t inner, int type,
                                 int64_t esize, int nans) {
    for (int64_t j = 0; j < n; j++) {
        const char *p = in + j * inner * esize;
        int member;
        if (type == NBXLA_KEY_F32) { float v; memcpy(&v, p, 4); member = nans ? v != v : v == 0; }
        else { double v; memcpy(&v, p, 8); member = nans ? v != v : v == 0; }
        if (member) memcpy(out + at++ * inner * esize, p, esize);
    }
}

/* One operand sorted by its own key: the sorted keys as values; the values sharing a key with
 * others (zeros and NaNs under a float comparison), where the sorted keys have them (binary
 * searches), copied from the input in its order into their key's places. */
static void nbxla_values_row(char *out, const char *in, const uint64_t *key, int64_t count, int64_t n,
                             int64_t inner, int type, int flags, int64_t esize) {
    for (int64_t k = 0; k < count; k++) nbxla_value_of(type, flags, key[k], out + k * inner * esize);
    if (type > NBXLA_KEY_F64 || (flags & NBXLA_KEY_TOTAL_ORDER) || count == 0) return;  /* keys tell all apart */
    static const char zeros[8];
    int unordered = 0;
    uint64_t mask = ~(uint64_t)0 >> (64 - 8 * esize), zero_key = nbxla_key_bits(type, flags, zeros, &unordered);
    int64_t zero_at = nbxla_lower_bound(key, count, zero_key);
    if (zero_at < count && key[zero_at] == zero_key)
        nbxla_class_in_order(out, in, zero_at, n, inner, type, esize, 0);
    if ((flags & NBXLA_KEY_NANS_LAST) && key[count - 1] == mask)
        nbxla_class_in_order(out, in, nbxla_lower_bound(key, count, mask), n, inner, type, esize, 1);
    if ((flags & NBXLA_KEY_NANS_FIRST) && key[0] == 0)
        nbxla_class_in_order(out, in, 0, n, inner, type, esize, 1);
}

#define NBXLA_SELECT_MAX 16     /* rows whose first keep <= this many are read: selection, not a sort */

/* The keep least of key[0..n) in order, ties by position (a stable sort's first keep), into
 * best / best_pos: each key that beats the last kept one is inserted after the kept keys equal
 * to it.  O(n) for most inputs (a key rarely enters once the kept ones are small). */
static void nbxla_select_least(const uint64_t *key, uint64_t *best, uint32_t *best_pos, int64_t n, int64_t keep) {
    int64_t have = 0;
    for (int64_t j = 0; j < n; j++) {
        uint64_t kj = key[j];
        if (have == keep && kj >= best[keep - 1]) continue;
        int64_t m = have < keep ? have++ : keep - 1;
        for (; m > 0 && best[m - 1] > kj; m--) { best[m] = best[m - 1]; best_pos[m] = best_pos[m - 1]; }
        best[m] = kj;
        best_pos[m] = (uint32_t)j;
    }
}

NBXLA_API(nbxla_sort_keys) int nbxla_sort_keys(int n_ops, char *const *in, char *const *out, const int64_t *esize,
                                int64_t outer, int64_t n, int64_t inner, int n_keys,
                                const struct nbxla_sort_key *keys, int64_t keep, uint64_t *scratch) {
    int values_only = n_ops == 1 && n_keys == 1;
    /* only the first keep of each row read: the stable selection of the keep least keys */
    int select = n_keys == 1 && keep >= 1 && keep < n && keep <= NBXLA_SELECT_MAX && n > NBXLA_SORT_SHORT;
    int64_t count = select ? keep : n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            uint64_t *key = scratch, *key2 = scratch + n;
            uint32_t *pos = values_only ? NULL : (uint32_t *)(scratch + 2 * n), *pos2 = pos ? pos + n : NULL;
            if (select) {
                int op = keys[0].operand;
                if (nbxla_keys_of(keys[0].type, keys[0].flags, in[op] + base * esize[op], inner * esize[op], NULL,
                                  n, key))
                    return 1;
                nbxla_select_least(key, key2, (uint32_t *)(scratch + 2 * n), n, keep);
                key = key2;
                pos = (uint32_t *)(scratch + 2 * n);
            } else {
                for (int64_t j = 0; pos && j < n; j++) pos[j] = j;
                for (int k = n_keys - 1; k >= 0; k--) {     /* stable passes: least significant key first */
                    int op = keys[k].operand;
                    if (nbxla_keys_of(keys[k].type, keys[k].flags, in[op] + base * esize[op], inner * esize[op],
                                      pos, n, key))
                        return 1;
                    nbxla_sort_row(&key, &pos, &key2, &pos2, n, nbxla_key_width[keys[k].type]);
                }
            }
            if (values_only)
                nbxla_values_row(out[0] + base * esize[0], in[0] + base * esize[0], key, count, n, inner,
                                 keys[0].type, keys[0].flags, esize[0]);
            else
                for (int j = 0; j < n_ops; j++)
                    nbxla_gather_row(out[j] + base * esize[j], in[j] + base * esize[j], pos, count, inner, esize[j]);
        }
    return 0;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* topk (XLA:CPU's semantics, as the evaluator's): per row of [rows, n], the k elements that come
 * first in the order of ``before`` (greatest first, or least), ties by position, with their
 * positions.  A stable sort of (x, 0..n-1) by ``before``, of which the first k are kept.
 * ``scratch``: 4n*rows (positions) + (esize + 4)*n*rows (sorted copies) + 16n (permutation),
 * each rounded up to 8 bytes. */
NBXLA_API(nbxla_topk) void nbxla_topk(const char *x, char *values, int32_t *positions, int64_t rows, int64_t n, int64_t k,
                       int64_t esize, nbxla_kernel before, int64_t before_extent, char *scratch) {
#define NBXLA_ALIGN8(bytes) (((bytes) + 7) / 8 * 8)
    int32_t *iota = (int32_t *)scratch;
    char *xs = scratch + NBXLA_ALIGN8(4 * n * rows);
    int32_t *is = (int32_t *)(xs + NBXLA_ALIGN8(esize * n * rows));
    int64_t *perm = (int64_t *)((char *)is + NBXLA_ALIGN8(4 * n * rows));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) iota[r * n + j] = (int32_t)j;
    char *const in[2] = {(char *)x, (char *)iota};
    char *const out[2] = {xs, (char *)is};
    const int64_t sizes[2] = {esize, 4};
    nbxla_sort(2, in, out, sizes, rows, n, 1, before, before_extent, perm);
    for (int64_t r = 0; r < rows; r++) {
        memcpy(values + r * k * esize, xs + r * n * esize, k * esize);
        memcpy(positions + r * k, is + r * n, k * 4);
    }
}

/* select-and-scatter (the evaluator's semantics): out starts as init everywhere; each window
 * (one per source element, row-major) picks the first operand element of the window, in
 * row-major window order, that ``select(picked, candidate)`` keeps against every later
 * candidate (padding is never picked), and combines the source element into out there with
 * ``scatter(out, source)``.  Window positions as in nbxla_conv. */
/* (struct nbxla_window: in the interface above) */

NBXLA_API(nbxla_select_and_scatter) void nbxla_select_and_scatter(const char *operand, const char *source, const char *init, char *out,
                                     int64_t esize, const struct nbxla_window *w, nbxla_kernel select,
                                     int64_t select_extent, nbxla_kernel scatter, int64_t scatter_extent) {
    int64_t total = 1, src_total = 1, win_total = 1, si[8] = {0}, ki[8];
    for (int64_t d = 0; d < w->rank; d++) {
        total *= w->in_dims[d];
        src_total *= w->src_dims[d];
        win_total *= w->size[d];
    }
    for (int64_t i = 0; i < total; i++) memcpy(out + i * esize, init, esize);
    unsigned char keep;
    char combined[16];
    void *args[3];
    for (int64_t s = 0; s < src_total; s++) {
        int64_t picked = -1;
        for (int64_t d = 0; d < w->rank; d++) ki[d] = 0;
        for (int64_t q = 0; q < win_total; q++) {
            int64_t at = 0, inside = 1;
            for (int64_t d = 0; d < w->rank; d++) {
                int64_t p = si[d] * w->stride[d] + ki[d] * w->win_dil[d] - w->pad_low[d];
                if (p < 0 || p % w->base_dil[d] || p / w->base_dil[d] >= w->in_dims[d]) { inside = 0; break; }
                at += p / w->base_dil[d] * w->in_strides[d];
            }
            if (inside) {
                if (picked < 0) picked = at;
                else {
                    args[0] = (void *)(operand + picked * esize);
                    args[1] = (void *)(operand + at * esize);
                    args[2] = &keep;
                    select(args, 0, select_extent);
                    if (!keep) picked = at;
                }
            }
            for (int64_t d = w->rank - 1; d >= 0; d--) {
                if (++ki[d] < w->size[d]) break;
                ki[d] = 0;
            }
        }
        if (picked >= 0) {
            args[0] = out + picked * esize;
            args[1] = (void *)(source + s * esize);
            args[2] = combined;
            scatter(args, 0, scatter_extent);
            memcpy(out + picked * esize, combined, esize);
        }
        for (int64_t d = w->rank - 1; d >= 0; d--) {
            if (++si[d] < w->src_dims[d]) break;
            si[d] = 0;
        }
    }
}

/* fft (the evaluator's NumPy semantics, in double precision): kind 0 FFT, 1 IFFT, 2 RFFT,
 * 3 IRFFT over the last nd dims (lengths ``len``) of ``batch`` arrays; IFFT and IRFFT scaled by
 * 1/n.  A direct DFT per line (O(n^2), angles reduced mod n), so: exact semantics, not speed.
 * Types: 0 f32, 1 f64, 2 c64, 3 c128.  ``work`` holds batch * prod(len) complex doubles,
 * ``line`` 2 * max(len). */
static double complex nbxla_fft_load(const char *p, int64_t i, int type) {
    switch (type) {
    case 0: return ((const float *)p)[i];
    case 1: return ((const double *)p)[i];
    case 2: return ((const float complex *)p)[i];
    default: return ((const double complex *)p)[i];
    }
}

static void nbxla_fft_store(char *p, int64_t i, int type, double complex v) {
    switch (type) {
    case 0: ((float *)p)[i] = (float)creal(v); break;
    case 1: ((double *)p)[i] = creal(v); break;
    case 2: ((float complex *)p)[i] = (float complex)v; break;
    default: ((double complex *)p)[i] = v;
    }
}

/* The DFT of every line along ``axis`` of work ([lines..., len[axis], inner...]). */
static void nbxla_dft_axis(double complex *work, int64_t batch, int nd, const int64_t *len, int axis,
                           int inverse, double complex *line) {
    int64_t n = len[axis], inner = 1, outer = batch;
    for (int d = axis + 1; d < nd; d++) inner *= len[d];
    for (int d = 0; d < axis; d++) outer *= len[d];
    double sign = inverse ? 2.0 : -2.0;
    const double pi = 3.14159265358979323846;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double complex *x = work + o * n * inner + i;
            for (int64_t k = 0; k < n; k++) {
                double complex acc = 0;
                for (int64_t j = 0; j < n; j++) {
                    double angle = sign * pi * (double)((j * k) % n) / (double)n;
                    acc += x[j * inner] * (cos(angle) + I * sin(angle));
                }
                line[k] = inverse ? acc / (double)n : acc;
            }
            for (int64_t k = 0; k < n; k++) x[k * inner] = line[k];
        }
}

NBXLA_API(nbxla_fft) void nbxla_fft(const char *in, char *out, int kind, int in_type, int out_type, int64_t batch, int nd,
                      const int64_t *len, double complex *work, double complex *line) {
    int64_t n = len[nd - 1], full = batch, rows;
    for (int d = 0; d < nd; d++) full *= len[d];
    rows = full / n;
    int64_t in_last = kind == 3 ? n / 2 + 1 : n, out_last = kind == 2 ? n / 2 + 1 : n;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
            work[r * n + j] = j < in_last ? nbxla_fft_load(in, r * in_last + j, in_type) : 0;
    if (kind == 3) {
        /* IRFFT: inverse transforms of the leading axes, then each last-axis line completed
         * as a Hermitian spectrum and transformed back; its real part is the result. */
        for (int a = 0; a < nd - 1; a++) nbxla_dft_axis(work, batch, nd, len, a, 1, line);
        for (int64_t r = 0; r < rows; r++) {
            double complex *x = work + r * n;
            for (int64_t k = in_last; k < n; k++) x[k] = conj(x[n - k]);
        }
        nbxla_dft_axis(work, batch, nd, len, nd - 1, 1, line);
    } else {
        for (int a = 0; a < nd; a++) nbxla_dft_axis(work, batch, nd, len, a, kind == 1, line);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < out_last; j++) nbxla_fft_store(out, r * out_last + j, out_type, work[r * n + j]);
}

/* Cholesky factorization as LAPACK's potrf through XLA's FFI (the evaluator's semantics):
 * per n x n matrix, the factor replaces the ``lower`` (else upper) triangle, read as the
 * symmetric matrix it describes; the other triangle keeps the input; info = 0, or the order of
 * the first leading minor that is not positive definite, with the factor all NaN.  Computed in
 * double.  ``work`` holds n*n doubles. */
#define NBXLA_POTRF(NAME, T)                                                                      \
    NBXLA_API(NAME) void NAME(const T *a, T *factor, int32_t *info, int64_t batch, int64_t n,        \
                           int lower,                                                         \
                     double *work) {                                                              \
        for (int64_t b = 0; b < batch; b++) {                                                     \
            const T *m = a + b * n * n;                                                           \
            T *f = factor + b * n * n;                                                            \
            memcpy(f, m, sizeof(T) * n * n);                                                      \
            info[b] = 0;                                                                          \
            for (int64_t j = 0; j < n && !info[b]; j++) {                                         \
                for (int64_t i = j; i < n; i++) { /* L[i][j] of the symmetric matrix */          \
                    double s = lower ? m[i * n + j] : m[j * n + i];                               \
                    for (int64_t k = 0; k < j; k++) s -= work[i * n + k] * work[j * n + k];       \
                    if (i == j) {                                                                 \
                        if (!(s > 0)) { info[b] = (int32_t)(j + 1); break; }                      \
                        work[j * n + j] = sqrt(s);                                                \
                    } else {                                                                      \
                        work[i * n + j] = s / work[j * n + j];                                    \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
            for (int64_t i = 0; i < n; i++)                                                       \
                for (int64_t j = 0; j <= i; j++) {                                                \
                    T v = info[b] ? (T)NAN : (T)work[i * n + j];                                  \
                    if (lower) f[i * n + j] = v; else f[j * n + i] = v;                           \
                }                                                                                 \
            if (info[b])                                                                          \
                for (int64_t i = 0; i < n * n; i++) f[i] = (T)NAN;                                \
        }                                                                                         \
    }

NBXLA_POTRF(nbxla_potrf_f32, float)
NBXLA_POTRF(nbxla_potrf_f64, double)
