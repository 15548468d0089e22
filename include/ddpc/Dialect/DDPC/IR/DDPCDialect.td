//===- DDPCDialect.td - the ddpc dialect: the IR contract --*- tablegen -*-===//
//
// Part of ddpc. The discardable attributes that the importer, training
// synthesis, the passes and the driver read and write, declared once:
// mlir-tblgen generates a typed helper per attribute
// (DDPCDialect::<Name>AttrHelper: getNameStr(), getAttr, setAttr,
// isAttrPresent), and DDPCDialect.h derives the name constants from them,
// so no attribute name is spelled anywhere else in C++.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_DIALECT_DDPC_IR_DDPCDIALECT_TD
#define DDPC_DIALECT_DDPC_IR_DDPCDIALECT_TD

include "mlir/IR/DialectBase.td"

def DDPC_Dialect : Dialect {
  let name = "ddpc";
  let cppNamespace = "::ddpc";
  let summary = "ddpc's IR contract: roles, names and plans on upstream IR";
  let description = [{
    ddpc's IR is upstream MLIR (linalg, tensor, memref, scf, gpu, ...). What
    the stages tell each other is carried by these attributes:

    On function arguments and results (the program's ABI):
      ddpc.name   : StringAttr   ONNX value name of the input/output
      ddpc.dtype  : IntegerAttr  ONNX TensorProto.DataType (i32)
      ddpc.role   : StringAttr   input, output, param, buffer,
                                 buffer_update, rng, grad_acc, new_grad_acc
      ddpc.host_shared : UnitAttr  a training step's per-step scalar that the
                                 runtime passes in host-shared memory
                                 (Runtime/Memory.h: page-locked on CUDA)
    On the module (the importer):
      ddpc.graph_name   : StringAttr  the ONNX graph's name
      ddpc.opset        : IntegerAttr default-domain opset (i64)
      ddpc.initializers : ArrayAttr   per initializer {name, shape, dtype,
                                      bytes}
    On ops:
      ddpc.collective     : StringAttr  a collective's kind (all_reduce_sum,
                                        allreduce_bucket)
      ddpc.bytes          : IntegerAttr bytes a collective sends (i64)
      ddpc.bucket         : IntegerAttr gradient bucket index (i64)
      ddpc.params         : ArrayAttr   names of a bucket's parameters
      ddpc.start_op       : IntegerAttr entry-block position a bucket starts
                                        after (1-based, i64)
      ddpc.function_ops   : IntegerAttr ops in that entry block (i64)
      ddpc.scatter_add    : UnitAttr    a loop nest that scatter-adds (VJP)
      ddpc.fusion_group   : IntegerAttr fusion group id (i64, program order)
      ddpc.fused_nodes    : ArrayAttr   ONNX node names a group computes
      ddpc.library        : StringAttr  library a call goes to (cublas, ...)
      ddpc.library_fallback : UnitAttr  scf.if running generated code when
                                        a library call declined
      ddpc.index_check    : UnitAttr    a run-time index bounds check
      ddpc.runtime_check  : UnitAttr    any other run-time check
      ddpc.remat          : StringAttr  a forward op recomputed for the
                                        backward pass (ddpc-rematerialize):
                                        its ONNX node names, '+'-joined
    On functions (ddpc-plan-arena):
      ddpc.arena_bytes    : IntegerAttr size of the temporaries' arena (i64)
      ddpc.arena_buffers  : IntegerAttr buffers placed in it (i64)
  }];
  let discardableAttrs = (ins
    "::mlir::StringAttr":$name,
    "::mlir::IntegerAttr":$dtype,
    "::mlir::StringAttr":$role,
    "::mlir::UnitAttr":$host_shared,
    "::mlir::StringAttr":$graph_name,
    "::mlir::IntegerAttr":$opset,
    "::mlir::ArrayAttr":$initializers,
    "::mlir::StringAttr":$collective,
    "::mlir::IntegerAttr":$bytes,
    "::mlir::IntegerAttr":$bucket,
    "::mlir::ArrayAttr":$params,
    "::mlir::IntegerAttr":$start_op,
    "::mlir::IntegerAttr":$function_ops,
    "::mlir::UnitAttr":$scatter_add,
    "::mlir::IntegerAttr":$fusion_group,
    "::mlir::ArrayAttr":$fused_nodes,
    "::mlir::StringAttr":$library,
    "::mlir::UnitAttr":$library_fallback,
    "::mlir::UnitAttr":$index_check,
    "::mlir::UnitAttr":$runtime_check,
    "::mlir::StringAttr":$remat,
    "::mlir::IntegerAttr":$arena_bytes,
    "::mlir::IntegerAttr":$arena_buffers
  );
}

#endif // DDPC_DIALECT_DDPC_IR_DDPCDIALECT_TD
