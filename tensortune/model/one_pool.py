"""One thread pool: TVM's parallel loops run on torch's OpenMP threads.

A build that calls torch has two pools on the same cores: TVM's own (its threads poll for work
after each kernel, then sleep, and must be woken for the next) and torch's OpenMP pool
(oneDNN, MKL, ATen). Generated CPU kernels start their parallel loops through two functions,
`__TVMBackendParallelLaunch` and `__TVMBackendParallelBarrier`, which tvm-ffi fills in each
module as it loads, from context symbols a process may register (`TVMFFIEnvModRegisterContextSymbol`,
the later registration winning). Here both are a few lines of OpenMP, compiled once into a
cache folder against torch's own libgomp, so that TVM's loops run on torch's threads: one pool
takes the cores, and it is the one torch's operators use next.

`use_torch_pool()` registers them: after `import tvm` and before the kernels load (modules
loaded before keep TVM's pool). It needs a C compiler with OpenMP (gcc), as exporting kernels
does; without one it says why and TVM's pool stays.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from pathlib import Path

SOURCE = r"""
#include <omp.h>
typedef struct { void* sync_handle; int num_task; } Env;
typedef int (*Lambda)(int task_id, Env* env, void* cdata);

int tensortune_parallel_launch(Lambda body, void* cdata, int num_task) {
  int failed = 0;
  int threads = num_task > 0 ? num_task : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    Env env = {0, omp_get_num_threads()};
    if (body(omp_get_thread_num(), &env, cdata) != 0) {
#pragma omp atomic write
      failed = -1;
    }
  }
  return failed;
}

int tensortune_parallel_barrier(int task_id, Env* env) {
#pragma omp barrier
  return 0;
}
"""

_registered: list[str] = []  # the reason it is not, once tried; empty: not tried yet


def use_torch_pool() -> str:
    """Register the OpenMP launch and barrier for the modules loaded from now on in this
    process; "" if done (now or before), else why TVM's own pool stays."""
    if _registered:
        return _registered[0]
    try:
        library = _load(_compiled())
        ffi = ctypes.CDLL(_tvm_ffi_library(), mode=ctypes.RTLD_GLOBAL)
        ffi.TVMFFIEnvModRegisterContextSymbol.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        for name in ("ParallelLaunch", "ParallelBarrier"):
            symbol = ctypes.cast(getattr(library, f"tensortune_{name.lower().replace('parallel', 'parallel_')}"),
                                 ctypes.c_void_p)
            if ffi.TVMFFIEnvModRegisterContextSymbol(f"__TVMBackend{name}".encode(), symbol) != 0:
                raise OSError(f"tvm-ffi refused __TVMBackend{name}")
        _registered.append("")
    except (OSError, subprocess.CalledProcessError) as err:
        _registered.append(f"TVM's own pool stays: {err}")
    return _registered[0]


def _compiled() -> Path:
    """The shared library, compiled once per source into the cache folder."""
    digest = hashlib.sha1(SOURCE.encode()).hexdigest()[:12]
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tensortune"
    library = folder / f"one_pool-{digest}.so"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        source, objects = folder / f"one_pool-{digest}.c", folder / f"one_pool-{digest}.o"
        source.write_text(SOURCE)
        # compiled with OpenMP, linked without libgomp: its calls resolve to torch's, loaded first
        subprocess.run(["gcc", "-O2", "-fPIC", "-fopenmp", "-c", str(source), "-o", str(objects)], check=True,
                       capture_output=True)
        partial = library.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["gcc", "-shared", str(objects), "-o", str(partial)], check=True, capture_output=True)
        partial.replace(library)  # whole or not at all, whichever process compiles it
    return library


def _load(library: Path):
    import torch

    gomp = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    if not gomp.exists():
        raise OSError(f"torch has no libgomp.so.1 of its own in {gomp.parent}")
    ctypes.CDLL(str(gomp), mode=ctypes.RTLD_GLOBAL)  # the one torch loaded: its symbols for ours
    return ctypes.CDLL(str(library))


def _tvm_ffi_library() -> str:
    import tvm_ffi

    return str(Path(tvm_ffi.__file__).parent / "lib" / "libtvm_ffi.so")
