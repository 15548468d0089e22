// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-clone-shared-fills))' | FileCheck %s
// RUN: ddpc-opt %s --ddpc-bufferize | FileCheck %s --check-prefix=BUF

// One zero tensor initializes two accumulations (after CSE): each
// destination use gets its own fill of its own tensor.empty, placed right
// before the user; the read-only use (the last generic's input) keeps the
// original.
// CHECK-LABEL: func.func @shared(
// CHECK: %[[E0:.*]] = tensor.empty() : tensor<4x3xf32>
// CHECK: %[[F0:.*]] = linalg.fill ins(%{{.*}}) outs(%[[E0]] : tensor<4x3xf32>)
// CHECK: %[[E1:.*]] = tensor.empty() : tensor<4x3xf32>
// CHECK: %[[F1:.*]] = linalg.fill ins(%{{.*}}) outs(%[[E1]] : tensor<4x3xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[F1]] : tensor<4x3xf32>)
// CHECK: %[[E2:.*]] = tensor.empty() : tensor<4x3xf32>
// CHECK: %[[F2:.*]] = linalg.fill ins(%{{.*}}) outs(%[[E2]] : tensor<4x3xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[F2]] : tensor<4x3xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %[[F0]] : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
//
// After bufferization no buffer is copied: every accumulation writes into
// its own freshly filled buffer.
// BUF-LABEL: func.func @shared(
// BUF-NOT: memref.copy
// BUF: return
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @shared(%x: tensor<4x8xf32>, %w: tensor<3x8xf32>, %v: tensor<3x8xf32>) -> tensor<4x3xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %p = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<3x8xf32>) outs(%z : tensor<4x3xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %m = arith.mulf %i, %j : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %q = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %v : tensor<4x8xf32>, tensor<3x8xf32>) outs(%z : tensor<4x3xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %m = arith.mulf %i, %j : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p, %q, %z : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) outs(%e : tensor<4x3xf32>) {
  ^bb0(%i: f32, %j: f32, %k: f32, %o: f32):
    %s = arith.addf %i, %j : f32
    %t = arith.addf %s, %k : f32
    linalg.yield %t : f32
  } -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}
