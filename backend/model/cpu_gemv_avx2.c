/* The decode GEMV of cpu_native.c for CPUs without AVX-512 (AVX2 + FMA + F16C: an EPYC Zen 2/3, a Haswell+
 * Xeon). Built on its own into a small library (cpu_native.py, ``gemv_library``) where the full native library
 * cannot build.
 *
 * Same weight layout and the same arithmetic as cpu_native.c's quant_gemv: x rounded to int16 codes with one
 * scale per row, integer dot products per 32-column block of the GGUF's exact Q4_1 / Q8_0 codes, scaled in
 * float32. A tile's 16 output rows are two 8-lane halves here: a chunk's 32 bytes widen to 32 int16 (16 rows x
 * 2 columns) and vpmaddwd (AVX2's vpdpwssd without the add) multiplies each half with a broadcast pair of x codes.
 *
 * Why: on such a CPU torch's int4 kernel took 0.28 ms for SmolLM2's gate/up at one row and its Q8_0 LM head as
 * two int4 halves 9.3 ms, on one core; a decode step is mostly these matmuls.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "the AVX2 GEMV needs AVX2, FMA and F16C"
#endif

#define MAXK 8192
#define TILE 16
#define MAXM 8

static inline float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f2bf(float f) { /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* x (float32 [K]) -> int16 codes, one scale for the row (cpu_native.c's quantize_x), and per 32-block sums */
static float quantize_x(const float *x, int64_t K, int16_t *xq, float *sx) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    const float a = hmax8(amax);
    const float dx = a / 32767.0f, id = a > 0.0f ? 32767.0f / a : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    for (int64_t k = 0; k < K; k += 32) {
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < 32; j += 16) {
            const __m256 x0 = _mm256_loadu_ps(x + k + j), x1 = _mm256_loadu_ps(x + k + j + 8);
            const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(x0, vid)); /* round to nearest even */
            const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(x1, vid));
            /* packs interleaves 128-bit lanes: put them back in order */
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
            _mm256_storeu_si256((__m256i *)(xq + k + j), p);
            s = _mm256_add_ps(s, _mm256_add_ps(x0, x1));
        }
        sx[k / 32] = hsum8(s);
    }
    return dx;
}

static inline int64_t block_bytes(int kind) { return kind == 4 ? 320 : 544; }

static inline __m256i bcast_pair(const int16_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return _mm256_set1_epi32(v);
}

#define TILE_FN static inline __attribute__((always_inline))

/* one 16-row tile of Q4_1 against M rows: lo = rows 0..7, hi = rows 8..15 of the tile */
TILE_FN void tile_q4(const uint8_t *t, int64_t NB, const int16_t *xq, int64_t K, const float *sx, const float *dx,
                     const int M, float *out, int64_t ldo) {
    const __m128i low = _mm_set1_epi8(0x0F);
    __m256 acc_lo[MAXM], acc_hi[MAXM], macc_lo[MAXM], macc_hi[MAXM];
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) acc_lo[m] = acc_hi[m] = macc_lo[m] = macc_hi[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < NB; b++, t += 320) {
        __m256i ilo[MAXM], ihi[MAXM];
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) ilo[m] = ihi[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m128i r0 = _mm_loadu_si128((const __m128i *)(t + 32 * c));      /* rows 0..7 */
            const __m128i r1 = _mm_loadu_si128((const __m128i *)(t + 32 * c + 16)); /* rows 8..15 */
            const __m256i w0lo = _mm256_cvtepu8_epi16(_mm_and_si128(r0, low));
            const __m256i w0hi = _mm256_cvtepu8_epi16(_mm_and_si128(r1, low));
            const __m256i w1lo = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(r0, 4), low));
            const __m256i w1hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(r1, 4), low));
#pragma GCC unroll 8
            for (int m = 0; m < M; m++) {
                const int16_t *xk = xq + m * K + 32 * b + 4 * c;
                const __m256i x0 = bcast_pair(xk), x1 = bcast_pair(xk + 2);
                /* a pair of products of codes <= 15 and |x| <= 32767 fits int32; 16 of them per block too */
                ilo[m] = _mm256_add_epi32(ilo[m], _mm256_add_epi32(_mm256_madd_epi16(w0lo, x0),
                                                                   _mm256_madd_epi16(w1lo, x1)));
                ihi[m] = _mm256_add_epi32(ihi[m], _mm256_add_epi32(_mm256_madd_epi16(w0hi, x0),
                                                                   _mm256_madd_epi16(w1hi, x1)));
            }
        }
        const __m256 dlo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 256)));
        const __m256 dhi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 272)));
        const __m256 mlo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 288)));
        const __m256 mhi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 304)));
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) {
            const __m256 s = _mm256_set1_ps(sx[m * (K / 32) + b]);
            acc_lo[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo[m]), dlo, acc_lo[m]);
            acc_hi[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi[m]), dhi, acc_hi[m]);
            macc_lo[m] = _mm256_fmadd_ps(mlo, s, macc_lo[m]);
            macc_hi[m] = _mm256_fmadd_ps(mhi, s, macc_hi[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) {
        const __m256 d = _mm256_set1_ps(dx[m]);
        _mm256_storeu_ps(out + m * ldo, _mm256_fmadd_ps(acc_lo[m], d, macc_lo[m]));
        _mm256_storeu_ps(out + m * ldo + 8, _mm256_fmadd_ps(acc_hi[m], d, macc_hi[m]));
    }
}

/* one 16-row tile of Q8_0 against M rows (chunk c: byte i = row i/2, columns 2c + i%2) */
TILE_FN void tile_q8(const uint8_t *t, int64_t NB, const int16_t *xq, int64_t K, const float *dx, const int M,
                     float *out, int64_t ldo) {
    __m256 acc_lo[MAXM], acc_hi[MAXM];
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) acc_lo[m] = acc_hi[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < NB; b++, t += 544) {
        __m256i ilo[MAXM], ihi[MAXM];
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) ilo[m] = ihi[m] = _mm256_setzero_si256();
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
            const __m256i wlo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(t + 32 * c)));
            const __m256i whi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(t + 32 * c + 16)));
#pragma GCC unroll 8
            for (int m = 0; m < M; m++) {
                /* |code| <= 128, |x| <= 32767: a pair fits int32 (2^23), 16 pairs per block too (2^27) */
                const __m256i x = bcast_pair(xq + m * K + 32 * b + 2 * c);
                ilo[m] = _mm256_add_epi32(ilo[m], _mm256_madd_epi16(wlo, x));
                ihi[m] = _mm256_add_epi32(ihi[m], _mm256_madd_epi16(whi, x));
            }
        }
        const __m256 dlo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 512)));
        const __m256 dhi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(t + 528)));
#pragma GCC unroll 8
        for (int m = 0; m < M; m++) {
            acc_lo[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo[m]), dlo, acc_lo[m]);
            acc_hi[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi[m]), dhi, acc_hi[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; m++) {
        const __m256 d = _mm256_set1_ps(dx[m]);
        _mm256_storeu_ps(out + m * ldo, _mm256_mul_ps(acc_lo[m], d));
        _mm256_storeu_ps(out + m * ldo + 8, _mm256_mul_ps(acc_hi[m], d));
    }
}

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
    const int par = N * K * mm >= (1 << 18) && omp_get_max_threads() > 1;
    switch (mm) { /* a constant row count per case: the accumulators stay in registers */
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

static void gemv_core(int kind, const uint8_t *w, int64_t N, int64_t K, const float *x, int64_t M, float *y) {
    const int64_t NB = K / 32;
    static _Thread_local int16_t xq[MAXM * MAXK] __attribute__((aligned(32)));
    static _Thread_local float sx[MAXM * MAXK / 32];
    float dx[MAXM];
    for (int64_t m0 = 0; m0 < M; m0 += MAXM) {
        const int mm = M - m0 < MAXM ? (int)(M - m0) : MAXM;
        for (int m = 0; m < mm; m++) dx[m] = quantize_x(x + (m0 + m) * K, K, xq + m * K, sx + m * NB);
        tile_dispatch(kind, w, N, K, xq, sx, dx, mm, y + m0 * N);
    }
}

int lt_gemv_avx2(void) { return 1; }

/* cpu_native.c's quant_gemv, same arguments: kind 4 Q4_1 / 8 Q8_0 in the tiled layout; x bfloat16 (xbf) or
 * float32 (xf) [M, K]; y bfloat16 (ybf) or float32 (yf) [M, N]; work float [M * (K + N)] for bfloat16 sides. */
int quant_gemv(int kind, const uint8_t *w, int64_t N, int64_t K, const uint16_t *xbf, const float *xf, int64_t M,
               uint16_t *ybf, float *yf, float *work) {
    if (K % 32 != 0 || K > MAXK || N % TILE != 0 || (kind != 4 && kind != 8)) return -1;
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

/* ---- decode attention over a paged float32 cache (a float32 model's decode steps) ------------------------
 * One query token per row against its sequence's pages, read in place through the block table: torch's path
 * gathers the pages into a copy, transposes it and runs two batched matmuls and a softmax per layer, which at
 * 500 cached tokens of SmolLM2 was ~40% of a decode step's CPU time on a Zen 3 core. */

/* e^x for x <= 0 (after subtracting the peak): Cephes' expf polynomial (cpu_native.h's exp_ps), 2^n built from
 * its exponent bits (x >= -87: n >= -126, a normal float) */
static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#define ADIM 64 /* head size the kernel takes (SmolLM2, Llama 3.2 1B's is 64 too) */
#define MAXG 8  /* query heads per KV head */

/* q [n, H, 64], caches [blocks, BS, KVH, 64], tables int32 [*, W], seq_lens int32 [*], rows int64 [n] (NULL: row
 * i is table row i), out [n, H, 64]; scratch float [threads][MAXG * (max seq_len + 8)]. Returns 0, or -1 for a
 * shape it does not take. */
int paged_decode_f32(const float *q, const float *kc, const float *vc, const int32_t *tables, int64_t W,
                     const int32_t *seq_lens, const int64_t *rows, int64_t n, int64_t H, int64_t KVH, int64_t D,
                     int64_t BS, float scale, float *out, float *scratch, int64_t stride) {
    if (D != ADIM || KVH < 1 || H % KVH || H / KVH > MAXG) return -1;
    const int64_t G = H / KVH;
    const int par = n * KVH > 1 && omp_get_max_threads() > 1;
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t g = 0; g < KVH; g++) {
            const int64_t row = rows ? rows[i] : i, L = seq_lens[row];
            const int32_t *tab = tables + row * W;
            float *s = scratch + (int64_t)omp_get_thread_num() * MAXG * stride;
            __m256 qv[MAXG][8];
            for (int64_t h = 0; h < G; h++)
                for (int c = 0; c < 8; c++)
                    qv[h][c] = _mm256_mul_ps(_mm256_loadu_ps(q + (i * H + g * G + h) * ADIM + 8 * c),
                                             _mm256_set1_ps(scale));
            float peak[MAXG];
            for (int64_t h = 0; h < G; h++) peak[h] = -INFINITY;
            for (int64_t t = 0; t < L; t++) { /* scores: each key read once for the group's query heads */
                const float *k = kc + (((int64_t)tab[t / BS] * BS + t % BS) * KVH + g) * ADIM;
                __m256 kv[8];
                for (int c = 0; c < 8; c++) kv[c] = _mm256_loadu_ps(k + 8 * c);
                for (int64_t h = 0; h < G; h++) {
                    __m256 a = _mm256_mul_ps(qv[h][0], kv[0]);
                    for (int c = 1; c < 8; c++) a = _mm256_fmadd_ps(qv[h][c], kv[c], a);
                    const float v = hsum8(a);
                    s[h * stride + t] = v;
                    peak[h] = v > peak[h] ? v : peak[h];
                }
            }
            float inv[MAXG];
            for (int64_t h = 0; h < G; h++) { /* softmax: e^(s - peak), summed */
                float *sh = s + h * stride;
                const __m256 m = _mm256_set1_ps(peak[h]);
                __m256 sum = _mm256_setzero_ps();
                int64_t t = 0;
                for (; t + 8 <= L; t += 8) {
                    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(sh + t), m));
                    _mm256_storeu_ps(sh + t, e);
                    sum = _mm256_add_ps(sum, e);
                }
                float tail = 0.0f;
                for (; t < L; t++) {
                    sh[t] = expf(sh[t] - peak[h]);
                    tail += sh[t];
                }
                inv[h] = 1.0f / (hsum8(sum) + tail);
            }
            for (int64_t h = 0; h < G; h++) { /* weighted sum of values, float32 accumulation */
                const float *sh = s + h * stride;
                __m256 acc[8];
                for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
                for (int64_t t = 0; t < L; t++) {
                    const float *v = vc + (((int64_t)tab[t / BS] * BS + t % BS) * KVH + g) * ADIM;
                    const __m256 p = _mm256_set1_ps(sh[t]);
                    for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), acc[c]);
                }
                float *o = out + (i * H + g * G + h) * ADIM;
                for (int c = 0; c < 8; c++) _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(acc[c], _mm256_set1_ps(inv[h])));
            }
        }
    }
    return 0;
}
