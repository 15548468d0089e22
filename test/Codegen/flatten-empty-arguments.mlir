// RUN: ddpc-opt %s --ddpc-flatten-empty-arguments | FileCheck %s
// RUN: ddpc-opt %s --ddpc-flatten-empty-arguments --convert-func-to-llvm="use-bare-ptr-memref-call-conv=1" | FileCheck %s --check-prefix=LLVM

// A zero-size argument of rank > 1 becomes memref<0xT>; its uses read a
// zero-byte alloca of the original type. Other arguments stay.
// CHECK-LABEL: func.func @empty
// CHECK-SAME: (%[[A:.*]]: memref<0xf32>, %[[B:.*]]: memref<2x4xf32>, %[[C:.*]]: memref<0xi64>)
// CHECK: %[[E:.*]] = memref.alloca() : memref<2x0x4xf32>
// CHECK: memref.alloca() : memref<3x0xi64>
// CHECK: memref.copy %[[E]], %[[E]]
// LLVM: llvm.func @empty(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @empty(%a: memref<2x0x4xf32>, %b: memref<2x4xf32>, %c: memref<3x0xi64>) {
  memref.copy %a, %a : memref<2x0x4xf32> to memref<2x0x4xf32>
  return
}

// Declarations and functions without such arguments are unchanged.
// CHECK: func.func private @decl(memref<2x0xf32>)
func.func private @decl(memref<2x0xf32>)
// CHECK-LABEL: func.func @plain(%{{.*}}: memref<0xf32>)
func.func @plain(%a: memref<0xf32>) {
  return
}
