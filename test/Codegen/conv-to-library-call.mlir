// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-conv-to-library-call))' | FileCheck %s

// Tests ddpc-conv-to-library-call on the importer's convolution generic: batch 2,
// 3 input channels of 6x6 (already padded), 4 output channels, 3x3 window,
// stride 1. First the library call (cuDNN on the GPU): kind 0 (forward),
// N, C, H, W = 2, 3, 6, 6, OC, KH, KW = 4, 3, 3, OH, OW = 4, 4, strides,
// dilations and groups 1, x, w, y, accumulate 1. Its fallback, run when it returns 0:
// im2col into col[2, 3*3*3, 4*4] and one GEMM per sample,
// y[n] (4 x 16) += w (4 x 27) * col[n] (27 x 16), with the weights shared
// by the batch (stride 0); the strides of col and y are 27*16 and 4*16.
// CHECK-LABEL: func.func @conv(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<2x1x3x6x6xf32>, %[[W:[a-zA-Z0-9_]+]]: memref<1x4x3x3x3xf32>, %[[Y:[a-zA-Z0-9_]+]]: memref<2x1x4x4x4xf32>)
// CHECK: %[[KIND:.*]] = arith.constant 0 : i32
// CHECK: %[[CN:.*]] = arith.constant 2 : i64
// CHECK: %[[CC:.*]] = arith.constant 3 : i64
// CHECK: %[[CH:.*]] = arith.constant 6 : i64
// CHECK: %[[CW:.*]] = arith.constant 6 : i64
// CHECK: %[[CK:.*]] = arith.constant 4 : i64
// CHECK: %[[CR:.*]] = arith.constant 3 : i64
// CHECK: %[[CS:.*]] = arith.constant 3 : i64
// CHECK: %[[CP:.*]] = arith.constant 4 : i64
// CHECK: %[[CQ:.*]] = arith.constant 4 : i64
// CHECK: %[[SH:.*]] = arith.constant 1 : i64
// CHECK: %[[SW:.*]] = arith.constant 1 : i64
// CHECK: %[[DH:.*]] = arith.constant 1 : i64
// CHECK: %[[DW:.*]] = arith.constant 1 : i64
// CHECK: %[[GR:.*]] = arith.constant 1 : i64
// CHECK: %[[ACC:.*]] = arith.constant 1 : i32
// CHECK: %[[DONE:.*]] = call @ddpc_conv2d_f32(%[[KIND]], %[[CN]], %[[CC]], %[[CH]], %[[CW]], %[[CK]], %[[CR]], %[[CS]], %[[CP]], %[[CQ]], %[[SH]], %[[SW]], %[[DH]], %[[DW]], %[[GR]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[ACC]]) {ddpc.library = "cudnn"}
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: %[[DECLINED:.*]] = arith.cmpi eq, %[[DONE]], %[[ZERO]] : i32
// CHECK: scf.if %[[DECLINED]] {
// CHECK: %[[COL:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x27x16xf32>
// CHECK: %[[COL6:.*]] = memref.expand_shape %[[COL]] {{\[\[}}0], [1, 2, 3], [4, 5]] output_shape [2, 3, 3, 3, 4, 4]
// CHECK: linalg.generic {indexing_maps = [#[[GATHER:.*]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%[[X]] : memref<2x1x3x6x6xf32>) outs(%[[COL6]] : memref<2x3x3x3x4x4xf32>)
// CHECK: memref.collapse_shape %[[W]] {{\[\[}}0, 1], [2, 3, 4]] : memref<1x4x3x3x3xf32> into memref<4x27xf32>
// CHECK: memref.collapse_shape %[[Y]] {{\[\[}}0], [1, 2], [3, 4]] : memref<2x1x4x4x4xf32> into memref<2x4x16xf32>
// CHECK-DAG: %[[B:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[M:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 16 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 27 : i64
// CHECK-DAG: %[[Z:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[SB:.*]] = arith.constant 432 : i64
// CHECK-DAG: %[[SC:.*]] = arith.constant 64 : i64
// CHECK: call @ddpc_gemm_f32(%[[B]], %[[M]], %[[N]], %[[K]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[Z]], %[[SB]], %[[SC]], %{{[^,]*}})
// CHECK: memref.dealloc %[[COL]]
// CHECK: } {ddpc.library_fallback}
// CHECK-NOT: reduction
#x = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#w = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @conv(%x: memref<2x1x3x6x6xf32>, %w: memref<1x4x3x3x3xf32>, %y: memref<2x1x4x4x4xf32>) {
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

// Stride 2 and dilation 2 go into the gather map: x[n, 0, ic, 2*oh + 2*kh,
// 2*ow + 2*kw] with loops (n, ic, kh, kw, oh, ow).
// CHECK: #[[G:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, 0, d1, d4 * 2 + d2 * 2, d5 * 2 + d3 * 2)>
// CHECK-LABEL: func.func @strided(
// CHECK: linalg.generic {indexing_maps = [#[[G]],
// CHECK: call @ddpc_gemm_f32(
#xs = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 * 2 + d6 * 2, d4 * 2 + d7 * 2)>
#ws = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#ys = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @strided(%x: memref<1x1x2x9x9xf32>, %w: memref<1x2x2x3x3xf32>, %y: memref<1x1x2x3x3xf32>) {
  linalg.generic {indexing_maps = [#xs, #ws, #ys], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<1x1x2x9x9xf32>, memref<1x2x2x3x3xf32>) outs(%y : memref<1x1x2x3x3xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Grouped (here depthwise: 3 groups of one channel) convolutions go to the
// library with C = 3, OC = 3 and 3 groups; the fallback is the generic
// itself (a generated kernel), no GEMM.
// CHECK-LABEL: func.func @grouped(
// CHECK: %[[KIND:.*]] = arith.constant 0 : i32
// CHECK: %[[N:.*]] = arith.constant 2 : i64
// CHECK: %[[C:.*]] = arith.constant 3 : i64
// CHECK: %[[H:.*]] = arith.constant 6 : i64
// CHECK: %[[W:.*]] = arith.constant 6 : i64
// CHECK: %[[K:.*]] = arith.constant 3 : i64
// CHECK: %[[R:.*]] = arith.constant 3 : i64
// CHECK: %[[S:.*]] = arith.constant 3 : i64
// CHECK: %[[P:.*]] = arith.constant 4 : i64
// CHECK: %[[Q:.*]] = arith.constant 4 : i64
// CHECK: %[[SH:.*]] = arith.constant 1 : i64
// CHECK: %[[SW:.*]] = arith.constant 1 : i64
// CHECK: %[[DH:.*]] = arith.constant 1 : i64
// CHECK: %[[DW:.*]] = arith.constant 1 : i64
// CHECK: %[[G:.*]] = arith.constant 3 : i64
// CHECK: call @ddpc_conv2d_f32(%[[KIND]], %[[N]], %[[C]], %[[H]], %[[W]], %[[K]], %[[R]], %[[S]], %[[P]], %[[Q]], %[[SH]], %[[SW]], %[[DH]], %[[DW]], %[[G]],
// CHECK: scf.if
// CHECK-NEXT: linalg.generic
// CHECK-NOT: ddpc_gemm_f32
// CHECK: } {ddpc.library_fallback}
#xg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#wg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#yg = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @grouped(%x: memref<2x3x1x6x6xf32>, %w: memref<3x1x1x3x3xf32>, %y: memref<2x3x1x4x4xf32>) {
  linalg.generic {indexing_maps = [#xg, #wg, #yg], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x3x1x6x6xf32>, memref<3x1x1x3x3xf32>) outs(%y : memref<2x3x1x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The weight gradient (n, oh, ow reduce): dw[0,oc,ic,kh,kw] += x[n,0,ic,
// oh+kh,ow+kw] * dy[n,0,oc,oh,ow] becomes colT[27, 2, 16] (im2col with the
// window index outermost), dyT[4, 2, 16] (transpose of dy) and one GEMM
// over the 2*16 positions: dw (4 x 27) += dyT (4 x 32) * colT^T (32 x 27).
// CHECK-LABEL: func.func @weight_grad(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<2x1x3x6x6xf32>, %[[DY:[a-zA-Z0-9_]+]]: memref<2x1x4x4x4xf32>, %{{[a-zA-Z0-9_]+}}: memref<1x4x3x3x3xf32>)
// CHECK: %[[COLT:.*]] = memref.alloc() {alignment = 64 : i64} : memref<27x2x16xf32>
// CHECK: memref.expand_shape %[[COLT]] {{\[\[}}0, 1, 2], [3], [4, 5]] output_shape [3, 3, 3, 2, 4, 4]
// CHECK: %[[DYT:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x2x16xf32>
// CHECK: linalg.generic {{.*}} ins(%[[DY]] : memref<2x1x4x4x4xf32>) outs(%{{.*}} : memref<4x2x4x4xf32>)
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[M:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 27 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 32 : i64
// CHECK-DAG: %[[NT:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK: call @ddpc_gemm_f32(%[[ONE]], %[[M]], %[[N]], %[[K]], %[[NT]], %[[T]],
// CHECK: memref.dealloc %[[COLT]]
// CHECK: memref.dealloc %[[DYT]]
#xw = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#gw = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#ww = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
func.func @weight_grad(%x: memref<2x1x3x6x6xf32>, %dy: memref<2x1x4x4x4xf32>, %dw: memref<1x4x3x3x3xf32>) {
  linalg.generic {indexing_maps = [#xw, #gw, #ww], iterator_types = ["reduction", "parallel", "parallel", "reduction", "reduction", "parallel", "parallel", "parallel"]}
      ins(%x, %dy : memref<2x1x3x6x6xf32>, memref<2x1x4x4x4xf32>) outs(%dw : memref<1x4x3x3x3xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The input gradient (all loops reduce): dx[n,0,ic,2*oh+kh,2*ow+kw] +=
// w[0,oc,ic,kh,kw] * dy[n,0,oc,oh,ow] becomes one batched GEMM that
// overwrites a temporary dcol[2, 27, 4] (no fill), dcol[n] (27 x 4) = w^T
// (27 x 5) * dy[n] (5 x 4) (w stored OC x K, so transposed, batch stride
// 0; dy and dcol strides 5*4 and 27*4), then col2im: a scatter-add of dcol into dx through the
// window map, left for ddpc-scatter-to-atomic.
// CHECK: #[[COL2IM:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, 0, d1, d4 * 2 + d2, d5 * 2 + d3)>
// CHECK-LABEL: func.func @input_grad(
// CHECK-SAME: %[[W:[a-zA-Z0-9_]+]]: memref<1x5x3x3x3xf32>, %[[DY:[a-zA-Z0-9_]+]]: memref<2x1x5x2x2xf32>, %[[DX:[a-zA-Z0-9_]+]]: memref<2x1x3x5x5xf32>)
// CHECK: %[[DCOL:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x27x4xf32>
// CHECK-NOT: linalg.fill
// CHECK: %[[WM:.*]] = memref.collapse_shape %[[W]] {{\[\[}}0, 1], [2, 3, 4]] : memref<1x5x3x3x3xf32> into memref<5x27xf32>
// CHECK: %[[DYM:.*]] = memref.collapse_shape %[[DY]] {{\[\[}}0], [1, 2], [3, 4]] : memref<2x1x5x2x2xf32> into memref<2x5x4xf32>
// CHECK-DAG: %[[B:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[M:.*]] = arith.constant 27 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 5 : i64
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[NT:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[Z:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[SB:.*]] = arith.constant 20 : i64
// CHECK-DAG: %[[SC:.*]] = arith.constant 108 : i64
// The GEMM overwrites dcol (last argument 0: BLAS beta = 0, no fill); its
// constant comes after the one of transB.
// CHECK-DAG: %[[BETA:.*]] = arith.constant 0 : i32
// CHECK: call @ddpc_gemm_f32(%[[B]], %[[M]], %[[N]], %[[K]], %[[T]], %[[NT]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[Z]], %[[SB]], %[[SC]], %[[BETA]])
// CHECK: %[[DCOL6:.*]] = memref.expand_shape %[[DCOL]] {{\[\[}}0], [1, 2, 3], [4, 5]] output_shape [2, 3, 3, 3, 2, 2]
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[COL2IM]]], iterator_types = ["reduction", "reduction", "reduction", "reduction", "reduction", "reduction"]} ins(%[[DCOL6]] : memref<2x3x3x3x2x2xf32>) outs(%[[DX]] : memref<2x1x3x5x5xf32>)
// CHECK: arith.addf
// CHECK: memref.dealloc %[[DCOL]]
// CHECK-NOT: linalg.generic
#wi = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#gi = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#xi = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 * 2 + d6, d4 * 2 + d7)>
func.func @input_grad(%w: memref<1x5x3x3x3xf32>, %dy: memref<2x1x5x2x2xf32>, %dx: memref<2x1x3x5x5xf32>) {
  linalg.generic {indexing_maps = [#wi, #gi, #xi], iterator_types = ["reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction"]}
      ins(%w, %dy : memref<1x5x3x3x3xf32>, memref<2x1x5x2x2xf32>) outs(%dx : memref<2x1x3x5x5xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %b, %a : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The same with the inputs in the other order (dy, w).
// CHECK-LABEL: func.func @input_grad_swapped(
// CHECK-SAME: %[[DY:[a-zA-Z0-9_]+]]: memref<2x1x4x4x4xf32>, %[[W:[a-zA-Z0-9_]+]]: memref<1x4x3x3x3xf32>, %{{[a-zA-Z0-9_]+}}: memref<2x1x3x6x6xf32>)
// CHECK: memref.collapse_shape %[[W]] {{\[\[}}0, 1], [2, 3, 4]] : memref<1x4x3x3x3xf32> into memref<4x27xf32>
// CHECK: memref.collapse_shape %[[DY]] {{\[\[}}0], [1, 2], [3, 4]] : memref<2x1x4x4x4xf32> into memref<2x4x16xf32>
// CHECK: call @ddpc_gemm_f32(
#wj = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#gj = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#xj = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
func.func @input_grad_swapped(%dy: memref<2x1x4x4x4xf32>, %w: memref<1x4x3x3x3xf32>, %dx: memref<2x1x3x6x6xf32>) {
  linalg.generic {indexing_maps = [#gj, #wj, #xj], iterator_types = ["reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction"]}
      ins(%dy, %w : memref<2x1x4x4x4xf32>, memref<1x4x3x3x3xf32>) outs(%dx : memref<2x1x3x6x6xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A forward convolution whose output was zero-filled: the fill is absorbed
// and the GEMM overwrites y (last argument 0).
// CHECK-LABEL: func.func @conv_zero_filled(
// CHECK-NOT: linalg.fill
// CHECK: scf.if
// CHECK-NOT: linalg.fill
// The beta constant follows the GEMM's pointers.
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK-NOT: linalg.fill
// CHECK: %[[BETA:.*]] = arith.constant 0 : i32
// CHECK-NOT: linalg.fill
// CHECK: call @ddpc_gemm_f32({{.*}}, %[[BETA]])
#xz = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#wz = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#yz = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
func.func @conv_zero_filled(%x: memref<2x1x3x6x6xf32>, %w: memref<1x4x3x3x3xf32>) -> memref<2x1x4x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %y = memref.alloc() : memref<2x1x4x4x4xf32>
  linalg.fill ins(%zero : f32) outs(%y : memref<2x1x4x4x4xf32>)
  linalg.generic {indexing_maps = [#xz, #wz, #yz], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x1x3x6x6xf32>, memref<1x4x3x3x3xf32>) outs(%y : memref<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %y : memref<2x1x4x4x4xf32>
}

// -----

// An input gradient into a zero-filled dx: the library call overwrites dx
// (accumulate 0) and the zero fill moves into the fallback, whose col2im
// accumulates. Kind 1 (backward data).
// CHECK-LABEL: func.func @input_grad_zero_filled(
// CHECK-NOT: linalg.fill
// CHECK: %[[KIND:.*]] = arith.constant 1 : i32
// CHECK-NOT: linalg.fill
// The accumulate constant follows the pointers.
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK-NOT: linalg.fill
// CHECK: %[[ACC:.*]] = arith.constant 0 : i32
// CHECK-NOT: linalg.fill
// CHECK: call @ddpc_conv2d_f32(%[[KIND]], {{.*}}, %[[ACC]]) {ddpc.library = "cudnn"}
// CHECK: scf.if
// CHECK-NEXT: linalg.fill
// CHECK: call @ddpc_gemm_f32(
// CHECK: } {ddpc.library_fallback}
#wf = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#gf = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#xf = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
func.func @input_grad_zero_filled(%w: memref<1x4x3x3x3xf32>, %dy: memref<2x1x4x4x4xf32>) -> memref<2x1x3x6x6xf32> {
  %zero = arith.constant 0.0 : f32
  %dx = memref.alloc() : memref<2x1x3x6x6xf32>
  linalg.fill ins(%zero : f32) outs(%dx : memref<2x1x3x6x6xf32>)
  linalg.generic {indexing_maps = [#wf, #gf, #xf], iterator_types = ["reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction", "reduction"]}
      ins(%w, %dy : memref<1x4x3x3x3xf32>, memref<2x1x4x4x4xf32>) outs(%dx : memref<2x1x3x6x6xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %dx : memref<2x1x3x6x6xf32>
}
