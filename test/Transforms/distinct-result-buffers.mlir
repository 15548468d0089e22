// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-distinct-result-buffers))' | FileCheck %s

// Tests that a buffer returned three times (one tensor under three graph
// output names) keeps its first result and gets a new allocation and a
// copy for each repeat, so buffer-results-to-out-params can give every
// result its own out-parameter.
// CHECK-LABEL: func.func @three_names(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<2x3xf32>)
// CHECK: %[[B:.*]] = memref.alloc() : memref<2x3xf32>
// CHECK: %[[C1:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x3xf32>
// CHECK: memref.copy %[[B]], %[[C1]]
// CHECK: %[[C2:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x3xf32>
// CHECK: memref.copy %[[B]], %[[C2]]
// CHECK: return %[[B]], %[[C1]], %[[C2]], %[[X]] :
func.func @three_names(%x: memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) {
  %b = memref.alloc() : memref<2x3xf32>
  memref.copy %x, %b : memref<2x3xf32> to memref<2x3xf32>
  return %b, %b, %b, %x : memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>
}

// -----

// Tests that distinct results are left alone.
// CHECK-LABEL: func.func @distinct(
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<4xf32>, %[[Y:[a-zA-Z0-9_]+]]: memref<4xf32>)
// CHECK-NOT: memref.copy
// CHECK: return %[[X]], %[[Y]] :
func.func @distinct(%x: memref<4xf32>, %y: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>) {
  return %x, %y : memref<4xf32>, memref<4xf32>
}
