// RUN: ddpc-opt %s --pass-pipeline='builtin.module(func.func(ddpc-parallel-loops-outermost,ddpc-split-reductions))' | FileCheck %s

// Tests ddpc-split-reductions: a bias gradient db[c] = sum_{n,h,w} dy[n,c,h,w]
// has 16 outputs of 25088 terms each. The loops over n and h join the
// parallel loop over c (16 * 32 * 28 = 14336 threads, within the 65536
// target); w would overshoot it (401408), so each thread sums its 28 terms
// over w in order and adds that to db[c] atomically: 896 atomic adds per
// output, not 25088.
// The first constant 28 bounds the parallel loop over h, the second the
// serial loop over w.
// CHECK-LABEL: func.func @bias_grad(
// CHECK-SAME: %[[DY:[a-zA-Z0-9_]+]]: memref<32x16x28x28xf32>, %[[DB:[a-zA-Z0-9_]+]]: memref<16xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C28:.*]] = arith.constant 28 : index
// CHECK-DAG: %[[W28:.*]] = arith.constant 28 : index
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) = (%[[C0]], %[[C0]], %[[C0]]) to (%[[C16]], %[[C32]], %[[C28]])
// CHECK: %[[S:.*]] = scf.for %{{.*}} = %[[C0]] to %[[W28]] step %[[C1]] iter_args(
// CHECK: memref.load %[[DY]][
// CHECK: scf.yield
// CHECK: memref.atomic_rmw addf %[[S]], %[[DB]][
// CHECK-NOT: linalg.generic
#in = affine_map<(n, c, h, w) -> (n, c, h, w)>
#out = affine_map<(n, c, h, w) -> (c)>
func.func @bias_grad(%dy: memref<32x16x28x28xf32>, %db: memref<16xf32>) {
  linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "parallel", "reduction", "reduction"]}
      ins(%dy : memref<32x16x28x28xf32>) outs(%db : memref<16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// A weight gradient dw[o,i] = sum_{n,p} x[n,p,i] * dy[n,p,o] with 64 * 64
// outputs: the batch loop joins them although 4096 * 128 = 524288 exceeds
// the target (4096 threads would each keep 25088 serial terms), and each
// thread sums the 196 positions p in order before one atomic add.
// CHECK-LABEL: func.func @weight_grad(
// CHECK-SAME: %{{[a-zA-Z0-9_]+}}: memref<128x196x64xf32>, %{{[a-zA-Z0-9_]+}}: memref<128x196x64xf32>, %[[DW:[a-zA-Z0-9_]+]]: memref<64x64xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[O64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[I64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C128:.*]] = arith.constant 128 : index
// CHECK-DAG: %[[C196:.*]] = arith.constant 196 : index
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) = (%[[C0]], %[[C0]], %[[C0]]) to (%[[O64]], %[[I64]], %[[C128]])
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[S:.*]] = scf.for %[[P:.*]] = %[[C0]] to %[[C196]] step %[[C1]] iter_args(%[[ACC:.*]] = %[[Z]]) -> (f32)
// CHECK: arith.mulf
// CHECK: %[[NEXT:.*]] = arith.addf %[[ACC]],
// CHECK: scf.yield %[[NEXT]] : f32
// CHECK: memref.atomic_rmw addf %[[S]], %[[DW]][
#x = affine_map<(o, i, n, p) -> (n, p, i)>
#g = affine_map<(o, i, n, p) -> (n, p, o)>
#w = affine_map<(o, i, n, p) -> (o, i)>
func.func @weight_grad(%xs: memref<128x196x64xf32>, %dys: memref<128x196x64xf32>, %dw: memref<64x64xf32>) {
  linalg.generic {indexing_maps = [#x, #g, #w], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%xs, %dys : memref<128x196x64xf32>, memref<128x196x64xf32>) outs(%dw : memref<64x64xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// Enough outputs already (65536), or too short a reduction (10 terms): left
// to the one-thread-per-output loops.
// CHECK-LABEL: func.func @many_outputs(
// CHECK: linalg.generic
// CHECK-LABEL: func.func @short(
// CHECK: linalg.generic
#a2 = affine_map<(i, j) -> (i, j)>
#o2 = affine_map<(i, j) -> (i)>
func.func @many_outputs(%x: memref<65536x300xf32>, %y: memref<65536xf32>) {
  linalg.generic {indexing_maps = [#a2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<65536x300xf32>) outs(%y : memref<65536xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}
func.func @short(%x: memref<8x10xf32>, %y: memref<8xf32>) {
  linalg.generic {indexing_maps = [#a2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x10xf32>) outs(%y : memref<8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// A multi-result kernel of ddpc-fuse-ops: BatchNorm backward's elementwise
// dz = dy * s[c] (written for every element) next to the reduction
// db[c] = sum dz that reads it. It was left to 64 threads of 8192 serial
// terms each; now split like @bias_grad (32768 threads, w serial), each
// thread storing its 16 dz elements and adding their sum atomically.
// The first constant 16 bounds the parallel loop over h, the second the
// serial loop over w.
// CHECK-LABEL: func.func @with_elementwise_output(
// CHECK-SAME: %[[DYBUF:[a-zA-Z0-9_]+]]: memref<32x64x16x16xf32>, %[[SBUF:[a-zA-Z0-9_]+]]: memref<64xf32>, %[[DZBUF:[a-zA-Z0-9_]+]]: memref<32x64x16x16xf32>, %[[DBBUF:[a-zA-Z0-9_]+]]: memref<64xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[W16:.*]] = arith.constant 16 : index
// CHECK: scf.parallel (%[[C:.*]], %[[N:.*]], %[[H:.*]]) = (%[[C0]], %[[C0]], %[[C0]]) to (%[[C64]], %[[C32]], %[[C16]])
// CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %[[C0]] to %[[W16]] step %[[C1]] iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: %[[DY:.*]] = memref.load %[[DYBUF]][
// CHECK: %[[S:.*]] = memref.load %[[SBUF]][
// CHECK: %[[DZ:.*]] = arith.mulf %[[DY]], %[[S]] : f32
// CHECK: memref.store %[[DZ]], %[[DZBUF]][
// CHECK: %[[NEXT:.*]] = arith.addf %[[ACC]], %[[DZ]] : f32
// CHECK: scf.yield %[[NEXT]] : f32
// CHECK: memref.atomic_rmw addf %[[SUM]], %[[DBBUF]][
// CHECK-NOT: linalg.generic
#nchw = affine_map<(n, c, h, w) -> (n, c, h, w)>
#ch = affine_map<(n, c, h, w) -> (c)>
func.func @with_elementwise_output(%dy: memref<32x64x16x16xf32>, %s: memref<64xf32>, %dz: memref<32x64x16x16xf32>, %db: memref<64xf32>) {
  linalg.generic {indexing_maps = [#nchw, #ch, #nchw, #ch], iterator_types = ["reduction", "parallel", "reduction", "reduction"]}
      ins(%dy, %s : memref<32x64x16x16xf32>, memref<64xf32>) outs(%dz, %db : memref<32x64x16x16xf32>, memref<64xf32>) {
  ^bb0(%a: f32, %b: f32, %unused: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %t = arith.addf %acc, %m : f32
    linalg.yield %m, %t : f32, f32
  }
  return
}

// Two accumulating outputs, or an output both read and written that is
// not the accumulator: not split.
// CHECK-LABEL: func.func @two_sums(
// CHECK: linalg.generic
func.func @two_sums(%dy: memref<32x64x16x16xf32>, %a: memref<64xf32>, %b: memref<64xf32>) {
  linalg.generic {indexing_maps = [#nchw, #ch, #ch], iterator_types = ["reduction", "parallel", "reduction", "reduction"]}
      ins(%dy : memref<32x64x16x16xf32>) outs(%a, %b : memref<64xf32>, memref<64xf32>) {
  ^bb0(%x: f32, %accA: f32, %accB: f32):
    %sa = arith.addf %accA, %x : f32
    %sb = arith.addf %accB, %x : f32
    linalg.yield %sa, %sb : f32, f32
  }
  return
}

// One sum of 1,000,000 terms: moving its loop whole would give 1,000,000
// atomic adds to one float. It is strip-mined instead: the input is
// expanded to 1 x 4000 x 250, the 4000 join the threads (at most 4096
// atomic adds per output) and each thread sums its 250 terms in order.
// Of the two constants 1, the first is the step and the second the bound
// of the unit dimension.
// CHECK-LABEL: func.func @one_long_sum(
// CHECK-SAME: %[[IN:[a-zA-Z0-9_]+]]: memref<1x1000000xf32>, %[[OUT:[a-zA-Z0-9_]+]]: memref<1xf32>)
// CHECK: %[[X:.*]] = memref.expand_shape %[[IN]] {{\[}}[0], [1, 2]] output_shape [1, 4000, 250] : memref<1x1000000xf32> into memref<1x4000x250xf32>
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[UNIT:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C4000:.*]] = arith.constant 4000 : index
// CHECK-DAG: %[[C250:.*]] = arith.constant 250 : index
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%[[C0]], %[[C0]]) to (%[[UNIT]], %[[C4000]]) step (%[[C1]], %[[C1]])
// CHECK: %[[S:.*]] = scf.for %{{.*}} = %[[C0]] to %[[C250]] step %[[C1]] iter_args(
// CHECK: memref.load %[[X]][%{{.*}}, %{{.*}}, %{{.*}}] : memref<1x4000x250xf32>
// CHECK: memref.atomic_rmw addf %[[S]], %[[OUT]][
// A prime extent cannot be strip-mined: moved whole as before.
// CHECK-LABEL: func.func @prime_sum(
// CHECK-NOT: expand_shape
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[UNIT:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C65537:.*]] = arith.constant 65537 : index
// CHECK-NOT: expand_shape
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%[[C0]], %[[C0]]) to (%[[UNIT]], %[[C65537]]) step (%[[C1]], %[[C1]])
#row = affine_map<(p, r) -> (p, r)>
#rowout = affine_map<(p, r) -> (p)>
func.func @one_long_sum(%x: memref<1x1000000xf32>, %y: memref<1xf32>) {
  linalg.generic {indexing_maps = [#row, #rowout], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<1x1000000xf32>) outs(%y : memref<1xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}
func.func @prime_sum(%x: memref<1x65537xf32>, %y: memref<1xf32>) {
  linalg.generic {indexing_maps = [#row, #rowout], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<1x65537xf32>) outs(%y : memref<1xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}
