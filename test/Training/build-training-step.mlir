// RUN: ddpc-opt %s --ddpc-build-training-step | FileCheck %s
// RUN: ddpc-opt %s --ddpc-build-training-step='optimizer=adamw' | FileCheck %s --check-prefix=ADAMW
// RUN: ddpc-opt %s --ddpc-build-training-step='loss=mse' | FileCheck %s --check-prefix=MSE
// RUN: not ddpc-opt %s --ddpc-build-training-step='optimizer=lamb' 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not ddpc-opt %s --ddpc-build-training-step='loss=hinge' 2>&1 | FileCheck %s --check-prefix=BADLOSS
// RUN: not ddpc-opt %s --ddpc-build-training-step='nesterov=true' 2>&1 | FileCheck %s --check-prefix=NESTEROV
//
// Tests ddpc-build-training-step on the imported forward functions of a
// one-layer model (logits = x W, what `ddpc compile --train` imports for
// test/Training/train-step.onnxtxt): the pass replaces @forward_train and
// @forward_eval with the TrainABI functions. Plain SGD updates
// W - lr * (grad_scale * grad); AdamW adds its two moment buffers to @apply.

// CHECK-NOT: @forward_train
// CHECK-NOT: @forward_eval
// CHECK-LABEL: func.func @train_micro(
// CHECK-SAME: {ddpc.name = "W"}
// CHECK-SAME: {ddpc.name = "grad_acc.W", ddpc.role = "grad_acc"}
// CHECK-SAME: tensor<4x3xf32> {ddpc.name = "data"}
// CHECK-SAME: tensor<4xi64> {ddpc.name = "labels"}
// CHECK-SAME: -> (tensor<3x4xf32> {ddpc.name = "grad_acc.W", ddpc.role = "new_grad_acc"}, tensor<f32> {ddpc.host_shared, ddpc.name = "loss"}, tensor<i64> {ddpc.host_shared, ddpc.name = "correct"})
// CHECK: math.exp
// CHECK: math.log
// CHECK-LABEL: func.func @apply(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<3x4xf32> {ddpc.name = "W"}
// CHECK-SAME: %[[G:[a-z0-9]+]]: tensor<3x4xf32> {ddpc.name = "grad_acc.W", ddpc.role = "grad_acc"}
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {ddpc.host_shared, ddpc.name = "lr"}
// CHECK-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {ddpc.host_shared, ddpc.name = "grad_scale"}
// CHECK: %[[SCALED:.+]] = linalg.generic {{.*}} ins(%[[G]], %[[SCALE]] :
// CHECK: linalg.generic {{.*}} ins(%[[W]], %[[SCALED]], %[[LR]] :
// CHECK: ^bb0(%[[WV:.+]]: f32, %[[GV:.+]]: f32, %[[LRV:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[STEP:.+]] = arith.mulf %[[LRV]], %[[GV]] : f32
// CHECK: arith.subf %[[WV]], %[[STEP]] : f32
// CHECK-LABEL: func.func @eval(
// CHECK-SAME: -> (tensor<4xf32> {ddpc.host_shared, ddpc.name = "sample_loss"}, tensor<4xi64> {ddpc.host_shared, ddpc.name = "sample_correct"})

// ADAMW-LABEL: func.func @apply(
// ADAMW-SAME: {ddpc.name = "exp_avg.W"}
// ADAMW-SAME: {ddpc.name = "exp_avg_sq.W"}
// ADAMW-SAME: -> (tensor<3x4xf32> {ddpc.name = "new.W"}, tensor<3x4xf32> {ddpc.name = "new.exp_avg.W"}, tensor<3x4xf32> {ddpc.name = "new.exp_avg_sq.W"})
// ADAMW: math.sqrt

// MSE-LABEL: func.func @train_micro(
// MSE-SAME: tensor<4x4xf32> {ddpc.name = "labels"}

// BADOPT: error: --optimizer (TrainConfig.optimizer) must be sgd or adamw, got 'lamb'
// BADLOSS: error: --loss (TrainConfig.loss) must be cross-entropy, mse or output, got 'hinge'
// NESTEROV: error: --nesterov (TrainConfig.nesterov) needs --momentum > 0 and --dampening 0, as torch.optim.SGD

#map = affine_map<(d0, d1, d2) -> (d0, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1)>
module attributes {ddpc.graph_name = "g", ddpc.initializers = [{bytes = 48 : i64, dtype = 1 : i32, name = "W", shape = array<i64: 3, 4>}], ddpc.opset = 17 : i64} {
  func.func @forward_train(%arg0: tensor<4x3xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x", ddpc.role = "input"}, %arg1: tensor<3x4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "W", ddpc.role = "param"}) -> (tensor<4x4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "logits", ddpc.role = "output"}) {
    %0 = tensor.empty() : tensor<4x4xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<4x3xf32>, tensor<3x4xf32>) outs(%1 : tensor<4x4xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %3 = arith.mulf %in, %in_0 : f32
      %4 = arith.addf %out, %3 : f32
      linalg.yield %4 : f32
    } -> tensor<4x4xf32>
    return %2 : tensor<4x4xf32>
  }
  func.func @forward_eval(%arg0: tensor<4x3xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x", ddpc.role = "input"}, %arg1: tensor<3x4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "W", ddpc.role = "param"}) -> (tensor<4x4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "logits", ddpc.role = "output"}) {
    %0 = tensor.empty() : tensor<4x4xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x4xf32>) -> tensor<4x4xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<4x3xf32>, tensor<3x4xf32>) outs(%1 : tensor<4x4xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %3 = arith.mulf %in, %in_0 : f32
      %4 = arith.addf %out, %3 : f32
      linalg.yield %4 : f32
    } -> tensor<4x4xf32>
    return %2 : tensor<4x4xf32>
  }
}

