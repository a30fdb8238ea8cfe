// aiayn's CPU kernels (aiayn/kernels/__init__.py builds every .cpp here into one library): what the files share.
// - matvec.cpp: q4a8_mm and q8a8_mm, int4 or int8 weights x int8 activations, the products of batch-1 decoding.
// - dequantize.cpp: dequantize_q4 and dequantize_q8, the same weights written out for a prompt's dense product.
// - dense.cpp: f32_mm, float32 weights x float32 activations, the same products for a float32 model.
// - attention.cpp: int8_attention, attention over the int8 KV cache's keys and values (model/kv_int8.py).
// - library.cpp: the ops' schemas (torch.library) and the SIMD path compiled.
#pragma once
#include <ATen/core/Tensor.h>
#include <cstdint>

namespace aiayn_kernels {

constexpr int GROUP = 32;  // weights (and activations) a group: one scale (and minimum) each

inline float half_to_float(uint16_t h) {
  return c10::detail::fp16_ieee_to_fp32_value(h);
}

at::Tensor q4a8_mm(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales);
at::Tensor q8a8_mm(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales);
at::Tensor dequantize_q4(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype);
at::Tensor dequantize_q8(const at::Tensor& packed, const at::Tensor& scales, at::ScalarType dtype);
at::Tensor f32_mm(const at::Tensor& x, const at::Tensor& weight);
at::Tensor int8_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_scale, const at::Tensor& v,
                          const at::Tensor& v_scale, const std::optional<at::Tensor>& mask);
const char* path();  // the SIMD path compiled: avx512-vnni, avx2 or c++

}  // namespace aiayn_kernels
