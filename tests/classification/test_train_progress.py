import pytest

from swinlite.engine import progress
from swinlite.engine.progress import Progress


def test_plain_lines_when_not_a_terminal(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(progress, "_tty", lambda: False)
    bar = Progress(total=5, desc="epoch 1/2", log_interval=2)
    for step in range(1, 6):
        bar.update(step, images=8, loss=0.5, lr=1e-3)
    bar.close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" loss")[0] for line in lines] == [
        "epoch 1/2 step 2/5",
        "epoch 1/2 step 4/5",
        "epoch 1/2 step 5/5",
    ]
    assert all("lr 1.00e-03" in line and "img/s" in line for line in lines)


def test_tqdm_bar_on_a_terminal(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(progress, "_tty", lambda: True)
    bar = Progress(total=3, desc="epoch 1/2")
    for step in range(1, 4):
        bar.update(step, images=8, loss=0.25, lr=2e-4)
    assert bar.bar.n == 3 and "loss=0.2500" in str(bar.bar) and "img_s=" in str(bar.bar)
    bar.close()
    assert capsys.readouterr().out == ""  # the bar draws on stderr; stdout stays clean


@pytest.mark.parametrize(("stdout", "stderr", "bar"), [(True, True, True), (True, False, False), (False, True, False)])
def test_the_bar_needs_both_streams_on_a_terminal(monkeypatch: pytest.MonkeyPatch, stdout, stderr, bar):
    """``2> err.log`` in a terminal: the bar's redraws went into err.log (tqdm draws on stderr; stdout was checked)
    and the terminal showed no progress."""
    monkeypatch.setattr(progress.sys.stdout, "isatty", lambda: stdout)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: stderr)
    assert progress._tty() is bar


def test_silent_on_other_ranks(capsys: pytest.CaptureFixture):
    bar = Progress(total=2, desc="x", enabled=False, log_interval=1)
    bar.update(1, 4, 1.0, 1e-3)
    bar.close()
    assert capsys.readouterr() == ("", "")
