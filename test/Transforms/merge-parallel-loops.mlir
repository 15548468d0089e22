// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-merge-parallel-loops))' | FileCheck %s
// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-merge-parallel-loops{max-loops=2}))' | FileCheck %s --check-prefix=MAX2

// Three independent loops over distinct entry-function arguments (sizes
// 64, 128 and 6 with lower bound 4 and step 2), separated by ops without
// memory effects: one loop of 64 + 128 + 6 = 198 iterations where the last
// loop was, each body under its index range with its own index rebuilt.

// CHECK-LABEL: func.func @independent(
// CHECK-SAME: %[[A:.*]]: memref<64xf32>, %[[B:.*]]: memref<128xf32>, %[[C:.*]]: memref<16xf32>, %[[X:.*]]: memref<128xf32>)
// CHECK-NOT: scf.parallel
// CHECK: %[[END:.*]] = arith.constant 198 : index
// CHECK-NEXT: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%[[END]]) step (%{{.*}}) {
// CHECK-NEXT: %[[N1:.*]] = arith.constant 64 : index
// CHECK-NEXT: %[[IN1:.*]] = arith.cmpi ult, %[[I]], %[[N1]] : index
// CHECK-NEXT: scf.if %[[IN1]] {
// CHECK-NEXT: memref.store %{{.*}}, %[[A]][%[[I]]]
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[N2:.*]] = arith.constant 192 : index
// CHECK-NEXT: %[[IN2:.*]] = arith.cmpi ult, %[[I]], %[[N2]] : index
// CHECK-NEXT: scf.if %[[IN2]] {
// CHECK-NEXT: %[[S64:.*]] = arith.constant 64 : index
// CHECK-NEXT: %[[J:.*]] = arith.subi %[[I]], %[[S64]] : index
// CHECK-NEXT: %[[V:.*]] = memref.load %[[X]][%[[J]]]
// CHECK-NEXT: memref.store %[[V]], %[[B]][%[[J]]]
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[S192:.*]] = arith.constant 192 : index
// CHECK-NEXT: %[[K0:.*]] = arith.subi %[[I]], %[[S192]] : index
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[K1:.*]] = arith.muli %[[K0]], %[[TWO]] : index
// CHECK-NEXT: %[[FOUR:.*]] = arith.constant 4 : index
// CHECK-NEXT: %[[K:.*]] = arith.addi %[[K1]], %[[FOUR]] : index
// CHECK-NEXT: memref.store %{{.*}}, %[[C]][%[[K]]]
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: scf.reduce
// CHECK-NEXT: }
// CHECK-NOT: scf.parallel
// CHECK: return
func.func @independent(%a: memref<64xf32>, %b: memref<128xf32>, %c: memref<16xf32>, %x: memref<128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %a[%i] : memref<64xf32>
    scf.reduce
  }
  %c2 = arith.constant 2 : index
  %c128 = arith.muli %c64, %c2 : index
  scf.parallel (%i) = (%c0) to (%c128) step (%c1) {
    %v = memref.load %x[%i] : memref<128xf32>
    memref.store %v, %b[%i] : memref<128xf32>
    scf.reduce
  }
  %c4 = arith.constant 4 : index
  %c15 = arith.constant 15 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c4) to (%c15) step (%c2) {
    memref.store %one, %c[%i] : memref<16xf32>
    scf.reduce
  }
  return
}

// With at most two loops per group, the third starts a group of its own.
// MAX2-LABEL: func.func @independent(
// MAX2: arith.constant 192 : index
// MAX2: scf.parallel
// MAX2: scf.parallel
// MAX2-NOT: scf.parallel
// MAX2: return

// -----

// The second loop reads what the first writes (a zero fill, then an
// accumulation into the same buffer, through a reshape): not merged. The
// third is independent of the second and joins it.

// CHECK-LABEL: func.func @dependent(
// CHECK: arith.constant 64 : index
// CHECK: scf.parallel
// CHECK: memref.store
// CHECK: scf.reduce
// CHECK: %[[END:.*]] = arith.constant 80 : index
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[END]])
// CHECK: memref.atomic_rmw addf
// CHECK: } else {
// CHECK: memref.store
// CHECK-NOT: scf.parallel
// CHECK: return
func.func @dependent(%acc: memref<64xf32>, %x: memref<64xf32>, %y: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %acc[%i] : memref<64xf32>
    scf.reduce
  }
  %acc2 = memref.expand_shape %acc [[0, 1]] output_shape [8, 8] : memref<64xf32> into memref<8x8xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %v = memref.load %x[%i] : memref<64xf32>
    %c8 = arith.constant 8 : index
    %r = arith.remsi %i, %c8 : index
    %q = arith.divsi %i, %c8 : index
    %old = memref.atomic_rmw addf %v, %acc2[%q, %r] : (f32, memref<8x8xf32>) -> f32
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    memref.store %zero, %y[%i] : memref<16xf32>
    scf.reduce
  }
  return
}

// -----

// Views of one arena (ddpc-plan-arena): byte ranges [0, 256) and [256, 512)
// are disjoint, so the loops writing them merge; [128, 384) overlaps both,
// so the loop reading it starts a new group. A library call ends a group
// too, and so does the deallocation of a buffer the group writes; an
// allocation, and the deallocation of an untouched buffer, do not.

// CHECK-LABEL: func.func @arena(
// CHECK: arith.constant 128 : index
// CHECK: scf.parallel
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[V0:.*]][
// CHECK: } else {
// CHECK: memref.store %{{.*}}, %[[V1:.*]][
// CHECK: scf.parallel
// CHECK: memref.load
// CHECK: call @opaque
// CHECK: scf.parallel
// CHECK: scf.if
// CHECK: } else {
// CHECK: memref.dealloc %[[OWN:.*]] :
// CHECK: scf.parallel
// CHECK-NOT: scf.parallel
// CHECK: return
func.func private @opaque()
func.func @arena(%out: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %arena = memref.alloc() : memref<512xi8>
  %b0 = arith.constant 0 : index
  %v0 = memref.view %arena[%b0][] : memref<512xi8> to memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %v0[%i] : memref<64xf32>
    scf.reduce
  }
  %b256 = arith.constant 256 : index
  %v1 = memref.view %arena[%b256][] : memref<512xi8> to memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %v1[%i] : memref<64xf32>
    scf.reduce
  }
  %b128 = arith.constant 128 : index
  %v2 = memref.view %arena[%b128][] : memref<512xi8> to memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %v = memref.load %v2[%i] : memref<64xf32>
    memref.store %v, %out[%i] : memref<64xf32>
    scf.reduce
  }
  call @opaque() : () -> ()
  %own = memref.alloc() : memref<64xf32>
  %other = memref.alloc() : memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %own[%i] : memref<64xf32>
    scf.reduce
  }
  memref.dealloc %other : memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %v = memref.load %v1[%i] : memref<64xf32>
    memref.store %v, %out[%i] : memref<64xf32>
    scf.reduce
  }
  memref.dealloc %own : memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %v0[%i] : memref<64xf32>
    scf.reduce
  }
  memref.dealloc %arena : memref<512xi8>
  return
}

// -----

// Four loops of 10: the bodies sit under a balanced tree of comparisons
// (index < 20, then < 10 or < 30), not a chain of three.

// CHECK-LABEL: func.func @tree(
// CHECK: %[[END:.*]] = arith.constant 40 : index
// CHECK-NEXT: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%[[END]])
// CHECK-NEXT: %[[B20:.*]] = arith.constant 20 : index
// CHECK-NEXT: %[[LOW:.*]] = arith.cmpi ult, %[[I]], %[[B20]]
// CHECK-NEXT: scf.if %[[LOW]] {
// CHECK-NEXT: arith.constant 10 : index
// CHECK-NEXT: arith.cmpi ult, %[[I]]
// CHECK-NEXT: scf.if
// CHECK-NEXT: memref.store %{{.*}}, %arg0[%[[I]]]
// CHECK-NEXT: } else {
// CHECK: memref.store %{{.*}}, %arg1[
// CHECK: } else {
// CHECK-NEXT: arith.constant 30 : index
// CHECK-NEXT: arith.cmpi ult, %[[I]]
// CHECK-NEXT: scf.if
// CHECK: memref.store %{{.*}}, %arg2[
// CHECK: } else {
// CHECK: memref.store %{{.*}}, %arg3[
func.func @tree(%a: memref<10xf32>, %b: memref<10xf32>, %c: memref<10xf32>, %d: memref<10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c10) step (%c1) {
    memref.store %zero, %a[%i] : memref<10xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c10) step (%c1) {
    memref.store %zero, %b[%i] : memref<10xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c10) step (%c1) {
    memref.store %zero, %c[%i] : memref<10xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c10) step (%c1) {
    memref.store %zero, %d[%i] : memref<10xf32>
    scf.reduce
  }
  return
}
