// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-gemm-to-library-call,ddpc-gemm-epilogues))' | FileCheck %s

// Tests ddpc-gemm-epilogues on Gemm + bias + Relu as an inference function
// bufferizes it: a zero fill (absorbed, so the GEMM overwrites C), the
// contraction, then D = relu(C + bias[n]) in place, in the importer's
// NaN-propagating select form. It becomes one cuBLASLt call
// (m=4, n=3, k=8, transB, act 1) whose result decides whether the GEMM
// and the kernel run after all (the fallback).
// The activation constant follows the bias pointer.
// CHECK-LABEL: func.func @dense_relu(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<4x8xf32>, %{{[a-zA-Z0-9_]+}}: memref<3x8xf32>, %[[BIAS:[a-zA-Z0-9_]+]]: memref<3xf32>, %{{[a-zA-Z0-9_]+}}: memref<4x3xf32>)
// CHECK-DAG: %[[M:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 3 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 8 : i64
// CHECK-DAG: %[[NT:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK: memref.extract_aligned_pointer_as_index %[[BIAS]] :
// CHECK: %[[ACT:.*]] = arith.constant 1 : i32
// CHECK: %[[DONE:.*]] = call @ddpc_gemm_bias_act_f32(%[[M]], %[[N]], %[[K]], %[[NT]], %[[T]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[ACT]]) {ddpc.library = "cublasLt"} : (i64, i64, i64, i32, i32, i64, i64, i64, i64, i32) -> i32
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: %[[FAILED:.*]] = arith.cmpi eq, %[[DONE]], %[[ZERO]] : i32
// CHECK: scf.if %[[FAILED]] {
// CHECK-NEXT: call @ddpc_gemm_f32(
// CHECK-NEXT: linalg.generic
// CHECK: } {ddpc.library_fallback}
// CHECK-NEXT: return
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

// -----

// Bias only (act 0), into another buffer D; C is a temporary that nothing
// reads afterwards, so the epilogue may skip writing it.
// CHECK-LABEL: func.func @dense_bias(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<4x8xf32>, %{{[a-zA-Z0-9_]+}}: memref<8x3xf32>, %[[BIAS:[a-zA-Z0-9_]+]]: memref<3xf32>, %{{[a-zA-Z0-9_]+}}: memref<4x3xf32>)
// CHECK: memref.extract_aligned_pointer_as_index %[[BIAS]] :
// CHECK: %[[ACT:.*]] = arith.constant 0 : i32
// CHECK: call @ddpc_gemm_bias_act_f32({{.*}}, %[[ACT]]) {ddpc.library = "cublasLt"}
// CHECK: scf.if
// CHECK: } {ddpc.library_fallback}
#a2 = affine_map<(m, n, k) -> (m, k)>
#b2 = affine_map<(m, n, k) -> (k, n)>
#c2 = affine_map<(m, n, k) -> (m, n)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#bias2 = affine_map<(d0, d1) -> (d1)>
func.func @dense_bias(%x: memref<4x8xf32>, %w: memref<8x3xf32>, %b: memref<3xf32>, %d: memref<4x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<4x3xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<4x3xf32>)
  linalg.generic {indexing_maps = [#a2, #b2, #c2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x3xf32>) outs(%t : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#bias2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%b, %t : memref<3xf32>, memref<4x3xf32>) outs(%d : memref<4x3xf32>) {
  ^bb0(%bb: f32, %v: f32, %o: f32):
    %s = arith.addf %bb, %v : f32
    linalg.yield %s : f32
  }
  memref.dealloc %t : memref<4x3xf32>
  return
}

// -----

// Not fused: C is read again after the bias add into D (training keeps the
// pre-activation for the backward pass); a bias along m (per row) is not a
// cuBLASLt bias; a GEMM that accumulates (no zero fill) is not either.
// CHECK-LABEL: func.func @not_fused(
// CHECK-NOT: ddpc_gemm_bias_act_f32
// CHECK-NOT: scf.if
// CHECK: return
#a3 = affine_map<(m, n, k) -> (m, k)>
#b3 = affine_map<(m, n, k) -> (k, n)>
#c3 = affine_map<(m, n, k) -> (m, n)>
#id3 = affine_map<(d0, d1) -> (d0, d1)>
#row3 = affine_map<(d0, d1) -> (d0)>
#col3 = affine_map<(d0, d1) -> (d1)>
func.func @not_fused(%x: memref<4x8xf32>, %w: memref<8x4xf32>, %b: memref<4xf32>, %d: memref<4x4xf32>, %e: memref<4x4xf32>, %acc: memref<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<4x4xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<4x4xf32>)
  linalg.generic {indexing_maps = [#a3, #b3, #c3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x4xf32>) outs(%t : memref<4x4xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id3, #col3, #id3], iterator_types = ["parallel", "parallel"]}
      ins(%t, %b : memref<4x4xf32>, memref<4xf32>) outs(%d : memref<4x4xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    linalg.yield %s : f32
  }
  linalg.copy ins(%t : memref<4x4xf32>) outs(%e : memref<4x4xf32>)
  memref.dealloc %t : memref<4x4xf32>
  %u = memref.alloc() : memref<4x4xf32>
  linalg.fill ins(%zero : f32) outs(%u : memref<4x4xf32>)
  linalg.generic {indexing_maps = [#a3, #b3, #c3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x4xf32>) outs(%u : memref<4x4xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id3, #row3, #id3], iterator_types = ["parallel", "parallel"]}
      ins(%u, %b : memref<4x4xf32>, memref<4xf32>) outs(%u : memref<4x4xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    linalg.yield %s : f32
  }
  memref.dealloc %u : memref<4x4xf32>
  linalg.generic {indexing_maps = [#a3, #b3, #c3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x4xf32>) outs(%acc : memref<4x4xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id3, #col3, #id3], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %b : memref<4x4xf32>, memref<4xf32>) outs(%acc : memref<4x4xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    linalg.yield %s : f32
  }
  return
}
