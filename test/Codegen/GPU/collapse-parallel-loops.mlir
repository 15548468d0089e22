// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-collapse-parallel-loops,canonicalize))' | FileCheck %s
// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-collapse-parallel-loops))' | FileCheck %s --check-prefix=NEST

// Tests ddpc-collapse-parallel-loops: an outermost 2-d scf.parallel over
// 3x5 becomes one 1-d loop over 15 iterations whose index is split back
// row-major (i = k / 5, j = k mod 5); a 1-d loop and a 2-d loop nested
// inside another parallel loop stay as they are (checked without
// canonicalize, which would merge the nest).

// CHECK-LABEL: func.func @collapse
// CHECK-SAME: (%[[M:.*]]: memref<3x5xf32>, %[[V:.*]]: f32)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C5:.*]] = arith.constant 5 : index
// CHECK-DAG: %[[C15:.*]] = arith.constant 15 : index
// CHECK: scf.parallel (%[[K:.*]]) = (%[[C0]]) to (%[[C15]]) step (%[[C1]]) {
// CHECK-DAG: %[[J:.*]] = arith.remsi %[[K]], %[[C5]] : index
// CHECK-DAG: %[[I:.*]] = arith.divsi %[[K]], %[[C5]] : index
// CHECK: memref.store %[[V]], %[[M]][%[[I]], %[[J]]] : memref<3x5xf32>
// CHECK: scf.parallel (%[[R:[^)]*]]) = (%[[C0]]) to (%{{.*}}) step (%[[C1]]) {
// CHECK-NEXT: memref.store %[[V]], %[[M]][%[[R]], %[[C0]]]
func.func @collapse(%m: memref<3x5xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c3, %c5) step (%c1, %c1) {
    memref.store %v, %m[%i, %j] : memref<3x5xf32>
    scf.reduce
  }
  scf.parallel (%k) = (%c0) to (%c3) step (%c1) {
    memref.store %v, %m[%k, %c0] : memref<3x5xf32>
    scf.reduce
  }
  return
}

// NEST-LABEL: func.func @nested
// NEST: scf.parallel (%[[B:[^)]*]]) =
// NEST-NEXT: scf.parallel (%[[I:[^,]*]], %[[J:[^)]*]]) =
// NEST-NEXT: memref.store %{{.*}}, %{{.*}}[%[[B]], %[[I]], %[[J]]]
func.func @nested(%m: memref<2x3x5xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  scf.parallel (%b) = (%c0) to (%c2) step (%c1) {
    scf.parallel (%i, %j) = (%c0, %c0) to (%c3, %c5) step (%c1, %c1) {
      memref.store %v, %m[%b, %i, %j] : memref<2x3x5xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}
