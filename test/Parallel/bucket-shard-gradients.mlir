// RUN: ddpc-opt %s --pass-pipeline='builtin.module(ddpc-bucket-gradient-allreduce{bucket-cap-mb=0.00001 first-bucket-mb=0.00001 shard-gradients=true})' | FileCheck %s

// ZeRO stage 2: two gradient outputs, finished in the order c, a, each its
// own bucket (caps of 10 bytes). Each becomes a buffer allocated right before
// the op that first writes it and freed right after its bucket's start
// call; both out-parameters leave the signature; the buckets are
// reduce-scatters. Other arguments stay.

// CHECK-LABEL: func.func @train_micro(
// CHECK-SAME: %[[OTHER:[a-zA-Z0-9_]+]]: memref<4xf32>) {
// CHECK-NOT: new_grad_acc
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OTHER]] :
// CHECK-NEXT: %[[C:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[C]] :
// CHECK: call @ddpc_rt_bucket_add_f32
// CHECK: call @ddpc_rt_bucket_allreduce_start({{.*}}) {ddpc.bucket = 0 : i64, {{.*}}ddpc.collective = "reduce_scatter_bucket", {{.*}}ddpc.params = ["c"]
// CHECK-NEXT: memref.dealloc %[[C]] : memref<4xf32>
// CHECK-NEXT: %[[A:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x2xf32>
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[A]] :
// CHECK: call @ddpc_rt_bucket_add_f32
// CHECK: call @ddpc_rt_bucket_allreduce_start({{.*}}) {ddpc.bucket = 1 : i64, {{.*}}ddpc.collective = "reduce_scatter_bucket", {{.*}}ddpc.params = ["a"]
// CHECK-NEXT: memref.dealloc %[[A]] : memref<2x2xf32>
// CHECK-NEXT: call @ddpc_rt_bucket_allreduce_wait()
// CHECK-NEXT: return
func.func @train_micro(%a: memref<2x2xf32> {ddpc.name = "grad_acc.a", ddpc.role = "new_grad_acc"},
                       %c: memref<4xf32> {ddpc.name = "grad_acc.c", ddpc.role = "new_grad_acc"},
                       %other: memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%other : memref<4xf32>)
  linalg.fill ins(%zero : f32) outs(%c : memref<4xf32>)
  linalg.fill ins(%zero : f32) outs(%a : memref<2x2xf32>)
  return
}

// A gradient nothing writes (a zero-element parameter's): its only uses are
// the bucket's pointer reads, so its buffer is allocated before them.

// CHECK-LABEL: func.func @unwritten(
// CHECK-SAME: %[[W:[a-zA-Z0-9_]+]]: memref<4xf32>) {
// CHECK: %[[Z:.*]] = memref.alloc() {alignment = 64 : i64} : memref<0xf32>
// CHECK: memref.extract_aligned_pointer_as_index %[[Z]]
// CHECK: call @ddpc_rt_bucket_allreduce_start({{.*}}ddpc.params = ["z"]
// CHECK-NEXT: memref.dealloc %[[Z]] : memref<0xf32>
func.func @unwritten(%z: memref<0xf32> {ddpc.name = "grad_acc.z", ddpc.role = "new_grad_acc"},
                     %w: memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%w : memref<4xf32>)
  return
}
