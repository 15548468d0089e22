// RUN: ddpc-opt %s --ddpc-bufferize --ddpc-gpu-kernels | FileCheck %s

// Tests the CUDA target's kernel stage on a dense layer (Gemm + Relu): the
// contraction becomes a cuBLAS call that overwrites its output (the zero
// fill is absorbed: BLAS beta = 0), the bias-add+Relu group becomes one
// kernel in the single gpu.module @ddpc_kernels, launched with 256-thread
// blocks over the flattened output (4x3 = 12 elements: one block), and the
// public function waits for the device before returning.
// CHECK-LABEL: func.func @main_graph(
// CHECK-NOT: gpu.launch_func
// CHECK: call @ddpc_gemm_f32(
// CHECK: gpu.launch_func @ddpc_kernels::@main_graph_kernel blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: gpu.launch_func
// CHECK: call @ddpc_gpu_host_sync()
// CHECK-NEXT: return
// CHECK: gpu.module @ddpc_kernels
// CHECK: gpu.func @main_graph_kernel(
// CHECK-SAME: kernel
// CHECK: gpu.block_id x
// CHECK: gpu.thread_id x
// CHECK: arith.maximumf
// CHECK-NOT: gpu.func
// CHECK-NOT: gpu.module
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
func.func @main_graph(%x: tensor<4x8xf32>, %w: tensor<3x8xf32>, %b: tensor<3xf32>) -> tensor<4x3xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %mm = linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<3x8xf32>) outs(%z : tensor<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %r = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<4x3xf32>, tensor<3xf32>) outs(%e : tensor<4x3xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    %t = arith.maximumf %s, %zero : f32
    linalg.yield %t : f32
  } -> tensor<4x3xf32>
  return %r : tensor<4x3xf32>
}
