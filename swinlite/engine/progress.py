"""Progress display: a tqdm bar on a terminal, plain periodic lines in logs and pipes."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Shows the epoch's running loss (the step's in brackets), learning rate and images/s, by optimizer steps.

    Args:
        total: optimizer steps in the epoch.
        desc: prefix, e.g. ``"epoch 3/30"``.
        enabled: False on non-zero ranks (prints nothing).
        log_interval: steps between plain lines when stdout or stderr is not a terminal (at the epoch's steps it
            divides, and at its last step: where TensorBoard logs too).
        done: steps of the epoch already taken (a run resumed from a step checkpoint).
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, log_interval: int = 50, done: int = 0) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled
        self.log_interval = max(1, log_interval)
        show = enabled and _tty()
        self.bar = tqdm(total=total, initial=done, desc=desc, dynamic_ncols=True, leave=False) if show else None
        self.start = time.perf_counter()
        self.images = 0

    def update(self, step: int, images: int, loss: float, lr: float, step_loss: float | None = None) -> None:
        """Record the ``images`` of optimizer step ``step`` (1-based within the epoch; under torchrun every process's):
        ``loss`` the epoch's running mean so far (per image, as the epoch line's), ``step_loss`` the step's mean (None:
        not shown)."""
        self.images += images
        if not self.enabled:
            return
        rate = self.images / max(time.perf_counter() - self.start, 1e-9)
        shown = loss_text(loss, step_loss)
        if self.bar is not None:
            self.bar.set_postfix(loss=shown, lr=f"{lr:.2e}", img_s=f"{rate:.0f}", refresh=False)
            self.bar.update(1)
        elif is_logged(step, self.total, self.log_interval):
            print(f"{self.desc} step {step}/{self.total} loss {shown} lr {lr:.2e} {rate:.0f} img/s", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def loss_text(loss: float, step_loss: float | None) -> str:
    """The epoch's running loss, then the last step's in brackets (as timm's train.py shows ``now (avg)``, reversed:
    the running mean is what the epoch line ends on): ``0.4123 (step 0.3981)``."""
    return f"{loss:.4f}" if step_loss is None else f"{loss:.4f} (step {step_loss:.4f})"


def is_logged(step: int, total: int, log_interval: int) -> bool:
    """Whether step ``step`` (1-based within an epoch of ``total``) is logged, as a plain progress line and to
    TensorBoard: every ``log_interval`` steps of the epoch, and its last step."""
    return step % max(1, log_interval) == 0 or step == total


def _tty() -> bool:
    """Whether the bar is shown: stdout (the plain lines' stream) and stderr (tqdm's) both terminals; either one
    redirected (``> out.log``, ``2> err.log``) gives plain lines, none of the bar's redraws in the file."""
    return sys.stdout.isatty() and sys.stderr.isatty()
