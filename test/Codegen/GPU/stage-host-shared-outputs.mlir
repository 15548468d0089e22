// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-stage-host-shared-outputs))' | FileCheck %s

// @grad_norm's output lives in page-locked host memory (ddpc.host_shared):
// the sum of squares accumulates in a device buffer that is copied from the
// output on entry and back before the return. The read-only host-shared
// input and the unmarked gradient stay as they are.
// CHECK-LABEL: func.func @grad_norm(
// CHECK-SAME: %[[G:[a-zA-Z0-9_]+]]: memref<64x1568xf32>, %[[S:[a-zA-Z0-9_]+]]: memref<f32> {ddpc.host_shared}, %[[OUT:[a-zA-Z0-9_]+]]: memref<f32> {ddpc.host_shared})
// CHECK: %[[T:.*]] = memref.alloc() : memref<f32>
// CHECK-NEXT: memref.copy %[[OUT]], %[[T]]
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[T]] : memref<f32>)
// CHECK: linalg.generic {{.*}} ins(%[[G]] : memref<64x1568xf32>) outs(%[[T]] : memref<f32>)
// CHECK: linalg.generic {{.*}} ins(%[[T]], %[[S]] : memref<f32>, memref<f32>) outs(%[[T]] : memref<f32>)
// CHECK: memref.copy %[[T]], %[[OUT]]
// CHECK-NEXT: memref.dealloc %[[T]]
// CHECK-NEXT: return
#in = affine_map<(a, b) -> (a, b)>
#scalar2 = affine_map<(a, b) -> ()>
#id0 = affine_map<() -> ()>
func.func @grad_norm(%g: memref<64x1568xf32>, %scale: memref<f32> {ddpc.host_shared}, %out: memref<f32> {ddpc.host_shared}) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<f32>)
  linalg.generic {indexing_maps = [#in, #scalar2], iterator_types = ["reduction", "reduction"]}
      ins(%g : memref<64x1568xf32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %acc: f32):
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %acc, %sq : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id0, #id0, #id0], iterator_types = []}
      ins(%out, %scale : memref<f32>, memref<f32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %r = math.sqrt %a : f32
    %m = arith.mulf %r, %b : f32
    linalg.yield %m : f32
  }
  return
}
