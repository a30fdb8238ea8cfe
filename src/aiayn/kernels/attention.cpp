// Attention over keys and values kept as int8, one float32 scale a position and head (the int8 KV cache,
// model/kv_int8.py): softmax(q k^T / sqrt(D)) v read straight from the int8 rows, never written out as floats.
// The keys are split into chunks of CHUNK positions (flash-decoding's split, so that one row's few heads still
// keep both cores busy); a task takes a row's key/value head, one query and one chunk: for each position the scores
// of the query heads that share the key head, then their softmax's maximum and sum and the weighted values, all in
// float32. The chunks are merged at the end, each weighted by its share of the whole softmax. Plain C++ with
// `omp simd` loops: -march=native vectorises the int8 -> float conversions and the sums on any x86 or other CPU.
#include "quant.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace aiayn_kernels {
namespace {

constexpr int64_t CHUNK = 256;  // key positions a task

inline float dot(const float* q, const int8_t* k, int64_t d) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += q[i] * static_cast<float>(k[i]);
  return sum;
}

inline void add_scaled(float* acc, float w, const int8_t* v, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] += w * static_cast<float>(v[i]);
}

struct Rows {  // a (B, H, S, D) int8 tensor and its (B, H, S, 1) scales, by their strides
  const int8_t* data;
  const float* scale;
  int64_t sb, sh, ss, cb, ch, cs;
  const int8_t* row(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
  float at(int64_t b, int64_t h, int64_t s) const { return scale[b * cb + h * ch + s * cs]; }
};

Rows rows_of(const at::Tensor& data, const at::Tensor& scale) {
  return {data.data_ptr<int8_t>(), scale.data_ptr<float>(), data.stride(0), data.stride(1), data.stride(2),
          scale.stride(0), scale.stride(1), scale.stride(2)};
}

}  // namespace

at::Tensor int8_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale, const at::Tensor& v,
                          const at::Tensor& v_scale, const std::optional<at::Tensor>& mask) {
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == at::kFloat, "int8_attention: q must be (B, H, T, D) float32");
  TORCH_CHECK(k.dim() == 4 && k.scalar_type() == at::kChar && k.stride(3) == 1 && v.sizes() == k.sizes() &&
                  v.scalar_type() == at::kChar && v.stride(3) == 1,
              "int8_attention: k and v must be (B, H_kv, S, D) int8, D contiguous");
  TORCH_CHECK(k_scale.scalar_type() == at::kFloat && v_scale.scalar_type() == at::kFloat && k_scale.dim() == 4 &&
                  v_scale.dim() == 4 && k_scale.size(2) == k.size(2) && v_scale.size(2) == k.size(2),
              "int8_attention: the scales must be (B, H_kv, S, 1) float32");
  const int64_t b_n = q.size(0), h_n = q.size(1), t_n = q.size(2), d = q.size(3);
  const int64_t kv_heads = k.size(1), s_n = k.size(2), groups = h_n / kv_heads;
  TORCH_CHECK(k.size(0) == b_n && k.size(3) == d && kv_heads * groups == h_n,
              "int8_attention: k must have q's rows and head size, and a number of heads that divides q's");
  const bool masked = mask.has_value() && mask->defined();
  at::Tensor m;
  if (masked) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 3 && mask->size(0) == b_n &&
                    mask->size(1) == t_n && mask->size(2) == s_n,
                "int8_attention: mask must be (B, T, S) bool");
    m = *mask;
  }
  const at::Tensor qc = q.contiguous();
  const Rows keys = rows_of(k, k_scale), values = rows_of(v, v_scale);
  const int64_t chunks = std::max<int64_t>(1, (s_n + CHUNK - 1) / CHUNK);
  // each (row, query head, query, chunk): the chunk's maximum score, its softmax's sum, its weighted values (D)
  at::Tensor parts = at::empty({b_n, h_n, t_n, chunks, d + 2}, q.options());
  float* part = parts.data_ptr<float>();
  const float* qp = qc.data_ptr<float>();
  const bool* mp = masked ? m.data_ptr<bool>() : nullptr;
  const int64_t mb = masked ? m.stride(0) : 0, mt = masked ? m.stride(1) : 0, ms = masked ? m.stride(2) : 0;
  const float root = 1.f / std::sqrt(static_cast<float>(d));
  const float low = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, b_n * kv_heads * t_n * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(groups * CHUNK);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t c = task % chunks, t = (task / chunks) % t_n, hk = (task / chunks / t_n) % kv_heads;
      const int64_t b = task / chunks / t_n / kv_heads;
      const int64_t s0 = c * CHUNK, s1 = std::min(s_n, s0 + CHUNK), n = s1 - s0;
      const bool* seen = mp ? mp + b * mb + t * mt : nullptr;
      for (int64_t s = s0; s < s1; ++s) {
        const bool visible = !seen || seen[s * ms];
        const int8_t* key = keys.row(b, hk, s);
        const float factor = visible ? keys.at(b, hk, s) * root : 0.f;
        for (int64_t g = 0; g < groups; ++g)
          scores[g * CHUNK + s - s0] = visible ? dot(qp + (((b * h_n) + hk * groups + g) * t_n + t) * d, key, d) *
                                                     factor : low;
      }
      for (int64_t g = 0; g < groups; ++g) {
        float* out = part + ((((b * h_n) + hk * groups + g) * t_n + t) * chunks + c) * (d + 2);
        const float* sc = scores.data() + g * CHUNK;
        const float top = *std::max_element(sc, sc + n);
        float sum = 0.f;
        std::fill(out + 2, out + 2 + d, 0.f);
        if (top != low) {
          for (int64_t s = s0; s < s1; ++s) {
            if (sc[s - s0] == low) continue;  // masked: never read (its slot may hold anything)
            const float w = std::exp(sc[s - s0] - top);
            sum += w;
            add_scaled(out + 2, w * values.at(b, hk, s), values.row(b, hk, s), d);
          }
        }
        out[0] = top;
        out[1] = sum;
      }
    }
  });
  at::Tensor y = at::zeros({b_n, h_n, t_n, d}, q.options());
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, b_n * h_n * t_n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* p = part + i * chunks * (d + 2);
      float top = low;
      for (int64_t c = 0; c < chunks; ++c) top = std::max(top, p[c * (d + 2)]);
      if (top == low) continue;  // nothing visible: zeros, as fast_attention gives a fully masked row
      float total = 0.f;
      for (int64_t c = 0; c < chunks; ++c)
        if (p[c * (d + 2)] != low) total += p[c * (d + 2) + 1] * std::exp(p[c * (d + 2)] - top);
      for (int64_t c = 0; c < chunks; ++c) {
        if (p[c * (d + 2)] == low) continue;
        const float w = std::exp(p[c * (d + 2)] - top) / total;
        const float* acc = p + c * (d + 2) + 2;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) yp[i * d + j] += w * acc[j];
      }
    }
  });
  return y;
}

}  // namespace aiayn_kernels
