"""Build the product's wheel as a user would, install it alone into a fresh virtualenv, try it.

``./dev test`` runs this after the suite. It builds an sdist and, from it, a wheel with
the standard frontend (``python -m build``), checks that the wheel installs
``streamwal`` and nothing else at the top level, ships ``py.typed`` and the generated
gRPC modules, and holds nothing of the lab (the developer tools are the other
distribution, ``streamwal-lab`` in ``lab/``: no ``streamwal_lab`` or ``streamwal/tools``
module, no Maven pom, no Go builder manifest) and no module that imports a test runner
(read with :mod:`ast`), and builds the lab's wheel to check that those went there. It
installs the wheel with no extra and without the lab into a new virtualenv and runs
``streamwal --help``, ``streamwal verify --help``, ``streamwal trace --help`` and a
script that opens a channel on the in-process backend through the public API (the
library needs no extra); checks that ``streamwal serve`` names the extra it lacks and
``streamwal stack up`` the lab; then adds the ``node`` extra, runs ``streamwal serve
--help`` and imports every module of the installed package, checking that none loads the
lab. All from a folder outside the repository. Prints the wheel's size, the install
times and the top-level names.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = (
    "streamwal/py.typed",
    "streamwal/tso/proto/tso_pb2.py",
    "streamwal/tso/proto/tso_pb2_grpc.py",
    "streamwal/node/proto/streaming_pb2.py",
    "streamwal/node/proto/streaming_pb2_grpc.py",
    "streamwal/adaptors/pulsar/__init__.py",
    "streamwal/adaptors/testing.py",
    "streamwal/verify/cli.py",
    "streamwal/node/trace/query.py",
)
#: what belongs to the lab and must not be in the product's wheel
LAB_PREFIXES = ("streamwal_lab/", "streamwal/tools/")
LAB_FILES = ("pulsar-standalone-pom.xml", "otelcol-builder.yaml")
#: test runners a user's install lacks: no module of the wheel may import them
TEST_ONLY = ("pytest", "_pytest", "pytest_asyncio", "hypothesis")

SMOKE = """
import asyncio

import streamwal
from streamwal.adaptors.memory import MemoryOpener
from streamwal.tso import MemoryStore


async def main() -> None:
    opener = MemoryOpener()
    config = streamwal.TsoConfig()
    async with streamwal.InProcessTSO(config, store=MemoryStore()) as tso:
        async with await streamwal.open_wal(opener, "smoke", tso.allocator(), 1) as wal:
            sent = await wal.append(streamwal.MutableMessage(streamwal.MessageType.INSERT, b"hi"))
        async with await streamwal.open_read_only(opener, "smoke") as reader:
            policy = streamwal.DeliveryPolicy.start_from(sent.message_id)
            scanner = await reader.read(policy)
            first = await anext(scanner)
            await scanner.close()
    assert (first.type, first.payload) == (streamwal.MessageType.INSERT, b"hi"), first
    print("opened, appended, read back:", first.message_id, "with streamwal", streamwal.__version__)


asyncio.run(main())
"""

# Imports every module of the installed package, in the venv, and fails if one loads
# the lab. A module that needs what this install lacks is listed as skipped, unless what
# it lacks is the lab.
IMPORT_ALL = """
import importlib
import pkgutil
import sys

import streamwal

skipped, failed = [], []
for info in pkgutil.walk_packages(streamwal.__path__, "streamwal."):
    if "_pb2" in info.name:
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        (failed if top in ("streamwal", "streamwal_lab") else skipped).append(
            f"{info.name} ({exc.name})"
        )
lab = sorted(m for m in sys.modules if m.split(".")[0] == "streamwal_lab")
if failed or lab:
    sys.exit(f"product modules need the lab or a missing module: {failed}; loaded: {lab}")
loaded = sum(1 for m in sys.modules if m.split(".")[0] == "streamwal")
print(f"imported {loaded} streamwal modules, none of the lab; skipped: {skipped or 'none'}")
"""


def run(cmd: list[str], cwd: Path) -> str:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stdout.write(out.stdout)
        sys.stderr.write(out.stderr)
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}")
    return out.stdout


def runner_imports(zf: zipfile.ZipFile) -> list[str]:
    """``file:line: module`` for each import of a test runner in the wheel's modules."""
    found = []
    for name in zf.namelist():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(zf.read(name), filename=name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            else:
                continue
            found += [f"{name}:{node.lineno}: {m}" for m in modules if m.split(".")[0] in TEST_ONLY]
    return found


def top_level_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        runners = runner_imports(zf)
    if runners:
        raise SystemExit(f"the product's wheel imports a test runner: {runners}")
    missing = [r for r in REQUIRED if r not in names]
    if missing:
        raise SystemExit(f"the wheel lacks {missing}")
    lab = [
        n
        for n in names
        if n.startswith(LAB_PREFIXES) or n.endswith(".xml") or n.rsplit("/", 1)[-1] in LAB_FILES
    ]
    if lab:
        raise SystemExit(f"the product's wheel holds the lab's files: {lab}")
    return sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})


def check_lab_wheel(tmp: Path) -> None:
    """The lab's wheel carries what left the product: the stack's pom and manifest."""
    out = tmp / "lab-dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT / "lab")], tmp)
    (wheel,) = out.glob("streamwal_lab-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    needed = {f"streamwal_lab/stack/{name}" for name in LAB_FILES}
    needed |= {"streamwal_lab/stack/cli.py", "streamwal_lab/bench/cli.py"}
    if not needed <= names:
        raise SystemExit(f"the lab's wheel lacks {sorted(needed - names)}")
    tops = sorted({n.split("/")[0] for n in names if ".dist-info" not in n.split("/")[0]})
    if tops != ["streamwal_lab"]:
        raise SystemExit(f"the lab's wheel installs {tops}, not only streamwal_lab")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="streamwal-wheel-") as tmp_name:
        tmp = Path(tmp_name)
        run([sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(ROOT)], tmp)
        (wheel,) = (tmp / "dist").glob("streamwal-*.whl")
        tops = top_level_names(wheel)
        if tops != ["streamwal"]:
            raise SystemExit(f"the wheel installs {tops}, not only streamwal")
        check_lab_wheel(tmp)

        env = tmp / "venv"
        venv.create(env, with_pip=True)
        py = env / "bin" / "python"
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        started = time.perf_counter()
        run([*pip, str(wheel)], tmp)
        core_s = time.perf_counter() - started

        exe = env / "bin" / "streamwal"
        run([str(exe), "--help"], tmp)
        version = run([str(exe), "--version"], tmp).strip()
        run([str(exe), "verify", "--help"], tmp)
        run([str(exe), "trace", "--help"], tmp)
        (tmp / "smoke.py").write_text(SMOKE)
        print(run([str(py), "smoke.py"], tmp).strip())
        refused = subprocess.run(
            [str(exe), "serve", "--help"], cwd=tmp, capture_output=True, text=True, check=False
        )
        if refused.returncode != 2 or "pip install 'streamwal[node]'" not in refused.stderr:
            raise SystemExit(f"serve without the node extra: {refused.stderr or refused.stdout}")
        no_lab = subprocess.run(
            [str(exe), "stack", "up"], cwd=tmp, capture_output=True, text=True, check=False
        )
        if (
            no_lab.returncode == 0
            or "pip install streamwal-lab" not in no_lab.stderr
            or "Traceback" in no_lab.stderr
        ):
            raise SystemExit(f"stack up without the lab: {no_lab.stderr or no_lab.stdout}")
        print(no_lab.stderr.strip())

        started = time.perf_counter()
        run([*pip, f"{wheel}[node]"], tmp)
        node_s = time.perf_counter() - started
        run([str(exe), "serve", "--help"], tmp)
        (tmp / "import_all.py").write_text(IMPORT_ALL)
        print(run([str(py), "import_all.py"], tmp).strip())

        print(
            f"wheel check passed: {wheel.name}, {wheel.stat().st_size / 1024:.0f} KiB; "
            f"installed into a fresh venv in {core_s:.1f} s, "
            f"the node extra in {node_s:.1f} s more; "
            f"top-level names: {', '.join(tops)}; {version}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
