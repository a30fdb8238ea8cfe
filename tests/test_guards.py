"""The suite's own guards (tests/conftest.py): a test that needs aiayn's kernels or a real model file is skipped,
saying why, only where the machine cannot have them (no C++ compiler; a file the registry could not give); a kernel
build that fails where a compiler is, or either missing under CI, is a failed test: a red ``bash .ci/run``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.kernels import compiler

TESTS = Path(__file__).resolve().parent
KERNEL_TEST = "tests/kernels/test_quant.py::test_the_kernel_equals_its_reference_on_each_simd_path[-None]"
REAL_FILE_TEST = "tests/test_readme.py::test_the_real_model_block_runs_as_written_and_says_what_a_reader_accepts"


@pytest.mark.parametrize(("test", "env", "outcome", "says"), [
    pytest.param(KERNEL_TEST, {"AIAYN_KERNEL_FLAGS": "-fno-such-flag-at-all"}, "error", "must load here",
                 marks=pytest.mark.skipif(compiler() is None, reason="no C++ compiler here to fail a build with")),
    (KERNEL_TEST, {"PATH": "", "CXX": ""}, "skipped", "install g++"),
    (KERNEL_TEST, {"PATH": "", "CXX": "", "CI": "true"}, "error", "no C++ compiler"),
    (REAL_FILE_TEST, {"AIAYN_SMOLLM2": "/nowhere/smollm2.gguf"}, "skipped", "make smollm2"),
    (REAL_FILE_TEST, {"AIAYN_SMOLLM2": "/nowhere/smollm2.gguf", "CI": "true"}, "error", "make smollm2"),
], ids=["build-fails", "no-compiler", "no-compiler-under-ci", "no-file", "no-file-under-ci"])
def test_a_missing_kernel_or_file_skips_only_where_the_machine_cannot_have_it(test, env, outcome, says, tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env = {**base, "AIAYN_CACHE": str(tmp_path), **env}
    if env["PATH"] == "":
        env["PATH"] = str(tmp_path)  # no compiler on it
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rsf", test],
                          capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=300)
    summary = done.stdout.strip().splitlines()[-1]
    assert f"1 {outcome}" in summary and says in done.stdout, done.stdout[-3000:]
    assert done.returncode == (1 if outcome == "error" else 0)  # an error at setup: a red run
