// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-conv-to-library-call,ddpc-conv-epilogues))' | FileCheck %s

// Tests ddpc-conv-epilogues on a Conv with bias + Relu as an inference
// function bufferizes it: a zero fill of the temporary y (absorbed by
// ddpc-conv-to-library-call, so the convolution overwrites it), the convolution
// (batch 2, 3 -> 4 channels, 6x6 padded input, 3x3 window), then
// D = relu(y + bias[k]) into the output in the importer's NaN-propagating
// select form. It becomes one fused call (shape operands as for
// ddpc_conv2d_f32 without the kind, then x, w, bias, D, act 1) whose result
// decides whether the convolution (with its own im2col + GEMM fallback)
// and the kernel run after all.
// CHECK-LABEL: func.func @conv_bias_relu(
// CHECK: %[[KIND:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[N:.*]] = arith.constant 2 : i64
// CHECK-NEXT: %[[C:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[H:.*]] = arith.constant 6 : i64
// CHECK-NEXT: %[[W:.*]] = arith.constant 6 : i64
// CHECK-NEXT: %[[K:.*]] = arith.constant 4 : i64
// CHECK-NEXT: %[[R:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[S:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[P:.*]] = arith.constant 4 : i64
// CHECK-NEXT: %[[Q:.*]] = arith.constant 4 : i64
// CHECK-NEXT: %[[STRIDE_H:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[STRIDE_W:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[DIL_H:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[DIL_W:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[GROUPS:.*]] = arith.constant 1 : i64
// CHECK: %[[RELU:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[DONE:.*]] = call @ddpc_conv2d_bias_act_f32(%[[N]], %[[C]], %[[H]], %[[W]], %[[K]], %[[R]], %[[S]], %[[P]], %[[Q]], %[[STRIDE_H]], %[[STRIDE_W]], %[[DIL_H]], %[[DIL_W]], %[[GROUPS]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[RELU]]) {ddpc.library = "cudnn"} : (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i32) -> i32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[FAILED:.*]] = arith.cmpi eq, %[[DONE]], %[[ZERO]]
// CHECK: scf.if %[[FAILED]] {
// CHECK-NEXT: %[[INNER:.*]] = func.call @ddpc_conv2d_f32(%[[KIND]], %[[N]], %[[C]]
// CHECK-NEXT: %[[DECLINED:.*]] = arith.cmpi eq, %[[INNER]]
// CHECK-NEXT: scf.if %[[DECLINED]] {
// CHECK: func.call @ddpc_gemm_f32(
// CHECK: } {ddpc.library_fallback}
// CHECK-NEXT: linalg.generic
// CHECK: } {ddpc.library_fallback}
// CHECK-NEXT: memref.dealloc
// CHECK-NEXT: return
#x = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#w = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
func.func @conv_bias_relu(%x: memref<2x1x3x6x6xf32>, %w: memref<1x4x3x3x3xf32>, %b: memref<4x1x1xf32>, %d: memref<2x4x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %y = memref.alloc() : memref<2x1x4x4x4xf32>
  linalg.fill ins(%zero : f32) outs(%y : memref<2x1x4x4x4xf32>)
  linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x1x3x6x6xf32>, memref<1x4x3x3x3xf32>) outs(%y : memref<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %bb: f32, %acc: f32):
    %m = arith.mulf %a, %bb : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %y4 = memref.collapse_shape %y [[0], [1, 2], [3], [4]] : memref<2x1x4x4x4xf32> into memref<2x4x4x4xf32>
  linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%y4, %b : memref<2x4x4x4xf32>, memref<4x1x1xf32>) outs(%d : memref<2x4x4x4xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    %nan = arith.cmpf uno, %s, %s : f32
    %z = arith.select %nan, %s, %zero : f32
    %pos = arith.cmpf ogt, %s, %zero : f32
    %r = arith.select %pos, %s, %z : f32
    linalg.yield %r : f32
  }
  memref.dealloc %y : memref<2x1x4x4x4xf32>
  return
}

// -----

// Tests that a convolution whose output is a function argument (a graph
// output the caller reads) keeps its separate bias kernel when that kernel
// writes elsewhere: the fused call would never write y.
// CHECK-LABEL: func.func @conv_output_read_later(
// CHECK-NOT: ddpc_conv2d_bias_act_f32
// CHECK: return
#x2 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#w2 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y2 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#id2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias2 = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
func.func @conv_output_read_later(%x: memref<2x1x3x6x6xf32>, %w: memref<1x4x3x3x3xf32>, %b: memref<4x1x1xf32>, %y: memref<2x1x4x4x4xf32>, %d: memref<2x4x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<2x1x4x4x4xf32>)
  linalg.generic {indexing_maps = [#x2, #w2, #y2], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x1x3x6x6xf32>, memref<1x4x3x3x3xf32>) outs(%y : memref<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %bb: f32, %acc: f32):
    %m = arith.mulf %a, %bb : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %y4 = memref.collapse_shape %y [[0], [1, 2], [3], [4]] : memref<2x1x4x4x4xf32> into memref<2x4x4x4xf32>
  linalg.generic {indexing_maps = [#id2, #bias2, #id2], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%y4, %b : memref<2x4x4x4xf32>, memref<4x1x1xf32>) outs(%d : memref<2x4x4x4xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests that an epilogue kernel writing into the convolution's own input
// (overlapping bytes of one allocation) is not fused: cuDNN would read x
// while writing D.
// CHECK-LABEL: func.func @output_overlaps_input(
// CHECK-NOT: ddpc_conv2d_bias_act_f32
// CHECK: return
#x3 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>
#w3 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y3 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#id3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias3 = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
func.func @output_overlaps_input(%w: memref<1x4x3x3x3xf32>, %b: memref<4x1x1xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1024 = arith.constant 1024 : index
  %arena = memref.alloc() : memref<2048xi8>
  %x = memref.view %arena[%c0][] : memref<2048xi8> to memref<2x1x3x6x6xf32>
  %d = memref.view %arena[%c0][] : memref<2048xi8> to memref<2x4x4x4xf32>
  %y = memref.view %arena[%c1024][] : memref<2048xi8> to memref<2x1x4x4x4xf32>
  linalg.fill ins(%zero : f32) outs(%y : memref<2x1x4x4x4xf32>)
  linalg.generic {indexing_maps = [#x3, #w3, #y3], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<2x1x3x6x6xf32>, memref<1x4x3x3x3xf32>) outs(%y : memref<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %bb: f32, %acc: f32):
    %m = arith.mulf %a, %bb : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %y4 = memref.collapse_shape %y [[0], [1, 2], [3], [4]] : memref<2x1x4x4x4xf32> into memref<2x4x4x4xf32>
  linalg.generic {indexing_maps = [#id3, #bias3, #id3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%y4, %b : memref<2x4x4x4xf32>, memref<4x1x1xf32>) outs(%d : memref<2x4x4x4xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32
    linalg.yield %s : f32
  }
  memref.dealloc %arena : memref<2048xi8>
  return
}
