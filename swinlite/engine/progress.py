"""Progress display: a tqdm bar on a terminal, plain periodic lines in logs and pipes."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Shows loss, learning rate and images/s for one epoch, by optimizer steps.

    Args:
        total: optimizer steps in the epoch.
        desc: prefix, e.g. ``"epoch 3/30"``.
        enabled: False on non-zero ranks (prints nothing).
        log_interval: steps between plain lines when stdout is not a terminal.
        done: steps of the epoch already taken (a run resumed from a step checkpoint).
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, log_interval: int = 50, done: int = 0) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled
        self.log_interval = max(1, log_interval)
        show = enabled and _tty()
        self.bar = tqdm(total=total, initial=done, desc=desc, dynamic_ncols=True, leave=False) if show else None
        self.start = time.perf_counter()
        self.images = 0

    def update(self, step: int, images: int, loss: float, lr: float) -> None:
        """Record the ``images`` of optimizer step ``step`` (1-based within the epoch; under torchrun every process's),
        its mean ``loss``."""
        self.images += images
        if not self.enabled:
            return
        rate = self.images / max(time.perf_counter() - self.start, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", img_s=f"{rate:.0f}", refresh=False)
            self.bar.update(1)
        elif step % self.log_interval == 0 or step == self.total:
            print(f"{self.desc} step {step}/{self.total} loss {loss:.4f} lr {lr:.2e} {rate:.0f} img/s", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _tty() -> bool:
    return sys.stdout.isatty()
