"""The server raises its soft limit on open files at start (`adapters.process_limits`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")

_CHILD = """
import json, resource
from adapters.process_limits import OPEN_FILES_WANTED, raise_open_file_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
answered = raise_open_file_limit()
again = raise_open_file_limit()
print(json.dumps({"answered": answered, "again": again, "hard": hard,
                  "now": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                  "wanted": OPEN_FILES_WANTED}))
"""


def test_a_low_soft_limit_is_raised_towards_the_hard_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    hard = seen["hard"]
    expected = seen["wanted"] if hard == resource.RLIM_INFINITY else min(hard, seen["wanted"])
    assert seen["now"] == seen["answered"] == seen["again"] == expected
