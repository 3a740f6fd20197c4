# lit configuration for tejit's IR and tool tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "tejit"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tejit_obj_root, "tests", "lit")

config.substitutions.append(("%examples", os.path.join(config.tejit_src_root, "examples")))
llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["te-opt", "te-compile"], [config.tejit_tools_dir])
