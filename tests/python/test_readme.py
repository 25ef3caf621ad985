"""README.md's "Training from Python" loop, run as written under `elastra run --nproc 2`."""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import SOURCE, Job  # noqa: E402


def readme_loop() -> str:
    with open(os.path.join(SOURCE, "README.md")) as f:
        text = f.read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if b.startswith("# example: python-loop")]
    assert len(blocks) == 1, "README.md has no (or several) python-loop examples"
    return blocks[0]


def test_readme_loop_runs_as_written():
    with Job(2, ["{dir}/loop.py"], files={"loop.py": readme_loop()}) as job:
        assert job.wait(120) == 0, job.log()
        # 100 steps at dp=2, 32 samples each, of a module bound with elastra.torch.bind.
        assert "trained 100 steps at Layout(dp=2, pp=1, tp=1), cursor 3200" in job.log(), job.log()
