// RUN: ddpc-opt %s --ddpc-graph-opt | FileCheck %s --check-prefix=FUSED
// RUN: ddpc-opt %s --ddpc-graph-opt='fuse-elementwise=false' | FileCheck %s --check-prefix=UNFUSED
// RUN: ddpc-opt %s --ddpc-bufferize --ddpc-gpu-loops | FileCheck %s --check-prefix=LOOPS
// RUN: ddpc-opt %s --ddpc-bufferize --ddpc-gpu-kernels --ddpc-nvvm='chips=sm_90,sm_100' | FileCheck %s --check-prefix=NVVM
// RUN: ddpc-opt %s --ddpc-bufferize --ddpc-gpu-kernels --ddpc-nvvm --ddpc-cuda-host-lowering | FileCheck %s --check-prefix=HOST
//
// Tests the named stage pipelines and their typed options on two
// elementwise ops (x*x, then exp): ddpc-graph-opt fuses them unless
// fuse-elementwise=false; ddpc-gpu-loops leaves the 256-thread tiled
// parallel loops that --target cuda-emulate runs; ddpc-nvvm attaches one
// target per chip (default sm_80) with its oldest PTX ISA and serializes
// the kernels; ddpc-cuda-host-lowering leaves LLVM host code that launches
// them.

// FUSED-COUNT-1: linalg.generic
// FUSED-NOT: linalg.generic
// FUSED: math.exp

// UNFUSED-COUNT-2: linalg.generic

// LOOPS: %[[BLOCK:.+]] = arith.constant 256 : index
// LOOPS: %[[STEP:.+]] = arith.muli %{{.+}}, %[[BLOCK]] : index
// LOOPS: scf.parallel ({{.*}}) = ({{.*}}) to ({{.*}}) step (%[[STEP]])
// LOOPS-NOT: gpu.launch_func

// NVVM: gpu.binary @ddpc_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// NVVM-SAME: #gpu.object<#nvvm.target<O = 3, chip = "sm_100", features = "+ptx86">

// HOST: llvm.func @main_graph(
// HOST: gpu.launch_func @ddpc_kernels::
// HOST: llvm.call @ddpc_gpu_host_sync()
// HOST: gpu.binary @ddpc_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_80"

#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main_graph(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %e = tensor.empty() : tensor<3x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<3x4xf32>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.mulf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  %e2 = tensor.empty() : tensor<3x4xf32>
  %r2 = linalg.generic {indexing_maps = [#id, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%r : tensor<3x4xf32>) outs(%e2 : tensor<3x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<3x4xf32>
  return %r2 : tensor<3x4xf32>
}
