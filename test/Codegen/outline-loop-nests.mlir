// RUN: ddpc-opt %s --split-input-file --ddpc-outline-loop-nests | FileCheck %s
// RUN: ddpc-opt %s --split-input-file --ddpc-outline-loop-nests='min-ops=100' | FileCheck %s --check-prefix=SMALL

// A nest over a subview of an argument: the argument is passed, the
// subview and the bounds' constants are cloned into the new function
// (internal linkage, called with no_inline), so its bounds stay constants.

// CHECK-LABEL: func.func private @step.loop0(
// CHECK-SAME:      %[[A:.*]]: memref<8x4xf32>, %[[S:.*]]: f32)
// CHECK-SAME:      llvm.linkage = #llvm.linkage<internal>
// CHECK:         %[[V:.*]] = memref.subview %[[A]][2, 0] [1, 4] [1, 1]
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C4:.*]] = arith.constant 4 : index
// CHECK:         scf.for %{{.*}} = %[[C0]] to %[[C4]]
// CHECK:           memref.store %[[S]], %[[V]]
// CHECK:         return
// CHECK-LABEL: func.func @step(
// CHECK:         call @step.loop0(%arg0, %{{.*}}) {no_inline}
// CHECK-NOT:     scf.for
// SMALL-LABEL: func.func @step(
// SMALL:         scf.for
func.func @step(%a: memref<8x4xf32>, %b: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %s = memref.load %b[] : memref<f32>
  %v = memref.subview %a[2, 0] [1, 4] [1, 1] : memref<8x4xf32> to memref<4xf32, strided<[1], offset: 8>>
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %v[%i] : memref<4xf32, strided<[1], offset: 8>>
    %y = arith.addf %x, %s : f32
    %z = arith.mulf %y, %y : f32
    %w = arith.subf %z, %s : f32
    memref.store %s, %v[%i] : memref<4xf32, strided<[1], offset: 8>>
    memref.store %w, %a[%c0, %i] : memref<8x4xf32>
  }
  return
}

// -----

// A nest that reads a dynamically shaped buffer (not passable by the
// bare-pointer convention, and defined by an allocation, not cloned)
// stays where it is.

// CHECK-LABEL: func.func @dynamic(
// CHECK-NOT:     call
// CHECK:         scf.for
func.func @dynamic(%n: index, %b: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xf32>
  %s = memref.load %b[] : memref<f32>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %m[%i] : memref<?xf32>
    %y = arith.addf %x, %s : f32
    %z = arith.mulf %y, %y : f32
    %w = arith.subf %z, %s : f32
    memref.store %w, %m[%i] : memref<?xf32>
    memref.store %w, %b[] : memref<f32>
  }
  memref.dealloc %m : memref<?xf32>
  return
}
