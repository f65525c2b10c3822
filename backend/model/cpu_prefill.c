/* Native causal prefill attention over the paged bfloat16 KV cache (built with cpu_native.c; see cpu_native.py).
 *
 * prefill_attention_bf16: one sequence's n new query tokens (positions L - n .. L - 1, their keys and values
 *   already written to the cache) against its L cached tokens, read through the block table. Both products run
 *   on AVX-512 BF16 dot products (vdpbf16ps: bfloat16 pairs, float32 accumulation), as torch's CPU flash
 *   attention runs them through its bfloat16 GEMM: scores in float32, softmax in float32, the probabilities
 *   rounded to bfloat16 for the weighted sum of values, float32 accumulation, bfloat16 out.
 *
 * Why not torch's SDPA: at 500 tokens of SmolLM2 (9 query heads, 3 KV heads, head size 64) it took 7.0 ms per
 * layer on one core, 43% of a whole prefill. Here the keys of a KV head are packed once per call into the
 * pair-interleaved layout vdpbf16ps wants, every query row of the head reuses them from cache, and causal rows
 * stop at their own position (the upper triangle is never computed).
 */
#include <stdlib.h>

#include <omp.h>

#include "cpu_native.h"

/* ---- row-wise pieces of a wide (prefill) step, bfloat16 in and out, float32 inside ------------------------
 * Torch runs each as two or three passes over the rows (widen, compute, round back; silu and the product as
 * separate ops over a strided half); one pass here. */

/* out[m] = x[m] / rms(x[m]) * w (w float32), as the model's float32 RMSNorm then rounded once */
int rows_rms_norm_bf16(const uint16_t *x, int64_t M, int64_t hid, const float *w, float eps, uint16_t *out) {
    if (hid % 16) return -1;
#pragma omp parallel for if (M > 64 && omp_get_max_threads() > 1)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *xm = x + m * hid;
        __m512 ss = _mm512_setzero_ps();
        for (int64_t j = 0; j < hid; j += 16) {
            const __m512 v = load_bf16x16(xm + j);
            ss = _mm512_fmadd_ps(v, v, ss);
        }
        const __m512 r = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)hid + eps));
        for (int64_t j = 0; j < hid; j += 16) {
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(load_bf16x16(xm + j), r), _mm512_loadu_ps(w + j));
            _mm256_storeu_si256((__m256i *)(out + m * hid + j), to_bf16x16(v));
        }
    }
    return 0;
}

/* gu [M, 2 inter] = gate | up -> out [M, inter] = silu(gate) * up */
int rows_silu_mul_bf16(const uint16_t *gu, int64_t M, int64_t inter, uint16_t *out) {
    if (inter % 16) return -1;
#pragma omp parallel for if (M > 64 && omp_get_max_threads() > 1)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *g = gu + m * 2 * inter, *u = g + inter;
        for (int64_t j = 0; j < inter; j += 16) {
            const __m512 gv = load_bf16x16(g + j);
            const __m512 sig = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f),
                                                               exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
            _mm256_storeu_si256((__m256i *)(out + m * inter + j), to_bf16x16(_mm512_mul_ps(sig, load_bf16x16(u + j))));
        }
    }
    return 0;
}

/* half-split rotary, in place, on heads [0, nh) of 64 values at the start of each row of x (row stride
 * `stride`): the query heads then the key heads of a fused QKV row; cos/sin: the model's float32 tables
 * [*, 32] at row positions[m] */
int rows_rope_bf16(uint16_t *x, int64_t n, int64_t stride, int64_t nh, const int64_t *positions,
                   const float *cos_t, const float *sin_t) {
#pragma omp parallel for if (n > 64 && omp_get_max_threads() > 1)
    for (int64_t m = 0; m < n; m++) {
        const float *c = cos_t + positions[m] * 32, *s = sin_t + positions[m] * 32;
        const __m512 c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + 16);
        const __m512 s0 = _mm512_loadu_ps(s), s1 = _mm512_loadu_ps(s + 16);
        for (int64_t h = 0; h < nh; h++) {
            uint16_t *v = x + m * stride + h * 64;
            const __m512 a0 = load_bf16x16(v), a1 = load_bf16x16(v + 16);
            const __m512 b0 = load_bf16x16(v + 32), b1 = load_bf16x16(v + 48);
            /* x[j] = a c - b s, x[j + 32] = b c + a s */
            _mm256_storeu_si256((__m256i *)v, to_bf16x16(_mm512_fmsub_ps(a0, c0, _mm512_mul_ps(b0, s0))));
            _mm256_storeu_si256((__m256i *)(v + 16), to_bf16x16(_mm512_fmsub_ps(a1, c1, _mm512_mul_ps(b1, s1))));
            _mm256_storeu_si256((__m256i *)(v + 32), to_bf16x16(_mm512_fmadd_ps(b0, c0, _mm512_mul_ps(a0, s0))));
            _mm256_storeu_si256((__m256i *)(v + 48), to_bf16x16(_mm512_fmadd_ps(b1, c1, _mm512_mul_ps(a1, s1))));
        }
    }
    return 0;
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)

#define PD 64 /* head size */
#define RB 8  /* query rows per block: 8 x 2 score accumulators */
#define PVB 4 /* rows per pass of the weighted values: 4 x 4 accumulators */
#define PMAXG 8

static inline const uint16_t *cache_row(const uint16_t *c, const int32_t *tab, int64_t t, int64_t BS,
                                        int64_t row) {
    return c + ((int64_t)tab[t / BS] * BS + t % BS) * row;
}

/* keys of one KV head as [blocks + 1][32][16] uint32: lane j of (block b, pair p) holds dims 2p, 2p + 1 of key
 * 16 b + j; keys past L and one extra block are zero (the score loop always reads two blocks) */
static void pack_keys(const uint16_t *kc, const int32_t *tab, int64_t L, int64_t BS, int64_t row, int64_t h,
                      int64_t blocks, uint32_t *dst) {
    memset(dst, 0, (size_t)(blocks + 1) * 32 * 16 * 4);
    for (int64_t t = 0; t < L; t++) {
        uint32_t src[32];
        memcpy(src, cache_row(kc, tab, t, BS, row) + h * PD, sizeof src);
        uint32_t *b = dst + (t / 16) * 32 * 16 + t % 16;
        for (int p = 0; p < 32; p++) b[p * 16] = src[p];
    }
}

/* values of one KV head as [pairs][64] uint32: lane d of pair p holds dim d of keys 2p (low) and 2p + 1 */
static void pack_values(const uint16_t *vc, const int32_t *tab, int64_t L, int64_t BS, int64_t row, int64_t h,
                        int64_t pairs, uint32_t *dst) {
    for (int64_t p = 0; p < pairs; p++) {
        const uint16_t *a = cache_row(vc, tab, 2 * p, BS, row) + h * PD;
        const uint16_t *b = 2 * p + 1 < L ? cache_row(vc, tab, 2 * p + 1, BS, row) + h * PD : NULL;
        for (int d = 0; d < PD; d++) dst[p * PD + d] = (uint32_t)a[d] | ((uint32_t)(b ? b[d] : 0) << 16);
    }
}

static inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/* RB query rows of KV head h (row r = token r / G, query head h G + r % G), rows past `rows` repeat the last */
static void attend_block(const uint16_t *q, int64_t H, int64_t G, int64_t h, int64_t r0, int64_t rows,
                         int64_t first_pos, const uint32_t *kp, const uint32_t *vp, float scale, int64_t lp,
                         float *S, uint16_t *P, uint16_t *out) {
    const uint16_t *qr[RB];
    int64_t cnt[RB], tok[RB];
    for (int i = 0; i < RB; i++) {
        const int64_t r = r0 + i < rows ? r0 + i : rows - 1;
        tok[i] = r / G;
        qr[i] = q + (tok[i] * H + h * G + r % G) * PD;
        cnt[i] = first_pos + tok[i] + 1; /* keys this row sees (causal) */
    }
    const int64_t maxcnt = cnt[RB - 1], nkb = (maxcnt + 15) / 16, pairs = (maxcnt + 1) / 2;
    uint32_t qw[RB][32];
    for (int i = 0; i < RB; i++) memcpy(qw[i], qr[i], sizeof qw[i]);
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t kb = 0; kb < nkb; kb += 2) {
        __m512 acc[RB][2];
        for (int i = 0; i < RB; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const uint32_t *k0 = kp + kb * 32 * 16;
        for (int p = 0; p < 32; p++) {
            const __m512bh a = as_bh(_mm512_loadu_si512(k0 + p * 16));
            const __m512bh b = as_bh(_mm512_loadu_si512(k0 + (32 + p) * 16));
            for (int i = 0; i < RB; i++) {
                const __m512bh x = as_bh(_mm512_set1_epi32((int)qw[i][p]));
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, a);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b);
            }
        }
        for (int i = 0; i < RB; i++) {
            _mm512_storeu_ps(S + i * lp + kb * 16, _mm512_mul_ps(acc[i][0], sc));
            _mm512_storeu_ps(S + i * lp + kb * 16 + 16, _mm512_mul_ps(acc[i][1], sc));
        }
    }
    float inv[RB];
    for (int i = 0; i < RB; i++) {
        float *s = S + i * lp;
        const __m512 m = row_peak(s, cnt[i]);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < 2 * pairs; j += 16) { /* zeros past the row's own keys, up to the block's pairs */
            const int64_t left = cnt[i] - j;
            const __mmask16 mk = (__mmask16)(left >= 16 ? 0xFFFFu : left <= 0 ? 0u : (1u << left) - 1u);
            const __m512 e = _mm512_maskz_mov_ps(mk, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), m)));
            sum = _mm512_add_ps(sum, e);
            _mm256_storeu_si256((__m256i *)(P + i * lp + j), (__m256i)_mm512_cvtneps_pbh(e));
        }
        inv[i] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    for (int h0 = 0; h0 < RB; h0 += PVB) { /* the weighted values, PVB rows at a time (4 x 4 accumulators) */
        const int64_t hp = (cnt[h0 + PVB - 1] + 1) / 2; /* these rows' pairs (P is zero past each row's keys) */
        __m512 acc[PVB][4];
        for (int i = 0; i < PVB; i++)
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
        for (int64_t p = 0; p < hp; p++) {
            const uint32_t *v = vp + p * PD;
            const __m512bh v0 = as_bh(_mm512_loadu_si512(v)), v1 = as_bh(_mm512_loadu_si512(v + 16));
            const __m512bh v2 = as_bh(_mm512_loadu_si512(v + 32)), v3 = as_bh(_mm512_loadu_si512(v + 48));
            for (int i = 0; i < PVB; i++) {
                uint32_t pw;
                memcpy(&pw, P + (h0 + i) * lp + 2 * p, 4);
                const __m512bh x = as_bh(_mm512_set1_epi32((int)pw));
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, v0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, v1);
                acc[i][2] = _mm512_dpbf16_ps(acc[i][2], x, v2);
                acc[i][3] = _mm512_dpbf16_ps(acc[i][3], x, v3);
            }
        }
        for (int i = 0; i < PVB && r0 + h0 + i < rows; i++) {
            uint16_t *o = out + (qr[h0 + i] - q);
            const __m512 s = _mm512_set1_ps(inv[h0 + i]);
            for (int c = 0; c < 4; c++)
                _mm256_storeu_si256((__m256i *)(o + 16 * c),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[i][c], s)));
        }
    }
}

/* q, out [n, H, 64] bfloat16 (n new tokens of one sequence, positions L - n .. L - 1); caches
 * [NB, BS, KVH, 64] bfloat16; tab: the sequence's int32 block table. Returns 0, -1 for shapes it does not
 * handle, -2 when out of memory (the caller then runs the torch path). */
int prefill_attention_bf16(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, const int32_t *tab,
                           int64_t L, int64_t n, int64_t H, int64_t KVH, int64_t D, int64_t BS, float scale,
                           uint16_t *out) {
    if (D != PD || KVH <= 0 || H % KVH || H / KVH > PMAXG || n <= 0 || n > L) return -1;
    const int64_t G = H / KVH, row = KVH * PD, blocks = (L + 15) / 16, pairs = (L + 1) / 2;
    const int64_t kstride = (blocks + 1) * 32 * 16, vstride = pairs * PD, lp = (blocks + 1) * 16;
    uint32_t *kp = aligned_alloc(64, (size_t)(KVH * kstride) * 4);
    uint32_t *vp = aligned_alloc(64, (size_t)((KVH * vstride + 16) * 4 + 63) / 64 * 64);
    if (!kp || !vp) {
        free(kp);
        free(vp);
        return -2;
    }
    const int many = omp_get_max_threads() > 1;
#pragma omp parallel for if (many && KVH > 1)
    for (int64_t h = 0; h < KVH; h++) {
        pack_keys(kc, tab, L, BS, row, h, blocks, kp + h * kstride);
        pack_values(vc, tab, L, BS, row, h, pairs, vp + h * vstride);
    }
    const int64_t rows = n * G, nrb = (rows + RB - 1) / RB;
    int failed = 0;
#pragma omp parallel if (many && KVH * nrb > 1)
    {
        float *S = aligned_alloc(64, (size_t)(RB * lp) * 4);
        uint16_t *P = aligned_alloc(64, (size_t)(RB * lp) * 2);
        if (!S || !P) {
#pragma omp atomic write
            failed = 1;
        }
        /* later row blocks see more keys: hand them out one at a time, longest first */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < KVH * nrb; task++) {
            if (S && P) {
                const int64_t h = task % KVH, rb = nrb - 1 - task / KVH;
                attend_block(q, H, G, h, rb * RB, rows, L - n, kp + h * kstride, vp + h * vstride, scale, lp, S, P,
                             out);
            }
        }
        free(S);
        free(P);
    }
    free(kp);
    free(vp);
    return failed ? -2 : 0;
}

int lt_has_bf16_dot(void) { return 1; }

#else /* no AVX-512 BF16: the torch path serves prefill */

int prefill_attention_bf16(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, const int32_t *tab,
                           int64_t L, int64_t n, int64_t H, int64_t KVH, int64_t D, int64_t BS, float scale,
                           uint16_t *out) {
    (void)q, (void)kc, (void)vc, (void)tab, (void)L, (void)n, (void)H, (void)KVH, (void)D, (void)BS, (void)scale;
    (void)out;
    return -1;
}

int lt_has_bf16_dot(void) { return 0; }

#endif

/* ---- the same attention in float32 arithmetic, for CPUs without bfloat16 dot products --------------------
 * prefill_attention_widened: the arguments and the result of prefill_attention_bf16 (bfloat16 cache, queries
 * and output), every product in float32 FMAs: queries, keys and values widened once per call (exact), scores,
 * softmax and the probabilities kept in float32, one rounding of the output. Why: torch's CPU SDPA over these
 * bfloat16 tensors widens them block by block (21 ms a layer at 1,000 tokens on one Xeon core without BF16),
 * over float32 copies it takes 17 ms plus the gather and the widening copies; here the keys of a KV head are
 * packed transposed once ([block][dim][16 keys]), each 8-row query block reuses them from cache, and causal
 * rows stop at their own position. */

#define WD 64 /* head size */
#define WRB 8 /* query rows per block: 8 x 2 score accumulators */
#define WPV 4 /* rows per pass of the weighted values: 4 x 4 accumulators */

/* keys of one KV head as float [blocks + 1][64][16]: lane j of (block b, dim d) = dim d of key 16 b + j */
static void widen_keys(const uint16_t *kc, const int32_t *tab, int64_t L, int64_t BS, int64_t row, int64_t h,
                       int64_t blocks, float *dst) {
    memset(dst, 0, (size_t)(blocks + 1) * WD * 16 * 4);
    for (int64_t t = 0; t < L; t++) {
        const uint16_t *src = kc + ((int64_t)tab[t / BS] * BS + t % BS) * row + h * WD;
        float *b = dst + (t / 16) * WD * 16 + t % 16;
        for (int d = 0; d < WD; d++) b[d * 16] = bf2f(src[d]);
    }
}

/* values of one KV head as float [L][64] */
static void widen_values(const uint16_t *vc, const int32_t *tab, int64_t L, int64_t BS, int64_t row, int64_t h,
                         float *dst) {
    for (int64_t t = 0; t < L; t++) {
        const uint16_t *src = vc + ((int64_t)tab[t / BS] * BS + t % BS) * row + h * WD;
        for (int d = 0; d < WD; d += 16) _mm512_storeu_ps(dst + t * WD + d, load_bf16x16(src + d));
    }
}

static void attend_block_widened(const uint16_t *q, int64_t H, int64_t G, int64_t h, int64_t r0, int64_t rows,
                                 int64_t first_pos, const float *kp, const float *vp, float scale, int64_t lp,
                                 float *S, uint16_t *out) {
    const uint16_t *qr[WRB];
    int64_t cnt[WRB];
    float qf[WRB][WD];
    for (int i = 0; i < WRB; i++) {
        const int64_t r = r0 + i < rows ? r0 + i : rows - 1, tok = r / G;
        qr[i] = q + (tok * H + h * G + r % G) * WD;
        cnt[i] = first_pos + tok + 1; /* keys this row sees (causal) */
        for (int d = 0; d < WD; d++) qf[i][d] = bf2f(qr[i][d]) * scale;
    }
    const int64_t nkb = (cnt[WRB - 1] + 15) / 16;
    for (int64_t kb = 0; kb < nkb; kb += 2) {
        __m512 acc[WRB][2];
        for (int i = 0; i < WRB; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const float *k0 = kp + kb * WD * 16;
        for (int d = 0; d < WD; d++) {
            const __m512 a = _mm512_loadu_ps(k0 + d * 16), b = _mm512_loadu_ps(k0 + (WD + d) * 16);
            for (int i = 0; i < WRB; i++) {
                const __m512 x = _mm512_set1_ps(qf[i][d]);
                acc[i][0] = _mm512_fmadd_ps(x, a, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(x, b, acc[i][1]);
            }
        }
        for (int i = 0; i < WRB; i++) {
            _mm512_storeu_ps(S + i * lp + kb * 16, acc[i][0]);
            _mm512_storeu_ps(S + i * lp + kb * 16 + 16, acc[i][1]);
        }
    }
    float inv[WRB];
    for (int i = 0; i < WRB; i++) { /* probabilities in place, zero past the row's keys up to the block's */
        float *s = S + i * lp;
        const __m512 m = row_peak(s, cnt[i]);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < nkb * 16; j += 16) {
            const int64_t left = cnt[i] - j;
            const __mmask16 mk = (__mmask16)(left >= 16 ? 0xFFFFu : left <= 0 ? 0u : (1u << left) - 1u);
            const __m512 e = _mm512_maskz_mov_ps(mk, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), m)));
            sum = _mm512_add_ps(sum, e);
            _mm512_storeu_ps(s + j, e);
        }
        inv[i] = 1.0f / _mm512_reduce_add_ps(sum);
    }
    for (int h0 = 0; h0 < WRB; h0 += WPV) {
        const int64_t keys = cnt[h0 + WPV - 1]; /* the last row of the pass sees the most (zeros past the others') */
        __m512 acc[WPV][4];
        for (int i = 0; i < WPV; i++)
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
        for (int64_t t = 0; t < keys; t++) {
            const float *v = vp + t * WD;
            const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
            const __m512 v2 = _mm512_loadu_ps(v + 32), v3 = _mm512_loadu_ps(v + 48);
            for (int i = 0; i < WPV; i++) {
                const __m512 x = _mm512_set1_ps(S[(h0 + i) * lp + t]);
                acc[i][0] = _mm512_fmadd_ps(x, v0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(x, v1, acc[i][1]);
                acc[i][2] = _mm512_fmadd_ps(x, v2, acc[i][2]);
                acc[i][3] = _mm512_fmadd_ps(x, v3, acc[i][3]);
            }
        }
        for (int i = 0; i < WPV && r0 + h0 + i < rows; i++) {
            uint16_t *o = out + (qr[h0 + i] - q);
            const __m512 s = _mm512_set1_ps(inv[h0 + i]);
            for (int c = 0; c < 4; c++)
                _mm256_storeu_si256((__m256i *)(o + 16 * c), to_bf16x16(_mm512_mul_ps(acc[i][c], s)));
        }
    }
}

/* as prefill_attention_bf16 (same arguments, same return codes), in float32 arithmetic */
int prefill_attention_widened(const uint16_t *q, const uint16_t *kc, const uint16_t *vc, const int32_t *tab,
                              int64_t L, int64_t n, int64_t H, int64_t KVH, int64_t D, int64_t BS, float scale,
                              uint16_t *out) {
    if (D != WD || KVH <= 0 || H % KVH || H / KVH > 8 || n <= 0 || n > L) return -1;
    const int64_t G = H / KVH, row = KVH * WD, blocks = (L + 15) / 16;
    const int64_t kstride = (blocks + 2) * WD * 16, vstride = L * WD, lp = (blocks + 2) * 16;
    float *kp = aligned_alloc(64, (size_t)(KVH * kstride) * 4);
    float *vp = aligned_alloc(64, (size_t)(KVH * vstride) * 4 + 64);
    if (!kp || !vp) {
        free(kp);
        free(vp);
        return -2;
    }
    const int many = omp_get_max_threads() > 1;
#pragma omp parallel for if (many && KVH > 1)
    for (int64_t h = 0; h < KVH; h++) {
        widen_keys(kc, tab, L, BS, row, h, blocks + 1, kp + h * kstride);
        widen_values(vc, tab, L, BS, row, h, vp + h * vstride);
    }
    const int64_t rows = n * G, nrb = (rows + WRB - 1) / WRB;
    int failed = 0;
#pragma omp parallel if (many && KVH * nrb > 1)
    {
        float *S = aligned_alloc(64, (size_t)(WRB * lp) * 4);
        if (!S) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < KVH * nrb; task++) {
            if (S) {
                const int64_t h = task % KVH, rb = nrb - 1 - task / KVH;
                attend_block_widened(q, H, G, h, rb * WRB, rows, L - n, kp + h * kstride, vp + h * vstride, scale,
                                     lp, S, out);
            }
        }
        free(S);
    }
    free(kp);
    free(vp);
    return failed ? -2 : 0;
}
