"""The package's type annotations as a user's type checker sees them: mypy
on a small program that calls vcattn (numpy arrays, so torch's stubs are
not needed): the result has q's type, return_lse=True gives a pair, and a
misspelt layout is an error. Exits 77 without mypy or numpy."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, finish, skip  # noqa: E402

try:
    import mypy  # noqa: F401
    import numpy  # noqa: F401
except ImportError as e:
    skip("test_types", "needs mypy and numpy (%s)" % e)

PROGRAM = '''
import numpy as np
import vcattn

q = np.zeros((1, 2, 64, 32), np.float32)
out = vcattn.attention(q, q, q)
reveal_type(out)
pair = vcattn.attention(q, q, q, return_lse=True)
reveal_type(pair)
positional = vcattn.attention(q, q, q, "NHD", False, None, True)
reveal_type(positional)
cfg = vcattn.config("vc", hadamard=1)
reveal_type(cfg)
vcattn.attention(q, q, q, tensor_layout="BHSD")
'''

python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "user.py")
    with open(path, "w") as f:
        f.write(PROGRAM)
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.path.join(tmp, "cache"),
                          "--follow-imports=silent", path], capture_output=True, text=True,
                         env=dict(os.environ, MYPYPATH=python))
lines = run.stdout.splitlines()
reveals = [line.split("Revealed type is ", 1)[1].strip('"') for line in lines if "Revealed type is" in line]
check(len(reveals) == 4, "mypy revealed %d types: %s" % (len(reveals), run.stdout[-2000:]))
if len(reveals) == 4:
    check(reveals[0].startswith("numpy.ndarray["), "attention() result: %s" % reveals[0])
    check(reveals[1].startswith("tuple[numpy.ndarray[") and reveals[1].count("numpy.ndarray[") == 2,
          "return_lse=True result: %s" % reveals[1])
    check(reveals[2].startswith("tuple[numpy.ndarray["), "positional return_lse=True result: %s" % reveals[2])
    check(reveals[3] == "vcattn._capi.Config", "config() result: %s" % reveals[3])
errors = [line for line in lines if ": error:" in line]
check(len(errors) == 1 and "user.py:14:" in errors[0] and '"attention"' in errors[0],
      "exactly the misspelt layout is an error: %s" % errors)
finish("test_types")
