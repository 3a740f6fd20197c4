"""Compiles every kernel te-compile --emit=cuda prints for each spec with
nvcc for sm_90a; fails on the first error or warning, with the log. Kernels
that differ only in their name and source location (the same op in several
layers) are compiled once. Arguments after te-compile that start with "--"
are te-compile options for every spec (--recipe=block, --inference)."""
import concurrent.futures, os, re, subprocess, sys, tempfile

nvcc, te_compile = sys.argv[1], sys.argv[2]
options = [a for a in sys.argv[3:] if a.startswith("--")]
specs = [a for a in sys.argv[3:] if not a.startswith("--")]
marker = "// ===== kernel "
with tempfile.TemporaryDirectory() as tmp:
    sources, seen = [], set()
    for spec in specs:
        out = subprocess.run([te_compile, spec, "--emit=cuda"] + options,
                             check=True, capture_output=True,
                             text=True).stdout
        for chunk in out.split(marker)[1:]:
            name = chunk.split(":")[0]
            source = chunk.split("\n", 2)[2]
            key = re.sub(r"^// K: te\.\S+ at .*$", "", source.replace(name, "K"),
                         flags=re.M)
            if key in seen:
                continue
            seen.add(key)
            path = os.path.join(tmp, name + ".cu")
            with open(path, "w") as f:
                f.write(source)
            sources.append(path)

    def compile_one(path):
        result = subprocess.run(
            [nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-cubin",
             "-Werror", "all-warnings", "-o", path + ".cubin", path],
            capture_output=True, text=True)
        return path, result.returncode, result.stdout + result.stderr

    failures = 0
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for path, rc, log in pool.map(compile_one, sources):
            if rc != 0:
                failures += 1
                print(f"FAIL {os.path.basename(path)}\n{log}")
    print(f"{len(sources) - failures}/{len(sources)} kernels compiled")
    sys.exit(1 if failures or not sources else 0)
