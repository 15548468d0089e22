// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-parallel-loops-outermost,convert-linalg-to-parallel-loops,ddpc-serial-loops-to-device))' | FileCheck %s

// Tests that no loop over device memory stays on the host in the CUDA
// pipeline: reductions are reordered so their parallel loops are outermost,
// and loops with no parallel dimension become one-iteration parallel loops
// (one-thread kernels).

// A bias gradient db[c] = sum_n dy[n, c] (reduction dim first). Without the
// interchange, the batch loop would run on the host around a 16-thread
// kernel. After it: one parallel loop over c, each iteration summing over n
// in the original order.
// CHECK-LABEL: func.func @bias_grad(
// CHECK-SAME: %[[DY:[a-zA-Z0-9_]+]]: memref<32x16xf32>, %{{[a-zA-Z0-9_]+}}: memref<16xf32>)
// CHECK: scf.parallel (%[[C:.*]]) = (%{{.*}}) to (%{{.*}}) step
// CHECK-NEXT: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: memref.load %[[DY]][%[[N]], %[[C]]]
// CHECK-NOT: scf.for
#in = affine_map<(n, c) -> (n, c)>
#out = affine_map<(n, c) -> (c)>
func.func @bias_grad(%dy: memref<32x16xf32>, %db: memref<16xf32>) {
  linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "parallel"]}
      ins(%dy : memref<32x16xf32>) outs(%db : memref<16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A full reduction (a correct-prediction count) has no parallel loop: it is
// wrapped in a one-iteration scf.parallel, whose body is the original loop.
// The loop's own bounds come first, then the wrapper's (0 to 1 step 1).
// CHECK-LABEL: func.func @count(
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[LB:.*]] = arith.constant 0 : index
// CHECK: %[[ONE:.*]] = arith.constant 1 : index
// CHECK: scf.parallel (%{{.*}}) = (%[[LB]]) to (%[[ONE]]) step (%[[ONE]])
// CHECK-NEXT: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C1]]
// CHECK: memref.store
#v = affine_map<(i) -> (i)>
#s = affine_map<(i) -> ()>
func.func @count(%pred: memref<32xi64>, %label: memref<32xi64>, %n: memref<i64>) {
  linalg.generic {indexing_maps = [#v, #v, #s], iterator_types = ["reduction"]}
      ins(%pred, %label : memref<32xi64>, memref<32xi64>) outs(%n : memref<i64>) {
  ^bb0(%p: i64, %l: i64, %acc: i64):
    %eq = arith.cmpi eq, %p, %l : i64
    %one = arith.extui %eq : i1 to i64
    %s = arith.addi %acc, %one : i64
    linalg.yield %s : i64
  }
  return
}

// -----

// Loops that call functions stay on the host; parallel loops are untouched.
// CHECK-LABEL: func.func @host_call(
// CHECK-NOT: scf.parallel
// CHECK: scf.for
// CHECK: call @ext
func.func private @ext(index)
func.func @host_call(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %m[%i] : memref<4xf32>
    func.call @ext(%i) : (index) -> ()
  }
  return
}
