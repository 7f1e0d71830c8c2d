/* kcgate's fused projection kernels for Freivalds' check (see kcgate/numerics/oracles/native.py).
 *
 * For a matrix x (rows x width) and k fp32 vectors v (k x width), one pass over x computes
 *     proj[j * rows + i] = sum_q v[j][q] * x[i][q]     and     norm[i] = sqrt(sum_q x[i][q]^2)
 * so each element of x is read from memory once, not once for a GEMM and again for the row norms.
 * x is fp32, bf16 or fp16 (both convert to fp32 exactly: bf16 is a 16-bit shift; fp16 needs x86's F16C or
 * AArch64, else kc_has_fp16() says 0 and the caller uses torch), with either unit stride along a row
 * ("rows" layout, element (i, q) at i * ld + q) or unit stride down a column ("cols" layout, element
 * (i, q) at q * ld + i, as for the transpose of a row-major matrix). Accumulation is fp32 in any order,
 * which is what the check's own-error bound assumes. Plain C with GCC/clang vector extensions; OpenMP
 * (the same libgomp as torch, by soname) splits the rows when available.
 */
#include <math.h>
#include <stdint.h>

/* The target's vector width (LANES floats) and how many rows one step reads (ROWS): every accumulator must
 * stay in a register. AVX-512 and AArch64 have 32 vector registers, AVX2 and SSE 16; a 64-byte vector on
 * AVX2 with four rows spilled and took 13 ms for a 4096^2 fp32 matrix, against 3.2 ms with AVX-512. */
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
#if defined(__AVX512F__) || defined(__aarch64__)
#define ROWS 4
#else
#define ROWS 2
#endif

typedef float vf __attribute__((vector_size(4 * LANES)));
typedef float vfu __attribute__((vector_size(4 * LANES), aligned(4)));
typedef uint16_t vh __attribute__((vector_size(2 * LANES), aligned(2)));
typedef uint32_t vu __attribute__((vector_size(4 * LANES)));

enum { KC_F32 = 0, KC_BF16 = 1, KC_F16 = 2 };

static inline vf load_f32(const void *p, int64_t at) { return *(const vfu *)((const float *)p + at); }

static inline vf load_bf16(const void *p, int64_t at)
{
    vu wide = __builtin_convertvector(*(const vh *)((const uint16_t *)p + at), vu) << 16;
    return (vf)wide;
}

static inline float one_f32(const void *p, int64_t at) { return ((const float *)p)[at]; }

static inline float one_bf16(const void *p, int64_t at)
{
    union { uint32_t u; float f; } bits = { (uint32_t)((const uint16_t *)p)[at] << 16 };
    return bits.f;
}

/* fp16: x86's conversion instructions where the target has them (GCC converts _Float16 vectors one element
 * at a time: 5.8 against 1.7 ms for a 4096^2 matrix), AArch64's _Float16 (converted in hardware), else none:
 * the caller then uses torch. */
#if defined(__F16C__) && LANES == 16
#include <immintrin.h>
static inline vf load_f16(const void *p, int64_t at)
{
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + at)));
}
static inline float one_f16(const void *p, int64_t at) { return _cvtsh_ss(((const uint16_t *)p)[at]); }
#define KC_HAS_F16 1
#elif defined(__F16C__) && LANES == 8
#include <immintrin.h>
static inline vf load_f16(const void *p, int64_t at)
{
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + at)));
}
static inline float one_f16(const void *p, int64_t at) { return _cvtsh_ss(((const uint16_t *)p)[at]); }
#define KC_HAS_F16 1
#elif defined(__FLT16_MAX__) && defined(__aarch64__) /* elsewhere _Float16 is emulated: 68 ms, not 2 */
typedef _Float16 vhf __attribute__((vector_size(2 * LANES), aligned(2)));
static inline vf load_f16(const void *p, int64_t at)
{
    return __builtin_convertvector(*(const vhf *)((const _Float16 *)p + at), vf);
}
static inline float one_f16(const void *p, int64_t at) { return (float)((const _Float16 *)p)[at]; }
#define KC_HAS_F16 1
#else
#define KC_HAS_F16 0
#endif

static inline float hsum(vf a)
{
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += a[l];
    return s;
}

/* Each kernel call runs one group of four streams over x: stream s of group g is vector j = 4g + s - 1 of v,
 * and j = -1 (stream 0 of group 0) is the row's sum of squares. w0 == 0 selects that: the first stream then
 * multiplies x by itself (S0 below), else by w0 like the others (T0). */
#define S0V(e, w) ((e) * (e))
#define T0V(e, w) ((e) * (w))
#define S0W(w, q) ((vf){0}) /* no vector: nothing to load */
#define T0W(w, q) load_f32(w, q)
#define S0(e, w, q) ((e) * (e))
#define T0(e, w, q) ((e) * (w)[q])

/* Keep a loaded vector in a register (x86; elsewhere a no-op). GCC 12 otherwise folds the loads into the
 * multiply-adds, one load per use: ten loads for a step's eight multiply-adds (AVX2, two rows) where five do.
 * The results are the same bit for bit. */
#if defined(__x86_64__) || defined(__i386__)
#define KEEP(e) __asm__("" : "+x"(e))
#else
#define KEEP(e) ((void)0)
#endif

/* Rows layout: ROWS rows at once (four memory streams per thread read faster than one: 3.3 against 4.1 ms
 * for a 4096^2 fp32 matrix on an Intel Xeon VM). out[s][r] = x_r . w_s (x_r . x_r for s = 0 when w0 == 0).
 * NS = 3 (v3 == 0: the group's fourth stream is past the last vector) skips that stream: at k = 10 the last of
 * three groups, 11 streams of multiply-adds, not 12 (in cache 0.41 against 0.49 ms for 256 x 4096 fp32 with
 * KEEP, AMD EPYC VM). */
#define ROW_LOOP(LOAD, ONE, F0, F0V, W0, NS)                                                                 \
    {                                                                                                 \
        vf acc[ROWS][4];                                                                              \
        for (int r = 0; r < ROWS; r++)                                                                \
            for (int s = 0; s < 4; s++) acc[r][s] = (vf){0};                                          \
        int64_t q = 0;                                                                                \
        for (; q + LANES <= width; q += LANES) {                                                      \
            vf w0 = W0(v0, q), w1 = load_f32(v1, q), w2 = load_f32(v2, q);                            \
            vf w3 = NS == 4 ? load_f32(v3, q) : w2;                                                   \
            KEEP(w0);                                                                                 \
            KEEP(w1);                                                                                 \
            KEEP(w2);                                                                                 \
            if (NS == 4) KEEP(w3);                                                                    \
            for (int r = 0; r < ROWS; r++) {                                                          \
                vf e = LOAD(x[r], q);                                                                 \
                KEEP(e);                                                                              \
                acc[r][0] += F0V(e, w0);                                                              \
                acc[r][1] += e * w1;                                                                  \
                acc[r][2] += e * w2;                                                                  \
                if (NS == 4) acc[r][3] += e * w3;                                                     \
            }                                                                                         \
        }                                                                                             \
        for (int r = 0; r < ROWS; r++) {                                                              \
            float s0 = hsum(acc[r][0]), s1 = hsum(acc[r][1]), s2 = hsum(acc[r][2]), s3 = hsum(acc[r][3]); \
            for (int64_t t = q; t < width; t++) {                                                     \
                float e = ONE(x[r], t);                                                               \
                s0 += F0(e, v0, t);                                                                   \
                s1 += e * v1[t];                                                                      \
                s2 += e * v2[t];                                                                      \
                if (NS == 4) s3 += e * v3[t];                                                         \
            }                                                                                         \
            out[0][r] = s0;                                                                           \
            out[1][r] = s1;                                                                           \
            out[2][r] = s2;                                                                           \
            out[3][r] = s3;                                                                           \
        }                                                                                             \
    }
#define ROW_KERNEL(NAME, LOAD, ONE)                                                                     \
    static void NAME(const void *const x[ROWS], const float *v0, const float *v1, const float *v2,    \
                     const float *v3, int64_t width, float out[4][ROWS])                              \
    {                                                                                                 \
        if (v0 && v3)                                                                                 \
            ROW_LOOP(LOAD, ONE, T0, T0V, T0W, 4)                                                      \
        else if (v0)                                                                                  \
            ROW_LOOP(LOAD, ONE, T0, T0V, T0W, 3)                                                      \
        else if (v3)                                                                                  \
            ROW_LOOP(LOAD, ONE, S0, S0V, S0W, 4)                                                      \
        else                                                                                          \
            ROW_LOOP(LOAD, ONE, S0, S0V, S0W, 3)                                                      \
    }

ROW_KERNEL(row_f32, load_f32, one_f32)
ROW_KERNEL(row_bf16, load_bf16, one_bf16)
#if KC_HAS_F16
ROW_KERNEL(row_f16, load_f16, one_f16)
#endif

/* Cols layout: rows [i0, i0 + n) of x (n <= CHUNK) at once, lines [q0, q1) of the transpose (one tile). Walk q
 * down the columns: each step reads n consecutive elements of one line and updates accumulators kept in cache
 * (acc is not zeroed: the caller runs every group over one tile, then reads the next tile). */
#define CHUNK 1024 /* at most; 4 KiB of each line per step: 256 gave 7.4 ms, 1024 4.5 ms for 4096^2 fp32 */
#define COL_LOOP(LOAD, ONE, F0)                                                                         \
    {                                                                                                 \
        int64_t full = n - n % LANES, q = q0;                                                         \
        for (; q + 4 <= q1; q += 4) { /* four lines of the transpose at once: four memory streams */  \
            int64_t at = q * ld + i0;                                                                 \
            for (int64_t l = 0; l < full; l += LANES) {                                               \
                vf e0 = LOAD(x, at + l), e1 = LOAD(x, at + ld + l);                                   \
                vf e2 = LOAD(x, at + 2 * ld + l), e3 = LOAD(x, at + 3 * ld + l);                      \
                *(vf *)&acc[0][l] += (F0(e0, v0, q) + F0(e1, v0, q + 1)) + (F0(e2, v0, q + 2) + F0(e3, v0, q + 3)); \
                *(vf *)&acc[1][l] += (e0 * v1[q] + e1 * v1[q + 1]) + (e2 * v1[q + 2] + e3 * v1[q + 3]); \
                *(vf *)&acc[2][l] += (e0 * v2[q] + e1 * v2[q + 1]) + (e2 * v2[q + 2] + e3 * v2[q + 3]); \
                *(vf *)&acc[3][l] += (e0 * v3[q] + e1 * v3[q + 1]) + (e2 * v3[q + 2] + e3 * v3[q + 3]); \
            }                                                                                         \
        }                                                                                             \
        for (; q < q1; q++)                                                                           \
            for (int64_t l = 0; l < full; l += LANES) {                                               \
                vf e = LOAD(x, q * ld + i0 + l);                                                      \
                *(vf *)&acc[0][l] += F0(e, v0, q);                                                    \
                *(vf *)&acc[1][l] += e * v1[q];                                                       \
                *(vf *)&acc[2][l] += e * v2[q];                                                       \
                *(vf *)&acc[3][l] += e * v3[q];                                                       \
            }                                                                                         \
        for (int64_t l = full; l < n; l++) /* the last rows, fewer than LANES: down their columns */  \
            for (q = q0; q < q1; q++) {                                                               \
                float e = ONE(x, q * ld + i0 + l);                                                    \
                acc[0][l] += F0(e, v0, q);                                                            \
                acc[1][l] += e * v1[q];                                                               \
                acc[2][l] += e * v2[q];                                                               \
                acc[3][l] += e * v3[q];                                                               \
            }                                                                                         \
    }
#define COL_KERNEL(NAME, LOAD, ONE)                                                                     \
    static void NAME(const void *x, int64_t ld, int64_t i0, int64_t n, const float *v0, const float *v1, \
                     const float *v2, const float *v3, int64_t q0, int64_t q1, float acc[4][CHUNK])   \
    {                                                                                                 \
        if (v0)                                                                                       \
            COL_LOOP(LOAD, ONE, T0)                                                                   \
        else                                                                                          \
            COL_LOOP(LOAD, ONE, S0)                                                                   \
    }

COL_KERNEL(col_f32, load_f32, one_f32)
COL_KERNEL(col_bf16, load_bf16, one_bf16)
#if KC_HAS_F16
COL_KERNEL(col_f16, load_f16, one_f16)
#endif

/* Stream s of group g: vector j = 4g + s - 1 of v, or none (0) for the sum of squares (j = -1); past the last
 * vector, v[0] again (its result is dropped). */
static const float *stream(const float *v, int64_t k, int64_t ldv, int64_t g, int s)
{
    int64_t j = 4 * g + s - 1;
    return j < 0 ? 0 : v + (j < k ? j : 0) * ldv;
}

/* One group's sums (sums[s * stride + l] for stream s and row i0 + l) into norm and proj. */
static void store(const float *sums, int64_t stride, int64_t i0, int64_t n, int64_t g, int64_t k, int64_t rows,
                  float *proj, float *norm)
{
    for (int64_t l = 0; l < n; l++)
        for (int s = 0; s < 4; s++) {
            int64_t j = 4 * g + s - 1;
            if (j < 0)
                norm[i0 + l] = sqrtf(sums[l]);
            else if (j < k)
                proj[j * rows + i0 + l] = sums[s * stride + l];
        }
}

typedef void (*row_fn)(const void *const[ROWS], const float *, const float *, const float *, const float *,
                       int64_t, float[4][ROWS]);
typedef void (*col_fn)(const void *, int64_t, int64_t, int64_t, const float *, const float *, const float *,
                       const float *, int64_t, int64_t, float[4][CHUNK]);

int kc_has_fp16(void) { return KC_HAS_F16; }

int kc_has_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* Cols layout: how many groups share one pass over a block (k <= 4 * GMAX - 1 reads x from memory once; their
 * accumulators, GMAX * 16 KiB, stay in L2), and how many lines of the transpose one tile holds (up to 64 KiB
 * of fp32 for CHUNK rows, re-read from cache by each group). Running the groups one after another over a whole
 * block read a 4096^2 fp32 matrix from memory once per group. */
#define GMAX 4
#define QTILE 16

/* proj (k x rows, row-major) and norm (rows) for x in the given dtype and layout (cols != 0: unit stride
 * down a column). v is k x width, row stride ldv. Returns 0, or -1 for a dtype this build lacks. The norm and
 * the k projections are run in groups of four streams (the norm and vectors 0-2, then 3-6, ...). Rows layout:
 * every group runs over the ROWS rows of one step while they are in cache. Cols layout: up to GMAX groups run
 * over each tile of QTILE lines before the next tile is read. So each element of x is read from memory once
 * (cols: for k <= 15; more vectors take another pass per GMAX groups). */
int kc_project(const void *x, int dtype, int cols, int64_t rows, int64_t width, int64_t ld, const float *v,
               int64_t k, int64_t ldv, float *proj, float *norm, int threads)
{
    row_fn row_kernel = dtype == KC_F32 ? row_f32 : dtype == KC_BF16 ? row_bf16 : 0;
    col_fn col_kernel = dtype == KC_F32 ? col_f32 : dtype == KC_BF16 ? col_bf16 : 0;
#if KC_HAS_F16
    if (dtype == KC_F16) {
        row_kernel = row_f16;
        col_kernel = col_f16;
    }
#endif
    if (!row_kernel) return -1;
    const char *base = (const char *)x;
    int64_t esize = dtype == KC_F32 ? 4 : 2;
    if (threads < 1) threads = 1;
    if (k < 0) k = 0;
    int64_t groups = (k + 4) / 4; /* k + 1 streams, four a group */
    /* cols: blocks of up to CHUNK rows, smaller where that leaves a thread idle (a multiple of LANES) */
    int64_t chunk = (rows + threads - 1) / threads;
    chunk = chunk > CHUNK ? CHUNK : (chunk + LANES - 1) / LANES * LANES;
    int64_t blocks = cols ? (rows + chunk - 1) / chunk : (rows + ROWS - 1) / ROWS;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < blocks; t++) {
        if (!cols) {
            const void *xs[ROWS];
            float out[4][ROWS];
            int64_t i0 = ROWS * t, n = rows - i0 < ROWS ? rows - i0 : ROWS;
            for (int r = 0; r < ROWS; r++) { /* past the last row: repeat it, drop the result */
                int64_t i = i0 + (r < n ? r : n - 1);
                xs[r] = base + i * ld * esize;
            }
            for (int64_t g = 0; g < groups; g++) {
                row_kernel(xs, stream(v, k, ldv, g, 0), stream(v, k, ldv, g, 1), stream(v, k, ldv, g, 2),
                           4 * g + 2 < k ? stream(v, k, ldv, g, 3) : 0, width, out); /* 0: three streams */
                store(&out[0][0], ROWS, i0, n, g, k, rows, proj, norm);
            }
            continue;
        }
        int64_t i0 = t * chunk, n = rows - i0 < chunk ? rows - i0 : chunk;
        float acc[GMAX][4][CHUNK] __attribute__((aligned(64)));
        for (int64_t g0 = 0; g0 < groups; g0 += GMAX) {
            int64_t gn = groups - g0 < GMAX ? groups - g0 : GMAX;
            for (int64_t u = 0; u < gn; u++)
                for (int s = 0; s < 4; s++)
                    for (int64_t l = 0; l < n; l++) acc[u][s][l] = 0.0f;
            for (int64_t q0 = 0; q0 < width; q0 += QTILE) {
                int64_t q1 = width - q0 < QTILE ? width : q0 + QTILE;
                for (int64_t u = 0; u < gn; u++) {
                    int64_t g = g0 + u;
                    col_kernel(x, ld, i0, n, stream(v, k, ldv, g, 0), stream(v, k, ldv, g, 1),
                               stream(v, k, ldv, g, 2), stream(v, k, ldv, g, 3), q0, q1, acc[u]);
                }
            }
            for (int64_t u = 0; u < gn; u++) store(&acc[u][0][0], CHUNK, i0, n, g0 + u, k, rows, proj, norm);
        }
    }
    return 0;
}
