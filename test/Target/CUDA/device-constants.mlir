// RUN: ddpc-opt %s --ddpc-device-constants | FileCheck %s

// ddpc-device-constants packs the constant globals that functions read into
// one byte array at 256-byte aligned offsets (in first-use order), asks the
// runtime for its device copy once at the top of each function that reads
// one, and turns every memref.get_global into a view of that copy. A splat
// is expanded and i1 elements take a byte each (LLVM's in-memory i1);
// mutable globals and functions that read none are left alone; globals no
// longer read are erased.

// 16 bytes of @w at 0, 4 bytes of @b at 256, the 4 bytes of @mask at 512,
// 8 bytes of the splat at 768: 776 bytes, rounded up to 1024.
// CHECK-DAG: memref.global "private" constant @__ddpc_device_constants : memref<1024xi8> = dense<"0x0000803F000000400000404000008040{{0+}}0000A0400{{0+}}01000101{{0+}}0300000000000000{{0+}}"> {alignment = 256 : i64}
// CHECK-DAG: func.func private @ddpc_device_constants(memref<1024xi8>, i64) -> memref<1024xi8>
// CHECK-NOT: memref.global "private" constant @w
// CHECK-NOT: memref.global "private" constant @b
// CHECK-NOT: memref.global "private" constant @three
// CHECK-NOT: memref.global "private" constant @mask
// CHECK-DAG: memref.global "private" @state : memref<2xf32>
memref.global "private" constant @w : memref<2x2xf32> = dense<[[1.0, 2.0], [3.0, 4.0]]>
memref.global "private" constant @b : memref<1xf32> = dense<5.0>
memref.global "private" constant @three : memref<1xi64> = dense<3>
memref.global "private" @state : memref<2xf32> = dense<0.0>
memref.global "private" constant @mask : memref<4xi1> = dense<[true, false, true, true]>

// CHECK-LABEL: func.func @first(
// CHECK-NEXT: %[[HOST:.*]] = memref.get_global @__ddpc_device_constants : memref<1024xi8>
// CHECK-NEXT: %[[BYTES:.*]] = arith.constant 1024 : i64
// CHECK-NEXT: %[[DEV:.*]] = call @ddpc_device_constants(%[[HOST]], %[[BYTES]])
// CHECK: %[[O0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[W:.*]] = memref.view %[[DEV]][%[[O0]]][] : memref<1024xi8> to memref<2x2xf32>
// CHECK: %[[O256:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[B:.*]] = memref.view %[[DEV]][%[[O256]]][] : memref<1024xi8> to memref<1xf32>
// CHECK: %[[S:.*]] = memref.get_global @state
// CHECK: %[[O512:.*]] = arith.constant 512 : index
// CHECK-NEXT: %[[M:.*]] = memref.view %[[DEV]][%[[O512]]][] : memref<1024xi8> to memref<4xi1>
// CHECK: memref.copy %[[W]]
// CHECK: memref.copy %[[B]]
// CHECK: memref.copy %[[S]]
// CHECK: memref.copy %[[M]]
func.func @first(%out: memref<2x2xf32>, %o1: memref<1xf32>, %o2: memref<2xf32>, %o3: memref<4xi1>) {
  %0 = memref.get_global @w : memref<2x2xf32>
  %1 = memref.get_global @b : memref<1xf32>
  %2 = memref.get_global @state : memref<2xf32>
  %3 = memref.get_global @mask : memref<4xi1>
  memref.copy %0, %out : memref<2x2xf32> to memref<2x2xf32>
  memref.copy %1, %o1 : memref<1xf32> to memref<1xf32>
  memref.copy %2, %o2 : memref<2xf32> to memref<2xf32>
  memref.copy %3, %o3 : memref<4xi1> to memref<4xi1>
  return
}

// A second function reading @b (same offset) and the splat; the read inside
// a loop body (a future kernel) becomes a view of the function's copy.
// CHECK-LABEL: func.func @second(
// CHECK-NEXT: memref.get_global @__ddpc_device_constants
// CHECK-NEXT: arith.constant 1024 : i64
// CHECK-NEXT: %[[DEV2:.*]] = call @ddpc_device_constants
// CHECK: scf.parallel
// CHECK: arith.constant 256 : index
// CHECK-NEXT: memref.view %[[DEV2]]{{.*}} to memref<1xf32>
// CHECK: arith.constant 768 : index
// CHECK-NEXT: memref.view %[[DEV2]]{{.*}} to memref<1xi64>
func.func @second(%out: memref<4xf32>, %n: memref<1xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    %b = memref.get_global @b : memref<1xf32>
    %v = memref.load %b[%c0] : memref<1xf32>
    memref.store %v, %out[%i] : memref<4xf32>
    scf.reduce
  }
  %t = memref.get_global @three : memref<1xi64>
  memref.copy %t, %n : memref<1xi64> to memref<1xi64>
  return
}

// CHECK-LABEL: func.func @none(
// CHECK-NOT: ddpc_device_constants
// CHECK: return
func.func @none(%x: memref<2xf32>) {
  %s = memref.get_global @state : memref<2xf32>
  memref.copy %s, %x : memref<2xf32> to memref<2xf32>
  return
}
