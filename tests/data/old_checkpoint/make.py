"""Writes the checkpoint file of this folder with the blamejax of commit 59fb466 (before the
options became values): a `blame_batch` run interrupted after two blocks of 8 failures,
with the old keywords. Run it from a checkout of that commit:

    git worktree add /tmp/base 59fb466
    PYTHONPATH=/tmp/base python tests/data/old_checkpoint/make.py tests/data/old_checkpoint
"""

import os
import sys

import jax

import blamejax as bj
from blamejax.estimators import _batch

OLD_KEYWORDS = dict(interval="normal", delta=0.05, first_checkpoint=4, growth=2.0, stop_early=True)


def main(folder: str) -> None:
    mode = "x64" if jax.config.jax_enable_x64 else "x32"
    path = os.path.join(folder, f"refund_{mode}.ckpt.json")
    if os.path.exists(path):
        os.remove(path)
    writes = []
    write = _batch.write_checkpoint
    _batch.write_checkpoint = lambda *a: writes.append(1) or write(*a)
    _batch.interrupted = lambda: len(writes) >= 2  # as if Ctrl-C came during block 2
    try:
        bj.blame_batch(
            bj.demos.refund_pipeline,
            bj.demos.refund_cases(60),
            0,
            checkpoint=path,
            block_size=8,
            **OLD_KEYWORDS,
        )
    except KeyboardInterrupt as stop:
        print(stop)


if __name__ == "__main__":
    main(sys.argv[1])
