/* The per-token reductions of a compression pass (scores.py) on the CPU, fused: one read of each key and value row;
 * the top-k of a head's scores where only one set is the top k, and the ascending order of the kept indices
 * (base.py).
 *
 * PyTorch computes TaR's similarity as five full passes over [H, T, D] float32 tensors (convert, norm, divide,
 * multiply, sum) and VaN's norm as two; on one thread each pass runs at memory speed. These kernels read a row
 * once and keep it in registers, and do every operation as PyTorch's CPU kernels do, in their order:
 *   - norm(dim=-1) (float32): 8 float32 lanes, acc = acc + x * x over the row's vectors from zero, then the lanes
 *     summed in order from the first (sqrt of that, rounded to float32);
 *   - sum(dim=-1) (float32): the row's vectors of 8 lanes summed into 4 accumulators (vector i into i % 4) from
 *     zero, the vectors past the last whole 4 into the first, the accumulators summed in order, then the lanes in
 *     order from zero;
 *   - conversion from float16/bfloat16, division, product: exact (one IEEE rounding each).
 * Compiled without fused multiply-adds (-ffp-contract=off) and without fast-math. native.py checks the results
 * against PyTorch's on every load and takes the PyTorch path where they differ (another PyTorch, another CPU).
 *
 * Layouts: x rows of dim contiguous elements, one after another along the tokens, heads hs elements apart;
 * out [heads, tokens] float32. dim must be a multiple of 8 and below 512 (PyTorch's sum cascades from there).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAXD 504

static inline __m256 ld_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }
static inline __m256 ld_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 ld_bf16(const void *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* The 8 x 8 transpose of r: afterwards lane i of r[j] is lane j of row i, so adding r[0], r[1], ... lane by lane
   sums each row's lanes in order, 8 rows at once. */
static inline void transpose8(__m256 *r) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* PyTorch's norms of 8 rows of n vectors each (v + 8 * r: row r): the squares summed into one vector from zero,
   then its lanes in order from the first */
static inline __m256 norms8(const __m256 *v, int64_t n) {
    __m256 acc[8];
    for (int r = 0; r < 8; r++) {
        acc[r] = _mm256_setzero_ps();
        for (int64_t i = 0; i < n; i++) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(v[8 * i + r], v[8 * i + r]));
    }
    transpose8(acc);
    __m256 s = acc[0];
    for (int j = 1; j < 8; j++) s = _mm256_add_ps(s, acc[j]);
    return _mm256_sqrt_ps(s);
}

/* PyTorch's sums of 8 rows of n vectors each (v + 8 * r: row r): 4 accumulators from zero (vector i into i % 4),
   the vectors past the last whole 4 into the first, the accumulators in order, then the lanes in order from zero */
static inline __m256 sums8(const __m256 *v, int64_t n) {
    __m256 acc0[8];
    int64_t whole = n / 4 * 4;
    for (int r = 0; r < 8; r++) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int64_t i = 0;
        for (; i < whole; i += 4)
            for (int k = 0; k < 4; k++) acc[k] = _mm256_add_ps(acc[k], v[8 * (i + k) + r]);
        for (int k = 0; k < 4; k++) acc[k] = _mm256_add_ps(acc[k], _mm256_setzero_ps()); /* its empty upper levels */
        for (; i < n; i++) acc[0] = _mm256_add_ps(acc[0], v[8 * i + r]);
        for (int k = 1; k < 4; k++) acc[0] = _mm256_add_ps(acc[0], acc[k]);
        acc0[r] = acc[0];
    }
    transpose8(acc0);
    __m256 s = _mm256_setzero_ps();
    for (int j = 0; j < 8; j++) s = _mm256_add_ps(s, acc0[j]);
    return s;
}

/* The rows AHEAD rows on are requested from memory while these are computed: a pass reads the cache after the
   forward pushed it out of the caches, and without the request every block would wait for memory in turn. */
#define AHEAD 32

static inline void prefetch_rows(const void *p, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)p + b);
}

/* Rows come 8 at a time, vector i of row r in v[8 * i + r]; a last group of fewer than 8 rows repeats its last
   row (its results are not stored). */
#define GATHER8(LOAD, T, x, hs, dim, tokens, h, t0, n, v)                                                            \
    prefetch_rows(x + h * hs + (t0 + AHEAD) * dim, (t0 + AHEAD + 8 <= tokens ? 8 : 0) * dim * (int64_t)sizeof(T)); \
    for (int r = 0; r < 8; r++) {                                                                                  \
        int64_t t = t0 + r < tokens ? t0 + r : tokens - 1;                                                         \
        const T *row = x + h * hs + t * dim;                                                                       \
        for (int64_t i = 0; i < n; i++) v[8 * i + r] = LOAD(row + 8 * i);                                          \
    }

static inline void store8(float *out, int64_t count, __m256 s) {
    float b[8];
    _mm256_storeu_ps(b, s);
    for (int64_t r = 0; r < count; r++) out[r] = b[r];
}

/* The kernels for one head and a block of tokens, inlined with n a constant for the common head_dims (the loops
   over a row's vectors then unroll and stay in registers). */
#define BLOCKS(NAME, T, LOAD)                                                                                       \
    static inline void norms_##NAME(const T *x, int64_t tokens, int64_t dim, int64_t n, float *out) {            \
        __m256 v[MAXD];                                                                                             \
        for (int64_t t0 = 0; t0 < tokens; t0 += 8) {                                                                \
            GATHER8(LOAD, T, x, 0, dim, tokens, 0, t0, n, v)                                                        \
            store8(out + t0, tokens - t0 < 8 ? tokens - t0 : 8, norms8(v, n));                                      \
        }                                                                                                           \
    }                                                                                                               \
    static inline void units_##NAME(const T *x, int64_t tokens, int64_t dim, int64_t n, float eps, float *out) {  \
        __m256 v[MAXD];                                                                                             \
        float norm[8];                                                                                              \
        for (int64_t t0 = 0; t0 < tokens; t0 += 8) {                                                                \
            GATHER8(LOAD, T, x, 0, dim, tokens, 0, t0, n, v)                                                        \
            _mm256_storeu_ps(norm, norms8(v, n));                                                                   \
            for (int r = 0; r < 8 && t0 + r < tokens; r++) {                                                        \
                __m256 d = _mm256_set1_ps(norm[r] < eps ? eps : norm[r]);                                           \
                float *o = out + (t0 + r) * dim;                                                                    \
                for (int64_t i = 0; i < n; i++) _mm256_storeu_ps(o + 8 * i, _mm256_div_ps(v[8 * i + r], d));       \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    static inline void dots_##NAME(const T *x, int64_t tokens, int64_t dim, int64_t n, float eps,                 \
                                   const int64_t *slot, const float *sums, __m256 divisor, __m256 sign,            \
                                   float *out) {                                                                    \
        __m256 v[MAXD];                                                                                             \
        float norm[8];                                                                                              \
        for (int64_t t0 = 0; t0 < tokens; t0 += 8) {                                                                \
            GATHER8(LOAD, T, x, 0, dim, tokens, 0, t0, n, v)                                                        \
            _mm256_storeu_ps(norm, norms8(v, n));                                                                   \
            for (int r = 0; r < 8; r++) {                                                                           \
                int64_t t = t0 + r < tokens ? t0 + r : tokens - 1;                                                  \
                __m256 d = _mm256_set1_ps(norm[r] < eps ? eps : norm[r]);                                           \
                const float *s = sums + slot[t] * dim;                                                              \
                for (int64_t i = 0; i < n; i++)                                                                     \
                    v[8 * i + r] = _mm256_mul_ps(_mm256_div_ps(v[8 * i + r], d), _mm256_loadu_ps(s + 8 * i));      \
            }                                                                                                       \
            __m256 s = _mm256_xor_ps(_mm256_div_ps(sums8(v, n), divisor), sign);                                 \
            store8(out + t0, tokens - t0 < 8 ? tokens - t0 : 8, s);                                                 \
        }                                                                                                           \
    }

/* n as a constant where it is a common one */
#define BY_DIM(dim, CALL)                                                                                           \
    do {                                                                                                            \
        if ((dim) == 64)                                                                                            \
            CALL(8);                                                                                                \
        else if ((dim) == 128)                                                                                      \
            CALL(16);                                                                                               \
        else                                                                                                        \
            CALL((dim) / 8);                                                                                        \
    } while (0)

#define KERNELS(NAME, T, LOAD)                                                                                      \
    BLOCKS(NAME, T, LOAD)                                                                                           \
    /* out[h, t] = ||x[h, t]|| */                                                                                  \
    void row_norms_##NAME(const T *x, int64_t heads, int64_t tokens, int64_t dim, int64_t hs, float *out) {      \
        for (int64_t h = 0; h < heads; h++) {                                                                       \
            BY_DIM(dim, NORMS_##NAME);                                                                              \
        }                                                                                                           \
    }                                                                                                               \
    /* out[h, t] = x[h, t] / max(||x[h, t]||, eps), float32 rows of dim, heads tokens * dim apart */          \
    void unit_rows_##NAME(const T *x, int64_t heads, int64_t tokens, int64_t dim, int64_t hs, float eps,          \
                          float *out) {                                                                             \
        for (int64_t h = 0; h < heads; h++) {                                                                       \
            BY_DIM(dim, UNITS_##NAME);                                                                              \
        }                                                                                                           \
    }                                                                                                               \
    /* out[h, t] = sum(x[h, t] / max(||x[h, t]||, eps) * sums[h, slot[h, t]]) / divisor, negated where negate, \
       for t < tokens: the unit key's dot product with its slot's sum of recent unit keys (sums [heads, slots,    \
       dim] float32; slot rows ss elements apart, 0 when every head shares one); out rows of os, rest after the    \
       tokens (a quotient by 1 and a negation, a flip of the sign bit, are exact) */                               \
    void unit_dot_##NAME(const T *x, int64_t heads, int64_t tokens, int64_t dim, int64_t hs, float eps,           \
                         const int64_t *slot, int64_t ss, const float *sums, int64_t slots, int64_t os,             \
                         float divisor, int negate, float rest, float *out) {                                       \
        const __m256 dv = _mm256_set1_ps(divisor), sign = _mm256_set1_ps(negate ? -0.f : 0.f);                   \
        for (int64_t h = 0; h < heads; h++) {                                                                       \
            BY_DIM(dim, DOTS_##NAME);                                                                               \
            for (int64_t t = tokens; t < os; t++) out[h * os + t] = rest;                                           \
        }                                                                                                           \
    }

#define NORMS_float32(n) norms_float32(x + h * hs, tokens, dim, n, out + h * tokens)
#define NORMS_float16(n) norms_float16(x + h * hs, tokens, dim, n, out + h * tokens)
#define NORMS_bfloat16(n) norms_bfloat16(x + h * hs, tokens, dim, n, out + h * tokens)
#define UNITS_float32(n) units_float32(x + h * hs, tokens, dim, n, eps, out + h * tokens * dim)
#define UNITS_float16(n) units_float16(x + h * hs, tokens, dim, n, eps, out + h * tokens * dim)
#define UNITS_bfloat16(n) units_bfloat16(x + h * hs, tokens, dim, n, eps, out + h * tokens * dim)
#define DOTS_float32(n) dots_float32(x + h * hs, tokens, dim, n, eps, slot + h * ss, sums + h * slots * dim, \
                                     dv, sign, out + h * os)
#define DOTS_float16(n) dots_float16(x + h * hs, tokens, dim, n, eps, slot + h * ss, sums + h * slots * dim, \
                                     dv, sign, out + h * os)
#define DOTS_bfloat16(n) dots_bfloat16(x + h * hs, tokens, dim, n, eps, slot + h * ss, sums + h * slots * dim, \
                                       dv, sign, out + h * os)

KERNELS(float32, float, ld_f32)
KERNELS(float16, uint16_t, ld_f16)
KERNELS(bfloat16, uint16_t, ld_bf16)

int64_t scores_max_head_dim(void) { return MAXD; }

/* out[h] = the indices kept[h] (n distinct indices in [0, tokens), any order) in ascending order: a head already in
   order is copied as it is, any other has each index marked in a row of tokens flags, then read back in order (the
   only result a sort of distinct integers has). Returns 0, or 1 where an index lies outside [0, tokens), 2 where a
   head repeats one. marks: tokens bytes of scratch. */
int64_t ascending_indices(const int64_t *kept, int64_t heads, int64_t n, int64_t tokens, uint8_t *marks,
                          int64_t *out) {
    for (int64_t h = 0; h < heads; h++) {
        const int64_t *k = kept + h * n;
        int64_t *o = out + h * n, m = 0;
        int in_order = n > 0 && k[0] >= 0 && k[n - 1] < tokens;
        for (int64_t j = 1; j < n && in_order; j++) in_order = k[j] > k[j - 1];
        if (in_order) { /* strictly increasing from k[0] >= 0 to k[n - 1] < tokens: distinct and in range */
            for (int64_t j = 0; j < n; j++) o[j] = k[j];
            continue;
        }
        for (int64_t t = 0; t < tokens; t++) marks[t] = 0;
        for (int64_t j = 0; j < n; j++) {
            if (k[j] < 0 || k[j] >= tokens) return 1;
            marks[k[j]] = 1;
        }
        for (int64_t t = 0; t < tokens; t++) /* at most n marks: n indices */
            if (marks[t]) o[m++] = t;
        if (m != n) return 2;
    }
    return 0;
}

/* float32 bits as an unsigned key in the order of the values (-inf lowest, +inf highest; -0 below +0) */
static inline uint32_t order_key(uint32_t b) { return b & 0x80000000u ? ~b : b | 0x80000000u; }
static inline float key_value(uint32_t u) {
    uint32_t b = u & 0x80000000u ? u & 0x7fffffffu : ~u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The highest bin of hist[bins] holding the want-th largest key, want reduced by the keys in the bins above it */
static inline uint32_t bin_of(const uint32_t *hist, uint32_t bins, int64_t *want) {
    uint32_t b = bins - 1;
    while (*want > hist[b]) *want -= hist[b--];
    return b;
}

/* out[h] = the k highest of score[h] (k in [1, tokens]), in ascending order of index, where that set is the only
   top-k there is: every score of the set above every other, i.e. fewer than k scores above the k-th highest and
   exactly k at least as high. Returns 0, or 1 where the set is not unique (ties across the k-th place, whose pick
   is up to the top-k's implementation) or a score is NaN: the caller then runs its top-k. The k-th highest is found
   by its key's bits, 11 + 11 + 10 at a time (a radix select; the keys of the top bin are copied aside for the last
   two digits), so no element is compared with another. scratch: 4 * tokens + 2 uint32 (2 * tokens, then tokens + 1
   int64). */
int64_t top_set(const float *score, int64_t heads, int64_t tokens, int64_t k, uint32_t *scratch, int64_t *out) {
    uint32_t hist[4][2048]; /* 4 histograms for the first digit: neighbouring keys often share a bin */
    uint32_t *keys = scratch, *cand = scratch + tokens;
    int64_t *picked = (int64_t *)(scratch + 2 * tokens); /* 8-byte aligned: 2 * tokens is even */
    for (int64_t h = 0; h < heads; h++) {
        const float *s = score + h * tokens;
        const uint32_t *bits = (const uint32_t *)s;
        memset(hist, 0, sizeof hist);
        uint32_t nan = 0;
        for (int64_t t = 0; t < tokens; t++) {
            nan |= (bits[t] & 0x7fffffffu) > 0x7f800000u;
            keys[t] = order_key(bits[t]);
            hist[t & 3][keys[t] >> 21]++;
        }
        if (nan) return 1;
        for (int b = 0; b < 2048; b++) hist[0][b] += hist[1][b] + hist[2][b] + hist[3][b];
        int64_t want = k, c = 0;
        uint32_t b0 = bin_of(hist[0], 2048, &want);
        for (int64_t t = 0; t < tokens; t++) {
            cand[c] = keys[t];
            c += keys[t] >> 21 == b0;
        }
        memset(hist[0], 0, 2048 * sizeof(uint32_t));
        for (int64_t i = 0; i < c; i++) hist[0][cand[i] >> 10 & 2047]++;
        uint32_t b1 = bin_of(hist[0], 2048, &want);
        memset(hist[0], 0, 1024 * sizeof(uint32_t));
        for (int64_t i = 0; i < c; i++)
            if ((cand[i] >> 10 & 2047) == b1) hist[0][cand[i] & 1023]++;
        uint32_t b2 = bin_of(hist[0], 1024, &want);
        const float kth = key_value(b0 << 21 | b1 << 10 | b2);
        int64_t m = 0;
        for (int64_t t = 0; t < tokens; t++) { /* by value: -0 and +0 are one score */
            picked[m] = t;
            m += s[t] >= kth;
        }
        if (m != k) return 1;
        memcpy(out + h * k, picked, (size_t)k * sizeof(int64_t));
    }
    return 0;
}

/* out = PyTorch's avg_pool3d of x [planes, nd, nh, nw] float32 (stride 1, odd kernel kd x kh x kw, padding of half
   the kernel, zeros counted): each cell's mean over the window clipped to the grid, its elements added from zero
   in PyTorch's order (frame, then row, then column; float32) and divided by the whole window's size. The same sums
   8 frames at a time: each plane is first turned into [nh, nw, nd] (scratch, planes * nd * nh * nw floats) so the
   8 frames of a lane group are contiguous; the first and last kd / 2 frames, whose windows are clipped, one by one.
   avg_pool1d over a sequence is the case nh = nw = 1. */
void box_mean(const float *x, int64_t planes, int64_t nd, int64_t nh, int64_t nw, int64_t kd, int64_t kh,
              int64_t kw, float *scratch, float *out) {
    const int64_t pd = kd / 2, ph = kh / 2, pw = kw / 2, cells = nh * nw;
    const float size = (float)(kd * kh * kw);
    const __m256 vsize = _mm256_set1_ps(size);
    for (int64_t c = 0; c < planes; c++) {
        const float *xp = x + c * nd * cells;
        float *xt = scratch + c * nd * cells, *op = out + c * nd * cells;
        for (int64_t d = 0; d < nd; d++)
            for (int64_t i = 0; i < cells; i++) xt[i * nd + d] = xp[d * cells + i];
        for (int64_t oh = 0; oh < nh; oh++) {
            int64_t h0 = oh - ph < 0 ? 0 : oh - ph, h1 = oh + ph + 1 > nh ? nh : oh + ph + 1;
            for (int64_t ow = 0; ow < nw; ow++) {
                int64_t w0 = ow - pw < 0 ? 0 : ow - pw, w1 = ow + pw + 1 > nw ? nw : ow + pw + 1;
                float *o = op + oh * nw + ow;
                int64_t od = 0;
                for (; od < nd; od++) {
                    if (od >= pd && od + pd + 8 <= nd) { /* 8 whole windows along the frames */
                        __m256 acc = _mm256_setzero_ps();
                        for (int64_t d = od - pd; d <= od + pd; d++)
                            for (int64_t h = h0; h < h1; h++)
                                for (int64_t w = w0; w < w1; w++)
                                    acc = _mm256_add_ps(acc, _mm256_loadu_ps(xt + (h * nw + w) * nd + d));
                        float b[8];
                        _mm256_storeu_ps(b, _mm256_div_ps(acc, vsize));
                        for (int j = 0; j < 8; j++) o[(od + j) * cells] = b[j];
                        od += 7;
                        continue;
                    }
                    int64_t d0 = od - pd < 0 ? 0 : od - pd, d1 = od + pd + 1 > nd ? nd : od + pd + 1;
                    float sum = 0.f;
                    for (int64_t d = d0; d < d1; d++)
                        for (int64_t h = h0; h < h1; h++)
                            for (int64_t w = w0; w < w1; w++) sum += xt[(h * nw + w) * nd + d];
                    o[od * cells] = sum / size;
                }
            }
        }
    }
}
