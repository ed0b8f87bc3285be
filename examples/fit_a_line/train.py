"""Fit a line: linear regression on a synthetic UCI-housing-like dataset, trained data-parallel
on CPU with ``paddle.distributed`` (collective gloo backend), one process per trainer.

PaddleCloud starts every trainer as ``sh -c "python train.py"`` in a private copy of this
directory, with the environment contract (README.md), which it reads through the SDK's
``paddlecloud_sdk.env`` helpers. It runs by hand too (with PaddleCloud installed)::

    PADDLE_OUTPUT_DIR=/tmp/out python train.py          # one trainer, no distributed setup

Each trainer reads only its own shards of the training set (shard ``i`` belongs to trainer
``i % trainers``) and prints the loss of every step; trainer 0 reports the cross-trainer mean
loss of every step with ``paddlecloud_sdk.report`` (``$PADDLE_OUTPUT_DIR/node_0/metrics.jsonl``,
plotted on the job's page) and saves the model in ``$PADDLE_OUTPUT_DIR/model/``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from paddlecloud_sdk import dataset, env, report

FEATURES = 13  # as in UCI housing
SHARDS = 8  # training-set files: at most this many trainers
ROWS_PER_SHARD = 64
TEST_ROWS = 128
NOISE = 0.1
SEED = 1013
BATCH_SIZE = 16  # per trainer
LEARNING_RATE = 0.05
DEFAULT_PASSES = 10


def log(message: str) -> None:
    print(message, flush=True)


# --- the dataset -------------------------------------------------------------------------------


def ensure_dataset(root: Path) -> None:
    """Generate the dataset into ``root`` unless it is there already (every trainer may call
    this at once: ``dataset.build_once`` makes one complete copy appear, atomically)."""

    def generate(tmp: Path) -> None:
        rng = np.random.default_rng(SEED)
        weight = rng.normal(size=FEATURES)
        bias = float(rng.normal())

        def rows(n: int) -> dict[str, np.ndarray]:
            x = rng.normal(size=(n, FEATURES))
            y = x @ weight + bias + NOISE * rng.normal(size=n)
            return {"x": x.astype("float32"), "y": y.astype("float32").reshape(n, 1)}

        for shard in range(SHARDS):
            np.savez(tmp / f"part-{shard:05d}.npz", **rows(ROWS_PER_SHARD))
        np.savez(tmp / "test.npz", **rows(TEST_ROWS))
        meta = {"features": FEATURES, "shards": SHARDS, "rows_per_shard": ROWS_PER_SHARD,
                "noise": NOISE, "seed": SEED, "weight": weight.tolist(), "bias": bias}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last

    dataset.build_once(root, generate, done="meta.json")


def my_shards(root: Path, trainer_id: int, trainers: int) -> list[Path]:
    """This trainer's training files, as the original cluster_files_reader picks them
    (``dataset.trainer_files``: shard ``i`` for trainer ``i % trainers``)."""
    shards = len(list(root.glob("part-*.npz")))
    if shards < trainers:
        raise SystemExit(f"the dataset in {root} has {shards} shards, "
                         f"fewer than the {trainers} trainers")
    return [Path(f) for f in dataset.trainer_files(root / "part-*.npz", trainers, trainer_id)]


def load(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    parts = [np.load(f) for f in files]
    return (np.concatenate([p["x"] for p in parts]), np.concatenate([p["y"] for p in parts]))


# --- paddle.distributed from the PaddleCloud contract ------------------------------------------


def derive_paddle_env(use_gpu: bool) -> None:
    """Fill in what ``paddle.distributed.init_parallel_env`` reads, from the contract variables.

    Paddle (3.x, collective mode) needs PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM and
    PADDLE_CURRENT_ENDPOINT (the contract sets all three), the TCP-store rendezvous address
    PADDLE_MASTER (contract; paddle falls back to the first of PADDLE_TRAINER_ENDPOINTS) and,
    on CPU, PADDLE_DISTRI_BACKEND=gloo: with the default "auto" a CPU build takes a legacy path
    whose collectives fail with "The global group is not initialized".
    Only defaults are set: anything already in the environment wins.
    """
    environ = os.environ
    trainer_id = env.trainer_id()
    environ.setdefault("PADDLE_TRAINER_ID", str(trainer_id))
    environ.setdefault("PADDLE_TRAINERS_NUM", str(env.trainer_count()))
    endpoints = env.trainer_endpoints()
    if "PADDLE_CURRENT_ENDPOINT" not in environ:
        if trainer_id < len(endpoints):
            environ["PADDLE_CURRENT_ENDPOINT"] = endpoints[trainer_id]
        elif (current := env.current_endpoint()) is not None:  # POD_IP:PADDLE_PORT
            environ["PADDLE_CURRENT_ENDPOINT"] = current
    if "PADDLE_MASTER" not in environ and (master := env.master_endpoint()) is not None:
        environ["PADDLE_MASTER"] = master
    if use_gpu:
        environ.setdefault("FLAGS_selected_gpus", "0")
    else:
        environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")


# --- training ----------------------------------------------------------------------------------


def main() -> int:
    started = time.monotonic()
    trainer_id = env.trainer_id()
    trainers = env.trainer_count()
    passes = env.num_passes(default=DEFAULT_PASSES)
    want_gpu = env.use_gpu()
    output = env.output_dir().resolve()
    if not 0 <= trainer_id < trainers:
        raise SystemExit(f"trainer id {trainer_id} is not in 0..{trainers - 1}")
    if not env.is_trainer():
        raise SystemExit("fit_a_line is a collective job: it has trainers only, no pservers")

    root = env.dataset_dir("fit_a_line")
    ensure_dataset(root)
    shards = my_shards(root, trainer_id, trainers)
    log(f"trainer {trainer_id}/{trainers} reads {len(shards)} shards: "
        + " ".join(f.name for f in shards))
    x, y = load(shards)

    import paddle  # only here: the dataset needs numpy alone

    use_gpu = want_gpu and paddle.is_compiled_with_cuda()
    if want_gpu and not use_gpu:
        log("PADDLE_INIT_USE_GPU=1 but this paddle has no CUDA: training on CPU")
    paddle.set_device("gpu" if use_gpu else "cpu")
    paddle.seed(SEED)
    model = paddle.nn.Linear(FEATURES, 1)
    net = model
    dist = None
    if trainers > 1:
        import paddle.distributed as dist

        derive_paddle_env(use_gpu)
        dist.init_parallel_env()
        net = paddle.DataParallel(model)  # starts from trainer 0's parameters
    optimizer = paddle.optimizer.SGD(learning_rate=LEARNING_RATE, parameters=model.parameters())

    # DataParallel needs every trainer to take the same number of steps.
    steps_per_pass = len(x) // BATCH_SIZE
    if dist is not None:
        count = paddle.to_tensor([steps_per_pass], dtype="int64")
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        steps_per_pass = int(count.item())
    if steps_per_pass == 0:
        raise SystemExit(f"trainer {trainer_id} has fewer than {BATCH_SIZE} rows")

    rng = np.random.default_rng(SEED + trainer_id)
    step = 0
    for pass_id in range(passes):
        order = rng.permutation(len(x))
        total = 0.0
        for i in range(steps_per_pass):
            batch = order[i * BATCH_SIZE:(i + 1) * BATCH_SIZE]
            loss = paddle.nn.functional.mse_loss(net(paddle.to_tensor(x[batch])),
                                                 paddle.to_tensor(y[batch]))
            loss.backward()  # DataParallel averages the gradients over the trainers
            optimizer.step()
            optimizer.clear_grad()
            mine = float(loss.item())
            mean = mine
            if dist is not None:
                summed = loss.detach().clone()
                dist.all_reduce(summed)
                mean = float(summed.item()) / trainers
            step += 1
            total += mean
            shown = f"loss {mine:.6f}"
            if dist is not None:
                shown += f" (mean over trainers {mean:.6f})"
            log(f"trainer {trainer_id} pass {pass_id} step {step} {shown}")
            if trainer_id == 0:
                report(step=step, loss=mean)  # the job's page plots it
        log(f"trainer {trainer_id} pass {pass_id} done: mean loss {total / steps_per_pass:.6f}")

    if trainer_id == 0:
        save(paddle, model, root, output / "model")
    if dist is not None:
        dist.barrier()  # trainer 0 hosts the rendezvous store: leave together
    log(f"trainer {trainer_id} finished {passes} passes, {step} steps "
        f"in {time.monotonic() - started:.1f}s")
    return 0


def save(paddle, model, root: Path, model_dir: Path) -> None:
    """The parameters (``paddle.load`` them into a ``Linear(13, 1)``), an inference model
    (``paddle.jit.load``) and a summary with the test-set loss."""
    model_dir.mkdir(parents=True, exist_ok=True)
    paddle.save(model.state_dict(), str(model_dir / "fit_a_line.pdparams"))
    model.eval()
    spec = paddle.static.InputSpec(shape=[None, FEATURES], dtype="float32", name="x")
    paddle.jit.save(model, str(model_dir / "inference"), input_spec=[spec])
    test = np.load(root / "test.npz")
    with paddle.no_grad():
        test_loss = float(paddle.nn.functional.mse_loss(
            model(paddle.to_tensor(test["x"])), paddle.to_tensor(test["y"])).item())
    truth = json.loads((root / "meta.json").read_text())
    summary = {
        "test_loss": test_loss,
        "weight": model.weight.numpy().ravel().tolist(),
        "bias": float(model.bias.numpy()[0]),
        "true_weight": truth["weight"],
        "true_bias": truth["bias"],
    }
    (model_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    log(f"saved the model in {model_dir}: test loss {test_loss:.6f}")


if __name__ == "__main__":
    sys.exit(main())
