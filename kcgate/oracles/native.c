/* kcgate's fused projection kernels for Freivalds' check (see kcgate/oracles/native.py).
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

/* Rows layout: ROWS rows at once (four memory streams per thread read faster than one: 3.3 against 4.1 ms
 * for a 4096^2 fp32 matrix on an Intel Xeon VM). out[.][r] = {x_r.x_r, x_r.v0, x_r.v1, x_r.v2}. */
#define ROW_KERNEL(NAME, LOAD, ONE)                                                                     \
    static void NAME(const void *const x[ROWS], const float *v0, const float *v1, const float *v2,    \
                     int64_t width, float out[4][ROWS])                                               \
    {                                                                                                 \
        vf acc[ROWS][4];                                                                              \
        for (int r = 0; r < ROWS; r++)                                                                \
            for (int s = 0; s < 4; s++) acc[r][s] = (vf){0};                                          \
        int64_t q = 0;                                                                                \
        for (; q + LANES <= width; q += LANES) {                                                      \
            vf w0 = load_f32(v0, q), w1 = load_f32(v1, q), w2 = load_f32(v2, q);                      \
            for (int r = 0; r < ROWS; r++) {                                                          \
                vf e = LOAD(x[r], q);                                                                 \
                acc[r][0] += e * e;                                                                   \
                acc[r][1] += e * w0;                                                                  \
                acc[r][2] += e * w1;                                                                  \
                acc[r][3] += e * w2;                                                                  \
            }                                                                                         \
        }                                                                                             \
        for (int r = 0; r < ROWS; r++) {                                                              \
            float s0 = hsum(acc[r][0]), s1 = hsum(acc[r][1]), s2 = hsum(acc[r][2]), s3 = hsum(acc[r][3]); \
            for (int64_t t = q; t < width; t++) {                                                     \
                float e = ONE(x[r], t);                                                               \
                s0 += e * e;                                                                          \
                s1 += e * v0[t];                                                                      \
                s2 += e * v1[t];                                                                      \
                s3 += e * v2[t];                                                                      \
            }                                                                                         \
            out[0][r] = s0;                                                                           \
            out[1][r] = s1;                                                                           \
            out[2][r] = s2;                                                                           \
            out[3][r] = s3;                                                                           \
        }                                                                                             \
    }

ROW_KERNEL(row_f32, load_f32, one_f32)
ROW_KERNEL(row_bf16, load_bf16, one_bf16)
#if KC_HAS_F16
ROW_KERNEL(row_f16, load_f16, one_f16)
#endif

/* Cols layout: rows [i0, i0 + n) of x (n <= CHUNK) at once. Walk q down the columns: each step reads n
 * consecutive elements of one line of the transposed matrix and updates accumulators kept in L1. */
#define CHUNK 1024 /* at most; 4 KiB of each line per step: 256 gave 7.4 ms, 1024 4.5 ms for 4096^2 fp32 */
#define COL_KERNEL(NAME, LOAD, ONE)                                                                     \
    static void NAME(const void *x, int64_t ld, int64_t i0, int64_t n, const float *v0, const float *v1, \
                     const float *v2, int64_t width, float acc[4][CHUNK])                             \
    {                                                                                                 \
        for (int s = 0; s < 4; s++)                                                                   \
            for (int64_t l = 0; l < n; l++) acc[s][l] = 0.0f;                                         \
        int64_t full = n - n % LANES, q = 0;                                                          \
        for (; q + 4 <= width; q += 4) { /* four lines of the transpose at once: four memory streams */ \
            int64_t at = q * ld + i0;                                                                 \
            for (int64_t l = 0; l < full; l += LANES) {                                               \
                vf e0 = LOAD(x, at + l), e1 = LOAD(x, at + ld + l);                                   \
                vf e2 = LOAD(x, at + 2 * ld + l), e3 = LOAD(x, at + 3 * ld + l);                      \
                *(vf *)&acc[0][l] += (e0 * e0 + e1 * e1) + (e2 * e2 + e3 * e3);                       \
                *(vf *)&acc[1][l] += (e0 * v0[q] + e1 * v0[q + 1]) + (e2 * v0[q + 2] + e3 * v0[q + 3]); \
                *(vf *)&acc[2][l] += (e0 * v1[q] + e1 * v1[q + 1]) + (e2 * v1[q + 2] + e3 * v1[q + 3]); \
                *(vf *)&acc[3][l] += (e0 * v2[q] + e1 * v2[q + 1]) + (e2 * v2[q + 2] + e3 * v2[q + 3]); \
            }                                                                                         \
        }                                                                                             \
        for (; q < width; q++)                                                                        \
            for (int64_t l = 0; l < full; l += LANES) {                                               \
                vf e = LOAD(x, q * ld + i0 + l);                                                      \
                *(vf *)&acc[0][l] += e * e;                                                           \
                *(vf *)&acc[1][l] += e * v0[q];                                                       \
                *(vf *)&acc[2][l] += e * v1[q];                                                       \
                *(vf *)&acc[3][l] += e * v2[q];                                                       \
            }                                                                                         \
        for (int64_t l = full; l < n; l++) /* the last rows, fewer than LANES: down their columns */  \
            for (q = 0; q < width; q++) {                                                             \
                float e = ONE(x, q * ld + i0 + l);                                                    \
                acc[0][l] += e * e;                                                                   \
                acc[1][l] += e * v0[q];                                                               \
                acc[2][l] += e * v1[q];                                                               \
                acc[3][l] += e * v2[q];                                                               \
            }                                                                                         \
    }

COL_KERNEL(col_f32, load_f32, one_f32)
COL_KERNEL(col_bf16, load_bf16, one_bf16)
#if KC_HAS_F16
COL_KERNEL(col_f16, load_f16, one_f16)
#endif

/* One block's sums (sums[s * stride + l] for stream s and row i0 + l) into norm and proj. */
static void store(const float *sums, int64_t stride, int64_t i0, int64_t n, int64_t g, int64_t k, int64_t rows,
                  float *proj, float *norm)
{
    for (int64_t l = 0; l < n; l++) {
        if (g == 0) norm[i0 + l] = sqrtf(sums[l]);
        for (int64_t u = 0; u < 3 && 3 * g + u < k; u++) proj[(3 * g + u) * rows + i0 + l] = sums[(1 + u) * stride + l];
    }
}

typedef void (*row_fn)(const void *const[ROWS], const float *, const float *, const float *, int64_t,
                       float[4][ROWS]);
typedef void (*col_fn)(const void *, int64_t, int64_t, int64_t, const float *, const float *, const float *,
                       int64_t, float[4][CHUNK]);

int kc_has_fp16(void) { return KC_HAS_F16; }

int kc_has_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* proj (k x rows, row-major) and norm (rows) for x in the given dtype and layout (cols != 0: unit stride
 * down a column). v is k x width, row stride ldv. Returns 0, or -1 for a dtype this build lacks. Groups of three
 * vectors share one pass; a group short of three repeats v[0] and drops the extra result. */
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
    int64_t groups = k > 0 ? (k + 2) / 3 : 1;
    /* cols: blocks of up to CHUNK rows, smaller where that leaves a thread idle (a multiple of LANES) */
    int64_t chunk = (rows + threads - 1) / threads;
    chunk = chunk > CHUNK ? CHUNK : (chunk + LANES - 1) / LANES * LANES;
    int64_t blocks = cols ? (rows + chunk - 1) / chunk : (rows + ROWS - 1) / ROWS;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < blocks; t++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *vs[3];
            for (int u = 0; u < 3; u++) vs[u] = v + (3 * g + u < k ? 3 * g + u : 0) * ldv;
            if (!cols) {
                const void *xs[ROWS];
                float out[4][ROWS];
                int64_t i0 = ROWS * t, n = rows - i0 < ROWS ? rows - i0 : ROWS;
                for (int r = 0; r < ROWS; r++) { /* past the last row: repeat it, drop the result */
                    int64_t i = i0 + (r < n ? r : n - 1);
                    xs[r] = base + i * ld * esize;
                }
                row_kernel(xs, vs[0], vs[1], vs[2], width, out);
                store(&out[0][0], ROWS, i0, n, g, k, rows, proj, norm);
                continue;
            }
            int64_t i0 = t * chunk, n = rows - i0 < chunk ? rows - i0 : chunk;
            float acc[4][CHUNK] __attribute__((aligned(64)));
            col_kernel(x, ld, i0, n, vs[0], vs[1], vs[2], width, acc);
            store(&acc[0][0], CHUNK, i0, n, g, k, rows, proj, norm);
        }
    }
    return 0;
}
