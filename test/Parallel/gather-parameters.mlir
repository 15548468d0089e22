// RUN: ddpc-opt %s --pass-pipeline='builtin.module(ddpc-gather-parameters)' | FileCheck %s

// ZeRO stage 3. @train_micro: %w is read in forward (the op named Fwd_0)
// and again in backward (nameless ops); %b only in forward; %v through a
// view that forward creates and backward reads, so it stays gathered from
// forward to backward; %x is no parameter. Each segment gets its own
// buffer, gathered right before its first use and freed right after its
// last; the parameter arguments are left unused.

// CHECK-LABEL: func.func @train_micro(
// CHECK-SAME: %[[W:[a-zA-Z0-9_]+]]: memref<4xf32> {{{.*}}ddpc.role = "param"}
// CHECK-SAME: %[[X:[a-zA-Z0-9_]+]]: memref<4xf32> {ddpc.name = "data"}
// CHECK-NEXT: %[[GW:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK: call @ddpc_rt_param_gather_f32(%{{.*}}, %c0_i64) {ddpc.bytes = 16 : i64, ddpc.collective = "all_gather_param", ddpc.params = ["w"]}
// CHECK-NEXT: %[[GB:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK: call @ddpc_rt_param_gather_f32(%{{.*}}, %c1_i64) {{.*}}ddpc.params = ["b"]
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[GW]], %[[GB]] : {{.*}}) outs(%[[X]] :
// CHECK: memref.dealloc %[[GB]] : memref<4xf32>
// CHECK-NEXT: memref.dealloc %[[GW]] : memref<4xf32>
// CHECK-NEXT: %[[GV:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x2xf32>
// CHECK: call @ddpc_rt_param_gather_f32(%{{.*}}, %c2_i64) {{.*}}ddpc.params = ["v"]
// CHECK-NEXT: %[[VIEW:.*]] = memref.collapse_shape %[[GV]]
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[VIEW]] : {{.*}}) outs(%[[X]] :
// CHECK-NOT: dealloc
// CHECK: %[[GW2:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK: call @ddpc_rt_param_gather_f32(%{{.*}}, %c0_i64{{.*}}) {{.*}}ddpc.params = ["w"]
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[GW2]], %[[VIEW]] : {{.*}}) outs(%[[X]] :
// CHECK: memref.dealloc %[[GV]] : memref<2x2xf32>
// CHECK-NEXT: memref.dealloc %[[GW2]] : memref<4xf32>
// CHECK-NEXT: return
#id = affine_map<(i) -> (i)>
func.func @train_micro(%w: memref<4xf32> {ddpc.name = "w", ddpc.role = "param"},
                       %b: memref<4xf32> {ddpc.name = "b", ddpc.role = "param"},
                       %v: memref<2x2xf32> {ddpc.name = "v", ddpc.role = "param"},
                       %x: memref<4xf32> {ddpc.name = "data"}) {
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%w, %b : memref<4xf32>, memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.addf %p, %q : f32
    linalg.yield %s : f32
  } loc("Fwd_0")
  %flat = memref.collapse_shape %v [[0, 1]] : memref<2x2xf32> into memref<4xf32> loc("Fwd_1")
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%flat : memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%p: f32, %o: f32):
    %s = arith.addf %p, %o : f32
    linalg.yield %s : f32
  } loc("Fwd_1")
  // Backward.
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%w, %flat : memref<4xf32>, memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %s = arith.mulf %p, %q : f32
    linalg.yield %s : f32
  }
  return
}

// @eval: one segment per parameter (no backward). Other functions are left
// alone.

// CHECK-LABEL: func.func @eval(
// CHECK-NEXT: %[[G:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK: call @ddpc_rt_param_gather_f32(%{{.*}}, %c0_i64)
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[G]] :
// CHECK-NOT: ddpc_rt_param_gather_f32
// CHECK: linalg.generic {{.*}} ins(%[[G]] :
// CHECK: memref.dealloc %[[G]]
// CHECK-NEXT: return
func.func @eval(%w: memref<4xf32> {ddpc.name = "w", ddpc.role = "param"},
                %x: memref<4xf32> {ddpc.name = "data"}) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%p: f32, %o: f32):
    linalg.yield %p : f32
  } loc("Fwd_0")
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%w : memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%p: f32, %o: f32):
    %s = arith.addf %p, %o : f32
    linalg.yield %s : f32
  } loc("Fwd_1")
  return
}

// CHECK-LABEL: func.func @apply(
// CHECK-NOT: ddpc_rt_param_gather_f32
// CHECK: return
func.func @apply(%w: memref<4xf32> {ddpc.name = "w", ddpc.role = "param"},
                 %x: memref<4xf32>) {
  memref.copy %w, %x : memref<4xf32> to memref<4xf32>
  return
}
