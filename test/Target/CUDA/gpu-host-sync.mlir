// RUN: ddpc-opt %s --ddpc-gpu-host-sync | FileCheck %s

// Tests where ddpc-gpu-host-sync waits for the compute stream: before the
// first host access after device work (a launch or a runtime GEMM/allreduce
// call), not for a stream-ordered index check, not again until new device work is queued, and before the return
// of public functions only. Private functions start "dirty" (their caller
// may have queued work).
// CHECK-LABEL: func.func @step(
// CHECK: gpu.launch_func
// CHECK-NEXT: call @ddpc_gpu_host_sync()
// CHECK-NEXT: memref.load
// CHECK-NEXT: memref.store
// CHECK-NEXT: call @ddpc_rt_allreduce_sum_f32
// CHECK-NEXT: gpu.launch_func
// CHECK-NEXT: call @ddpc_rt_check_indices
// CHECK-NEXT: gpu.launch_func
// CHECK-NEXT: call @ddpc_gpu_host_sync()
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @helper(
// CHECK-NEXT: call @ddpc_gpu_host_sync()
// CHECK-NEXT: memref.load
// CHECK-NEXT: return
// CHECK: func.func private @ddpc_gpu_host_sync()
module attributes {gpu.container_module} {
  func.func private @ddpc_rt_allreduce_sum_f32(!llvm.ptr, i64)
  func.func private @ddpc_rt_check_indices(!llvm.ptr, !llvm.ptr, i64, !llvm.ptr)
  func.func @step(%a: memref<16xf32>, %s: memref<f32>, %p: !llvm.ptr) {
    %c1 = arith.constant 1 : index
    %n = arith.constant 16 : i64
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<16xf32>)
    %v = memref.load %s[] : memref<f32>
    memref.store %v, %s[] : memref<f32>
    call @ddpc_rt_allreduce_sum_f32(%p, %n) : (!llvm.ptr, i64) -> ()
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<16xf32>)
    call @ddpc_rt_check_indices(%p, %p, %n, %p) : (!llvm.ptr, !llvm.ptr, i64, !llvm.ptr) -> ()
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<16xf32>)
    return
  }
  func.func private @helper(%s: memref<f32>) -> f32 {
    %v = memref.load %s[] : memref<f32>
    return %v : f32
  }
  gpu.module @k {
    gpu.func @k(%a: memref<16xf32>) kernel {
      gpu.return
    }
  }
}
