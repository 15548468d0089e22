#!/usr/bin/env python3
"""The PyTorch reference of the benchmark: eager CPU training of a model
given as a graph description written by bench/run_bench.py (graph.json +
weights.npz, converted from the ONNX file so that this script needs only
torch and numpy and runs under Debian's python3-torch as well as a venv).

The module executes the ONNX graph node by node with torch.nn.functional
(the kernels an nn.Module of the same layers calls), from the same initial
weights. Trainable parameters are the float initializers except
BatchNormalization's running mean/var, which are buffers (training-mode
BatchNorm, PyTorch momentum = 1 - ONNX momentum).

    python torch_ref.py train --graph G.json --weights W.npz --data X.npy \
        --labels Y.npy --batch B --warmup W --steps S --world 1|2 --out R.json \
        --optimizer sgd --lr 0.05 --momentum 0.9

Processes the global batches in order (no shuffle): step s, rank r uses rows
[(s*world + r)*B, (s*world + r + 1)*B), as ddpc's sampler with --no-shuffle
does. One thread per rank; rank r is pinned to CPU r (mod the CPU count).
With --world 2 it starts two ranks (DistributedDataParallel, gloo backend).
Writes JSON: per-step losses (mean over ranks), per-step seconds, version,
and the per-step losses of the same training in float64 (oracle_fp64).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


class OnnxModule(torch.nn.Module):
    """Runs the converted ONNX graph with torch ops."""

    def __init__(self, graph: dict, weights: dict) -> None:
        super().__init__()
        self.graph = graph
        buffers = set(graph["buffers"])
        self.params = torch.nn.ParameterDict()
        self.names = {}  # ONNX name -> ParameterDict/buffer key
        for i, name in enumerate(graph["initializers"]):
            key = f"t{i}"
            self.names[name] = key
            value = torch.from_numpy(np.array(weights[name]))
            if name in buffers or not value.is_floating_point():
                self.register_buffer(key, value)
            else:
                self.params[key] = torch.nn.Parameter(value)
        self.consts = {
            k: torch.from_numpy(np.array(weights[k])) for k in graph["constants"]
        }

    def value(self, env: dict, name: str):
        if name in env:
            return env[name]
        key = self.names[name]
        return self.params[key] if key in self.params else getattr(self, key)

    def forward(self, x):
        env = dict(self.consts)
        env[self.graph["input"]] = x
        for node in self.graph["nodes"]:
            ins = [self.value(env, n) if n else None for n in node["inputs"]]
            env[node["outputs"][0]] = run_op(node["op"], ins, node["attrs"])
        return env[self.graph["output"]]


def run_op(op: str, ins: list, a: dict):
    if op == "Gemm":
        x, w = ins[0], ins[1]
        if a.get("transA", 0):
            x = x.t()
        if not a.get("transB", 0):
            w = w.t()
        y = F.linear(x, w) * a.get("alpha", 1.0)
        return y + a.get("beta", 1.0) * ins[2] if len(ins) > 2 else y
    if op == "MatMul":
        return torch.matmul(ins[0], ins[1])
    if op in ("Add", "Mul", "Div", "Sub"):
        return {"Add": torch.add, "Mul": torch.mul, "Div": torch.div, "Sub": torch.sub}[
            op
        ](*ins)
    if op == "Relu":
        return F.relu(ins[0])
    if op == "Erf":
        return torch.erf(ins[0])
    if op == "Conv":
        pads = a.get("pads", [0, 0, 0, 0])
        assert pads[:2] == pads[2:], "asymmetric pads"
        return F.conv2d(
            ins[0],
            ins[1],
            ins[2] if len(ins) > 2 else None,
            stride=a.get("strides", [1, 1]),
            padding=pads[:2],
            dilation=a.get("dilations", [1, 1]),
            groups=a.get("group", 1),
        )
    if op in ("MaxPool", "AveragePool"):
        pads = a.get("pads", [0, 0, 0, 0])
        assert pads[:2] == pads[2:], "asymmetric pads"
        fn = F.max_pool2d if op == "MaxPool" else F.avg_pool2d
        return fn(ins[0], a["kernel_shape"], a.get("strides", [1, 1]), pads[:2])
    if op == "GlobalAveragePool":
        return ins[0].mean(dim=tuple(range(2, ins[0].dim())), keepdim=True)
    if op == "BatchNormalization":
        x, scale, bias, mean, var = ins
        return F.batch_norm(
            x,
            mean,
            var,
            scale,
            bias,
            training=True,
            momentum=1.0 - a.get("momentum", 0.9),
            eps=a.get("epsilon", 1e-5),
        )
    if op == "LayerNormalization":
        axis = a.get("axis", -1) % ins[0].dim()
        return F.layer_norm(
            ins[0],
            ins[0].shape[axis:],
            ins[1],
            ins[2] if len(ins) > 2 else None,
            a.get("epsilon", 1e-5),
        )
    if op == "Flatten":
        return ins[0].flatten(a.get("axis", 1))
    if op == "Reshape":
        shape = [
            ins[0].shape[i] if s == 0 else int(s) for i, s in enumerate(ins[1].tolist())
        ]
        return ins[0].reshape(shape)
    if op == "Transpose":
        return ins[0].permute(a["perm"])
    if op == "Softmax":
        return torch.softmax(ins[0], a.get("axis", -1))
    if op == "ReduceMean":
        return ins[0].mean(dim=a["axes"], keepdim=bool(a.get("keepdims", 1)))
    raise NotImplementedError(f"torch_ref: op {op}")


def make_optimizer(params, args):
    if args.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
        )
    b1, b2 = (float(v) for v in args.betas.split(","))
    return torch.optim.AdamW(
        params, lr=args.lr, betas=(b1, b2), eps=args.eps, weight_decay=args.weight_decay
    )


def train_rank(args, rank: int, world: int) -> None:
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.manual_seed(0)
    with open(args.graph) as f:
        graph = json.load(f)
    model = OnnxModule(graph, np.load(args.weights))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
        net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        net = model
    opt = make_optimizer(net.parameters(), args)
    x_all = torch.from_numpy(np.load(args.data))
    y_all = torch.from_numpy(np.load(args.labels).astype(np.int64))
    B = args.batch
    losses, secs = [], []
    for step in range(args.warmup + args.steps):
        begin = (step * world + rank) * B
        x, y = x_all[begin : begin + B], y_all[begin : begin + B]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        secs.append(time.perf_counter() - t0)
        value = loss.detach().clone()
        if world > 1:
            torch.distributed.all_reduce(value)
            value /= world
        losses.append(float(value))
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        result = {
            "torch_version": torch.__version__,
            "world": world,
            "batch": B,
            "warmup": args.warmup,
            "losses": losses,
            "step_seconds": secs,
            "threads": torch.get_num_threads(),
            "losses_fp64": oracle_fp64(args, graph, x_all, y_all, world),
        }
        with open(args.out, "w") as f:
            json.dump(result, f)


def oracle_fp64(args, graph: dict, x_all, y_all, world: int) -> list:
    """The same training in float64, in one process: each step runs every
    rank's micro-batch separately (BatchNorm statistics per rank, as in DDP)
    and averages their losses, so the gradient is DDP's. Not timed; the loss
    check uses it to tell float32 rounding (which a badly conditioned run
    amplifies on both sides) from a wrong program."""
    model = OnnxModule(graph, np.load(args.weights)).double()
    opt = make_optimizer(model.parameters(), args)
    B, losses = args.batch, []
    for step in range(args.warmup + args.steps):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for r in range(world):
            begin = (step * world + r) * B
            loss = (
                F.cross_entropy(
                    model(x_all[begin : begin + B].double()), y_all[begin : begin + B]
                )
                / world
            )
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
    return losses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description="PyTorch reference training")
    parser.add_argument("mode", choices=["train", "version"])
    parser.add_argument("--graph")
    parser.add_argument("--weights")
    parser.add_argument("--data")
    parser.add_argument("--labels")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--betas", default="0.9,0.999")
    parser.add_argument("--eps", type=float, default=1e-8)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.mode == "version":
        print(torch.__version__)
        return
    if args.world == 1 or args.rank is not None:
        train_rank(args, args.rank or 0, args.world)
        return
    # Launcher: one process per rank, like torchrun, without its extra agent.
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, *sys.argv[1:], "--rank", str(r)], env=env
        )
        for r in range(args.world)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"torch_ref: rank exit codes {codes}")


if __name__ == "__main__":
    main()
