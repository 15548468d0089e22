// RUN: ddpc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(ddpc-plan-arena))' | FileCheck %s

// Tests static memory planning: %a (1024 B) and %b (512 B) are live at the
// same time and get disjoint offsets; %c is allocated after %a is freed and
// reuses its bytes (offset 0). The arena is 1536 bytes, allocated once at
// entry and freed before the return. %keep has no dealloc in this block
// (it is freed by someone else) and stays a separate allocation.
// CHECK-LABEL: func.func @plan(
// CHECK-SAME: attributes {ddpc.arena_buffers = 3 : i64, ddpc.arena_bytes = 1536 : i64}
// CHECK: %[[ARENA:.*]] = memref.alloc() {alignment = 256 : i64} : memref<1536xi8>
// CHECK: %[[KEEP:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.view %[[ARENA]][%c0{{.*}}][] : memref<1536xi8> to memref<256xf32>
// CHECK: memref.view %[[ARENA]][%c1024{{.*}}][] : memref<1536xi8> to memref<128xf32>
// CHECK: memref.view %[[ARENA]][%c0{{.*}}][] : memref<1536xi8> to memref<200xf32>
// CHECK-NOT: memref.dealloc %{{.*}} : memref<256xf32>
// CHECK: memref.dealloc %[[ARENA]] : memref<1536xi8>
// CHECK-NEXT: return %[[KEEP]]
func.func @plan(%x: memref<256xf32>, %y: memref<200xf32>) -> memref<4xf32> {
  %keep = memref.alloc() : memref<4xf32>
  %a = memref.alloc() : memref<256xf32>
  %b = memref.alloc() : memref<128xf32>
  memref.copy %x, %a : memref<256xf32> to memref<256xf32>
  %s = memref.subview %a[0] [128] [1] : memref<256xf32> to memref<128xf32, strided<[1]>>
  memref.copy %s, %b : memref<128xf32, strided<[1]>> to memref<128xf32>
  memref.dealloc %a : memref<256xf32>
  %c = memref.alloc() : memref<200xf32>
  memref.copy %y, %c : memref<200xf32> to memref<200xf32>
  memref.dealloc %b : memref<128xf32>
  memref.dealloc %c : memref<200xf32>
  return %keep : memref<4xf32>
}

// -----

// One buffer: nothing to share, left alone.
// CHECK-LABEL: func.func @single(
// CHECK-NOT: ddpc.arena_bytes
// CHECK: memref.alloc() : memref<8xf32>
func.func @single(%x: memref<8xf32>) {
  %a = memref.alloc() : memref<8xf32>
  memref.copy %x, %a : memref<8xf32> to memref<8xf32>
  memref.dealloc %a : memref<8xf32>
  return
}
