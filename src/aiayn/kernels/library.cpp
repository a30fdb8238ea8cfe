// The ops' schemas and CPU implementations, registered with torch.library when the library is loaded.
#include "quant.h"

#include <torch/library.h>

using namespace aiayn_kernels;

TORCH_LIBRARY(aiayn, lib) {
  lib.def("q4a8_mm(Tensor x, Tensor packed, Tensor scales) -> Tensor");
  lib.def("q8a8_mm(Tensor x, Tensor packed, Tensor scales) -> Tensor");
  lib.def("dequantize_q4(Tensor packed, Tensor scales, ScalarType dtype) -> Tensor");
  lib.def("dequantize_q8(Tensor packed, Tensor scales, ScalarType dtype) -> Tensor");
  lib.def("f32_mm(Tensor x, Tensor weight) -> Tensor");
  lib.def("int8_attention(Tensor q, Tensor k, Tensor k_scale, Tensor v, Tensor v_scale, Tensor? mask) -> Tensor");
}

TORCH_LIBRARY_IMPL(aiayn, CPU, lib) {
  lib.impl("q4a8_mm", &q4a8_mm);
  lib.impl("q8a8_mm", &q8a8_mm);
  lib.impl("dequantize_q4", &dequantize_q4);
  lib.impl("dequantize_q8", &dequantize_q8);
  lib.impl("f32_mm", &f32_mm);
  lib.impl("int8_attention", &int8_attention);
}

extern "C" const char* aiayn_kernels_path() { return path(); }
