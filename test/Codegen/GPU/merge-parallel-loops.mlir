// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-merge-parallel-loops))' | FileCheck %s
// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-merge-parallel-loops{max-loops=2}))' | FileCheck %s --check-prefix=MAX2
// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-merge-parallel-loops{max-param-bytes=48}))' | FileCheck %s --check-prefix=PARAMS

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

// The first two loops take 3 memrefs (48 bytes of kernel parameters; the
// constants are not counted), the third one more: it starts a new group.
// PARAMS-LABEL: func.func @independent(
// PARAMS: arith.constant 192 : index
// PARAMS: scf.parallel
// PARAMS: scf.parallel
// PARAMS-NOT: scf.parallel
// PARAMS: return

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
// CHECK-SAME: %[[A:[a-zA-Z0-9_]+]]: memref<10xf32>, %[[B:[a-zA-Z0-9_]+]]: memref<10xf32>, %[[C:[a-zA-Z0-9_]+]]: memref<10xf32>, %[[D:[a-zA-Z0-9_]+]]: memref<10xf32>)
// CHECK: %[[END:.*]] = arith.constant 40 : index
// CHECK-NEXT: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%[[END]])
// CHECK-NEXT: %[[B20:.*]] = arith.constant 20 : index
// CHECK-NEXT: %[[LOW:.*]] = arith.cmpi ult, %[[I]], %[[B20]]
// CHECK-NEXT: scf.if %[[LOW]] {
// CHECK-NEXT: arith.constant 10 : index
// CHECK-NEXT: arith.cmpi ult, %[[I]]
// CHECK-NEXT: scf.if
// CHECK-NEXT: memref.store %{{.*}}, %[[A]][%[[I]]]
// CHECK-NEXT: } else {
// CHECK: memref.store %{{.*}}, %[[B]][
// CHECK: } else {
// CHECK-NEXT: arith.constant 30 : index
// CHECK-NEXT: arith.cmpi ult, %[[I]]
// CHECK-NEXT: scf.if
// CHECK: memref.store %{{.*}}, %[[C]][
// CHECK: } else {
// CHECK: memref.store %{{.*}}, %[[D]][
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

// -----

// A GEMM library call reads and writes only the buffers it is passed (as
// pointers), so a loop moves down past an independent call and its
// fallback (scf.if) to join the next loop; a call that writes what the
// group reads ends the group. Subviews of arena views lie within the
// view's bytes: the fallback's subview of [0, 256) does not touch
// [256, 512).

// CHECK-LABEL: func.func @past_calls(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<4x4xf32>, %[[B:[a-zA-Z0-9_]+]]: memref<4x4xf32>, %{{[a-zA-Z0-9_]+}}: memref<4x4xf32>, %[[X:[a-zA-Z0-9_]+]]: memref<64xf32>, %[[Y:[a-zA-Z0-9_]+]]: memref<64xf32>, %{{[a-zA-Z0-9_]+}}: i1)
// CHECK: call @ddpc_gemm_f32
// CHECK: scf.if
// CHECK: memref.subview
// CHECK: %[[END:.*]] = arith.constant 128 : index
// CHECK-NEXT: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[END]])
// CHECK: memref.store %{{.*}}, %[[X]][
// CHECK: } else {
// CHECK: memref.store %{{.*}}, %[[Y]][
// CHECK: call @ddpc_gemm_f32
// CHECK: %[[END2:.*]] = arith.constant 32 : index
// CHECK-NEXT: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[END2]])
// CHECK: call @ddpc_gemm_f32
// CHECK-NEXT: scf.parallel
// CHECK-NEXT: memref.store %{{.*}}, %[[B]][
// CHECK-NOT: scf.parallel
// CHECK: return
func.func private @ddpc_gemm_f32(i64, i64, i64, i64, i32, i32, i64, i64, i64, i64, i64, i64, i32)
func.func @past_calls(%a: memref<4x4xf32>, %b: memref<4x4xf32>, %c: memref<4x4xf32>, %x: memref<64xf32>, %y: memref<64xf32>, %done: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %i0 = arith.constant 0 : i32
  %n = arith.constant 4 : i64
  %s = arith.constant 0 : i64
  %arena = memref.alloc() : memref<512xi8>
  %b0 = arith.constant 0 : index
  %v0 = memref.view %arena[%b0][] : memref<512xi8> to memref<64xf32>
  %b256 = arith.constant 256 : index
  %v1 = memref.view %arena[%b256][] : memref<512xi8> to memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %x[%i] : memref<64xf32>
    %v = memref.load %v1[%i] : memref<64xf32>
    memref.store %v, %v1[%i] : memref<64xf32>
    scf.reduce
  }
  %pa = memref.extract_aligned_pointer_as_index %a : memref<4x4xf32> -> index
  %pa64 = arith.index_cast %pa : index to i64
  %pb = memref.extract_aligned_pointer_as_index %b : memref<4x4xf32> -> index
  %pb64 = arith.index_cast %pb : index to i64
  %pc = memref.extract_aligned_pointer_as_index %c : memref<4x4xf32> -> index
  %pc64 = arith.index_cast %pc : index to i64
  call @ddpc_gemm_f32(%n, %n, %n, %n, %i0, %i0, %pa64, %pb64, %pc64, %s, %s, %s, %i0) : (i64, i64, i64, i64, i32, i32, i64, i64, i64, i64, i64, i64, i32) -> ()
  scf.if %done {
    %sub = memref.subview %v0[8] [16] [1] : memref<64xf32> to memref<16xf32, strided<[1], offset: 8>>
    scf.parallel (%i) = (%c0) to (%c1) step (%c1) {
      memref.store %zero, %sub[%i] : memref<16xf32, strided<[1], offset: 8>>
      scf.reduce
    }
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %y[%i] : memref<64xf32>
    scf.reduce
  }
  // Writes %a, which the next two loops read: they stay after it (and
  // merge with each other).
  call @ddpc_gemm_f32(%n, %n, %n, %n, %i0, %i0, %pb64, %pc64, %pa64, %s, %s, %s, %i0) : (i64, i64, i64, i64, i32, i32, i64, i64, i64, i64, i64, i64, i32) -> ()
  %a1 = memref.collapse_shape %a [[0, 1]] : memref<4x4xf32> into memref<16xf32>
  %c16 = arith.constant 16 : index
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %v = memref.load %a1[%i] : memref<16xf32>
    memref.store %v, %x[%i] : memref<64xf32>
    scf.reduce
  }
  // Reads %a, which the next call writes: this pair is not moved past it
  // to the loop after the call.
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %v = memref.load %a1[%i] : memref<16xf32>
    memref.store %v, %y[%i] : memref<64xf32>
    scf.reduce
  }
  call @ddpc_gemm_f32(%n, %n, %n, %n, %i0, %i0, %pb64, %pc64, %pa64, %s, %s, %s, %i0) : (i64, i64, i64, i64, i32, i32, i64, i64, i64, i64, i64, i64, i32) -> ()
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    memref.store %zero, %b[%c0, %c0] : memref<4x4xf32>
    scf.reduce
  }
  memref.dealloc %arena : memref<512xi8>
  return
}

// -----

// A buffer chosen at run time (select, scf.if result) may be any buffer,
// here %a, which the second loop reads: not merged. (mayAlias used to take
// any root other than an allocation as distinct from every allocation.)

// CHECK-LABEL: func.func @chosen_at_run_time(
// CHECK: scf.parallel
// CHECK: memref.store %{{.*}}, %[[S:.*]][
// CHECK: scf.parallel
// CHECK: memref.store
// CHECK: scf.parallel
// CHECK: memref.load
func.func @chosen_at_run_time(%c: i1, %out: memref<16xf32>) {
  %a = memref.alloc() : memref<16xf32>
  %b = memref.alloc() : memref<16xf32>
  %d = memref.alloc() : memref<16xf32>
  %s = arith.select %c, %a, %b : memref<16xf32>
  %t = scf.if %c -> memref<16xf32> {
    scf.yield %a : memref<16xf32>
  } else {
    scf.yield %b : memref<16xf32>
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %f = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    memref.store %f, %s[%i] : memref<16xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    memref.store %f, %t[%i] : memref<16xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %v = memref.load %a[%i] : memref<16xf32>
    memref.store %v, %d[%i] : memref<16xf32>
    scf.reduce
  }
  memref.copy %d, %out : memref<16xf32> to memref<16xf32>
  return
}
