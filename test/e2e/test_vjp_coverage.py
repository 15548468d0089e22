"""Every input of every op ddpc imports has a checked gradient or is
declared non-differentiable, in one table (issue 17, item 1).

A missing VJP rule used to be silent: Gather's table got a zero cotangent,
so embeddings never trained. This file makes that class impossible to miss:

- `test_every_op_input_is_covered` walks `ddpc.supported_ops()` and, for
  each op, the inputs of its ONNX schema (onnx.defs). An input that may
  carry a gradient (its type constraint admits a float type, and so does an
  output's) must have a finite-difference case in CASES or a reason in
  NONDIFF; integer and bool inputs (indices, shapes, axes, conditions) and
  ops whose outputs cannot be float (comparisons, Shape) need none. A new op
  registered without either fails here.
- `test_vjp_matches_finite_differences` runs each case: the op alone in
  float64, compiled with `vjp=True`, its cotangent of every float graph
  input against central differences (test_gradients.check_gradients), on
  the CPU target.
"""
import dataclasses
import pathlib
import sys

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "build" / "python"))
ddpc = pytest.importorskip("ddpc", reason="build the Python extension (make build)")
from test_gradients import check_gradients  # noqa: E402

FLOAT_TYPES = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"}


@dataclasses.dataclass
class Var:
    """Shapes of a variadic input (Concat's inputs, Sum's data_0, ...)."""
    shapes: tuple

    def __init__(self, *shapes):
        self.shapes = shapes


@dataclasses.dataclass
class Case:
    """One op alone. `inputs`: formal input name -> a shape (a float64
    graph input whose gradient is checked), a Var of shapes, or a numpy
    array (a constant initializer: indices, shapes, configuration)."""
    inputs: dict
    attrs: dict = dataclasses.field(default_factory=dict)
    opset: int = 17
    positive: tuple = ()
    out_dtype: int = TensorProto.DOUBLE
    h: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7
    name: str = ""

    def fd_inputs(self):
        """Formal inputs whose gradient the case checks."""
        return {k for k, v in self.inputs.items() if not isinstance(v, np.ndarray)}


def c(opset=17, attrs=None, positive=(), name="", **inputs):
    return Case(inputs=inputs, attrs=attrs or {}, opset=opset, positive=positive, name=name)


def i64(*v):
    return np.array(v if len(v) != 1 or not isinstance(v[0], list) else v[0], np.int64)


AXES1 = i64([1])
REDUCE = {op: [c(opset=18, attrs=dict(keepdims=0), data=[3, 4, 2], axes=AXES1,
                 positive=("data",) if op == "ReduceLogSum" else ())]
          for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                     "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"]}
UNARY = {op: [c(**{name: [3, 4]})] for op, name in [
    ("Abs", "X"), ("Ceil", "X"), ("Elu", "X"), ("Erf", "input"), ("Exp", "input"),
    ("Floor", "X"), ("HardSigmoid", "X"), ("Identity", "input"), ("LeakyRelu", "X"),
    ("Neg", "X"), ("Relu", "X"), ("Sigmoid", "X"), ("Sign", "input"), ("Softplus", "X"),
    ("Tanh", "input")]}
POSITIVE_UNARY = {op: [c(positive=(name,), **{name: [3, 4]})] for op, name in [
    ("Log", "input"), ("Reciprocal", "X"), ("Sqrt", "X")]}
BINARY = {op: [c(A=[2, 3, 4], B=[3, 1], positive=("B",) if op == "Div" else ())]
          for op in ["Add", "Sub", "Mul", "Div"]}
VARIADIC = {op: [c(data_0=Var([3, 4], [4], [3, 1]))] for op in ["Max", "Min", "Mean", "Sum"]}

CASES = {
    **REDUCE, **UNARY, **POSITIVE_UNARY, **BINARY, **VARIADIC,
    "AveragePool": [c(X=[1, 2, 5, 5], attrs=dict(kernel_shape=[2, 2], strides=[2, 1],
                                                  pads=[0, 1, 0, 1]))],
    "BatchNormalization": [
        # Inference mode: the output depends on the running statistics too.
        c(X=[2, 3, 2, 2], scale=[3], B=[3], input_mean=[3], input_var=[3],
          positive=("input_var",), name="inference"),
        # Training mode: batch statistics; the running ones are buffers.
        c(X=[4, 3, 2, 2], scale=[3], B=[3], input_mean=np.zeros(3), input_var=np.ones(3),
          attrs=dict(training_mode=1), name="training")],
    "Cast": [Case(inputs=dict(input=[3, 4]), attrs=dict(to=TensorProto.FLOAT),
                  out_dtype=TensorProto.FLOAT, h=1e-3, rtol=1e-3, atol=2e-4)],
    "Clip": [c(input=[3, 4], min=[], max=[], opset=13)],
    "Concat": [c(inputs=Var([2, 3], [2, 1]), attrs=dict(axis=1))],
    "Conv": [c(X=[1, 2, 5, 4], W=[3, 2, 3, 2], B=[3], attrs=dict(pads=[1, 0, 1, 0]))],
    "Dropout": [c(data=[3, 4], ratio=np.array(0.3))],
    "Expand": [c(input=[3, 1], shape=i64([2, 3, 4]))],
    "Flatten": [c(input=[2, 3, 2], attrs=dict(axis=2))],
    "Gather": [c(data=[5, 3], indices=i64([[0, -1], [2, 0]]))],
    "Gelu": [c(X=[3, 4], opset=20, name="exact"),
             c(X=[3, 4], opset=20, attrs=dict(approximate="tanh"), name="tanh")],
    "Gemm": [c(A=[3, 4], B=[5, 4], C=[5], attrs=dict(transB=1, alpha=0.5, beta=2.0))],
    "GlobalAveragePool": [c(X=[2, 3, 3, 2])],
    "GlobalMaxPool": [c(X=[2, 3, 3, 2])],
    "InstanceNormalization": [c(input=[2, 3, 2, 2], scale=[3], B=[3])],
    "LRN": [c(X=[1, 5, 2, 2], attrs=dict(size=3))],
    "LayerNormalization": [c(X=[2, 3, 4], Scale=[4], B=[4])],
    "LogSoftmax": [c(input=[3, 4])],
    "MatMul": [c(A=[2, 3, 4], B=[4, 5])],
    "MaxPool": [c(X=[1, 2, 5, 5], attrs=dict(kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1]))],
    "Pow": [c(X=[3, 4], Y=[4], positive=("X",))],
    "Reshape": [c(data=[2, 6], shape=i64([3, 4]))],
    "Slice": [c(data=[4, 5], starts=i64([1, -1]), ends=i64([3, -6]), axes=i64([0, 1]),
                steps=i64([1, -2]))],
    "Softmax": [c(input=[3, 4])],
    "Squeeze": [c(data=[3, 1, 4], axes=AXES1)],
    "Transpose": [c(data=[2, 3, 4], attrs=dict(perm=[2, 0, 1]))],
    "Unsqueeze": [c(data=[3, 4], axes=i64([0, 2]))],
    "Where": [c(condition=np.array([[True, False, True, False]] * 3), X=[3, 4], Y=[4])],
}

# Inputs that may be float but get no gradient, and why. Everything else
# that may carry one has a case above.
NONDIFF = {
    "Dropout": {"ratio": "configuration (the drop probability; PyTorch takes a Python "
                         "float); an initializer here stays a constant in training"},
}


def possibly_differentiable(schema):
    """Formal inputs of `schema` that could carry a gradient."""
    constraints = {t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints}
    types = lambda f: constraints.get(f.type_str, {f.type_str})  # noqa: E731
    if not any(types(o) & FLOAT_TYPES for o in schema.outputs):
        return []
    return [f.name for f in schema.inputs if types(f) & FLOAT_TYPES]


def test_every_op_input_is_covered():
    ops = ddpc.supported_ops()
    assert len(ops) > 50, ops
    missing = []
    for op in ops:
        schema = onnx.defs.get_schema(op)
        checked = set().union(*[case.fd_inputs() for case in CASES.get(op, [])])
        for name in possibly_differentiable(schema):
            declared = name in NONDIFF.get(op, {})
            assert not (declared and name in checked), f"{op}.{name}: both checked and declared"
            if name not in checked and not declared:
                missing.append(f"{op}.{name}")
    assert not missing, ("inputs with neither a finite-difference case nor a "
                         f"non-differentiable declaration: {missing}")
    # The tables name only real ops and inputs.
    for op in set(CASES) | set(NONDIFF):
        assert op in ops, f"{op} is in the tables but ddpc does not import it"
        formal = {f.name for f in onnx.defs.get_schema(op).inputs}
        for case in CASES.get(op, []):
            assert set(case.inputs) <= formal, (op, set(case.inputs) - formal)
        assert set(NONDIFF.get(op, {})) <= formal


def build(op, case):
    """The op alone: float64 graph inputs for shapes, initializers for arrays."""
    schema = onnx.defs.get_schema(op, case.opset)
    node_inputs, graph_inputs, inits, fd = [], [], [], []
    for f in schema.inputs:
        spec = case.inputs.get(f.name)
        if spec is None:
            node_inputs.append("")
            continue
        if isinstance(spec, np.ndarray):
            inits.append(numpy_helper.from_array(spec, f.name))
            node_inputs.append(f.name)
        elif isinstance(spec, Var):
            for j, shape in enumerate(spec.shapes):
                graph_inputs.append((f"{f.name}_{j}", list(shape)))
                node_inputs.append(f"{f.name}_{j}")
        else:
            graph_inputs.append((f.name, list(spec)))
            node_inputs.append(f.name)
    while node_inputs and not node_inputs[-1]:
        node_inputs.pop()
    g = helper.make_graph(
        [helper.make_node(op, node_inputs, ["y"], **case.attrs)], op,
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, s) for n, s in graph_inputs],
        [helper.make_tensor_value_info("y", case.out_dtype, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset)])
    m.ir_version = 8
    positive = {n for n, _ in graph_inputs if n.rsplit("_", 1)[0] in case.positive or n in case.positive}
    return m, graph_inputs, positive


CASE_IDS = [(op, i) for op in sorted(CASES) for i in range(len(CASES[op]))]


@pytest.mark.parametrize("op,index", CASE_IDS,
                         ids=[f"{op}{'-' + CASES[op][i].name if CASES[op][i].name else ''}"
                              for op, i in CASE_IDS])
def test_vjp_matches_finite_differences(op, index):
    case = CASES[op][index]
    m, inputs, positive = build(op, case)
    check_gradients(m, inputs, np.random.default_rng(sum(map(ord, op)) + index), h=case.h,
                    rtol=case.rtol, atol=case.atol, positive=positive)
