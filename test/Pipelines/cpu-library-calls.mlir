// RUN: ddpc-opt %s --split-input-file --ddpc-cpu-library-calls | FileCheck %s

// Tests the CPU target's library calls (ddpc-cpu-library-calls): a
// convolution calls the runtime's ddpc_conv2d_f32 (im2col + OpenBLAS,
// CpuBlas.cpp) with beta 0 (the zero fill of y is absorbed), and its
// fallback branch (taken with DDPC_CUDNN=0) is im2col + one batched GEMM.
// CHECK-LABEL: func.func @conv(
// CHECK-NOT: linalg.fill
// CHECK: %[[DONE:.*]] = call @ddpc_conv2d_f32(%c0_i32, {{.*}}, %c0_i32_{{[0-9]+}}) {ddpc.library = "openblas"}
// CHECK: %[[DECLINED:.*]] = arith.cmpi eq, %[[DONE]]
// CHECK: scf.if %[[DECLINED]] {
// CHECK: %[[COL:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x27x16xf32>
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : memref<2x3x3x3x4x4xf32>)
// CHECK: arith.constant 64 : i64
// CHECK-NEXT: %[[BETA:.*]] = arith.constant 0 : i32
// CHECK-NEXT: call @ddpc_gemm_f32({{.*}}, %[[BETA]]) {{{.*}}ddpc.library = "openblas"}
// CHECK: memref.dealloc %[[COL]]
// CHECK: } {ddpc.library_fallback}
// CHECK: return
#x = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#w = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @conv(%x: memref<2x1x3x6x6xf32>, %w: memref<1x4x3x3x3xf32>, %y: memref<2x1x4x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<2x1x4x4x4xf32>)
  linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x1x3x6x6xf32>, memref<1x4x3x3x3xf32>) outs(%y : memref<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A grouped convolution (2 groups) calls ddpc_conv2d_f32 with 2 groups;
// its fallback is the convolution generic itself (loops), which
// accumulates, so the call accumulates too (no zero fill to absorb).
// CHECK-LABEL: func.func @grouped(
// CHECK: %[[DONE:.*]] = call @ddpc_conv2d_f32(
// CHECK-SAME: ddpc.library = "openblas"
// CHECK: scf.if
// CHECK-NEXT: linalg.generic
// CHECK-NOT: call
// CHECK: } {ddpc.library_fallback}
// CHECK: return
#xg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#wg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#yg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @grouped(%x: memref<2x2x3x6x6xf32>, %w: memref<2x4x3x3x3xf32>, %y: memref<2x2x4x4x4xf32>) {
  linalg.generic {indexing_maps = [#xg, #wg, #yg], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x2x3x6x6xf32>, memref<2x4x3x3x3xf32>) outs(%y : memref<2x2x4x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Gemm + bias + Relu of an inference function: one OpenBLAS GEMM with the
// epilogue in the runtime, the separate GEMM and kernel as its fallback.
// CHECK-LABEL: func.func @dense_relu(
// CHECK: %[[DONE:.*]] = call @ddpc_gemm_bias_act_f32({{.*}}) {ddpc.library = "openblas"}
// CHECK: scf.if
// CHECK-NEXT: call @ddpc_gemm_f32({{.*}}) {{{.*}}ddpc.library = "openblas"}
// CHECK-NEXT: linalg.generic
// CHECK: } {ddpc.library_fallback}
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
func.func @dense_relu(%x: memref<4x8xf32>, %w: memref<3x8xf32>, %b: memref<3xf32>, %y: memref<4x3xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<4x3xf32>)
  linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<3x8xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : memref<4x3xf32>, memref<3xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    %nan = arith.cmpf uno, %s, %s : f32
    %z = arith.select %nan, %s, %zero : f32
    %pos = arith.cmpf ogt, %s, %zero : f32
    %r = arith.select %pos, %s, %z : f32
    linalg.yield %r : f32
  }
  return
}
