"""torch_fallback: the forward must compute in the candidate's own kernels, not in torch.

Run time (the authority): every audited candidate forward runs under a ``TorchDispatchMode`` that records
each operator torch dispatches, from Python or from the candidate's C++ (``at::``/``torch::`` calls go
through the same dispatcher). Allowed:

- allocation: ``empty*``, ``new_empty*`` and constant fills (``zeros``, ``ones``, ``full``, ``fill_``,
  ``zero_``): a fill is a memset; it computes nothing from the inputs, and an output left at zero still
  has to match the reference;
- views and metadata: ``view``, ``reshape`` (as view), ``permute``, ``transpose``, ``expand``, ``select``,
  ``slice``, ``unsqueeze``, ``squeeze``, ``as_strided``, ``split``, ``detach``, sizes and strides;
- copies and conversions: ``clone``/``contiguous``, ``copy_``, ``_to_copy`` (``.to()``, ``.float()``).
  They move data without computing on it; a precision drop through a cast is the ``precision`` guard's;
- reading a scalar (``.item()``) and stream bookkeeping (``record_stream``);
- operators outside torch's own namespaces: the candidate's custom ops (``TORCH_LIBRARY``).

Everything else in ``aten``/``prims`` (and torchvision's ops) is a fallback. cuBLAS/cuDNN called from the
candidate's C++ dispatch nothing and are allowed; the ``decoy_kernels`` guard checks the kernel mix.

Static (fast feedback with file:line): in the functions of ``model_new.py`` other than ``__init__`` (module
code and ``__init__`` run once, before the weights are copied in, and may build buffers the reference also
has), calls into ``torch.nn.functional``, torch's compute functions (``torch.matmul``, ``torch.relu``, ...),
``torch.ops.aten``, ``torch.compile`` / ``torch.jit`` and the ``@`` operator; in C++ (kernel files and
``load_inline`` strings), ``torch::`` /
``at::`` calls other than allocation, stream and device helpers, and tensor compute methods.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.source_scan import PYTHON_FILE, all_cpp, cpp_calls, parse_python, python_calls

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext, ForwardCall

ALLOWED_ATEN = frozenset({
    # allocation and constant fills
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
    "fill", "fill_", "zero_", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "resize_",
    # views and metadata
    "view", "_unsafe_view", "_reshape_alias", "reshape", "as_strided", "alias", "detach", "detach_",
    "t", "transpose", "permute", "expand", "expand_as", "select", "slice", "narrow", "unsqueeze",
    "squeeze", "split", "split_with_sizes", "unbind", "chunk", "unflatten", "flatten", "view_as",
    "diagonal", "unfold", "movedim", "view_as_real", "view_as_complex", "real", "imag", "_conj",
    "_neg_view", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
    "_has_compatible_shallow_copy_type",
    # copies and conversions
    "clone", "contiguous", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
    # scalars and streams
    "_local_scalar_dense", "item", "record_stream",
})

# Namespaces of operators that torch (or its domain libraries) implements: calling them is a fallback.
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "torchvision", "torchaudio", "quantized", "_quantized",
                              "mkldnn", "inductor", "_c10d_functional", "c10d"})

# torch.* callables a solution may use (allocation, types, devices, streams, build and custom-op APIs).
ALLOWED_TORCH_PREFIXES = (
    "torch.empty", "torch.zeros", "torch.ones", "torch.full", "torch.tensor", "torch.as_tensor",
    "torch.from_numpy", "torch.Size", "torch.device", "torch.dtype", "torch.finfo", "torch.iinfo",
    "torch.get_default_dtype", "torch.is_tensor", "torch.no_grad", "torch.inference_mode",
    "torch.cuda.", "torch.utils.cpp_extension.", "torch.library.", "torch.ops.", "torch.nn.Parameter",
    "torch.nn.Module", "torch.nn.init.", "torch.manual_seed", "torch.get_device", "torch.promote_types",
    "torch.Generator", "torch.backends.",
)
BANNED_TORCH_PREFIXES = (
    "torch.nn.functional.", "torch.ops.aten.", "torch.ops.prims.", "torch.compile", "torch.jit.",
    "torch._dynamo", "torch._inductor", "torch.cuda.jiterator",
)

# C++: torch::/at:: calls that allocate or query, and tensor methods that compute.
ALLOWED_CPP_ROOTS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "from_blob", "cuda", "Tensor", "TensorOptions", "Device", "Scalar", "ScalarType", "IntArrayRef",
    "MemoryFormat", "device", "dtype", "elementSize", "typeMetaToScalarType", "DeviceGuard",
    "OptionalDeviceGuard", "TensorArg", "checkAllSameGPU", "checkContiguous", "globalContext",
    "getCurrentCUDAStream", "get_num_threads", "kFloat", "kHalf", "kBFloat16", "kInt", "kLong",
})
COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "relu", "relu_", "sigmoid", "tanh", "softmax",
    "log_softmax", "gelu", "silu", "sum", "mean", "var", "std", "norm", "cumsum", "cumprod", "prod",
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "pow", "sqrt", "rsqrt", "exp", "clamp",
    "clamp_", "conv1d", "conv2d", "conv3d", "conv_transpose2d", "layer_norm", "batch_norm", "group_norm",
    "einsum", "softplus", "logsumexp", "amax", "amin", "argmax", "argmin", "topk", "sort", "masked_fill",
    "index_select", "gather", "scatter_add", "matmul_out", "addcmul", "lerp", "erf", "sin", "cos",
})


@register
class TorchFallback(Guard):
    """Forward computed by torch (aten operators) instead of the candidate's kernels."""

    name = "torch_fallback"
    summary = "ModelNew.forward must compute in your kernels: torch/F/aten compute is not allowed"
    order = 90  # innermost forward scope: other guards' bookkeeping must not be audited

    def check_sources(self, ctx: EvalContext) -> None:
        """Flag torch compute calls in model_new.py and in the C++ sources."""
        findings = list(_python_findings(ctx.sources.get(PYTHON_FILE, "")))
        findings += list(_cpp_findings(ctx.sources))
        self.flag_findings(ctx, findings, prefix="torch computes in the solution: ")

    def forward_scope(self, ctx: EvalContext, call: ForwardCall) -> AbstractContextManager[Any] | None:
        """Record the operators the forward dispatches."""
        return _audit(ctx, call, self.name)


@contextmanager
def _audit(ctx: EvalContext, call: ForwardCall, guard: str) -> Iterator[None]:
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, None] = {}

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            namespace = getattr(func, "namespace", "")
            base = func._schema.name.split("::")[-1]
            if namespace in TORCH_NAMESPACES and base not in ALLOWED_ATEN:
                seen.setdefault(f"{namespace}.{base}", None)
            return func(*args, **(kwargs or {}))

    with _Recorder():
        yield
    if seen:
        ops = ", ".join(list(seen)[:10])
        ctx.flag(guard, f"the forward ran torch operators: {ops}; compute must run in your own kernels "
                 "(allowed: allocation, views, copies)")


def _python_findings(text: str) -> Iterator[str]:
    tree = parse_python(text)
    if tree is None:
        return
    runtime_nodes = _nodes_in_run_time_code(tree)
    for call in python_calls(tree):
        if id(call.node) not in runtime_nodes:
            continue
        name = call.name
        if name.startswith(BANNED_TORCH_PREFIXES):
            yield f"{PYTHON_FILE}:{call.line} calls {name}"
        elif name.startswith("torch.") and not name.startswith(ALLOWED_TORCH_PREFIXES):
            last = name.rsplit(".", 1)[-1]
            if last[:1].islower():  # torch.matmul, torch.nn.functional...; classes (torch.nn.Linear) build modules
                yield f"{PYTHON_FILE}:{call.line} calls {name}"
    for node in ast.walk(tree):
        if id(node) in runtime_nodes and isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(
                node.op, ast.MatMult):
            yield f"{PYTHON_FILE}:{node.lineno} uses the @ operator (torch.matmul)"


def _nodes_in_run_time_code(tree: ast.Module) -> set[int]:
    """Nodes inside functions other than ``__init__``: the code a forward can run.

    Module-level code and ``__init__`` run once, before the state_dict is copied in; building a buffer
    there with torch (``torch.tril(torch.ones(n, n))`` for a causal mask the reference also registers) is
    how a solution matches the reference's state_dict, not a fallback.
    """
    found: set[int] = set()

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside = node.name != "__init__"
        elif isinstance(node, ast.Lambda):
            inside = True
        if inside:
            found.add(id(node))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return found


def _cpp_findings(sources: dict[str, str]) -> Iterator[str]:
    for path, first_line, text in all_cpp(sources):
        for call in cpp_calls(text):
            line = first_line + call.line - 1
            if call.namespace:
                root = call.name.split("::")[0]
                if root not in ALLOWED_CPP_ROOTS:
                    yield f"{path}:{line} calls {call.namespace}::{call.name}"
            elif call.name in COMPUTE_METHODS:
                yield f"{path}:{line} calls the tensor method .{call.name}()"
