#!/usr/bin/env python3
"""Writes the four benchmark models as ONNX files (opset 17, float32, a
symbolic batch dimension 'N', weights as initializers):

  mlp.onnx          the digits MLP: float32[N, 64] -> Gemm 32 -> Relu -> Gemm 10
  fashion_cnn.onnx  Fashion-MNIST CNN: [N, 1, 28, 28] -> 2 x (Conv3x3 -> Relu ->
                    MaxPool2) -> Gemm 128 -> Relu -> Gemm 10 (~420k params)
  resnet18.onnx     ResNet-18 (BasicBlock [2, 2, 2, 2], BatchNorm) for
                    [N, 3, 64, 64] inputs, 10 classes (~11.2M params)
  transformer.onnx  one post-LN transformer encoder block, d_model 256, 4 heads,
                    FFN 1024 (exact GELU), sequence 128: [N, 128, 256] ->
                    mean over the sequence -> Gemm 10

Weights are random (numpy seed 0 per model) and scaled like PyTorch's
default initialization. The PyTorch reference (bench/torch_ref.py) builds its
module from these same initializers, so both sides start from equal weights.

    python3 bench/models/make_models.py OUT_DIR [--only NAME ...]
"""

import argparse
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
CLASSES = 10

#: name -> (input name, per-sample input shape); also used by bench/run_bench.py.
INPUTS = {
    "mlp": ("input", (64,)),
    "fashion_cnn": ("input", (1, 28, 28)),
    "resnet18": ("input", (3, 64, 64)),
    "transformer": ("input", (128, 256)),
}


class Graph:
    """A tiny onnx.helper wrapper: fresh names, initializers, nodes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def init(self, prefix: str, array: np.ndarray) -> str:
        """A trainable parameter (or BatchNorm buffer): an initializer."""
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, prefix: str, array: np.ndarray) -> str:
        """A fixed value (shapes, scalars): a Constant node, never trained."""
        name = self.fresh(prefix)
        value = numpy_helper.from_array(array, name + "_value")
        self.nodes.append(
            helper.make_node("Constant", [], [name], name=name, value=value)
        )
        return name

    def uniform(self, prefix: str, shape: tuple, fan_in: int) -> str:
        bound = 1.0 / np.sqrt(fan_in)
        return self.init(
            prefix, self.rng.uniform(-bound, bound, shape).astype(np.float32)
        )

    def node(self, op: str, inputs: list, **attrs) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def gemm(self, x: str, fin: int, fout: int) -> str:
        # Gemm with transB=1 keeps the weight in PyTorch's Linear layout [out, in].
        w = self.uniform("fc_weight", (fout, fin), fin)
        b = self.uniform("fc_bias", (fout,), fin)
        return self.node("Gemm", [x, w, b], transB=1)

    def linear3d(self, x: str, fin: int, fout: int) -> str:
        # x [N, S, fin] @ W [fin, fout] + b: MatMul + Add, as exporters write it.
        w = self.uniform("proj_weight", (fin, fout), fin)
        b = self.uniform("proj_bias", (fout,), fin)
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def conv(
        self, x: str, cin: int, cout: int, k: int, stride=1, pad=0, bias=True
    ) -> str:
        fan_in = cin * k * k
        ins = [x, self.uniform("conv_weight", (cout, cin, k, k), fan_in)]
        if bias:
            ins.append(self.uniform("conv_bias", (cout,), fan_in))
        return self.node(
            "Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4
        )

    def bn(self, x: str, c: int) -> str:
        ins = [
            x,
            self.init("bn_weight", np.ones(c, np.float32)),
            self.init("bn_bias", np.zeros(c, np.float32)),
            self.init("bn_running_mean", np.zeros(c, np.float32)),
            self.init("bn_running_var", np.ones(c, np.float32)),
        ]
        return self.node("BatchNormalization", ins, epsilon=1e-5, momentum=0.9)

    def layer_norm(self, x: str, d: int) -> str:
        scale = self.init("ln_weight", np.ones(d, np.float32))
        bias = self.init("ln_bias", np.zeros(d, np.float32))
        return self.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def model(self, name: str, x_shape: list, out: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", CLASSES])],
            self.inits,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="ddpc-bench",
        )
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def mlp() -> onnx.ModelProto:
    g = Graph(0)
    h = g.node("Relu", [g.gemm("input", 64, 32)])
    return g.model("mlp", ["N", 64], g.gemm(h, 32, CLASSES))


def fashion_cnn() -> onnx.ModelProto:
    g = Graph(0)
    x = "input"
    for cin, cout in ((1, 32), (32, 64)):
        x = g.node("Relu", [g.conv(x, cin, cout, 3, pad=1)])
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Flatten", [x], axis=1)
    x = g.node("Relu", [g.gemm(x, 64 * 7 * 7, 128)])
    return g.model("fashion_cnn", ["N", 1, 28, 28], g.gemm(x, 128, CLASSES))


def resnet18() -> onnx.ModelProto:
    g = Graph(0)
    x = g.node("Relu", [g.bn(g.conv("input", 3, 64, 7, 2, 3, bias=False), 64)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = g.node("Relu", [g.bn(g.conv(x, cin, cout, 3, s, 1, bias=False), cout)])
            y = g.bn(g.conv(y, cout, cout, 3, 1, 1, bias=False), cout)
            skip = x
            if s != 1 or cin != cout:
                skip = g.bn(g.conv(x, cin, cout, 1, s, 0, bias=False), cout)
            x = g.node("Relu", [g.node("Add", [y, skip])])
            cin = cout
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model("resnet18", ["N", 3, 64, 64], g.gemm(x, 512, CLASSES))


def transformer(
    seq: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024
) -> onnx.ModelProto:
    g = Graph(0)
    hd = d // heads
    split = g.const("shape", np.array([-1, seq, heads, hd], np.int64))
    merge = g.const("shape", np.array([-1, seq, d], np.int64))

    def heads_of(t: str, perm: list) -> str:
        return g.node("Transpose", [g.node("Reshape", [t, split])], perm=perm)

    x = "input"
    q = heads_of(g.linear3d(x, d, d), [0, 2, 1, 3])  # [N, H, S, hd]
    k = heads_of(g.linear3d(x, d, d), [0, 2, 3, 1])  # [N, H, hd, S]
    v = heads_of(g.linear3d(x, d, d), [0, 2, 1, 3])  # [N, H, S, hd]
    scale = g.const("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    scores = g.node("Mul", [g.node("MatMul", [q, k]), scale])
    probs = g.node("Softmax", [scores], axis=-1)
    ctx = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    attn = g.linear3d(g.node("Reshape", [ctx, merge]), d, d)
    h = g.layer_norm(g.node("Add", [x, attn]), d)
    # Exact GELU written with Erf (Gelu itself is opset 20): x/2 * (1 + erf(x/sqrt2)).
    u = g.linear3d(h, d, ffn)
    erf = g.node(
        "Erf",
        [g.node("Div", [u, g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))])],
    )
    gelu = g.node(
        "Mul",
        [
            g.node(
                "Mul",
                [u, g.node("Add", [erf, g.const("one", np.array(1.0, np.float32))])],
            ),
            g.const("half", np.array(0.5, np.float32)),
        ],
    )
    y = g.layer_norm(g.node("Add", [h, g.linear3d(gelu, ffn, d)]), d)
    pooled = g.node("ReduceMean", [y], axes=[1], keepdims=0)
    return g.model("transformer", ["N", seq, d], g.gemm(pooled, d, CLASSES))


BUILDERS = {
    "mlp": mlp,
    "fashion_cnn": fashion_cnn,
    "resnet18": resnet18,
    "transformer": transformer,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--only", nargs="*", choices=sorted(BUILDERS))
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.only or BUILDERS:
        path = args.out_dir / f"{name}.onnx"
        onnx.save(BUILDERS[name](), str(path))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
