// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --ddpc-lower-collectives | FileCheck %s

// Two sum all-reduces over the world grid, of 6 and of 1 element (0-D):
// each becomes a call of its helper on the tensor flattened to 1-D, the
// helper all-reduces a private copy in place through the runtime, and the
// grid goes once unused.

// CHECK-NOT: shard.grid
// CHECK-LABEL: func.func private @ddpc_allreduce_sum_f32_1(
// CHECK:       func.func private @ddpc_rt_allreduce_sum_f32(!llvm.ptr, i64)
// CHECK-LABEL: func.func private @ddpc_allreduce_sum_f32_6(
// CHECK-SAME:      %[[ARG:.*]]: tensor<6xf32>) -> tensor<6xf32>
// CHECK:         %[[SRC:.*]] = bufferization.to_buffer %[[ARG]] read_only
// CHECK:         %[[BUF:.*]] = memref.alloc() {alignment = 64 : i64} : memref<6xf32>
// CHECK:         memref.copy %[[SRC]], %[[BUF]]
// CHECK:         %[[N:.*]] = arith.constant 6 : i64
// CHECK:         call @ddpc_rt_allreduce_sum_f32(%{{.*}}, %[[N]]) : (!llvm.ptr, i64) -> ()
// CHECK:         %[[OUT:.*]] = bufferization.to_tensor %[[BUF]] restrict writable
// CHECK:         return %[[OUT]]
// CHECK-LABEL: func.func @stats(
// CHECK-SAME:      %[[X:.*]]: tensor<2x3xf32>, %[[S:.*]]: tensor<f32>)
// CHECK:         %[[FLAT:.*]] = tensor.collapse_shape %[[X]] {{\[\[}}0, 1]] : tensor<2x3xf32> into tensor<6xf32>
// CHECK:         %[[SUM:.*]] = call @ddpc_allreduce_sum_f32_6(%[[FLAT]]) {ddpc.bytes = 24 : i64, ddpc.collective = "all_reduce_sum"}
// CHECK:         %[[R:.*]] = tensor.expand_shape %[[SUM]] {{\[\[}}0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
// CHECK:         %[[S1:.*]] = tensor.expand_shape %[[S]] [] output_shape [1] : tensor<f32> into tensor<1xf32>
// CHECK:         %[[SS:.*]] = call @ddpc_allreduce_sum_f32_1(%[[S1]]) {ddpc.bytes = 4 : i64, ddpc.collective = "all_reduce_sum"}
// CHECK:         %[[S0:.*]] = tensor.collapse_shape %[[SS]] [] : tensor<1xf32> into tensor<f32>
// CHECK:         return %[[R]], %[[S0]]
module {
  shard.grid @ddpc_world(shape = ?)
  func.func @stats(%x: tensor<2x3xf32>, %s: tensor<f32>) -> (tensor<2x3xf32>, tensor<f32>) {
    %0 = shard.all_reduce %x on @ddpc_world grid_axes = [0] reduction = sum : tensor<2x3xf32> -> tensor<2x3xf32>
    %1 = shard.all_reduce %s on @ddpc_world grid_axes = [0] : tensor<f32> -> tensor<f32>
    return %0, %1 : tensor<2x3xf32>, tensor<f32>
  }
}

// -----

// A reduction the runtime does not have is refused, naming the op.
module {
  shard.grid @ddpc_world(shape = ?)
  func.func @max(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @below {{is not a sum all-reduce of a static float32 tensor over @ddpc_world}}
    %0 = shard.all_reduce %x on @ddpc_world grid_axes = [0] reduction = max : tensor<4xf32> -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// So is another element type.
module {
  shard.grid @ddpc_world(shape = ?)
  func.func @f64(%x: tensor<4xf64>) -> tensor<4xf64> {
    // expected-error @below {{is not a sum all-reduce of a static float32 tensor over @ddpc_world}}
    %0 = shard.all_reduce %x on @ddpc_world grid_axes = [0] : tensor<4xf64> -> tensor<4xf64>
    return %0 : tensor<4xf64>
  }
}
