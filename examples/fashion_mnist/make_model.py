#!/usr/bin/env python3
"""Writes the Fashion-MNIST CNN used by `make demo`, built with onnx's own
tools (onnx.helper), in the graph form PyTorch's exporter writes:

  Conv(1->16, 3x3, pad 1) Relu MaxPool(2)       28x28 -> 14x14
  Conv(16->32, 3x3, pad 1) Relu MaxPool(2)      14x14 -> 7x7
  Flatten Gemm(1568->64) Relu Gemm(64->10)      logits [N, 10]

Weights use PyTorch's default initialization (Kaiming-uniform with
a=sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in))), numpy seed 0; the batch
dimension is symbolic ('N').

    python3 examples/fashion_mnist/make_model.py [OUT.onnx]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def uniform(shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def main():
    out = (
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fmnist_cnn.onnx")
    )
    w = {
        "conv1.weight": uniform((16, 1, 3, 3), 9),
        "conv1.bias": uniform((16,), 9),
        "conv2.weight": uniform((32, 16, 3, 3), 144),
        "conv2.bias": uniform((32,), 144),
        "fc1.weight": uniform((64, 1568), 1568),
        "fc1.bias": uniform((64,), 1568),
        "fc2.weight": uniform((10, 64), 64),
        "fc2.bias": uniform((10,), 64),
    }
    n = helper.make_node
    nodes = [
        n(
            "Conv",
            ["input", "conv1.weight", "conv1.bias"],
            ["c1"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n(
            "Conv",
            ["p1", "conv2.weight", "conv2.bias"],
            ["c2"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        n("Relu", ["c2"], ["r2"]),
        n("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Flatten", ["p2"], ["f"], axis=1),
        n("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        n("Relu", ["h"], ["hr"]),
        n("Gemm", ["hr", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "fmnist_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
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
