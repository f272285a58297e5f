/* The row bookkeeping of a KiviStore's keep() and read() on the CPU: the same rows as the PyTorch path of
 * infinipotv/kv/kivi.py and infinipotv/kv/ragged.py, computed in one call per layer instead of dozens of small
 * tensor operations; and the row gather of every store's keep(). Integer arithmetic and copies only: nothing here
 * rounds.
 *
 * Layouts (see kivi.py): per head h, nq[h] quantized tokens then tokens - nq[h] residual ones, in stream order.
 * Padded parts (codes, value scale/zero) are [heads, lq, ...]; survivor counts [heads, lg] (live groups first, 0 for
 * padding); key scale/zero and the residual window are flat, head after head.
 */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* dst[i] = src[idx[i]] for rows of row_bytes, a multiple of 16 (dst 16-byte aligned): index_select's result, moved
   with stores that bypass the caches. A pass's kept rows are not read again until the next step's forward, after
   the model's weights have gone through the caches, so an ordinary store would first read each destination line
   from memory for nothing: the gather of a store's keep() then moved a third more bytes. Returns 1, copying
   nothing, where an index lies outside [0, rows). */
int64_t select_rows(const uint8_t *src, int64_t rows, int64_t row_bytes, const int64_t *idx, int64_t n,
                    uint8_t *dst) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= rows) return 1;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = src + idx[i] * row_bytes;
        uint8_t *d = dst + i * row_bytes;
#if defined(__SSE2__)
        for (int64_t b = 0; b < row_bytes; b += 16)
            _mm_stream_si128((__m128i *)(d + b), _mm_loadu_si128((const __m128i *)(s + b)));
#else
        memcpy(d, s, (size_t)row_bytes);
#endif
    }
#if defined(__SSE2__)
    _mm_sfence();
#endif
    return 0;
}

/* keep(): idx [heads, n], each head's kept positions. Returns 1 where one lies outside [0, tokens), 2 where a head's
   are not strictly increasing, else 0 and
     nq_new[h]: the kept quantized tokens (a prefix of idx[h]: quantized tokens precede residual ones),
     q_rows [heads * lq_new]: the rows of the flattened padded parts that hold them, h * lq + min(idx, lq - 1) (the
       rows past a head's own nq_new[h] are padding: any row, as the PyTorch path's clamp picks it),
     ng_new[h], new_counts [heads, lg] (zeroed here): the surviving key groups per head and their survivors, in
       order, and g_rows [groups of all heads]: each one's row in the flat key scale/zero,
     r_rows [kept residual tokens of all heads]: their rows in the flat residual window,
     sizes: lq_new, lg_new, len(g_rows), len(r_rows). */
int64_t kivi_keep_plan(const int64_t *idx, int64_t heads, int64_t n, int64_t tokens, const int64_t *nq,
                       const int16_t *counts, int64_t lg, int64_t lq, int64_t *nq_new, int64_t *ng_new,
                       int16_t *new_counts, int64_t *q_rows, int64_t *g_rows, int64_t *r_rows, int64_t *sizes) {
    for (int64_t h = 0; h < heads; h++) {
        const int64_t *k = idx + h * n;
        for (int64_t j = 0; j < n; j++) {
            if (k[j] < 0 || k[j] >= tokens) return 1;
            if (j && k[j] <= k[j - 1]) return 2;
        }
    }
    int64_t lq_new = 0;
    for (int64_t h = 0; h < heads; h++) {
        const int64_t *k = idx + h * n;
        int64_t c = 0;
        while (c < n && k[c] < nq[h]) c++;
        nq_new[h] = c;
        if (c > lq_new) lq_new = c;
    }
    if (lq)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t j = 0; j < lq_new; j++) {
                int64_t v = idx[h * n + j];
                q_rows[h * lq_new + j] = h * lq + (v < lq - 1 ? v : lq - 1);
            }
    memset(new_counts, 0, (size_t)(heads * lg) * sizeof(int16_t));
    int64_t g_old = 0, g_out = 0, lg_new = 0;
    for (int64_t h = 0; h < heads; h++) {
        const int16_t *cnt = counts + h * lg;
        int16_t *out = new_counts + h * lg;
        int64_t live_old = 0, g = 0, end = lg ? cnt[0] : 0, made = 0, last = -1;
        for (int64_t i = 0; i < lg; i++) live_old += cnt[i] > 0;
        for (int64_t j = 0; j < nq_new[h]; j++) {
            int64_t v = idx[h * n + j];
            while (v >= end) end += cnt[++g]; /* v < nq[h], the sum of the head's counts: g stays in range */
            if (g != last) {
                g_rows[g_out + made++] = g_old + g;
                last = g;
            }
            out[made - 1]++;
        }
        ng_new[h] = made;
        if (made > lg_new) lg_new = made;
        g_out += made;
        g_old += live_old;
    }
    int64_t r_old = 0, r_out = 0;
    for (int64_t h = 0; h < heads; h++) {
        for (int64_t j = nq_new[h]; j < n; j++) r_rows[r_out++] = r_old + idx[h * n + j] - nq[h];
        r_old += tokens - nq[h];
    }
    sizes[0] = lq_new;
    sizes[1] = lg_new;
    sizes[2] = g_out;
    sizes[3] = r_out;
    return 0;
}

/* read(): rows [heads, lq], the flat key scale/zero row of each quantized token (a padding token past a head's
   nq[h] gets some row in range, as the PyTorch path's clamp gives it: it is overwritten by the residual window),
   and dest [residual tokens of all heads], each residual token's row in the flattened [heads * tokens] output. */
void kivi_read_plan(int64_t heads, int64_t tokens, const int64_t *nq, const int16_t *counts, int64_t lg, int64_t lq,
                    int64_t groups_total, int64_t *rows, int64_t *dest) {
    int64_t g_old = 0, d = 0;
    for (int64_t h = 0; h < heads; h++) {
        const int16_t *cnt = counts + h * lg;
        int64_t g = 0, end = lg ? cnt[0] : 0, live = 0;
        for (int64_t i = 0; i < lg; i++) live += cnt[i] > 0;
        for (int64_t i = 0; i < lq; i++) {
            while (i >= end && g < lg - 1) end += cnt[++g];
            int64_t row = g_old + g;
            rows[h * lq + i] = row < groups_total - 1 ? row : groups_total - 1;
        }
        for (int64_t i = nq[h]; i < tokens; i++) dest[d++] = h * tokens + i;
        g_old += live;
    }
}
