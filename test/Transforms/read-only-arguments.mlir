// RUN: ddpc-opt %s --split-input-file --ddpc-read-only-arguments | FileCheck %s
// RUN: ddpc-opt %s --split-input-file --ddpc-read-only-arguments --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=BUF

// Tests that the tensor arguments of public functions become read-only for
// one-shot bufferization, so that an insert into an argument that dies
// there (the VJP of Concat writes zeros into its cotangent) goes to a copy
// instead of the caller's buffer. Private functions and scalars are left
// alone.
// CHECK-LABEL: func.func @insert_into_argument(
// CHECK-SAME: %{{.*}}: tensor<4xf32> {bufferization.writable = false}
// CHECK-SAME: %{{.*}}: f32)
// BUF-LABEL: func.func @insert_into_argument(
// BUF-SAME: %[[ARG:.*]]: memref<4xf32{{.*}}>,
// BUF: %[[COPY:.*]] = memref.alloc
// BUF: memref.copy %[[ARG]], %[[COPY]]
// BUF: memref.store %{{.*}}, %[[COPY]]
func.func @insert_into_argument(%t: tensor<4xf32>, %v: f32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %r = tensor.insert %v into %t[%c0] : tensor<4xf32>
  return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func private @helper(
// CHECK-NOT: writable
func.func private @helper(%t: tensor<4xf32>) -> tensor<4xf32> {
  return %t : tensor<4xf32>
}
