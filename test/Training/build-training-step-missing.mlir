// RUN: not ddpc-opt %s --ddpc-build-training-step 2>&1 | FileCheck %s
//
// The pass needs both imports of the forward graph.

// CHECK: error: ddpc-build-training-step needs @forward_train and @forward_eval (ddpc compile --train imports both)
module {
  func.func @forward_train(%arg0: tensor<4xf32> {ddpc.name = "x", ddpc.role = "input"}) -> tensor<4xf32> {
    return %arg0 : tensor<4xf32>
  }
}
