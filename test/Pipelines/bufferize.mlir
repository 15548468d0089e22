// RUN: ddpc-opt %s --ddpc-bufferize | FileCheck %s

// Tests that the bufferization pipeline turns tensor results into
// caller-provided out-parameters with identity layouts (the runtime ABI:
// inputs first, then outputs) and leaves no memref result.
// CHECK-LABEL: func.func @main_graph(
// CHECK-SAME: %{{.*}}: memref<3x4xf32>, %[[OUT:.*]]: memref<3x4xf32>) {
// CHECK: linalg.generic
// CHECK-SAME: outs(%[[OUT]] : memref<3x4xf32>)
// CHECK: return
// CHECK-NOT: memref.alloc
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main_graph(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %e = tensor.empty() : tensor<3x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<3x4xf32>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.mulf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}
