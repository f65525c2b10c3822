/* Integer prefill GEMM on AVX-512 VNNI for CPUs without bfloat16 dot products (built with cpu_native.c; see
 * cpu_native.py and compute_path.py).
 *
 * gemm_i16: y = x @ W.T for many rows (a prefill's wide matmuls). W is quantized once at load, per output
 *   channel, to int16 codes of at most +-WMAX (gemm_pack_i16); each row of x per call, per row, to int16 codes of
 *   at most +-AMAX. vpdpwssd multiplies two int16 pairs into an int32 lane: 32 products an instruction, twice an
 *   FMA's 16. int32 partial sums are widened to float32 every KC columns (KC * AMAX * WMAX < 2^31: no
 *   overflow whatever the values), and the epilogue scales by the row's and the channel's scale.
 *
 * Why int16 and not int8 (vpdpbusd, 64 products an instruction): this model's activations have outlier channels
 * (a row's largest value up to 1,300x its mean magnitude), so int8 codes per row leave most values a few levels
 * wide. Simulated on SmolLM2's 150-token prefill logits against float32 (relative error, the bfloat16 model:
 * 0.0164): int8 rows 0.176, int8 per-channel weights alone 0.038, these int16 codes 0.0199 (the float32 prefill
 * path's own error with bfloat16 activations: 0.0199).
 *
 * Layout of the packed weights: panels of NR = 48 output channels (3 vectors of 16); in a panel, for each
 * column pair p, 48 int32 lanes, lane j = (W[n0 + j][2p], W[n0 + j][2p + 1]) as two int16 (low, high). N is
 * padded to a panel with zero channels, K to even with a zero column. */
#include <stdlib.h>

#include <omp.h>

#include "cpu_native.h"

#define AMAX 8191.0f /* activation codes: +-(2^13 - 1) */
#define WMAX 2047.0f /* weight codes: +-(2^11 - 1) */
#define KCP 64       /* column pairs between float32 widenings: 128 * 8191 * 2047 < 2^31 */
#define MR 8         /* rows of a micro tile: 8 x 3 int32 accumulators */
#define NR 48        /* channels of a panel */
#define MB 192       /* rows of a block one thread runs over every panel (its codes stay in L2) */

int64_t gemm_i16_packed_size(int64_t N, int64_t K) { return (N + NR - 1) / NR * NR * ((K + 1) / 2); }

/* W [N, K] float32 -> packed int32 [gemm_i16_packed_size] and scale [N padded to NR] (code * scale = W) */
int gemm_pack_i16(const float *W, int64_t N, int64_t K, int32_t *packed, float *scale) {
    const int64_t panels = (N + NR - 1) / NR, kp = (K + 1) / 2;
#pragma omp parallel for if (N * K > (1 << 16) && omp_get_max_threads() > 1)
    for (int64_t p = 0; p < panels; p++) {
        for (int64_t j = 0; j < NR; j++) {
            const int64_t n = p * NR + j;
            const float *w = W + n * K;
            float peak = 0.0f;
            for (int64_t k = 0; n < N && k < K; k++) peak = fmaxf(peak, fabsf(w[k]));
            const float s = peak > 0.0f ? peak / WMAX : 1.0f, inv = 1.0f / s;
            scale[n] = n < N ? s : 0.0f;
            int32_t *dst = packed + p * kp * NR + j;
            for (int64_t c = 0; c < kp; c++) {
                const int k = 2 * c;
                const int32_t lo = n < N ? (int32_t)lrintf(w[k] * inv) : 0;
                const int32_t hi = n < N && k + 1 < K ? (int32_t)lrintf(w[k + 1] * inv) : 0;
                dst[c * NR] = (int32_t)(((uint32_t)(uint16_t)(int16_t)hi << 16) | (uint16_t)(int16_t)lo);
            }
        }
    }
    return 0;
}

/* row m of x (bfloat16 or float32) -> int16 codes [kp pairs] and its scale */
static void quant_row(const uint16_t *xbf, const float *xf, int64_t K, int64_t kp, int16_t *q, float *scale) {
    __m512 peak = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 mk = (__mmask16)(K - k >= 16 ? 0xFFFFu : (1u << (K - k)) - 1u);
        const __m512 v = xbf ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                   _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, xbf + k)), 16))
                             : _mm512_maskz_loadu_ps(mk, xf + k);
        peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    }
    const float top = _mm512_reduce_max_ps(peak), s = top > 0.0f ? top / AMAX : 1.0f;
    *scale = s;
    const __m512 inv = _mm512_set1_ps(1.0f / s);
    for (int64_t k = 0; k < 2 * kp; k += 16) {
        const int64_t left = K - k;
        const __mmask16 mk = (__mmask16)(left >= 16 ? 0xFFFFu : left <= 0 ? 0u : (1u << left) - 1u);
        const __m512 v = xbf ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                   _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, xbf + k)), 16))
                             : _mm512_maskz_loadu_ps(mk, xf + k);
        const __m256i c = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv)));
        const int64_t room = 2 * kp - k; /* the padded row may end inside this vector */
        _mm256_mask_storeu_epi16(q + k, (__mmask16)(room >= 16 ? 0xFFFFu : (1u << room) - 1u), c);
    }
}

/* one row's three accumulators: named, not an array (gcc kept an array of them on the stack, half the speed) */
#define ACC_DECL(i) __m512i a##i##0 = _mm512_setzero_si512(), a##i##1 = a##i##0, a##i##2 = a##i##0
#define ACC_STEP(i)                                                   \
    do {                                                              \
        const __m512i b = _mm512_set1_epi32(xr[(i) * kp + c]);        \
        a##i##0 = _mm512_dpwssd_epi32(a##i##0, b, w0);                \
        a##i##1 = _mm512_dpwssd_epi32(a##i##1, b, w1);                \
        a##i##2 = _mm512_dpwssd_epi32(a##i##2, b, w2);                \
    } while (0)
#define ACC_FLUSH(i)                                                  \
    do {                                                              \
        float *d = f + (i) * NR;                                      \
        _mm512_store_ps(d, _mm512_add_ps(_mm512_load_ps(d), _mm512_cvtepi32_ps(a##i##0)));           \
        _mm512_store_ps(d + 16, _mm512_add_ps(_mm512_load_ps(d + 16), _mm512_cvtepi32_ps(a##i##1))); \
        _mm512_store_ps(d + 32, _mm512_add_ps(_mm512_load_ps(d + 32), _mm512_cvtepi32_ps(a##i##2))); \
    } while (0)

/* rows r0 .. r0 + MR - 1 of codes xq [*, kp pairs], column pairs c0 .. c1 - 1 (at most KCP), against one
 * panel: the int32 sums widened and added to f [MR][NR] float32 */
/* no-tree-pre: with it gcc 12 keeps the 24 accumulators on the stack (a load and a store per product) */
__attribute__((noinline, optimize("no-tree-pre"))) static void micro_tile(const int32_t *xq, int64_t kp, int64_t r0,
                                                                         const int32_t *panel, int64_t c0,
                                                                         int64_t c1, float *f) {
    const int32_t *xr = xq + r0 * kp; /* MR rows (the codes are padded to a multiple of MR rows with zeros) */
    ACC_DECL(0); ACC_DECL(1); ACC_DECL(2); ACC_DECL(3); ACC_DECL(4); ACC_DECL(5); ACC_DECL(6); ACC_DECL(7);
    for (int64_t c = c0; c < c1; c++) {
        const int32_t *w = panel + c * NR;
        const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 16), w2 = _mm512_loadu_si512(w + 32);
        ACC_STEP(0); ACC_STEP(1); ACC_STEP(2); ACC_STEP(3); ACC_STEP(4); ACC_STEP(5); ACC_STEP(6); ACC_STEP(7);
    }
    ACC_FLUSH(0); ACC_FLUSH(1); ACC_FLUSH(2); ACC_FLUSH(3); ACC_FLUSH(4); ACC_FLUSH(5); ACC_FLUSH(6); ACC_FLUSH(7);
}

/* rows b0 .. b1 - 1 (a row block) against panel p: KCP column pairs at a time over every row tile of the
 * block (the panel's slice, KCP * NR * 4 = 12 KiB, stays in L1 across them), then scaled into y */
static void block_panel(const int32_t *xq, const float *xs, int64_t kp, int64_t b0, int64_t b1, int64_t p,
                        const int32_t *packed, const float *wscale, int64_t N, float *f, uint16_t *ybf,
                        float *yf) {
    const int64_t tiles = (b1 - b0 + MR - 1) / MR;
    const int32_t *panel = packed + p * kp * NR;
    for (int64_t i = 0; i < tiles * MR * NR; i += 16) _mm512_store_ps(f + i, _mm512_setzero_ps());
    for (int64_t c0 = 0; c0 < kp; c0 += KCP)
        for (int64_t t = 0; t < tiles; t++)
            micro_tile(xq, kp, b0 + t * MR, panel, c0, c0 + KCP < kp ? c0 + KCP : kp, f + t * MR * NR);
    __m512 sw[3];
    for (int v = 0; v < 3; v++) sw[v] = _mm512_loadu_ps(wscale + p * NR + 16 * v);
    for (int64_t m = b0; m < b1; m++) {
        const __m512 rs = _mm512_set1_ps(xs[m]);
        for (int v = 0; v < 3; v++) {
            const int64_t n = p * NR + 16 * v;
            if (n >= N) break;
            const __mmask16 mk = (__mmask16)(N - n >= 16 ? 0xFFFFu : (1u << (N - n)) - 1u);
            const __m512 y = _mm512_mul_ps(_mm512_load_ps(f + (m - b0) * NR + 16 * v), _mm512_mul_ps(sw[v], rs));
            if (yf)
                _mm512_mask_storeu_ps(yf + m * N + n, mk, y);
            else
                _mm256_mask_storeu_epi16(ybf + m * N + n, mk, to_bf16x16(y));
        }
    }
}

/* y [M, N] (bfloat16 ybf or float32 yf) = x [M, K] (bfloat16 xbf or float32 xf) @ W.T, W packed by
 * gemm_pack_i16. Returns 0, -1 for arguments it does not take, -2 when out of memory. */
int gemm_i16(const int32_t *packed, const float *wscale, int64_t N, int64_t K, const uint16_t *xbf,
             const float *xf, int64_t M, uint16_t *ybf, float *yf) {
    if (M <= 0 || N <= 0 || K <= 0 || (!xbf == !xf) || (!ybf == !yf)) return -1;
    const int64_t kp = (K + 1) / 2, panels = (N + NR - 1) / NR, blocks = (M + MB - 1) / MB;
    const int64_t mp = (M + MR - 1) / MR * MR;
    int16_t *xq = aligned_alloc(64, (size_t)((mp * kp * 4 + 63) / 64 * 64));
    float *xs = malloc((size_t)M * sizeof(float));
    if (!xq || !xs) {
        free(xq);
        free(xs);
        return -2;
    }
    const int many = omp_get_max_threads() > 1;
#pragma omp parallel for if (many && M >= 32)
    for (int64_t m = 0; m < M; m++)
        quant_row(xbf ? xbf + m * K : NULL, xf ? xf + m * K : NULL, K, kp, xq + m * 2 * kp, xs + m);
    memset(xq + M * 2 * kp, 0, (size_t)((mp - M) * kp * 4));
    /* a thread takes whole (row block, panel) tiles in order: its row blocks' codes stay in L2 across panels */
    int failed = 0;
#pragma omp parallel if (many && M * N * K >= (1 << 22))
    {
        float *f = aligned_alloc(64, (size_t)MB * NR * sizeof(float)); /* a row block's sums for one panel */
        if (!f) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t p = 0; p < panels; p++)
                if (f)
                    block_panel((const int32_t *)xq, xs, kp, b * MB, (b + 1) * MB < M ? (b + 1) * MB : M, p, packed,
                                wscale, N, f, ybf, yf);
        free(f);
    }
    free(xq);
    free(xs);
    return failed ? -2 : 0;
}
