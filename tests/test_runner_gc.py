"""The runner keeps what its warm-up imported out of later collections, and still frees what a job brings.

Its start frees the reference's code with a collection before the candidate's code arrives; with torch loaded a full
collection walked every object the imports made. Run in a fresh process: the warm-up freezes its process's objects.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent('''
    import gc, weakref
    from cudagym.judge.split.runner import _Server

    server = _Server.__new__(_Server)
    server.warm()
    frozen = gc.get_freeze_count()

    class Reference:  # made after the warm-up, as a job's reference module is, and left in a cycle
        pass

    ref = Reference()
    ref.me = ref
    gone = weakref.ref(Reference)
    del Reference, ref
    collected = gc.collect()
    print(frozen, collected, gone() is None)
''')


def test_the_warm_up_freezes_its_imports_and_a_later_cycle_is_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    frozen, collected, gone = done.stdout.split()
    assert int(frozen) > 100_000, done.stdout  # torch, its dynamo and the harness: kept out of the job's collection
    assert int(collected) > 0 and gone == "True", done.stdout  # the job's own garbage is freed as before
