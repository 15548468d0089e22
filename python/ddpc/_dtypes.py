"""ONNX element types (TensorProto.DataType numbers) and their numpy dtypes."""

from __future__ import annotations

import numpy as np

# BFLOAT16 has no numpy dtype: its values travel as their raw uint16 bits.
ONNX_TO_NUMPY: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
    16: np.dtype(np.uint16),
}

ONNX_NAMES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16 (as uint16 bits)",
}

NUMPY_TO_ONNX: dict[np.dtype, int] = {
    dt: num for num, dt in ONNX_TO_NUMPY.items() if num != 16
}


def numpy_dtype(onnx_dtype: int) -> np.dtype:
    """The numpy dtype that holds ONNX type ``onnx_dtype``.

    Raises:
        ValueError: for an ONNX type the ddpc ABI does not use.
    """
    try:
        return ONNX_TO_NUMPY[onnx_dtype]
    except KeyError:
        raise ValueError(f"ONNX dtype {onnx_dtype} is not supported") from None


def onnx_dtype(dtype: np.dtype) -> int:
    """The ONNX type number of numpy ``dtype``.

    Raises:
        ValueError: for a numpy dtype with no ONNX counterpart in ddpc.
    """
    try:
        return NUMPY_TO_ONNX[np.dtype(dtype).newbyteorder("=")]
    except KeyError:
        raise ValueError(f"numpy dtype {np.dtype(dtype)} is not supported") from None
