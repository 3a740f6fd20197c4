"""Writes the norm backward kernels te-compile emits for some layer specs
(one kernel a norm: dx, the residual add, dgamma/dbeta), with their launch
configurations from plan.json, as an include for norm_bwd_fused.cu (compiled
with -DNORM_BWD_EMITTED='"FILE"'), and copies their NVRTC cubins into
CUBIN_DIR: the generated kernels verbatim, checked and timed on the GPU,
compiled by nvcc and launched with <<<>>>, and as te-compile built them,
launched through the driver's cuLaunchKernel as the executor does.

python3 emit_norm_bwd.py TE_COMPILE OUT.inc CUBIN_DIR SPEC...

See emit_norm_bwd_specs.sh for the specs."""
import json, os, re, shutil, subprocess, sys, tempfile

te_compile, out_path, cubin_dir, specs = (sys.argv[1], sys.argv[2],
                                          sys.argv[3], sys.argv[4:])
types = {"tj_bf16": "BF16", "tj_f16": "F16", "float": "F32"}
os.makedirs(cubin_dir, exist_ok=True)
sources, entries, seen = [], [], set()


def add_entry(name, cubin, variant, shape, ln, add, roles, dtype, zc, grid,
              block, scratch_bytes, args, scratch):
    flag = lambda b: "true" if b else "false"
    entries.append(
        '  {"%s", "%s", "%s", %s, %s, DType::%s, %s, %s, %s, %s, %s, %s, %s,'
        "\n   dim3(%d, %d, %d), dim3(%d, %d, %d), %d,\n"
        "   [](const KernelArgs &a) { %s<<<dim3(%d, %d, %d), "
        "dim3(%d, %d, %d)>>>(%s); },\n   {%s}},"
        % (name, cubin, variant, shape.group(1), shape.group(2), dtype,
           flag(ln), flag(add), flag("dx" in roles), flag("sum" in roles),
           flag("dgamma" in roles), flag("dbeta" in roles), flag(zc), *grid,
           *block, scratch_bytes, name, *grid, *block, ", ".join(args),
           ", ".join('"%s"' % r for r in roles) +
           (', "scratch"' if scratch else "")))


with tempfile.TemporaryDirectory() as tmp:
    for spec in specs:
        out = os.path.join(tmp, os.path.basename(spec))
        env = dict(os.environ, TEJIT_CACHE_DIR=os.path.join(tmp, "cache"))
        subprocess.run([te_compile, spec, "-o", out], check=True, env=env,
                       capture_output=True)
        plan = json.load(open(os.path.join(out, "plan.json")))
        for function in plan["functions"]:
            for step in function["steps"]:
                if step.get("kind") != "kernel" or "norm_bwd" not in step[
                        "name"] and "rmsnorm_bwd" not in step["name"] and \
                        "layernorm_bwd" not in step["name"]:
                    continue
                name = "emitted_" + step["name"]
                source = open(os.path.join(out, "kernels", step["name"] +
                                           ".cu")).read().replace(
                                               step["name"], name)
                kernel = source[source.index("// " + name + ":"):]
                key = re.sub(r"^// .* at loc.*$", "",
                             kernel.replace(name, "K"), flags=re.M)
                if key in seen:
                    continue
                seen.add(key)
                cubin = step["name"] + ".cubin"
                shutil.copy(os.path.join(out, "kernels", cubin),
                            os.path.join(cubin_dir, cubin))
                start = kernel.index(name + "(")
                signature = kernel[start:kernel.index(")", start)]
                params = re.findall(r"(const )?(\w+) \*(?:__restrict__ )?(\w+)",
                                    signature)
                inputs = [p for p in params if p[0]]
                outputs = [p for p in params
                           if not p[0] and p[2] != "tj_scratch"]
                scratch = any(p[2] == "tj_scratch" for p in params)
                shape = re.search(r"kRows = (\d+), kCols = (\d+)", kernel)
                ln = "float mu, rs;" in kernel
                add = "addend[kChunks]" in kernel
                zc = "(1.f + gamma_k[i])" in kernel
                roles = ["dy", "x"] + (["mean"] if ln else []) + \
                    ["rsigma", "gamma"] + (["addend"] if add else [])
                sums = []
                for p in outputs:
                    if re.search(r"tj_store\(%s \+ row \* kCols \+ col, "
                                 r"sum_out\)" % p[2], kernel):
                        roles.append("sum")
                    elif re.search(r"tj_store\(%s \+ row \* kCols \+ col, "
                                   r"dx_out\)" % p[2], kernel):
                        roles.append("dx")
                    else:
                        roles.append(["dgamma", "dbeta"][len(sums)])
                        sums.append(p)
                dtype = types[inputs[0][1]]
                args = []
                for role, p in zip(roles, inputs + outputs):
                    const = "const " if p[0] else ""
                    args.append("(%s%s *)a.%s" % (const, p[1], role))
                if scratch:
                    args.append("a.scratch")
                grid, block = step["grid"], step["block"]
                variants = [("", source)]
                if re.search(r"(quickstart|llama)_backward_norm_bwd_add_0_dx$",
                             step["name"]):
                    # Timed beside the kernel: its pointers not __restrict__
                    # (plain loads; gamma read again after the reduction),
                    # and that with the rows' words hidden from the optimizer
                    # across the reduction, as the template's measured kernel.
                    head = source.index(name + "(")
                    body = source.index(") {", head)
                    plain = (source[:head] +
                             source[head:body].replace("__restrict__ ", "") +
                             source[body:])
                    variants.append(("norestrict", plain))
                    at = plain.index("    const int " + "row = base + rg;")
                    variants.append(("norestrict_hide", plain[:at] + """\
    #pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      tj_u32 dy_w[kVec / 2], x_w[kVec / 2];
      memcpy(dy_w, &cur.dy[k], sizeof dy_w);
      memcpy(x_w, &cur.x[k], sizeof x_w);
      #pragma unroll
      for (int j = 0; j < kVec / 2; ++j) asm volatile("" : "+r"(dy_w[j]), "+r"(x_w[j]));
      memcpy(&cur.dy[k], dy_w, sizeof dy_w);
      memcpy(&cur.x[k], x_w, sizeof x_w);
    }
""" + plain[at:]))
                for variant, text in variants:
                    vname = name + ("_" + variant if variant else "")
                    sources.append(text.replace(name, vname))
                    add_entry(vname, cubin if not variant else "", variant,
                              shape, ln, add, roles, dtype, zc, grid, block,
                              step.get("scratch_bytes", 0), args, scratch)

with open(out_path, "w") as f:
    f.write("// Generated by emit_norm_bwd.py from: %s\n" % " ".join(
        os.path.basename(s) for s in specs))
    f.write("// clang-format off\n")
    for source in sources:
        f.write(source + "\n")
    f.write("static const EmittedNormBwd kEmitted[] = {\n")
    f.write("\n".join(entries) + "\n};\n")
    f.write("// clang-format on\n")
print("%d kernels -> %s" % (len(entries), out_path))
