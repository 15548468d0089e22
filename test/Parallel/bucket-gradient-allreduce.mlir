// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ddpc-bucket-gradient-allreduce{bucket-cap-mb=0.00003 first-bucket-mb=0.00001})' | FileCheck %s
// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(ddpc-bucket-gradient-allreduce)' | FileCheck %s --check-prefix=ONE

// Three gradient outputs, finished by backward in the order c, a, b. The
// caps are 10 bytes for the first bucket and 31 bytes for the others
// (bucket-cap-mb is in MiB), so: bucket 0 = {c} (16 bytes), bucket 1 =
// {a, b} (32 bytes). Each bucket starts right after the op that last
// touches its last gradient (a view of `b` counts; deallocation bookkeeping
// does not), before the ops that follow; all are waited for before the
// return. Inputs (role grad_acc) are not bucketed.

// CHECK-LABEL: func.func @train_micro(
// CHECK-SAME: %[[C:[a-zA-Z0-9_]+]]: memref<4xf32> {ddpc.name = "grad_acc.c", ddpc.role = "new_grad_acc"}
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[C]] :
// CHECK-NEXT: memref.extract_aligned_pointer_as_index %[[C]]
// CHECK: %[[N0:.*]] = arith.constant 4 : i64
// CHECK: call @ddpc_rt_bucket_add_f32(%{{.*}}, %[[N0]])
// CHECK-NEXT: %[[I0:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @ddpc_rt_bucket_allreduce_start(%[[I0]]) {ddpc.bucket = 0 : i64, ddpc.bytes = 16 : i64, ddpc.collective = "allreduce_bucket", ddpc.function_ops = 9 : i64, ddpc.params = ["c"], ddpc.start_op = 2 : i64}
// CHECK-NEXT: linalg.fill
// CHECK-NEXT: memref.subview
// CHECK-NEXT: linalg.fill
// CHECK-NEXT: memref.extract_aligned_pointer_as_index
// CHECK-NOT: linalg
// CHECK: %[[N1:.*]] = arith.constant 4 : i64
// CHECK-NOT: linalg
// CHECK: call @ddpc_rt_bucket_add_f32(%{{.*}}, %[[N1]])
// CHECK-NOT: linalg
// CHECK: %[[N2:.*]] = arith.constant 4 : i64
// CHECK-NOT: linalg
// CHECK: call @ddpc_rt_bucket_add_f32(%{{.*}}, %[[N2]])
// CHECK: call @ddpc_rt_bucket_allreduce_start(%{{.*}}) {ddpc.bucket = 1 : i64, ddpc.bytes = 32 : i64, ddpc.collective = "allreduce_bucket", ddpc.function_ops = 9 : i64, ddpc.params = ["a", "b"], ddpc.start_op = 5 : i64}
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<4xf32>)
// CHECK-NEXT: memref.extract_aligned_pointer_as_index
// CHECK-NEXT: memref.dealloc
// CHECK-NEXT: call @ddpc_rt_bucket_allreduce_wait()
// CHECK-NEXT: return
// CHECK-DAG: func.func private @ddpc_rt_bucket_add_f32(!llvm.ptr, i64)
// CHECK-DAG: func.func private @ddpc_rt_bucket_allreduce_start(i64)
// CHECK-DAG: func.func private @ddpc_rt_bucket_allreduce_wait()

// With the default caps (25 MiB, first 1 MiB) all three share one bucket,
// in ready order, started after the last of them is ready.
// ONE-LABEL: func.func @train_micro(
// ONE-COUNT-3: call @ddpc_rt_bucket_add_f32
// ONE-NEXT: arith.constant 0 : i64
// ONE-NEXT: call @ddpc_rt_bucket_allreduce_start({{.*}}ddpc.params = ["c", "a", "b"]
// ONE-NOT: call @ddpc_rt_bucket_allreduce_start
// ONE: call @ddpc_rt_bucket_allreduce_wait()
// ONE-NEXT: return
func.func @train_micro(%in: memref<4xf32> {ddpc.name = "grad_acc.a", ddpc.role = "grad_acc"},
                       %a: memref<4xf32> {ddpc.name = "grad_acc.a", ddpc.role = "new_grad_acc"},
                       %b: memref<2x2xf32> {ddpc.name = "grad_acc.b", ddpc.role = "new_grad_acc"},
                       %c: memref<4xf32> {ddpc.name = "grad_acc.c", ddpc.role = "new_grad_acc"},
                       %other: memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4xf32>)
  linalg.fill ins(%zero : f32) outs(%a : memref<4xf32>)
  %row = memref.subview %b[1, 0] [1, 2] [1, 1] : memref<2x2xf32> to memref<2xf32, strided<[1], offset: 2>>
  linalg.fill ins(%zero : f32) outs(%row : memref<2xf32, strided<[1], offset: 2>>)
  linalg.fill ins(%zero : f32) outs(%other : memref<4xf32>)
  %p = memref.extract_aligned_pointer_as_index %b : memref<2x2xf32> -> index
  memref.dealloc %b : memref<2x2xf32>
  return
}

// -----

// Functions without gradient outputs are left alone.
// CHECK-LABEL: func.func @apply(
// CHECK-NOT: ddpc_rt_bucket
// CHECK: return
func.func @apply(%g: memref<4xf32> {ddpc.role = "grad_acc"}) {
  return
}

// -----

// expected-error @+1 {{gradient output 0 must be a dense static float32 memref}}
func.func @train_micro(%a: memref<?xf32> {ddpc.role = "new_grad_acc"}) {
  return
}
