// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --ddpc-make-vjp | FileCheck %s
//
// Tests ddpc-make-vjp (stage "vjp" of `ddpc compile --vjp`): y = x * x
// becomes (x, d_y) -> (y, d_x) with d_x = d_y * x + d_y * x (the product
// rule, one term per use of x).

#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @main_graph(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x"}
// CHECK-SAME: %[[DY:[a-z0-9]+]]: tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "d_y"}
// CHECK-SAME: -> (tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "y"}, tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "d_x"})
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[X]] :
// CHECK: %[[T1:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[X]], %[[DY]] :
// CHECK: %[[T2:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[X]], %[[DY]] :
// CHECK: %[[DX:.+]] = linalg.generic {{.*}} ins(%[[T1]], %[[T2]] :
// CHECK: arith.addf
// CHECK: return %[[Y]], %[[DX]] : tensor<4xf32>, tensor<4xf32>
func.func @main_graph(%x: tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x"}) -> (tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "y"}) {
  %e = tensor.empty() : tensor<4xf32>
  %y = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%x, %x : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{ddpc-make-vjp needs @main_graph}}
module {
  func.func @other() {
    return
  }
}

// -----

// expected-error @+1 {{ddpc-make-vjp: argument 0 of @main_graph needs a ranked tensor type, ddpc.name and ddpc.dtype}}
func.func @main_graph(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{ddpc-make-vjp: result 0 of @main_graph needs a ranked tensor type, ddpc.name and ddpc.dtype}}
func.func @main_graph(%x: tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{ddpc-make-vjp: @main_graph is a declaration; it needs a body}}
func.func private @main_graph(tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "x"}) -> (tensor<4xf32> {ddpc.dtype = 1 : i32, ddpc.name = "y"})
