/* Native CPU kernels for the bfloat16 decode path (built at first use by cpu_native.py; see there).
 *
 * paged_decode_bf16: one query token per sequence against the paged KV cache, read in place through the
 *   block table (no gather, no transposes), float32 scores, softmax and accumulation, bfloat16 out.
 * quant_gemv: y = x @ W.T for a few rows of x against the exact Q4_1 / Q8_0 weight codes: x as int16 codes
 *   (one scale per row), integer block dot products (AVX-512 VNNI vpdpwssd), float32 block scales.
 * decode_attention_block / decode_mlp_block: one decode layer's two halves, fused.
 * Parallel loops use OpenMP; linked against the libgomp torch already loaded, torch.set_num_threads applies.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__))
#error "the native kernels need AVX-512 (F, BW, VNNI) and F16C; the torch path serves this CPU"
#endif
#include <immintrin.h>
#include <omp.h>

#include "cpu_native.h"

int lt_has_vnni(void) { return 1; }

int lt_threads(void) { return omp_get_max_threads(); }

#define DIM 64   /* head size the kernel is specialised for (SmolLM2, Llama 3.2 1B...) */
#define MAXG 4   /* query heads per KV head it holds in registers */
#define MAXHD 4096 /* query heads x head size */

/* ask for a token chunk's rows before they are read (pages are scattered, so the hardware prefetcher cannot
 * run ahead across them) */
static inline void prefetch_rows(const uint16_t *const *rows, int64_t n, int64_t row_bytes) {
    for (int64_t j = 0; j < n; j++)
        for (int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch((const char *)rows[j] + b, _MM_HINT_T0);
}

/* lane j of the result = the sum of all 16 lanes of input 4 * (j % 4) + j / 4 */
static inline __m512 reduce16(float v[16][16]) {
    __m512 w[8], x[4];
    for (int i = 0; i < 8; i++) {
        const __m512 a = _mm512_load_ps(v[2 * i]), b = _mm512_load_ps(v[2 * i + 1]);
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; i < 4; i++)
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
    const __m512 y0 = _mm512_add_ps(_mm512_unpacklo_ps(x[0], x[1]), _mm512_unpackhi_ps(x[0], x[1]));
    const __m512 y1 = _mm512_add_ps(_mm512_unpacklo_ps(x[2], x[3]), _mm512_unpackhi_ps(x[2], x[3]));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(y0), _mm512_castps_pd(y1))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(y0), _mm512_castps_pd(y1))));
}

/* One query token (q: [H, 64] float32, already scaled) against one sequence's L cached tokens, read in place
 * through its block table; out: [H, 64] float32. scratch: float [H * (L + 16)].
 * The cache is walked 16 tokens at a time, every KV head of a chunk before the next chunk: each token's row
 * (all heads, contiguous) is read once, in order, while the next chunk's rows are being fetched. */
static void attend_row(const float *q, const uint16_t *kc, const uint16_t *vc, const int32_t *tab, int64_t L,
                       int64_t H, int64_t KVH, int64_t BS, float *scratch, float *out) {
    const int64_t G = H / KVH, stride = (L + 15) & ~15L, row = KVH * DIM;
    const uint16_t *krow[2][16], *vrow[2][16];
    float tmp[MAXG][16][16] __attribute__((aligned(64)));
    __m512 peakv[MAXHD / DIM];
    for (int64_t hg = 0; hg < H; hg++) peakv[hg] = _mm512_set1_ps(-INFINITY);
    /* row addresses of chunk c (t = 16c ..) into slot c % 2; chunks are visited in order, so the block index
     * and offset advance by counting (no division per token) */
    int64_t bi = 0, off = 0;
#define CHUNK_ROWS(c)                                                                                          \
    do {                                                                                                       \
        for (int64_t j = 0; j < 16 && 16 * (c) + j < L; j++) {                                                 \
            const int64_t slot = ((int64_t)tab[bi] * BS + off) * row;                                          \
            if (++off == BS) {                                                                                 \
                off = 0;                                                                                       \
                bi++;                                                                                          \
            }                                                                                                  \
            krow[(c) & 1][j] = kc + slot;                                                                      \
            vrow[(c) & 1][j] = vc + slot;                                                                      \
        }                                                                                                      \
    } while (0)
    const int64_t chunks = (L + 15) / 16;
    CHUNK_ROWS(0);
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t t0 = 16 * c, n = L - t0 < 16 ? L - t0 : 16;
        if (c + 1 < chunks) {
            CHUNK_ROWS(c + 1);
            prefetch_rows(krow[(c + 1) & 1], L - t0 - 16 < 16 ? L - t0 - 16 : 16, row * 2);
        }
        prefetch_rows(vrow[c & 1], n, row * 2); /* needed by the value pass, after this one */
        const __mmask16 valid = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1u);
        for (int64_t h = 0; h < KVH; h++) {
            __m512 qv[MAXG][4];
            for (int64_t g = 0; g < G; g++)
                for (int cc = 0; cc < 4; cc++) qv[g][cc] = _mm512_loadu_ps(q + (h * G + g) * DIM + 16 * cc);
            for (int64_t j = 0; j < 16; j++) {
                const int slot = (int)(4 * (j % 4) + j / 4); /* the order reduce16 wants its inputs in */
                if (j < n) {
                    const uint16_t *kp = krow[c & 1][j] + h * DIM;
                    const __m512 k0 = load_bf16x16(kp), k1 = load_bf16x16(kp + 16);
                    const __m512 k2 = load_bf16x16(kp + 32), k3 = load_bf16x16(kp + 48);
                    for (int64_t g = 0; g < G; g++) {
                        __m512 sv = _mm512_mul_ps(qv[g][0], k0);
                        sv = _mm512_fmadd_ps(qv[g][1], k1, sv);
                        sv = _mm512_fmadd_ps(qv[g][2], k2, sv);
                        sv = _mm512_fmadd_ps(qv[g][3], k3, sv);
                        _mm512_store_ps(tmp[g][slot], sv);
                    }
                } else {
                    for (int64_t g = 0; g < G; g++) _mm512_store_ps(tmp[g][slot], _mm512_setzero_ps());
                }
            }
            for (int64_t g = 0; g < G; g++) {
                const int64_t hg = h * G + g;
                const __m512 r = reduce16(tmp[g]);
                _mm512_storeu_ps(scratch + hg * stride + t0, r);
                peakv[hg] = _mm512_mask_max_ps(peakv[hg], valid, peakv[hg], r);
            }
        }
    }
    float inv[MAXHD / DIM];
    for (int64_t hg = 0; hg < H; hg++) {
        float *sg = scratch + hg * stride;
        const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(peakv[hg]));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t t = 0; t < L; t += 16) {
            const __mmask16 mk = (__mmask16)(L - t >= 16 ? 0xFFFFu : (1u << (L - t)) - 1u);
            const __m512 e = _mm512_maskz_mov_ps(mk, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sg + t), m)));
            _mm512_mask_storeu_ps(sg + t, mk, e);
            sum = _mm512_add_ps(sum, e);
        }
        inv[hg] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    /* weighted values, chunk by chunk; each head's accumulators wait in out[] between chunks */
    for (int64_t j = 0; j < H * DIM; j++) out[j] = 0.0f;
    bi = 0;
    off = 0;
    CHUNK_ROWS(0);
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t t0 = 16 * c, n = L - t0 < 16 ? L - t0 : 16;
        if (c + 1 < chunks) {
            CHUNK_ROWS(c + 1);
            prefetch_rows(vrow[(c + 1) & 1], L - t0 - 16 < 16 ? L - t0 - 16 : 16, row * 2);
        }
        for (int64_t h = 0; h < KVH; h++) {
            __m512 acc[MAXG][4];
            for (int64_t g = 0; g < G; g++)
                for (int cc = 0; cc < 4; cc++) acc[g][cc] = _mm512_loadu_ps(out + (h * G + g) * DIM + 16 * cc);
            for (int64_t j = 0; j < n; j++) {
                const uint16_t *vp = vrow[c & 1][j] + h * DIM;
                const __m512 v0 = load_bf16x16(vp), v1 = load_bf16x16(vp + 16);
                const __m512 v2 = load_bf16x16(vp + 32), v3 = load_bf16x16(vp + 48);
                for (int64_t g = 0; g < G; g++) {
                    const __m512 p = _mm512_set1_ps(scratch[(h * G + g) * stride + t0 + j]);
                    acc[g][0] = _mm512_fmadd_ps(p, v0, acc[g][0]);
                    acc[g][1] = _mm512_fmadd_ps(p, v1, acc[g][1]);
                    acc[g][2] = _mm512_fmadd_ps(p, v2, acc[g][2]);
                    acc[g][3] = _mm512_fmadd_ps(p, v3, acc[g][3]);
                }
            }
            for (int64_t g = 0; g < G; g++)
                for (int cc = 0; cc < 4; cc++) _mm512_storeu_ps(out + (h * G + g) * DIM + 16 * cc, acc[g][cc]);
        }
    }
#undef CHUNK_ROWS
    for (int64_t hg = 0; hg < H; hg++)
        for (int cc = 0; cc < 4; cc++)
            _mm512_storeu_ps(out + hg * DIM + 16 * cc,
                             _mm512_mul_ps(_mm512_loadu_ps(out + hg * DIM + 16 * cc), _mm512_set1_ps(inv[hg])));
}

static int attention_shape_ok(int64_t H, int64_t KVH, int64_t D) {
    return KVH > 0 && H % KVH == 0 && D == DIM && H / KVH <= MAXG && H * DIM <= MAXHD;
}

/* q [nq, H, 64] bfloat16; caches [NB, BS, KVH, 64] bfloat16; tables int32 [*, W]; seq_lens int32 [*]; rows int64
 * [nq] (table row of each query row) or NULL (row i); out [nq, H, 64] bfloat16; scratch float [H * (max seq_len
 * + 16)]. Returns 0, or -1 for shapes it does not handle (the caller then runs the torch path). */
int paged_decode_bf16(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, const int32_t *tables,
                      int64_t W, const int32_t *seq_lens, const int64_t *rows, int64_t nq, int64_t H,
                      int64_t KVH, int64_t D, int64_t BS, float scale, uint16_t *out, float *scratch) {
    if (!attention_shape_ok(H, KVH, D)) return -1;
    float qf[MAXHD], of[MAXHD];
    for (int64_t i = 0; i < nq; i++) {
        const int64_t r = rows ? rows[i] : i;
        for (int64_t j = 0; j < H * DIM; j++) qf[j] = bf2f(q[i * H * DIM + j]) * scale;
        attend_row(qf, kc, vc, tables + r * W, seq_lens[r], H, KVH, BS, scratch, of);
        for (int64_t j = 0; j < H * DIM; j++) out[i * H * DIM + j] = f2bf(of[j]);
    }
    return 0;
}

/* ---- weight-only quantized GEMV: y[m, n] = sum_k x[m, k] * W[n, k] ------------------------------------- */

#define MAXK 8192
#define TILE 16  /* output rows per tile: one float32 lane each */
#define MAXM 8   /* x rows computed together against one pass over the weights */

/* x (float32 [K]) -> int16 codes with one scale for the row (dx = max|x| / 32767: a step 128x finer than
 * bfloat16's own rounding of x, so the products are as exact as the float path's), and per 32-block sums of x
 * (Q4_1's minimum term). */
static float quantize_x(const float *x, int64_t K, int16_t *xq, float *sx) {
    __m512 amax = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
    const float a = _mm512_reduce_max_ps(amax);
    const float dx = a / 32767.0f, id = a > 0.0f ? 32767.0f / a : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    for (int64_t k = 0; k < K; k += 32) {
        const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)); /* round to nearest even */
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
        _mm256_storeu_si256((__m256i *)(xq + k), _mm512_cvtsepi32_epi16(q0));
        _mm256_storeu_si256((__m256i *)(xq + k + 16), _mm512_cvtsepi32_epi16(q1));
        sx[k / 32] = _mm512_reduce_add_ps(_mm512_add_ps(x0, x1));
    }
    return dx;
}

/* Weight layout, tile by tile (16 output rows), block by block (32 columns), one memory stream:
 * Q4_1: 8 x 32 bytes of nibbles, then 16 fp16 scales, then 16 fp16 minimums (320 bytes). In chunk c (columns
 *   4c .. 4c+3) byte i holds row i/2: low nibble column 4c + i%2, high nibble column 4c + 2 + i%2, so the
 *   widened low (high) nibbles are the row-major int16 pairs one vpdpwssd multiplies with two x codes.
 * Q8_0: 16 x 32 bytes of int8 codes (chunk c: byte i = row i/2, column 2c + i%2), then 16 fp16 scales (544 B).
 */
static inline int64_t block_bytes(int kind) { return kind == 4 ? 320 : 544; }

static inline __m512i bcast_pair(const int16_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return _mm512_set1_epi32(v);
}

/* One tile against M quantized x rows (lanes = rows of the tile). Always inlined with a constant M (see
 * tile_dispatch), so the per-row accumulators live in registers; up to 2 rows each keeps two integer
 * accumulators per block (two dependency chains), more rows one each (M chains already overlap). */
#define TILE_FN static inline __attribute__((always_inline))

TILE_FN void tile_q4(const uint8_t *t, int64_t NB, const int16_t *xq, int64_t K, const float *sx, const float *dx,
                     const int M, float *out, int64_t ldo) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    const int two = M <= 2;
    __m512 acc[MAXM], macc[MAXM];
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) acc[m] = macc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < NB; b++, t += 320) {
        __m512i ia[MAXM], ib[MAXM];
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) ia[m] = ib[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(t + 32 * c));
            const __m512i w0 = _mm512_cvtepu8_epi16(_mm256_and_si256(raw, low));
            const __m512i w1 = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low));
#pragma GCC unroll 8
            for (int m = 0; m < M; m++) {
                const int16_t *xk = xq + m * K + 32 * b + 4 * c;
                ia[m] = _mm512_dpwssd_epi32(ia[m], w0, bcast_pair(xk));
                if (two)
                    ib[m] = _mm512_dpwssd_epi32(ib[m], w1, bcast_pair(xk + 2));
                else
                    ia[m] = _mm512_dpwssd_epi32(ia[m], w1, bcast_pair(xk + 2));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t + 256)));
        const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t + 288)));
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) {
            const __m512i dot = two ? _mm512_add_epi32(ia[m], ib[m]) : ia[m];
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[m]);
            macc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(sx[m * (K / 32) + b]), macc[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; m++)
        _mm512_storeu_ps(out + m * ldo, _mm512_fmadd_ps(acc[m], _mm512_set1_ps(dx[m]), macc[m]));
}

TILE_FN void tile_q8(const uint8_t *t, int64_t NB, const int16_t *xq, int64_t K, const float *dx, const int M,
                     float *out, int64_t ldo) {
    const int two = M <= 2;
    __m512 acc[MAXM];
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < NB; b++, t += 544) {
        __m512i ia[MAXM], ib[MAXM];
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) ia[m] = ib[m] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 16; c += 2) {
            const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(t + 32 * c)));
            const __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(t + 32 * c + 32)));
#pragma GCC unroll 8
            for (int m = 0; m < M; m++) {
                const int16_t *xk = xq + m * K + 32 * b + 2 * c;
                ia[m] = _mm512_dpwssd_epi32(ia[m], w0, bcast_pair(xk));
                if (two)
                    ib[m] = _mm512_dpwssd_epi32(ib[m], w1, bcast_pair(xk + 2));
                else
                    ia[m] = _mm512_dpwssd_epi32(ia[m], w1, bcast_pair(xk + 2));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t + 512)));
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) {
            const __m512i dot = two ? _mm512_add_epi32(ia[m], ib[m]) : ia[m];
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) _mm512_storeu_ps(out + m * ldo, _mm512_mul_ps(acc[m], _mm512_set1_ps(dx[m])));
}

/* every tile of one weight matrix against mm (1..MAXM) rows, with the row count a compile-time constant */
#define TILE_LOOP(MM)                                                                                          \
    _Pragma("omp parallel for schedule(static) if (par)")                                                      \
    for (int64_t n0 = 0; n0 < N; n0 += TILE) {                                                                 \
        const uint8_t *t = w + (n0 / TILE) * tile_bytes;                                                       \
        if (kind == 4)                                                                                         \
            tile_q4(t, NB, xq, K, sx, dx, MM, y + n0, N);                                                      \
        else                                                                                                   \
            tile_q8(t, NB, xq, K, dx, MM, y + n0, N);                                                          \
    }

static void tile_dispatch(int kind, const uint8_t *w, int64_t N, int64_t K, const int16_t *xq, const float *sx,
                          const float *dx, int mm, float *y) {
    const int64_t NB = K / 32, tile_bytes = NB * block_bytes(kind);
    /* tiles split over torch's OpenMP threads (the same libgomp: torch.set_num_threads applies) when big enough */
    const int par = N * K * mm >= (1 << 18) && omp_get_max_threads() > 1;
    switch (mm) {
    case 1: TILE_LOOP(1) break;
    case 2: TILE_LOOP(2) break;
    case 3: TILE_LOOP(3) break;
    case 4: TILE_LOOP(4) break;
    case 5: TILE_LOOP(5) break;
    case 6: TILE_LOOP(6) break;
    case 7: TILE_LOOP(7) break;
    default: TILE_LOOP(8) break;
    }
}

/* y [M, N] float32 = x [M, K] float32 @ W.T, W in the tiled layout above (N % 16 == 0, K % 32 == 0, K <= MAXK) */
static void gemv_core(int kind, const uint8_t *w, int64_t N, int64_t K, const float *x, int64_t M, float *y) {
    const int64_t NB = K / 32;
    static _Thread_local int16_t xq[MAXM * MAXK] __attribute__((aligned(64)));
    static _Thread_local float sx[MAXM * MAXK / 32];
    float dx[MAXM];
    for (int64_t m0 = 0; m0 < M; m0 += MAXM) {
        const int mm = M - m0 < MAXM ? (int)(M - m0) : MAXM;
        for (int m = 0; m < mm; m++) dx[m] = quantize_x(x + (m0 + m) * K, K, xq + m * K, sx + m * NB);
        tile_dispatch(kind, w, N, K, xq, sx, dx, mm, y + m0 * N);
    }
}

static int gemv_shape_ok(int kind, int64_t N, int64_t K) {
    return K % 32 == 0 && K <= MAXK && N % TILE == 0 && (kind == 4 || kind == 8);
}

/* One weight matrix (kind 4: Q4_1, 8: Q8_0) in the tiled layout. x: M rows, bfloat16 (xbf) or float32 (xf)
 * [M, K]; y: bfloat16 (ybf) or float32 (yf) [M, N]; work: float [M * (K + N)] when x or y is bfloat16.
 * Returns 0, or -1 for shapes it does not handle. */
int quant_gemv(int kind, const uint8_t *w, int64_t N, int64_t K, const uint16_t *xbf, const float *xf, int64_t M,
               uint16_t *ybf, float *yf, float *work) {
    if (!gemv_shape_ok(kind, N, K)) return -1;
    float *x = (float *)xf, *y = yf;
    if (!xf) {
        x = work;
        for (int64_t j = 0; j < M * K; j++) x[j] = bf2f(xbf[j]);
    }
    if (!yf) y = work + M * K;
    gemv_core(kind, w, N, K, x, M, y);
    if (!yf)
        for (int64_t j = 0; j < M * N; j++) ybf[j] = f2bf(y[j]);
    return 0;
}

/* ---- fused decode layer halves (one query token per sequence, row i = table row i) ---------------------- */

static void rms_norm_rows(const uint16_t *hidden, int64_t M, int64_t hid, const float *w, float eps, float *h,
                          float *xn) {
    for (int64_t m = 0; m < M; m++) {
        float *hm = h + m * hid, *xm = xn + m * hid;
        for (int64_t j = 0; j < hid; j++) hm[j] = bf2f(hidden[m * hid + j]);
        float ss = 0.0f;
        for (int64_t j = 0; j < hid; j++) ss += hm[j] * hm[j];
        const float r = 1.0f / sqrtf(ss / (float)hid + eps);
        for (int64_t j = 0; j < hid; j++) xm[j] = hm[j] * r * w[j];
    }
}

/* hidden [M, hid] bfloat16 (updated in place: hidden += o(attention(rope(qkv(norm(hidden)))))); the new keys and
 * values go to their cache slots before attention reads them. cos/sin: the model's float32 tables [*, 32] at
 * row positions[m]. work: float [M * (3 hid + qkv_n + H D + H * (max seq_len + 16))]. */
int decode_attention_block(uint16_t *hidden, int64_t M, int64_t hid, const float *norm_w, float eps,
                           const uint8_t *wqkv, const uint8_t *wo, const float *cos_t, const float *sin_t,
                           const int64_t *positions, const int64_t *slots, uint16_t *kc, uint16_t *vc,
                           const int32_t *tables, int64_t W, const int32_t *seq_lens, int64_t H, int64_t KVH,
                           int64_t D, int64_t BS, float scale, float *work) {
    const int64_t qn = H * D, kvn = KVH * D, qkv_n = qn + 2 * kvn, half = D / 2;
    if (!attention_shape_ok(H, KVH, D) || !gemv_shape_ok(4, qkv_n, hid) || !gemv_shape_ok(4, hid, qn)) return -1;
    float *h = work, *xn = h + M * hid, *qkv = xn + M * hid, *att = qkv + M * qkv_n, *o = att + M * qn;
    float *scratch = o + M * hid;
    rms_norm_rows(hidden, M, hid, norm_w, eps, h, xn);
    gemv_core(4, wqkv, qkv_n, hid, xn, M, qkv);
    for (int64_t m = 0; m < M; m++) {
        float *row = qkv + m * qkv_n;
        const float *c = cos_t + positions[m] * half, *sn = sin_t + positions[m] * half;
        for (int64_t head = 0; head < H + KVH; head++) { /* half-split rotary on the query and key heads */
            float *x = row + head * D;
            for (int64_t j = 0; j < half; j++) {
                const float a = x[j], b = x[j + half];
                x[j] = a * c[j] - b * sn[j];
                x[j + half] = b * c[j] + a * sn[j];
            }
        }
        uint16_t *kd = kc + slots[m] * kvn, *vd = vc + slots[m] * kvn;
        for (int64_t j = 0; j < kvn; j++) {
            kd[j] = f2bf(row[qn + j]);
            vd[j] = f2bf(row[qn + kvn + j]);
        }
    }
    int64_t longest = 0;
    for (int64_t m = 0; m < M; m++) longest = seq_lens[m] > longest ? seq_lens[m] : longest;
    const int64_t per_row = H * (longest + 16); /* each row its own softmax scratch */
#pragma omp parallel for schedule(dynamic, 1) if (M > 1 && omp_get_max_threads() > 1)
    for (int64_t m = 0; m < M; m++) {
        float *qrow = qkv + m * qkv_n;
        for (int64_t j = 0; j < qn; j++) qrow[j] *= scale;
        attend_row(qrow, kc, vc, tables + m * W, seq_lens[m], H, KVH, BS, scratch + m * per_row, att + m * qn);
    }
    gemv_core(4, wo, hid, qn, att, M, o);
    for (int64_t j = 0; j < M * hid; j++) hidden[j] = f2bf(h[j] + o[j]);
    return 0;
}

/* hidden [M, hid] bfloat16 += down(silu(gate) * up), gate|up = gate_up(norm(hidden)).
 * work: float [M * (2 hid + 3 inter + hid)]. */
int decode_mlp_block(uint16_t *hidden, int64_t M, int64_t hid, const float *norm_w, float eps,
                     const uint8_t *wgu, const uint8_t *wdown, int64_t inter, float *work) {
    if (!gemv_shape_ok(4, 2 * inter, hid) || !gemv_shape_ok(4, hid, inter)) return -1;
    float *h = work, *xn = h + M * hid, *gu = xn + M * hid, *a = gu + M * 2 * inter, *d = a + M * inter;
    rms_norm_rows(hidden, M, hid, norm_w, eps, h, xn);
    gemv_core(4, wgu, 2 * inter, hid, xn, M, gu);
    for (int64_t m = 0; m < M; m++) {
        const float *g = gu + m * 2 * inter, *u = g + inter;
        float *am = a + m * inter;
        int64_t j = 0;
        for (; j + 16 <= inter; j += 16) {
            const __m512 gv = _mm512_loadu_ps(g + j);
            const __m512 sig = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
            _mm512_storeu_ps(am + j, _mm512_mul_ps(sig, _mm512_loadu_ps(u + j)));
        }
        for (; j < inter; j++) am[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
    gemv_core(4, wdown, hid, inter, a, M, d);
    for (int64_t j = 0; j < M * hid; j++) hidden[j] = f2bf(h[j] + d[j]);
    return 0;
}

/* ---- one decode step's arguments, filled once per step: each layer half is then a two-argument call ------- */

typedef struct {
    uint16_t *hidden;
    int64_t rows, hid, heads, kv_heads, head_dim, block_size, inter, table_width;
    float eps, scale;
    const int64_t *layer_ptrs; /* per layer: attn_norm, qkv, o, ffn_norm, gate_up, down, k cache, v cache */
    const float *cos_t, *sin_t;
    const int64_t *positions, *slots;
    const int32_t *tables, *seq_lens;
    float *work;
} DecodeStep;

int step_attention(const DecodeStep *s, int64_t layer) {
    const int64_t *p = s->layer_ptrs + 8 * layer;
    return decode_attention_block(s->hidden, s->rows, s->hid, (const float *)p[0], s->eps, (const uint8_t *)p[1],
                                  (const uint8_t *)p[2], s->cos_t, s->sin_t, s->positions, s->slots, (uint16_t *)p[6],
                                  (uint16_t *)p[7], s->tables, s->table_width, s->seq_lens, s->heads, s->kv_heads,
                                  s->head_dim, s->block_size, s->scale, s->work);
}

int step_mlp(const DecodeStep *s, int64_t layer) {
    const int64_t *p = s->layer_ptrs + 8 * layer;
    return decode_mlp_block(s->hidden, s->rows, s->hid, (const float *)p[3], s->eps, (const uint8_t *)p[4],
                            (const uint8_t *)p[5], s->inter, s->work);
}
