// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-scatter-to-atomic,ddpc-parallel-loops-outermost,ddpc-split-reductions))' | FileCheck %s

// The global gradient norm's sum of squares of a 512x512x3x3 weight
// gradient into one float (@grad_norm). ddpc-scatter-to-atomic once made it
// one atomic add per term (2,359,296 serialized adds to one address, 2.3 s
// per step on an H200); ddpc-split-reductions bounds it: 512 x 8 threads
// (4096 atomic adds to the output), each summing 64 x 3 x 3 terms in order.
// CHECK-LABEL: func.func @sum_of_squares(
// CHECK-SAME: %[[G:[a-zA-Z0-9_]+]]: memref<512x512x3x3xf32>, %[[OUT:[a-zA-Z0-9_]+]]: memref<f32>)
// CHECK: %[[X:.*]] = memref.expand_shape %[[G]] {{\[}}[0], [1, 2], [3], [4]] output_shape [512, 8, 64, 3, 3]
// CHECK-DAG: %[[C512:.*]] = arith.constant 512 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%{{.*}}, %{{.*}}) to (%[[C512]], %[[C8]])
// CHECK: scf.for
// CHECK: memref.atomic_rmw addf %{{.*}}, %[[OUT]][] : (f32, memref<f32>) -> f32
// CHECK-NOT: memref.atomic_rmw
// CHECK: return
#in = affine_map<(a, b, c, d) -> (a, b, c, d)>
#scalar = affine_map<(a, b, c, d) -> ()>
func.func @sum_of_squares(%g: memref<512x512x3x3xf32>, %out: memref<f32>) {
  linalg.generic {indexing_maps = [#in, #scalar], iterator_types = ["reduction", "reduction", "reduction", "reduction"]}
      ins(%g : memref<512x512x3x3xf32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %acc, %sq : f32
    linalg.yield %s : f32
  }
  return
}
