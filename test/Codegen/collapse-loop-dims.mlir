// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-collapse-loop-dims))' | FileCheck %s

// An elementwise kernel over 4x3x3 buffers (identity maps) becomes one loop
// dim of 36 over collapsed views.
// CHECK-LABEL: func.func @elementwise(
// CHECK-DAG: %[[A:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1, 2]] : memref<4x3x3xf32> into memref<36xf32>
// CHECK-DAG: %[[B:.*]] = memref.collapse_shape %arg1 {{\[}}[0, 1, 2]] : memref<4x3x3xf32> into memref<36xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]{{.*}} ins(%[[A]] : memref<36xf32>) outs(%[[B]] : memref<36xf32>)
// CHECK-SAME: ddpc.group = "g0"
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @elementwise(%a: memref<4x3x3xf32>, %b: memref<4x3x3xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a : memref<4x3x3xf32>) outs(%b : memref<4x3x3xf32>) attrs = {ddpc.group = "g0"} {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A per-channel bias of an NCHW tensor: only (h, w) merge; a sum over
// (h, w) merges its two reduction dims and its two parallel ones.
// CHECK-LABEL: func.func @bias_and_sum(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]{{.*}} ins(%{{.*}}, %arg1 : memref<2x3x20xf32>, memref<3xf32>) outs(%{{.*}} : memref<2x3x20xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.*}} : memref<6x20xf32>) outs(%{{.*}} : memref<6xf32>)
#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#c = affine_map<(d0, d1, d2, d3) -> (d1)>
#nc = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
func.func @bias_and_sum(%x: memref<2x3x4x5xf32>, %bias: memref<3xf32>, %sum: memref<2x3xf32>) {
  linalg.generic {indexing_maps = [#x, #c, #x], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %bias : memref<2x3x4x5xf32>, memref<3xf32>) outs(%x : memref<2x3x4x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#x, #nc], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x : memref<2x3x4x5xf32>) outs(%sum : memref<2x3xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Unchanged: a transposed read (no dim run is contiguous in both maps), a
// broadcast through a constant index, and a strided view.
// CHECK-LABEL: func.func @unchanged(
// CHECK-NOT: memref.collapse_shape
// CHECK: return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#t2 = affine_map<(d0, d1) -> (d1, d0)>
#b2 = affine_map<(d0, d1) -> (0, d1)>
func.func @unchanged(%a: memref<4x4xf32>, %b: memref<4x4xf32>, %one: memref<1x4xf32>, %s: memref<4x4xf32, strided<[8, 1]>>) {
  linalg.generic {indexing_maps = [#t2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<4x4xf32>) outs(%b : memref<4x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  linalg.generic {indexing_maps = [#b2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%one : memref<1x4xf32>) outs(%b : memref<4x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%s : memref<4x4xf32, strided<[8, 1]>>) outs(%b : memref<4x4xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}
