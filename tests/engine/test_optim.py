"""The shared optimizer and schedule: ``schedule.kind=poly`` (mmsegmentation's poly with a linear warm-up),
``optim.betas`` and ``optim.momentum``, for every task."""

import copy
import importlib.util

import pytest
import timm
import torch
from enginekit import TASKS
from pico import PICO
from timm.optim import create_optimizer_v2

from swinlite.classification import ClassificationTask
from swinlite.engine.optim import (
    build_optimizer,
    build_scheduler,
    check_loss_scaling,
    check_optimizer,
    lr_scale,
    warn_long_accumulation,
    warn_short_batch,
)
from swinlite.engine.preflight import SCHEDULE_READS, check_model_structure, check_run
from swinlite.engine.sections import OptimConfig


def _lrs(cfg, epochs: int, steps_per_epoch: int) -> list[float]:
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=cfg.optim.lr)
    scheduler = build_scheduler(optimizer, cfg.schedule, epochs=epochs, steps_per_epoch=steps_per_epoch)
    lrs = []
    for step in range(epochs * steps_per_epoch):
        scheduler.step_update(step)
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


OTHER_VALUE = {"warmup_epochs": "1", "warmup_lr": "1e-4", "min_lr": "1e-4", "power": "3", "decay_epochs": "[1]",
               "decay_rate": "0.5"}  # fmt: skip


@pytest.mark.parametrize("kind", SCHEDULE_READS)
@pytest.mark.parametrize("name", OTHER_VALUE)
def test_the_table_of_schedule_settings_read_is_build_schedulers(kind: str, name: str):
    """preflight's SCHEDULE_READS, which warns of a setting a kind does not read: another value changes the lrs of a
    kind exactly where the table says the kind reads it."""
    settings = ["optim.lr=1e-3", f"schedule.kind={kind}", "schedule.warmup_epochs=0.5", "schedule.decay_epochs=[2]"]
    cfg = ClassificationTask.load_config(None, settings)
    other = ClassificationTask.load_config(None, [*settings, f"schedule.{name}={OTHER_VALUE[name]}"])
    assert (_lrs(cfg, 3, 4) != _lrs(other, 3, 4)) == (name in SCHEDULE_READS[kind])


@pytest.mark.parametrize("power", [1.0, 0.9])
@pytest.mark.parametrize("task", list(TASKS))
def test_poly_schedule_is_linear_warmup_then_polynomial_decay(task: str, power: float):
    """10 epochs of 20 steps, warm-up 1.5 epochs (30 steps) from 0: the closed form step by step."""
    overrides = ["schedule.kind=poly", "schedule.warmup_epochs=1.5", "schedule.warmup_lr=0", "schedule.min_lr=1e-6",
                 f"schedule.power={power}", "optim.lr=6e-5"]  # fmt: skip
    cfg = TASKS[task].load_config(None, overrides)
    base, floor, warmup, total = 6e-5, 1e-6, 30, 200
    expected = [
        base * t / warmup if t < warmup else floor + (base - floor) * (1 - (t - warmup) / (total - warmup)) ** power
        for t in range(total)
    ]
    assert _lrs(cfg, 10, 20) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("task", list(TASKS))
def test_betas_and_momentum_reach_the_optimizer_or_are_refused_before_the_run(task: str):
    """optim.momentum given to AdamW (the default optimizer) was recorded in config.yaml and dropped by timm without a
    word; the default every config records stays accepted."""
    model = torch.nn.Linear(2, 2)
    cfg = TASKS[task].load_config(None, ["optim.opt=adamw", "optim.betas=[0.8, 0.95]"])
    assert build_optimizer(model, cfg.optim, global_batch=1).param_groups[0]["betas"] == (0.8, 0.95)
    default = TASKS[task].load_config(None, ["optim.opt=adamw"])
    check_optimizer(default.optim)
    assert build_optimizer(model, default.optim, global_batch=1).param_groups[0]["betas"] == (0.9, 0.999)
    sgd = TASKS[task].load_config(None, ["optim.opt=momentum", "optim.momentum=0.1"])
    check_optimizer(sgd.optim)
    assert build_optimizer(model, sgd.optim, global_batch=1).param_groups[0]["momentum"] == 0.1
    said = r"optim.momentum: optim.opt=adamw takes no momentum \(timm's SGD family does: momentum, sgd, nesterov; "
    with pytest.raises(ValueError, match=said + r".*leave optim.momentum at its default 0.9"):
        check_run(TASKS[task], TASKS[task].load_config(None, ["optim.momentum=0.1"]))
    with pytest.raises(ValueError, match="optim.momentum: optim.opt=lookahead_lamb takes no momentum"):
        check_run(TASKS[task], TASKS[task].load_config(None, ["optim.opt=lookahead_lamb", "optim.momentum=0"]))
    with pytest.raises(ValueError, match="optim.betas: optim.opt=momentum takes no betas"):
        check_run(TASKS[task], TASKS[task].load_config(None, ["optim.opt=momentum", "optim.betas=[0.9, 0.99]"]))
    with pytest.raises(ValueError, match=r"optim.betas: adan takes 3 betas, got \[0.9, 0.99\]"):
        check_run(TASKS[task], TASKS[task].load_config(None, ["optim.opt=adan", "optim.betas=[0.9, 0.99]"]))
    with pytest.raises(ValueError, match="expected 0 <= optim.betas < 1"):
        TASKS[task].load_config(None, ["optim.betas=[0.9, 1.0]"])


@pytest.mark.parametrize("task", list(TASKS))
def test_betas_of_a_lookahead_optimizer_are_judged_by_the_optimizer_it_wraps(task: str):
    """optim.opt=lookahead_sgd with optim.betas passed the check (timm's registry has no lookahead_ names) and timm
    dropped the betas without a word."""
    with pytest.raises(ValueError, match="optim.betas: optim.opt=lookahead_sgd takes no betas"):
        check_run(TASKS[task], TASKS[task].load_config(None, ["optim.opt=lookahead_sgd", "optim.betas=[0.9, 0.99]"]))
    cfg = TASKS[task].load_config(None, ["optim.opt=lookahead_adamw", "optim.betas=[0.8, 0.95]"])
    optimizer = build_optimizer(torch.nn.Linear(2, 2), cfg.optim, global_batch=1)
    assert type(optimizer).__name__ == "Lookahead" and optimizer.param_groups[0]["betas"] == (0.8, 0.95)


@pytest.mark.parametrize("kind", ["cosine", "poly"])
@pytest.mark.parametrize(
    ("warmup", "steps", "said"),
    [
        (2, 10, r"warmup_epochs 2.0 is not shorter than the run \(1 epoch of 10 steps\): the warm-up is cut to 9 "
                r"steps"),
        (2, 2, r"the run \(1 epoch of 2 steps\): the warm-up is cut to 1 step and"),  # "1 steps" before
        (0.9, 10, r"warmup_epochs 0.9 leaves one step of the run \(1 epoch of 10 steps\) after the warm-up"),
    ],
)  # fmt: skip
def test_a_warmup_that_leaves_one_step_is_one_warning(kind, warmup, steps, said, caplog):
    """The demo's 2 warm-up epochs with train.epochs=1: cut to total - 1 steps silently before. A warm-up that fits
    but leaves one step (a small folder dataset) was not warned about. The warning is the only line: timm's
    unprefixed note that the remaining one-step cosine (poly's says the same) has no effect is not logged."""
    settings = [f"schedule.kind={kind}", f"schedule.warmup_epochs={warmup}", "schedule.warmup_lr=0"]
    cfg = TASKS["classification"].load_config(None, settings)
    with pytest.warns(UserWarning, match=said):
        lrs = _lrs(cfg, 1, steps)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("timm")] == []
    assert lrs[-1] == pytest.approx(cfg.optim.lr, rel=1e-6) and lrs[0] == 0.0  # it ends at the peak


def test_decay_epochs_beyond_the_run_are_one_warning(recwarn):
    """schedule.kind=step with schedule.decay_epochs=[5] in a run of 1 epoch never decayed, without a word (a warm-up
    longer than the run was warned about)."""
    cfg = TASKS["classification"].load_config(
        None, ["schedule.kind=step", "schedule.decay_epochs=[0.5,1,5]", "schedule.warmup_epochs=0"]
    )
    with pytest.warns(UserWarning, match=r"schedule.decay_epochs 1, 5 lie at or beyond the end of the run \(1 epoch "
                                         r"of 10 steps\): the lr never decays there"):  # fmt: skip
        lrs = _lrs(cfg, 1, 10)
    assert lrs == pytest.approx([cfg.optim.lr] * 5 + [cfg.optim.lr * 0.1] * 5)  # 0.5 decays, within the run
    fits = TASKS["classification"].load_config(None, ["schedule.kind=step", "schedule.decay_epochs=[0.5]"])
    recwarn.clear()
    _lrs(fits, 1, 10)
    assert not [w for w in recwarn if "decay_epochs" in str(w.message)]


def test_decay_epochs_that_end_before_half_the_run_are_one_warning(recwarn):
    """train.epochs=24 with the 1x schedule's decay_epochs [8,11] (train_detection.py's --help suggested the epochs
    alone) ran epochs 12-24 at 1/100 of the lr without a word."""
    cfg = TASKS["detection"].load_config(None, ["schedule.warmup_epochs=0"])
    said = r"^schedule.decay_epochs end at epoch 11 of the run \(24 epochs of 2 steps\): its last 13 epochs, more"
    with pytest.warns(UserWarning, match=said + r" than half, run at the decayed lr; move them"):
        _lrs(cfg, 24, 2)
    recwarn.clear()
    _lrs(cfg, 12, 2)  # the 1x schedule itself, and mmdetection's 2x
    _lrs(TASKS["detection"].load_config(None, ["schedule.warmup_epochs=0", "schedule.decay_epochs=[16,22]"]), 24, 2)
    assert not [w for w in recwarn if "decay_epochs" in str(w.message)]


@pytest.mark.parametrize("kind", ["cosine", "poly", "step"])
def test_warmup_and_floor_scale_with_the_global_batch_as_the_lr(kind: str):
    """optim.lr_base_batch scales schedule.warmup_lr and schedule.min_lr as optim.lr, as the Swin recipe does: at
    batch 8 of a recipe per 1024 the floor (1e-5) lay above the peak (7.8e-6), and the "decay" raised the lr."""
    cfg = TASKS["classification"].load_config(None, [
        f"schedule.kind={kind}", "schedule.warmup_epochs=1", "schedule.warmup_lr=1e-6", "schedule.min_lr=1e-5",
        "schedule.decay_epochs=[2]", "optim.lr=1e-3", "optim.lr_base_batch=1024"])  # fmt: skip
    optimizer = build_optimizer(torch.nn.Linear(2, 2), cfg.optim, global_batch=8)
    scale = 8 / 1024
    scheduler = build_scheduler(optimizer, cfg.schedule, epochs=3, steps_per_epoch=10, scale=lr_scale(cfg.optim, 8))
    lrs = []
    for step in range(30):
        scheduler.step_update(step)
        lrs.append(optimizer.param_groups[0]["lr"])
    assert lrs[0] == pytest.approx(1e-6 * scale) and max(lrs) == pytest.approx(1e-3 * scale)
    assert all(b <= a for a, b in zip(lrs[10:], lrs[11:], strict=False))  # after the warm-up it only decays
    if kind != "step":
        assert scheduler.lr_min == pytest.approx(1e-5 * scale) and min(lrs[10:]) > scheduler.lr_min


@pytest.mark.parametrize(("epochs", "steps", "warmup"), [(0.14, 50, 7), (0.07, 100, 7), (0.14, 100, 14), (0.5, 3, 2)])
def test_a_fractional_warmup_is_rounded_up_to_whole_steps_not_by_the_floats_error(epochs, steps, warmup):
    """0.14 x 50 is 7.000000000000001 in floats: the warm-up took 8 steps."""
    cfg = TASKS["detection"].load_config(None, [f"schedule.warmup_epochs={epochs}"])
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
    assert build_scheduler(optimizer, cfg.schedule, epochs=12, steps_per_epoch=steps).warmup_t == warmup


@pytest.mark.parametrize(("opt", "refused"), [("sgd", True), ("nesterov", True), ("momentum", False)])
def test_nesterov_sgd_without_momentum_is_refused_before_any_data(opt: str, refused: bool):
    """torch refused it ("Nesterov momentum requires a momentum and zero dampening") when the optimizer was built,
    after the data scan had written to the output folder; timm's plain SGD is optim.opt=momentum."""
    cfg = ClassificationTask.load_config(None, [f"optim.opt={opt}", "optim.momentum=0"])
    if refused:
        with pytest.raises(ValueError, match=f"optim.opt={opt} is timm's Nesterov SGD, which needs optim.momentum > 0"):
            check_optimizer(cfg.optim)
    else:
        check_optimizer(cfg.optim)
        build_optimizer(torch.nn.Linear(2, 2), cfg.optim, global_batch=cfg.data.batch_size)


@pytest.mark.parametrize("decay", [0.0, 0.05])
# lamb clips by the grad norm of all groups, summed in their order: the float's last bits differ
@pytest.mark.parametrize(("opt", "atol"), [("adamw", 0.0), ("momentum", 0.0), ("sgd", 0.0), ("lamb", 1e-6)])
def test_the_weight_decay_groups_are_two_and_train_as_timm_s(opt: str, atol: float, decay: float):
    """optim.weight_decay=0 gave timm's one group, 0.05 two: a --resume that changed it to or from 0 was refused.
    The groups are two at 0 too, and three steps update the weights as timm's own optimizer does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    cfg = ClassificationTask.load_config(None, [f"optim.opt={opt}", f"optim.weight_decay={decay}", "optim.lr=0.1"])
    ours, theirs = model, copy.deepcopy(model)
    optimizer = build_optimizer(ours, cfg.optim, global_batch=cfg.optim.lr_base_batch or 1)
    reference = create_optimizer_v2(theirs, opt=opt, lr=optimizer.defaults["lr"], weight_decay=decay, momentum=0.9)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.0, decay]
    for _ in range(3):
        x = torch.randn(5, 4)
        for net, optim in ((ours, optimizer), (theirs, reference)):
            optim.zero_grad()
            net(x).square().sum().backward()
            optim.step()
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=atol)


class WrappedClassification(ClassificationTask):
    """A contributor's task whose model wraps a timm model, as a regression head around a backbone does."""

    name = "wrapped"

    @classmethod
    def model_for(cls, cfg, classes: list[str]) -> torch.nn.Module:
        return torch.nn.Sequential(super().model_for(cfg, classes))


@pytest.mark.parametrize("task", [WrappedClassification, TASKS["detection"], TASKS["segmentation"]])
def test_layer_decay_is_refused_before_the_data_where_the_tasks_model_has_no_group_matcher(task):
    """Detection and segmentation each refused it in their own check; a fourth task's model without a group_matcher
    got timm's log line "Layer-wise lr decay has no effect" after the data scan, and trained without it."""
    cfg = task.load_config(None, ["optim.layer_decay=0.9", "data.data_dir=/no/such/folder"])
    with pytest.raises(ValueError, match=f"optim.layer_decay is not available for {task.name}: its model .* has no"):
        check_run(task, cfg)  # before the missing data folder is named
    check_model_structure(task, task.load_config(None, []))  # unset: nothing built


def test_layer_decay_passes_for_a_timm_model_of_a_task_of_its_own():
    check_model_structure(ClassificationTask, ClassificationTask.load_config(None, ["optim.layer_decay=0.9"]))


class Backboned(torch.nn.Module):
    """A custom task's model: a Swin under ``backbone.`` and a head, layered for layer decay by its group_matcher."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.backbone = timm.create_model(name, num_classes=0)
        self.head = torch.nn.Linear(self.backbone.num_features, 3)

    def group_matcher(self, coarse: bool = False) -> dict:
        return dict(stem=r"^backbone\.patch_embed", blocks=r"^backbone\.layers\.(\d+)")


@pytest.mark.parametrize("name", [PICO, "swinlite_v2_pico_patch2_window4_32"])
def test_layer_decay_spares_a_nested_swin_s_no_weight_decay_parameters(name: str):
    """With optim.layer_decay, timm's optimizer factory read the model's own no_weight_decay() alone: a Swin nested
    under backbone. had weight decay on its relative position tables (V2: logit_scale, the CPB MLP's weights), which
    it spares without layer decay. Both now decay the same parameters: weights of 2 dims or more, none of those."""
    model = Backboned(name)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = []
    for layer_decay in (None, 0.9):
        optimizer = build_optimizer(model, OptimConfig(layer_decay=layer_decay), global_batch=8)
        decayed.append({names[id(p)] for g in optimizer.param_groups if g["weight_decay"] for p in g["params"]})
    spared = model.backbone.no_weight_decay()
    assert decayed[1] == decayed[0] and not {f"backbone.{n}" for n in spared} & decayed[1] and spared
    assert all(dict(model.named_parameters())[n].ndim > 1 for n in decayed[1])


@pytest.mark.parametrize("opt", ["fusedadamw", "bnbadamw8bit", "lookahead_fusedsgd"])
def test_an_optimizer_this_machine_cannot_build_is_refused_before_any_data(opt: str, monkeypatch):
    """timm's APEX (fused*) and bitsandbytes (bnb*) optimizers passed the config check and ended the run in "CUDA
    required for ..." (an AssertionError traceback) after the data scan where there is no CUDA; where there is, a
    missing package raised timm's ImportError as late."""
    cfg = ClassificationTask.load_config(None, [f"optim.opt={opt}", "data.data_dir=/no/such/folder"])
    plain = {"fusedadamw": "adamw", "bnbadamw8bit": "adamw", "lookahead_fusedsgd": "lookahead_sgd"}[opt]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=rf"optim.opt={opt} \(.*\) needs CUDA .* e.g. optim.opt={plain}$"):
        check_run(ClassificationTask, cfg)
    package = "apex" if "fused" in opt else "bitsandbytes"
    if importlib.util.find_spec(package) is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        with pytest.raises(ValueError, match=f"needs the package {package}, which is not installed"):
            check_optimizer(cfg.optim)


@pytest.mark.parametrize("fast", [True, False])
def test_a_second_order_optimizer_needs_the_reference_path_before_any_data(fast: bool):
    """adahessian on a swinlite model's fast path (first derivatives only) failed its first step, after the data
    scan; refused before it, naming model.kwargs.fast=false, with which the checks go on to the data."""
    overrides = [f"model.name={PICO}", "optim.opt=adahessian", "data.data_dir=/no/such/folder"]
    cfg = ClassificationTask.load_config(None, [*overrides, f"model.kwargs.fast={fast}"])
    error = r"optim.opt=adahessian is second order .* set model.kwargs.fast=false$" if fast else "/no/such/folder"
    with pytest.raises(ValueError, match=error):
        check_run(ClassificationTask, cfg)


@pytest.mark.parametrize(("opt", "amp", "refused"), [
    ("adahessian", torch.float16, True), ("lookahead_adahessian", torch.float16, True),
    ("adahessian", torch.bfloat16, False), ("adamw", torch.float16, False),
])  # fmt: skip
def test_a_second_order_optimizer_is_refused_under_fp16_loss_scaling(opt: str, amp: torch.dtype, refused: bool):
    """adahessian's Hessian, taken through the scaled loss's graph, kept the loss scale the scaler divides out of the
    gradients: its steps came out 65536 times too small under train.amp=fp16."""
    cfg = OptimConfig(opt=opt)
    if refused:
        with pytest.raises(ValueError, match=f"optim.opt={opt} is second order, .* use train.amp=bf16 or none"):
            check_loss_scaling(cfg, amp)
    else:
        check_loss_scaling(cfg, amp)


@pytest.mark.parametrize(("accum_steps", "base", "said"), [
    (4, 8, "optim.accum_steps=4 exceeds the 3 micro-batches of an epoch (per process): every optimizer step averages "
           "3, yet optim.lr_base_batch scales the lr for 4; set optim.accum_steps=3"),
    (4, None, "optim.accum_steps=4 exceeds the 3 micro-batches of an epoch (per process): every optimizer step "
              "averages 3; set optim.accum_steps=3"),
    (3, 8, None),
])  # fmt: skip
def test_accumulation_beyond_the_epoch_is_one_warning(accum_steps: int, base: int | None, said: str | None, recwarn):
    """24 images in batches of 8 with optim.accum_steps=4: every step averaged 3 micro-batches at the lr that
    optim.lr_base_batch scales for 4 (4e-3 where 3 would take 3e-3), without a word."""
    warn_long_accumulation(OptimConfig(accum_steps=accum_steps, lr_base_batch=base), batches=3)
    assert [str(w.message) for w in recwarn] == ([said] if said else [])


@pytest.mark.parametrize(("batch_size", "base", "said"), [
    (16, 16, "data.batch_size=16 exceeds the 8 training samples a process gets: every micro-batch holds 8, yet "
             "optim.lr_base_batch scales the lr for 16; set data.batch_size=8"),
    (16, None, None),  # the lr as set, whatever the batch
    (8, 16, None),
])  # fmt: skip
def test_a_batch_beyond_the_shard_is_one_warning(batch_size: int, base: int | None, said: str | None, recwarn):
    """Detection (which keeps the last incomplete batch) on 8 images with data.batch_size=16: each step took 8 images
    at the lr optim.lr_base_batch scales for 16, twice the lr per image, without a word."""
    warn_short_batch(OptimConfig(lr_base_batch=base), batch_size, shard=8)
    assert [str(w.message) for w in recwarn] == ([said] if said else [])
