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
}

TORCH_LIBRARY_IMPL(aiayn, CPU, lib) {
  lib.impl("q4a8_mm", &q4a8_mm);
  lib.impl("q8a8_mm", &q8a8_mm);
  lib.impl("dequantize_q4", &dequantize_q4);
  lib.impl("dequantize_q8", &dequantize_q8);
  lib.impl("f32_mm", &f32_mm);
}

extern "C" const char* aiayn_kernels_path() { return path(); }
