"""te IR as text, for the small programs tejit.pytorch writes itself (the
casts, cross entropy, MoE permutation, the router: its _*_ir.py files).
Part of the core package, which imports no PyTorch, so those files stay
loadable without it (tests/python/torch_free.py)."""


def tensor_type(shape, element):
    """`tensor<AxBxELEMENT>`."""
    return f"tensor<{'x'.join(str(d) for d in shape)}x{element}>"


def f64(value):
    """An f64 literal MLIR reads back exactly (it needs a point)."""
    return f"{float(value):.17e}"


def _ssa(value):
    return value if value.startswith("%") else f"%{value}"


def function(name, arguments, body, results):
    """A func.func named `name`. `arguments`: (name, type) pairs, the
    argument's SSA name being its te.name, or (ssa, type, te.name);
    `body`: op lines; `results`: (ssa, type, te.name). SSA names may come
    with or without their `%`."""
    entries = [(_ssa(a[0]), a[1], a[0].lstrip("%")) if len(a) == 2
               else (_ssa(a[0]), a[1], a[2]) for a in arguments]
    signature = ", ".join(f'{v}: {t} {{te.name = "{n}"}}'
                          for v, t, n in entries)
    outputs = ", ".join(f'{t} {{te.name = "{n}"}}' for _, t, n in results)
    lines = [f"func.func @{name}({signature}) -> ({outputs}) {{"]
    lines += [f"  {line}" for line in body]
    lines.append(f"  return {', '.join(_ssa(v) for v, _, _ in results)} : "
                 f"{', '.join(t for _, t, _ in results)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
