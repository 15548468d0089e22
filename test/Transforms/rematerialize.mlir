// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-rematerialize{nodes=Relu_1,Scale_2}))' | FileCheck %s

// Forward: Relu_1 then Scale_2; the loss (the first linalg op of no node)
// starts backward, which reads both. Each chosen activation is recomputed
// right before backward's first read of it, Scale_2's copy from Relu_1's
// copy (their empty inits rebuilt too); forward keeps the originals. Noise_3
// reads the random state and is never recomputed.

#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @train_micro(
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%arg0 :
// CHECK: %[[S:.*]] = linalg.generic {{.*}} ins(%[[R]] :
// CHECK: %[[N:.*]] = linalg.generic {{.*}} ins(%[[S]], %arg1 :
// CHECK: %[[L:.*]] = linalg.generic {{.*}} ins(%[[N]] :
// CHECK: tensor.empty() {ddpc.remat = "Relu_1"}
// CHECK: %[[R2:.*]] = linalg.generic {{.*}} ins(%arg0 : {{.*}} attrs = {ddpc.remat = "Relu_1"}
// CHECK: tensor.empty() {ddpc.remat = "Scale_2"}
// CHECK: %[[S2:.*]] = linalg.generic {{.*}} ins(%[[R2]] : {{.*}} attrs = {ddpc.remat = "Scale_2"}
// CHECK: linalg.generic {{.*}} ins(%[[S2]], %[[N]], %[[L]] :
// CHECK-NOT: ddpc.remat = "Noise_3"
// CHECK: return
func.func @train_micro(%x: tensor<4xf32>, %rng: tensor<4xf32> {ddpc.name = "rng"}) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4xf32> loc("Relu_1")
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e0 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %zero : f32
    linalg.yield %m : f32
  } -> tensor<4xf32> loc("Relu_1")
  %e1 = tensor.empty() : tensor<4xf32> loc("Scale_2")
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%r : tensor<4xf32>) outs(%e1 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.addf %a, %a : f32
    linalg.yield %m : f32
  } -> tensor<4xf32> loc("Scale_2")
  %e2 = tensor.empty() : tensor<4xf32> loc("Noise_3")
  %n = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%s, %rng : tensor<4xf32>, tensor<4xf32>) outs(%e2 : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4xf32> loc("Noise_3")
  // The loss: backward starts here.
  %e3 = tensor.empty() : tensor<4xf32>
  %l = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%n : tensor<4xf32>) outs(%e3 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  %e4 = tensor.empty() : tensor<4xf32>
  %g = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%s, %n, %l : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) outs(%e4 : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %k = arith.addf %m, %c : f32
    linalg.yield %k : f32
  } -> tensor<4xf32>
  return %g : tensor<4xf32>
}
