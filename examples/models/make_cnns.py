#!/usr/bin/env python3
"""Builds the example CNNs with onnx's own tools (onnx.helper), in the graph
form PyTorch's exporter writes (Conv/BatchNormalization/Relu/MaxPool,
Flatten + Gemm heads, a symbolic batch dimension 'N').

  lenet.onnx        LeNet-5 for 1x28x28 inputs, 10 classes (~44k params)
  resnet_mini.onnx  a 3-stage residual CNN for 3x32x32 inputs (BN, skip adds)

Weights are random (numpy seed 0) and scaled like PyTorch's default
initialization, so activations stay in a sane range. Run:
    python3 examples/models/make_cnns.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
rng = np.random.default_rng(0)


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, prefix):
        self.n += 1
        return f"{prefix}_{self.n}"

    def param(self, prefix, shape, fan_in, kind="uniform"):
        if kind == "ones":
            a = np.ones(shape, np.float32)
        elif kind == "zeros":
            a = np.zeros(shape, np.float32)
        else:
            bound = 1.0 / np.sqrt(fan_in)
            a = rng.uniform(-bound, bound, shape).astype(np.float32)
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def node(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, pad=0, bias=True):
        w = self.param("weight", (cout, cin, k, k), cin * k * k)
        ins = [x, w] + ([self.param("bias", (cout,), cin * k * k)] if bias else [])
        return self.node(
            "Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4
        )

    def bn(self, x, c):
        scale = self.param("bn_weight", (c,), 1, "ones")
        b = self.param("bn_bias", (c,), 1, "zeros")
        mean = self.param("running_mean", (c,), 1, "zeros")
        var = self.param("running_var", (c,), 1, "ones")
        return self.node(
            "BatchNormalization", [x, scale, b, mean, var], epsilon=1e-5, momentum=0.9
        )

    def linear(self, x, fin, fout):
        w = self.param("fc_weight", (fout, fin), fin)
        b = self.param("fc_bias", (fout,), fin)
        return self.node("Gemm", [x, w, b], transB=1)

    def model(self, name, x_shape, y, classes):
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *x_shape])
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])
        self.nodes.append(helper.make_node("Identity", [y], ["logits"], name="logits"))
        g = helper.make_graph(self.nodes, name, [x], [out], self.inits)
        m = helper.make_model(
            g,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="ddpc-examples",
        )
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def lenet():
    b = Builder()
    h = b.node("Relu", [b.conv("input", 1, 6, 5, pad=2)])
    h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Relu", [b.conv(h, 6, 16, 5)])
    h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Flatten", [h], axis=1)
    h = b.node("Relu", [b.linear(h, 16 * 5 * 5, 120)])
    h = b.node("Relu", [b.linear(h, 120, 84)])
    return b.model("lenet", [1, 28, 28], b.linear(h, 84, 10), 10)


def resnet_mini():
    b = Builder()
    h = b.node("Relu", [b.bn(b.conv("input", 3, 16, 3, pad=1, bias=False), 16)])
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        y = b.node("Relu", [b.bn(b.conv(h, cin, cout, 3, stride, 1, False), cout)])
        y = b.bn(b.conv(y, cout, cout, 3, 1, 1, False), cout)
        skip = (
            h
            if (cin == cout and stride == 1)
            else b.bn(b.conv(h, cin, cout, 1, stride, 0, False), cout)
        )
        h = b.node("Relu", [b.node("Add", [y, skip])])
        cin = cout
    h = b.node("GlobalAveragePool", [h])
    h = b.node("Flatten", [h], axis=1)
    return b.model("resnet_mini", [3, 32, 32], b.linear(h, 64, 10), 10)


def main():
    out = (
        sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    )
    for name, fn in (("lenet", lenet), ("resnet_mini", resnet_mini)):
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(fn(), path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
