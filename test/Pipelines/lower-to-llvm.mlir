// RUN: ddpc-opt %s --ddpc-cpu-pipeline | FileCheck %s

// Tests that the whole CPU pipeline ends in the LLVM dialect with the
// bare-pointer calling convention: one !llvm.ptr per tensor, no result.
// CHECK-LABEL: llvm.func @main_graph(
// CHECK-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-NOT: linalg.
// CHECK: llvm.return
#id = affine_map<(d0) -> (d0)>
func.func @main_graph(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id],
                       iterator_types = ["parallel"]}
      ins(%x, %y : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = math.erf %a : f32
    %t = arith.addf %s, %b : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
