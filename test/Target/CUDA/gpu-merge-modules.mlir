// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --ddpc-gpu-merge-modules | FileCheck %s

// Tests ddpc-gpu-merge-modules on what gpu-kernel-outlining emits: one
// gpu.module per kernel (@f_kernel::@f_kernel, @f_kernel_0::@f_kernel).
// Both kernels move into one gpu.module @ddpc_kernels, each renamed after
// its old module (names stay unique), and every gpu.launch_func follows.

// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @ddpc_kernels {
// CHECK-NEXT: gpu.func @f_kernel(%[[A:.*]]: memref<4xf32>) kernel
// CHECK: memref.store %{{.*}}, %[[A]]
// CHECK: gpu.func @f_kernel_0(%[[B:.*]]: memref<4xf32>) kernel
// CHECK: memref.load %[[B]]
// CHECK-NOT: gpu.module
// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[M:.*]]: memref<4xf32>)
// CHECK: gpu.launch_func @ddpc_kernels::@f_kernel blocks in {{.*}} args(%[[M]] : memref<4xf32>)
// CHECK: gpu.launch_func @ddpc_kernels::@f_kernel_0 blocks in {{.*}} args(%[[M]] : memref<4xf32>)
module attributes {gpu.container_module} {
  gpu.module @f_kernel {
    gpu.func @f_kernel(%m: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %z = arith.constant 0.0 : f32
      memref.store %z, %m[%i] : memref<4xf32>
      gpu.return
    }
  }
  gpu.module @f_kernel_0 {
    gpu.func @f_kernel(%m: memref<4xf32>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %m[%i] : memref<4xf32>
      gpu.return
    }
  }
  func.func @f(%m: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    gpu.launch_func @f_kernel::@f_kernel blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1) args(%m : memref<4xf32>)
    gpu.launch_func @f_kernel_0::@f_kernel blocks in (%c1, %c1, %c1) threads in (%c4, %c1, %c1) args(%m : memref<4xf32>)
    return
  }
}

// -----

// A module without kernels is left alone.
// CHECK-LABEL: func.func @none
// CHECK-NOT: gpu.module
module {
  func.func @none() {
    return
  }
}

// -----

// Anything but a gpu.func in an outlined module is refused.
module attributes {gpu.container_module} {
  // expected-error @below {{unexpected op in an outlined gpu.module}}
  gpu.module @g {
    func.func private @helper()
  }
}
