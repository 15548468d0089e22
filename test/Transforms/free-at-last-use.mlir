// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-free-at-last-use))' | FileCheck %s

// The dealloc moves up to right after the last use, through a view.
// CHECK-LABEL: func.func @moves(
// CHECK: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[A]] : memref<4xf32>)
// CHECK: %[[V:.*]] = memref.expand_shape %[[A]]
// CHECK-NEXT: linalg.copy ins(%[[V]] : memref<2x2xf32>) outs(%{{.*}} : memref<2x2xf32>)
// CHECK-NEXT: memref.dealloc %[[A]] : memref<4xf32>
// CHECK-NEXT: %[[B:.*]] = memref.alloc() : memref<4xf32>
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[B]] : memref<4xf32>)
// CHECK-NEXT: memref.dealloc %[[B]] : memref<4xf32>
// CHECK-NEXT: return
func.func @moves(%out: memref<2x2xf32>) {
  %c = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<4xf32>
  linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
  %v = memref.expand_shape %a [[0, 1]] output_shape [2, 2] : memref<4xf32> into memref<2x2xf32>
  linalg.copy ins(%v : memref<2x2xf32>) outs(%out : memref<2x2xf32>)
  %b = memref.alloc() : memref<4xf32>
  linalg.fill ins(%c : f32) outs(%b : memref<4xf32>)
  memref.dealloc %a : memref<4xf32>
  memref.dealloc %b : memref<4xf32>
  return
}

// A use inside a loop counts as the loop's; an address that escapes (a
// call, an extracted pointer) keeps its dealloc where it was.
// CHECK-LABEL: func.func @stays(
// CHECK: scf.for
// CHECK: memref.store
// CHECK: }
// CHECK-NEXT: memref.dealloc %[[L:.*]] : memref<4xf32>
// CHECK: call @keep
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: linalg.fill
// CHECK-NEXT: memref.dealloc %{{.*}} : memref<4xf32>
// CHECK-NEXT: memref.dealloc %{{.*}} : memref<4xf32>
// CHECK-NEXT: return
func.func private @keep(memref<4xf32>)
func.func @stays(%n: index) -> index {
  %c = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %l = memref.alloc() : memref<4xf32>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %c, %l[%i] : memref<4xf32>
  }
  %e = memref.alloc() : memref<4xf32>
  call @keep(%e) : (memref<4xf32>) -> ()
  %p = memref.alloc() : memref<4xf32>
  %ptr = memref.extract_aligned_pointer_as_index %p : memref<4xf32> -> index
  %t = memref.alloc() : memref<4xf32>
  linalg.fill ins(%c : f32) outs(%t : memref<4xf32>)
  memref.dealloc %l : memref<4xf32>
  memref.dealloc %e : memref<4xf32>
  memref.dealloc %p : memref<4xf32>
  return %ptr : index
}

// The inputs of a contraction stay live through the elementwise kernel that
// reads its result (an epilogue that ddpc-gemm-epilogues may fuse into one
// library call there).
// CHECK-LABEL: func.func @epilogue(
// CHECK: linalg.matmul
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK-NEXT: linalg.yield
// CHECK-NEXT: }
// CHECK-DAG: memref.dealloc %{{.*}} : memref<2x3xf32>
// CHECK-DAG: memref.dealloc %{{.*}} : memref<2x2xf32>
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @epilogue(%b: memref<3x2xf32>, %d: memref<2x2xf32>) {
  %c = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<2x3xf32>
  linalg.fill ins(%c : f32) outs(%a : memref<2x3xf32>)
  %m = memref.alloc() : memref<2x2xf32>
  linalg.matmul ins(%a, %b : memref<2x3xf32>, memref<3x2xf32>) outs(%m : memref<2x2xf32>)
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %m : memref<2x2xf32>, memref<2x2xf32>) outs(%d : memref<2x2xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }
  memref.dealloc %a : memref<2x3xf32>
  memref.dealloc %m : memref<2x2xf32>
  return
}
