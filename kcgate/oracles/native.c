/* kcgate's fused projection kernels for Freivalds' check (see kcgate/oracles/native.py).
 *
 * For a matrix x (rows x width) and k fp32 vectors v (k x width), one pass over x computes
 *     proj[j * rows + i] = sum_q v[j][q] * x[i][q]     and     norm[i] = sqrt(sum_q x[i][q]^2)
 * so each element of x is read from memory once, not once for a GEMM and again for the row norms.
 * x is fp32 or bf16 (bf16 -> fp32 is exact: a 16-bit shift), with either unit stride along a row
 * ("rows" layout, element (i, q) at i * ld + q) or unit stride down a column ("cols" layout, element
 * (i, q) at q * ld + i, as for the transpose of a row-major matrix). Accumulation is fp32 in any order,
 * which is what the check's own-error bound assumes. Plain C with GCC/clang vector extensions; OpenMP
 * (the same libgomp as torch, by soname) splits the rows when available.
 */
#include <math.h>
#include <stdint.h>

typedef float vf __attribute__((vector_size(64)));
typedef float vfu __attribute__((vector_size(64), aligned(4)));
typedef uint16_t vh __attribute__((vector_size(32), aligned(2)));
typedef uint32_t vu __attribute__((vector_size(64)));

enum { KC_F32 = 0, KC_BF16 = 1 };
#define LANES 16

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

static inline float hsum(vf a)
{
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += a[l];
    return s;
}

/* Rows layout: four rows at once (four memory streams per thread read faster than one: 3.3 against
 * 4.1 ms for a 4096^2 fp32 matrix on an Intel Xeon VM). out[r] = {x_r.x_r, x_r.v0, x_r.v1, x_r.v2}. */
#define ROW_KERNEL(NAME, LOAD, ONE)                                                                     \
    static void NAME(const void *const x[4], const float *v0, const float *v1, const float *v2,       \
                     int64_t width, float out[4][4])                                                  \
    {                                                                                                 \
        vf acc[4][4];                                                                                 \
        for (int r = 0; r < 4; r++)                                                                   \
            for (int s = 0; s < 4; s++) acc[r][s] = (vf){0};                                          \
        int64_t q = 0;                                                                                \
        for (; q + LANES <= width; q += LANES) {                                                      \
            vf w0 = load_f32(v0, q), w1 = load_f32(v1, q), w2 = load_f32(v2, q);                      \
            for (int r = 0; r < 4; r++) {                                                             \
                vf e = LOAD(x[r], q);                                                                 \
                acc[r][0] += e * e;                                                                   \
                acc[r][1] += e * w0;                                                                  \
                acc[r][2] += e * w1;                                                                  \
                acc[r][3] += e * w2;                                                                  \
            }                                                                                         \
        }                                                                                             \
        for (int r = 0; r < 4; r++) {                                                                 \
            float s0 = hsum(acc[r][0]), s1 = hsum(acc[r][1]), s2 = hsum(acc[r][2]), s3 = hsum(acc[r][3]); \
            for (int64_t t = q; t < width; t++) {                                                     \
                float e = ONE(x[r], t);                                                               \
                s0 += e * e;                                                                          \
                s1 += e * v0[t];                                                                      \
                s2 += e * v1[t];                                                                      \
                s3 += e * v2[t];                                                                      \
            }                                                                                         \
            out[r][0] = s0;                                                                           \
            out[r][1] = s1;                                                                           \
            out[r][2] = s2;                                                                           \
            out[r][3] = s3;                                                                           \
        }                                                                                             \
    }

ROW_KERNEL(row_f32, load_f32, one_f32)
ROW_KERNEL(row_bf16, load_bf16, one_bf16)

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
            for (int64_t l = full; l < n; l++)                                                        \
                for (int64_t d = 0; d < 4; d++) {                                                     \
                    float e = ONE(x, at + d * ld + l);                                                \
                    acc[0][l] += e * e;                                                               \
                    acc[1][l] += e * v0[q + d];                                                       \
                    acc[2][l] += e * v1[q + d];                                                       \
                    acc[3][l] += e * v2[q + d];                                                       \
                }                                                                                     \
        }                                                                                             \
        for (; q < width; q++) {                                                                      \
            int64_t at = q * ld + i0;                                                                 \
            float s1 = v0[q], s2 = v1[q], s3 = v2[q];                                                 \
            for (int64_t l = 0; l < full; l += LANES) {                                               \
                vf e = LOAD(x, at + l);                                                               \
                *(vf *)&acc[0][l] += e * e;                                                           \
                *(vf *)&acc[1][l] += e * s1;                                                          \
                *(vf *)&acc[2][l] += e * s2;                                                          \
                *(vf *)&acc[3][l] += e * s3;                                                          \
            }                                                                                         \
            for (int64_t l = full; l < n; l++) {                                                      \
                float e = ONE(x, at + l);                                                             \
                acc[0][l] += e * e;                                                                   \
                acc[1][l] += e * s1;                                                                  \
                acc[2][l] += e * s2;                                                                  \
                acc[3][l] += e * s3;                                                                  \
            }                                                                                         \
        }                                                                                             \
    }

COL_KERNEL(col_f32, load_f32, one_f32)
COL_KERNEL(col_bf16, load_bf16, one_bf16)

int kc_has_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* proj (k x rows, row-major) and norm (rows) for x in the given dtype and layout (cols != 0: unit stride
 * down a column). v is k x width, row stride ldv. Returns 0, or -1 for an unknown dtype. Groups of three
 * vectors share one pass; a group short of three repeats v[0] and drops the extra result. */
int kc_project(const void *x, int dtype, int cols, int64_t rows, int64_t width, int64_t ld, const float *v,
               int64_t k, int64_t ldv, float *proj, float *norm, int threads)
{
    if (dtype != KC_F32 && dtype != KC_BF16) return -1;
    if (threads < 1) threads = 1;
    int64_t groups = k > 0 ? (k + 2) / 3 : 1;
    /* cols: blocks of up to CHUNK rows, smaller where that leaves a thread idle (a multiple of LANES) */
    int64_t chunk = (rows + threads - 1) / threads;
    chunk = chunk > CHUNK ? CHUNK : (chunk + LANES - 1) / LANES * LANES;
    int64_t blocks = cols ? (rows + chunk - 1) / chunk : (rows + 3) / 4;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < blocks; t++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *vs[3];
            for (int u = 0; u < 3; u++) vs[u] = v + (3 * g + u < k ? 3 * g + u : 0) * ldv;
            if (!cols) {
                const void *xs[4];
                float out[4][4];
                int64_t i0 = 4 * t, n = rows - i0 < 4 ? rows - i0 : 4;
                for (int r = 0; r < 4; r++) { /* past the last row: repeat it, drop the result */
                    int64_t i = i0 + (r < n ? r : n - 1);
                    xs[r] = dtype == KC_F32 ? (const void *)((const float *)x + i * ld)
                                            : (const void *)((const uint16_t *)x + i * ld);
                }
                (dtype == KC_F32 ? row_f32 : row_bf16)(xs, vs[0], vs[1], vs[2], width, out);
                for (int64_t r = 0; r < n; r++) {
                    if (g == 0) norm[i0 + r] = sqrtf(out[r][0]);
                    for (int u = 0; u < 3 && 3 * g + u < k; u++) proj[(3 * g + u) * rows + i0 + r] = out[r][1 + u];
                }
                continue;
            }
            int64_t i0 = t * chunk, n = rows - i0 < chunk ? rows - i0 : chunk;
            float acc[4][CHUNK] __attribute__((aligned(64)));
            (dtype == KC_F32 ? col_f32 : col_bf16)(x, ld, i0, n, vs[0], vs[1], vs[2], width, acc);
            for (int64_t l = 0; l < n; l++) {
                if (g == 0) norm[i0 + l] = sqrtf(acc[0][l]);
                for (int u = 0; u < 3 && 3 * g + u < k; u++) proj[(3 * g + u) * rows + i0 + l] = acc[1 + u][l];
            }
        }
    }
    return 0;
}
