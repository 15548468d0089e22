// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-gemm-to-library-call,ddpc-scatter-to-atomic,ddpc-memref-copy-to-linalg))' | FileCheck %s

// Tests the memref-level rewrites of the CUDA pipeline.

// Row-major C[m,n] += A[m,k] * B[n,k] (Gemm with transB=1): a cuBLAS call
// with batch 1, m=4, n=3, k=8, transA=0, transB=1 and the three aligned
// pointers; the generic is gone.
// CHECK-LABEL: func.func @gemm_transb(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<4x8xf32>, %{{[a-zA-Z0-9_]+}}: memref<3x8xf32>, %{{[a-zA-Z0-9_]+}}: memref<4x3xf32>)
// CHECK-DAG: %[[B1:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[M:.*]] = arith.constant 4 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 3 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 8 : i64
// CHECK-DAG: %[[F:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK: memref.extract_aligned_pointer_as_index %[[X]]
// The batch strides (elements) follow: A 4*8, B 8*3, C 4*3.
// CHECK-DAG: %[[SA:.*]] = arith.constant 32 : i64
// CHECK-DAG: %[[SB:.*]] = arith.constant 24 : i64
// CHECK-DAG: %[[SC:.*]] = arith.constant 12 : i64
// The output is not known to be zero: the GEMM accumulates (last
// argument 1, BLAS beta = 1).
// CHECK-DAG: %[[BETA:.*]] = arith.constant 1 : i32
// CHECK: call @ddpc_gemm_f32(%[[B1]], %[[M]], %[[N]], %[[K]], %[[F]], %[[T]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[SA]], %[[SB]], %[[SC]], %[[BETA]]) {{{.*}}ddpc.library = "cublas"}
// CHECK-NOT: linalg.generic
// CHECK: func.func private @ddpc_gemm_f32(i64, i64, i64, i64, i32, i32, i64, i64, i64, i64, i64, i64, i32)
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @gemm_transb(%x: memref<4x8xf32>, %w: memref<3x8xf32>, %y: memref<4x3xf32>) {
  linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<3x8xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Batched, A transposed (the weight gradient of a batched MatMul).
// CHECK-LABEL: func.func @bmm_transa(
// CHECK-DAG: %[[B:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[F:.*]] = arith.constant 0 : i32
// CHECK: call @ddpc_gemm_f32(%[[B]], %{{.*}}, %{{.*}}, %{{.*}}, %[[T]], %[[F]],
#a = affine_map<(b, m, n, k) -> (b, k, m)>
#bb = affine_map<(b, m, n, k) -> (b, k, n)>
#c = affine_map<(b, m, n, k) -> (b, m, n)>
func.func @bmm_transa(%x: memref<2x8x4xf32>, %w: memref<2x8x3xf32>, %y: memref<2x4x3xf32>) {
  linalg.generic {indexing_maps = [#a, #bb, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<2x8x4xf32>, memref<2x8x3xf32>) outs(%y : memref<2x4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The VJP of a MatMul w.r.t. its input, dX[m,n] += dY[m,k] * W[k,n], with
// the weight as the first input and the loops in (m, k, n) order: the
// operands are matched by role, so A is the second input (%arg1).
// CHECK-LABEL: func.func @vjp_operand_order(
// CHECK-SAME: %[[W:[a-zA-Z0-9_]+]]: memref<10x64xf32>, %[[G:[a-zA-Z0-9_]+]]: memref<8x10xf32>, %{{[a-zA-Z0-9_]+}}: memref<8x64xf32>)
// CHECK-DAG: %[[M:.*]] = arith.constant 8 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 64 : i64
// CHECK-DAG: %[[K:.*]] = arith.constant 10 : i64
// CHECK: %[[PA:.*]] = memref.extract_aligned_pointer_as_index %[[G]] :
// CHECK: %[[A:.*]] = arith.index_cast %[[PA]]
// CHECK: %[[PB:.*]] = memref.extract_aligned_pointer_as_index %[[W]] :
// CHECK: %[[B:.*]] = arith.index_cast %[[PB]]
// CHECK: call @ddpc_gemm_f32(%{{.*}}, %[[M]], %[[N]], %[[K]], %{{.*}}, %{{.*}}, %[[A]], %[[B]], %{{.*}})
#w = affine_map<(m, k, n) -> (k, n)>
#g = affine_map<(m, k, n) -> (m, k)>
#o = affine_map<(m, k, n) -> (m, n)>
func.func @vjp_operand_order(%w: memref<10x64xf32>, %g: memref<8x10xf32>, %o: memref<8x64xf32>) {
  linalg.generic {indexing_maps = [#w, #g, #o], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%w, %g : memref<10x64xf32>, memref<8x10xf32>) outs(%o : memref<8x64xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %q, %p : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A strided view is not a dense buffer: the contraction stays a generic
// (it becomes a generated kernel).
// CHECK-LABEL: func.func @strided(
// CHECK-NOT: ddpc_gemm_f32
// CHECK: linalg.generic
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @strided(%x: memref<4x8xf32, strided<[16, 1]>>, %w: memref<8x3xf32>, %y: memref<4x3xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32, strided<[16, 1]>>, memref<8x3xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The input gradient of a 1-D window (out[i + j] += g[i] * w[j]) has no
// parallel loop: it becomes a 2-d scf.parallel with an atomic add, which
// the GPU mapping turns into one thread per (i, j).
// CHECK-LABEL: func.func @scatter(
// CHECK-SAME: %[[GBUF:[a-zA-Z0-9_]+]]: memref<6xf32>, %[[WBUF:[a-zA-Z0-9_]+]]: memref<3xf32>, %[[OUT:[a-zA-Z0-9_]+]]: memref<8xf32>)
// CHECK: scf.parallel (%[[I:.*]], %[[J:.*]]) =
// CHECK: %[[G:.*]] = memref.load %[[GBUF]][
// CHECK: %[[W:.*]] = memref.load %[[WBUF]][
// CHECK: %[[P:.*]] = arith.mulf %[[G]], %[[W]]
// CHECK: %[[O:.*]] = affine.apply #{{.*}}(%[[I]], %[[J]])
// CHECK: memref.atomic_rmw addf %[[P]], %[[OUT]][%[[O]]]
// CHECK-NOT: linalg.generic
#g = affine_map<(i, j) -> (i)>
#w = affine_map<(i, j) -> (j)>
#o = affine_map<(i, j) -> (i + j)>
func.func @scatter(%g: memref<6xf32>, %w: memref<3xf32>, %out: memref<8xf32>) {
  linalg.generic {indexing_maps = [#g, #w, #o], iterator_types = ["reduction", "reduction"]}
      ins(%g, %w : memref<6xf32>, memref<3xf32>) outs(%out : memref<8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests that a scatter-add loop nest of a Gather's gradient (marked
// ddpc.scatter_add by autodiff: d_table[idx[i], j] += g[i, j]) becomes one
// 2-d scf.parallel whose read-modify-write is an atomic add.
// CHECK-LABEL: func.func @gather_scatter(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<4xi64>, %[[GRAD:[a-zA-Z0-9_]+]]: memref<4x3xf32>, %[[TABLE:[a-zA-Z0-9_]+]]: memref<5x3xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: scf.parallel (%[[I:.*]], %[[J:.*]]) = (%[[C0]], %[[C0]]) to (%[[C4]], %[[C3]])
// CHECK: %[[R:.*]] = arith.index_cast
// CHECK: %[[G:.*]] = memref.load %[[GRAD]][%[[I]], %[[J]]]
// CHECK-NOT: memref.load %[[TABLE]]
// CHECK: memref.atomic_rmw addf %[[G]], %[[TABLE]][%[[R]], %[[J]]]
// CHECK-NOT: memref.store
// CHECK: } {ddpc.scatter_add}
func.func @gather_scatter(%idx: memref<4xi64>, %g: memref<4x3xf32>, %t: memref<5x3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %x = memref.load %idx[%i] : memref<4xi64>
      %r = arith.index_cast %x : i64 to index
      %v = memref.load %g[%i, %j] : memref<4x3xf32>
      %old = memref.load %t[%r, %j] : memref<5x3xf32>
      %new = arith.addf %old, %v : f32
      memref.store %new, %t[%r, %j] : memref<5x3xf32>
    }
  } {ddpc.scatter_add}
  return
}

// -----

// Tests that a marked loop whose updated buffer is also read elsewhere in
// the body stays serial (parallel iterations would see partial sums).
// CHECK-LABEL: func.func @scatter_read_elsewhere(
// CHECK-NOT: scf.parallel
// CHECK-NOT: atomic_rmw
func.func @scatter_read_elsewhere(%g: memref<4xf32>, %t: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %first = memref.load %t[%c0] : memref<4xf32>
    %v = memref.load %g[%i] : memref<4xf32>
    %w = arith.mulf %v, %first : f32
    %old = memref.load %t[%i] : memref<4xf32>
    %new = arith.addf %old, %w : f32
    memref.store %new, %t[%i] : memref<4xf32>
  } {ddpc.scatter_add}
  return
}

// -----

// CHECK-LABEL: func.func @copy(
// CHECK-SAME: %[[A:[a-zA-Z0-9_]+]]: memref<4x4xf32>, %[[B:[a-zA-Z0-9_]+]]: memref<4x4xf32>)
// CHECK: linalg.copy ins(%[[A]] : memref<4x4xf32>) outs(%[[B]] : memref<4x4xf32>)
// CHECK-NOT: memref.copy
func.func @copy(%a: memref<4x4xf32>, %b: memref<4x4xf32>) {
  memref.copy %a, %b : memref<4x4xf32> to memref<4x4xf32>
  return
}

// -----

// A zero fill of the GEMM's output (here through a reshape, with an
// unrelated kernel in between) is absorbed: the fill is erased and the
// GEMM overwrites (last argument 0, BLAS beta = 0).
// CHECK-LABEL: func.func @zero_filled(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-NOT: linalg.fill
// CHECK: linalg.generic
// CHECK-NOT: linalg.fill
// CHECK: memref.extract_aligned_pointer_as_index %[[X]] :
// CHECK-NOT: linalg.fill
// CHECK: %[[BETA:.*]] = arith.constant 0 : i32
// CHECK-NOT: linalg.fill
// CHECK: call @ddpc_gemm_f32({{.*}}, %[[BETA]])
#za = affine_map<(m, n, k) -> (m, k)>
#zb = affine_map<(m, n, k) -> (n, k)>
#zc = affine_map<(m, n, k) -> (m, n)>
#zid = affine_map<(d0) -> (d0)>
func.func @zero_filled(%x: memref<4x8xf32>, %w: memref<3x8xf32>, %other: memref<5xf32>) -> memref<4x3xf32> {
  %zero = arith.constant 0.0 : f32
  %flat = memref.alloc() : memref<12xf32>
  linalg.fill ins(%zero : f32) outs(%flat : memref<12xf32>)
  linalg.generic {indexing_maps = [#zid], iterator_types = ["parallel"]} outs(%other : memref<5xf32>) {
  ^bb0(%o: f32):
    %n = arith.negf %o : f32
    linalg.yield %n : f32
  }
  %y = memref.expand_shape %flat [[0, 1]] output_shape [4, 3] : memref<12xf32> into memref<4x3xf32>
  linalg.generic {indexing_maps = [#za, #zb, #zc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<3x8xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  return %y : memref<4x3xf32>
}

// -----

// Not absorbed: a kernel between the fill and the GEMM writes an
// overlapping view of the same arena (bytes 32..48 of the output's 0..48),
// and a fill of 1 is not a zero fill. Both GEMMs accumulate.
// CHECK-LABEL: func.func @not_zero_filled(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK: linalg.fill
// CHECK: memref.extract_aligned_pointer_as_index %[[X]] :
// CHECK: %[[BETA1:.*]] = arith.constant 1 : i32
// CHECK: call @ddpc_gemm_f32({{.*}}, %[[BETA1]])
// CHECK: linalg.fill
// CHECK: memref.extract_aligned_pointer_as_index %[[X]] :
// CHECK: %[[BETA2:.*]] = arith.constant 1 : i32
// CHECK: call @ddpc_gemm_f32({{.*}}, %[[BETA2]])
#na = affine_map<(m, n, k) -> (m, k)>
#nb = affine_map<(m, n, k) -> (n, k)>
#nc = affine_map<(m, n, k) -> (m, n)>
#nid = affine_map<(d0) -> (d0)>
func.func @not_zero_filled(%x: memref<4x8xf32>, %w: memref<3x8xf32>, %out: memref<4x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %arena = memref.alloc() : memref<64xi8>
  %y = memref.view %arena[%c0][] : memref<64xi8> to memref<4x3xf32>
  %tail = memref.view %arena[%c32][] : memref<64xi8> to memref<4xf32>
  linalg.fill ins(%zero : f32) outs(%y : memref<4x3xf32>)
  linalg.generic {indexing_maps = [#nid], iterator_types = ["parallel"]} outs(%tail : memref<4xf32>) {
  ^bb0(%o: f32):
    %n = arith.negf %o : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#na, #nb, #nc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<3x8xf32>) outs(%y : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  linalg.fill ins(%one : f32) outs(%out : memref<4x3xf32>)
  linalg.generic {indexing_maps = [#na, #nb, #nc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<3x8xf32>) outs(%out : memref<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  memref.dealloc %arena : memref<64xi8>
  return
}
