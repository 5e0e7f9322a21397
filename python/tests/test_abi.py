"""The ctypes mirror (python/vcattn/_capi.py) against include/vcattn.h: the
structs field by field with their C types, the version (the mirror's, the
CMake project's and the Python package's), and the status codes by name and
value; and docs/api.md's table of config fields against the struct. Any
change to the header that the mirror or that table does not follow fails
here.
Needs nothing but Python (no library, no numpy)."""
import ctypes
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)

from vcattn import _capi  # noqa: E402
from harness import check, finish  # noqa: E402

header = open(os.path.join(here, "..", "..", "include", "vcattn.h")).read()
header = re.sub(r"/\*.*?\*/", "", header, flags=re.S)  # comments out

C_TYPES = {"int": ctypes.c_int, "float": ctypes.c_float, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64}
ENUMS = set(re.findall(r"\}\s*(vcattn_\w+);", header))  # typedef'd names: enums resolve to int


def c_fields(struct):
    body = re.search(r"typedef struct \{([^}]*)\}\s*%s;" % struct, header).group(1)
    fields = []
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = re.match(r"(const\s+)?(\w+)\s+(.*)", decl)
        ctype, names = m.group(2), m.group(3)
        for name in (n.strip() for n in names.split(",")):
            if name.startswith("*"):
                fields.append((name.lstrip("*").strip(), ctypes.c_void_p))
            else:
                fields.append((name, C_TYPES.get(ctype, ctypes.c_int if ctype in ENUMS else None)))
    return fields


for struct, mirror in (("vcattn_config", _capi.Config), ("vcattn_tensor", _capi.Tensor), ("vcattn_rope", _capi.Rope)):
    want = c_fields(struct)
    got = [(n, t) for n, t in mirror._fields_]
    check(len(want) == len(got), "%s: the header has %d fields, the mirror %d" % (struct, len(want), len(got)))
    for (wn, wt), (gn, gt) in zip(want, got):
        check(wn == gn and wt is gt, "%s: header field %s (%s), mirror %s (%s)" % (
            struct, wn, getattr(wt, "__name__", wt), gn, gt.__name__))

major, minor = (int(re.search(r"#define VCATTN_VERSION_%s (\d+)" % part, header).group(1))
                for part in ("MAJOR", "MINOR"))
check(_capi.VERSION == (major, minor), "the mirror is version %s, the header %d.%d: a struct change bumps both"
      % (".".join(map(str, _capi.VERSION)), major, minor))
root = os.path.join(here, "..", "..")
for name, pattern in (("CMakeLists.txt", r"project\(vcattn VERSION (\d+)\.(\d+)\."),
                      ("pyproject.toml", r'^version = "(\d+)\.(\d+)\.')):
    found = re.search(pattern, open(os.path.join(root, name)).read(), flags=re.M)
    check(found is not None and (int(found.group(1)), int(found.group(2))) == (major, minor),
          "%s's version is not the header's %d.%d" % (name, major, minor))

body = re.search(r"typedef enum \{([^}]*)\}\s*vcattn_status;", header).group(1)
value, statuses = -1, {}
for item in filter(None, (i.strip() for i in body.split(","))):
    name, _, init = item.partition("=")
    value = int(init) if init.strip() else value + 1
    statuses[name.strip()] = value
statuses.pop("VCATTN_STATUS_COUNT")
mirrored = {"VCATTN_" + ("" if s.name == "OK" else "ERR_") + s.name: int(s) for s in _capi.Status}
check(mirrored == statuses, "status codes differ: header %s, mirror %s" % (
    sorted(set(statuses.items()) - set(mirrored.items())), sorted(set(mirrored.items()) - set(statuses.items()))))

# docs/api.md's table of config fields names every field of the header's struct
api_md = open(os.path.join(here, "..", "..", "docs", "api.md")).read()
documented = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", api_md, flags=re.M))
documented = {n for pair in documented for n in pair if n}
missing = [n for n, _ in c_fields("vcattn_config") if n not in documented]
check(not missing, "docs/api.md's config table lacks %s" % missing)

finish("test_abi")
