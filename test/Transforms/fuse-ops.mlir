// RUN: ddpc-opt %s --split-input-file --ddpc-fuse-ops | FileCheck %s

// Tests the fusion policy of ddpc-fuse-ops and its group labels.

// An elementwise chain (Exp -> Add -> Relu) becomes one group that names
// the three ONNX nodes (from the ops' NameLocs).
// CHECK-LABEL: func.func @chain(
// CHECK: linalg.generic {{.*}}ddpc.fused_nodes = ["exp_0", "add_1", "relu_2"], ddpc.fusion_group = 0 : i64
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: arith.maximumf
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @chain(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %zero = arith.constant 0.0 : f32
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32> loc("exp_0")
  %1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0, %y : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32> loc("add_1")
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%1 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %zero : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32> loc("relu_2")
  return %2 : tensor<4x8xf32>
}

// -----

// An elementwise producer fuses into a reduction that reads each element
// once (ReduceSum of Exp); the reduction's result starts a new group.
// CHECK-LABEL: func.func @reduce(
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}}ddpc.fused_nodes = ["exp", "sum"], ddpc.fusion_group = 0 : i64
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}}ddpc.fused_nodes = ["div"], ddpc.fusion_group = 1 : i64
// CHECK: arith.divf
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @reduce(%x: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32> loc("exp")
  %1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4xf32> loc("sum")
  %2 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %1 : tensor<4x8xf32>, tensor<4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %r = arith.divf %a, %s : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32> loc("div")
  return %2 : tensor<4x8xf32>
}

// -----

// A contraction reads each operand element N (or M) times: its elementwise
// producer stays a separate group, so the MatMul keeps its plain
// multiply-add body (for a library GEMM) and no work is duplicated.
// CHECK-LABEL: func.func @matmul_operand(
// CHECK: linalg.generic {{.*}}ddpc.fusion_group = 0 : i64
// CHECK: math.tanh
// CHECK: linalg.generic {{.*}}ddpc.fusion_group = 1 : i64
// CHECK-NOT: math.tanh
// CHECK: arith.mulf
// CHECK: arith.addf
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @matmul_operand(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %acc: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%0, %w : tensor<4x8xf32>, tensor<8x3xf32>) outs(%acc : tensor<4x3xf32>) {
  ^bb0(%p: f32, %q: f32, %o: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  return %1 : tensor<4x3xf32>
}

// -----

// A producer with two users is recomputed in each (its body is cheap), so
// both consumers become single groups and the producer disappears.
// CHECK-LABEL: func.func @two_users(
// CHECK-COUNT-2: math.exp
// CHECK-NOT: math.exp
#id = affine_map<(d0) -> (d0)>
func.func @two_users(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.negf %a : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %a : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  return %1, %2 : tensor<16xf32>, tensor<16xf32>
}

// -----

// A producer whose other user (here the caller, through the return) comes
// after the consumer: one multi-result kernel computes both (an optimizer's
// moment and parameter updates), the producer is erased, and the return
// reads the fused op's copy. Nothing is computed twice.
// CHECK-LABEL: func.func @multi_result(
// CHECK: %[[F:.*]]:2 = linalg.generic
// CHECK-COUNT-1: math.exp
// CHECK-NOT: math.exp
// CHECK: return %[[F]]#{{[01]}}, %[[F]]#{{[01]}}
#id = affine_map<(d0) -> (d0)>
func.func @multi_result(%x: tensor<16xf32>, %y: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%0, %y : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %b, %a : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  return %0, %1 : tensor<16xf32>, tensor<16xf32>
}

// -----

// A producer that a contraction reads *before* the elementwise consumer
// (a ReLU output: the next layer's GEMM, then the ReLU VJP in the backward
// pass) is written anyway; it is neither recomputed in the consumer (that
// would keep its input alive until then) nor fused: the consumer reads it.
// CHECK-LABEL: func.func @user_before_consumer(
// CHECK: %[[R:.*]] = linalg.generic
// CHECK: arith.cmpf ogt
// CHECK: linalg.generic {{.*}}"reduction"]} ins(%[[R]],
// CHECK: linalg.generic {{.*}} ins(%[[R]], %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.cmpf ogt
// CHECK-NEXT: arith.select
// CHECK-NEXT: linalg.yield
// CHECK: return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @user_before_consumer(%h: tensor<4x8xf32>, %w: tensor<8x3xf32>, %acc: tensor<4x3xf32>,
                                %g: tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %zero = arith.constant 0.0 : f32
  %0 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %p = arith.cmpf ogt, %a0, %zero : f32
    %r = arith.select %p, %a0, %zero : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%0, %w : tensor<4x8xf32>, tensor<8x3xf32>) outs(%acc : tensor<4x3xf32>) {
  ^bb0(%p0: f32, %q: f32, %o: f32):
    %m = arith.mulf %p0, %q : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %2 = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%0, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%y0: f32, %d: f32, %o: f32):
    %p = arith.cmpf ogt, %y0, %zero : f32
    %r = arith.select %p, %d, %zero : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %1, %2 : tensor<4x3xf32>, tensor<4x8xf32>
}

// -----

// A consumer that reads two results of one producer (s and t of a
// multi-result kernel, both also returned): fusing through one operand
// would leave the other reading the producer, and redirecting that to the
// fused op's own result would make it read itself. It stays a separate op.
// CHECK-LABEL: func.func @consumer_reads_two_results(
// CHECK: %[[P:.*]]:2 = linalg.generic
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[P]]#{{[01]}}, %[[P]]#{{[01]}} :
// CHECK: return %[[Y]], %[[P]]#
#id3 = affine_map<(d0) -> (d0)>
func.func @consumer_reads_two_results(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.negf %a : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %t = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%s : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %y = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel"]}
      ins(%s, %t : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %y, %s, %t : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
