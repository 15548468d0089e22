#!/usr/bin/env python3
"""Writes the digits MLP (64 -> 64 -> 10, ReLU) with onnx's own tools:
MatMul + Add + Relu + Gemm, PyTorch-style uniform initialization (numpy seed
0), symbolic batch 'N'.

    python3 examples/digits/make_model.py [OUT.onnx]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = (
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_mlp.onnx")
    )
    rng = np.random.default_rng(0)
    u = lambda shape, fan_in: rng.uniform(
        -1 / np.sqrt(fan_in), 1 / np.sqrt(fan_in), shape
    ).astype(np.float32)
    w = {
        "fc1.weight": u((64, 64), 64),
        "fc1.bias": u((64,), 64),
        "fc2.weight": u((10, 64), 64),
        "fc2.bias": u((10,), 64),
    }
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)], producer_name="ddpc-examples"
    )
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
