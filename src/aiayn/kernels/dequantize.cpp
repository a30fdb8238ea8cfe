// A prompt's weights written out from the packing of matvec.cpp in one pass (aiayn.kernels.quant's layout).
#include "quant.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <cstring>
#include <type_traits>

namespace aiayn_kernels {
namespace {

// A prompt's many rows go through the weights dequantized (a dense product): w (N, K) written from the packing in
// one pass, w = q d + mn (int4) or q d (int8) in float32, then rounded once to the output's dtype (bfloat16: to
// nearest even). torch's own chain of operations took 64 ms a prompt for SmolLM2's int4 layers on an AMD EPYC.
inline uint16_t to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

template <bool INT4, typename Out>
void dequantize_quad(const uint8_t* w, const uint16_t* s, int64_t groups, Out* out, int64_t k) {
  constexpr int WIDTH = INT4 ? 64 : 128, PER = INT4 ? 8 : 4;
  float v[GROUP];
  for (int64_t g = 0; g < groups; ++g)
    for (int r = 0; r < 4; ++r) {
      const float d = half_to_float(s[g * PER + r]), mn = INT4 ? half_to_float(s[g * PER + 4 + r]) : 0.f;
      const uint8_t* b = w + g * WIDTH + r * (INT4 ? 16 : 32);
      if constexpr (INT4) {
        for (int j = 0; j < 16; ++j) {
          v[j] = static_cast<float>(b[j] & 15) * d + mn;
          v[j + 16] = static_cast<float>(b[j] >> 4) * d + mn;
        }
      } else {
        for (int j = 0; j < GROUP; ++j) v[j] = static_cast<float>(static_cast<int8_t>(b[j])) * d;
      }
      Out* o = out + r * k + g * GROUP;
      for (int j = 0; j < GROUP; ++j) {
        if constexpr (std::is_same_v<Out, float>) o[j] = v[j];
        else o[j] = to_bf16(v[j]);
      }
    }
}

template <bool INT4>
at::Tensor dequantize(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "dequantize: dtype float32 or bfloat16");
  TORCH_CHECK(packed.dim() == 3 && scales.dim() == 3 && scales.scalar_type() == at::kHalf &&
              packed.size(2) == (INT4 ? 64 : 128) && scales.size(2) == (INT4 ? 8 : 4), "dequantize: a packing");
  const at::Tensor pc = packed.contiguous(), sc = scales.contiguous();
  const int64_t quads = pc.size(0), groups = pc.size(1), k = groups * GROUP;
  at::Tensor out = at::empty({quads * 4, k}, packed.options().dtype(dtype));
  const uint8_t* w = static_cast<const uint8_t*>(pc.data_ptr());
  const uint16_t* s = reinterpret_cast<const uint16_t*>(sc.data_ptr<at::Half>());
  at::parallel_for(0, quads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const uint8_t* wq = w + q * groups * (INT4 ? 64 : 128);
      const uint16_t* sq = s + q * groups * (INT4 ? 8 : 4);
      if (dtype == at::kFloat)
        dequantize_quad<INT4>(wq, sq, groups, out.data_ptr<float>() + q * 4 * k, k);
      else
        dequantize_quad<INT4>(wq, sq, groups, reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()) + q * 4 * k, k);
    }
  });
  return out;
}

}  // namespace

at::Tensor dequantize_q4(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype) {
  return dequantize<true>(packed, scales, dtype);
}

at::Tensor dequantize_q8(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype) {
  return dequantize<false>(packed, scales, dtype);
}

}  // namespace aiayn_kernels
