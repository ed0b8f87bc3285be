"""Fit a line: linear regression on a synthetic UCI-housing-like dataset, trained data-parallel
on CPU with ``paddle.distributed`` (collective gloo backend), one process per trainer.

PaddleCloud starts every trainer as ``sh -c "python train.py"`` in a private copy of this
directory, with the environment contract (README.md), which it reads through the SDK's
``paddlecloud_sdk.env`` helpers. It runs by hand too (with PaddleCloud installed)::

    PADDLE_OUTPUT_DIR=/tmp/out python train.py          # one trainer, no distributed setup

Where the data comes from:

- a job without a dataset: each trainer reads its own shards of a training set the trainers
  generate in the owner's PFS home (shard ``i`` belongs to trainer ``i % trainers``), the same
  number of steps per pass on every trainer;
- a job submitted with a ``dataset`` (``PADDLECLOUD_MASTER_URL`` is set), e.g. the text files
  of ``data/`` uploaded to PFS: the trainers read it through the job's master
  (``paddlecloud_sdk.master``), task by task, as it hands the tasks out — so one trainer may
  read more than another. The trainers still step together (``train_from_master``): each step
  they share how many rows each holds; one without rows takes a step of weight 0, the
  gradient is the mean over the rows actually read, and a pass (the master's) ends when its
  tasks are all trained.

Every trainer prints the loss of every step; trainer 0 reports the mean loss over the trainers
with ``paddlecloud_sdk.report`` (``$PADDLE_OUTPUT_DIR/node_0/metrics.jsonl``, plotted on the
job's page) and saves the model in ``$PADDLE_OUTPUT_DIR/model/``.

Every ``CHECKPOINT_EVERY`` steps (20; the job's ``env`` may say) the trainers save a checkpoint
(``paddlecloud_sdk.checkpoint``: the model's and the optimizer's state, trainer 0 writing); a
restarted job goes on from the latest one instead of step 0 — with the master, where the
checkpoint left the pass (``checkpoint.load`` before any task is asked for).

``python train.py --write-data DIR`` writes the text dataset (what ``data/`` holds).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from paddlecloud_sdk import checkpoint, dataset, env, master, report

FEATURES = 13  # as in UCI housing
SHARDS = 8  # training-set files: at most this many trainers
ROWS_PER_SHARD = 64
TEST_ROWS = 128
NOISE = 0.1
SEED = 1013
BATCH_SIZE = 16  # per trainer
LEARNING_RATE = 0.05  # unless the environment's LEARNING_RATE says (a sweep's trials do)
DEFAULT_PASSES = 10
DATA = Path(__file__).resolve().parent / "data"  # the text dataset shipped with the example
ASK_AGAIN_SECONDS = 1.0  # a trainer told to wait asks the master again after this at the latest
IDLE_SECONDS = 0.1  # the pause of a step no trainer has rows for
CHECKPOINT_EVERY = 20  # steps between checkpoints, unless the environment says


def log(message: str) -> None:
    print(message, flush=True)


# --- the dataset -------------------------------------------------------------------------------


def synthetic() -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray], dict]:
    """The dataset (numpy, fixed seed): ``SHARDS`` training shards of ``ROWS_PER_SHARD`` rows,
    the test set, and what generated them (``meta``: the true ``weight`` and ``bias``)."""
    rng = np.random.default_rng(SEED)
    weight = rng.normal(size=FEATURES)
    bias = float(rng.normal())

    def rows(n: int) -> dict[str, np.ndarray]:
        x = rng.normal(size=(n, FEATURES))
        y = x @ weight + bias + NOISE * rng.normal(size=n)
        return {"x": x.astype("float32"), "y": y.astype("float32").reshape(n, 1)}

    shards = [rows(ROWS_PER_SHARD) for _ in range(SHARDS)]
    test = rows(TEST_ROWS)
    meta = {"features": FEATURES, "shards": SHARDS, "rows_per_shard": ROWS_PER_SHARD,
            "noise": NOISE, "seed": SEED, "weight": weight.tolist(), "bias": bias}
    return shards, test, meta


def ensure_dataset(root: Path) -> None:
    """Generate the dataset into ``root`` as ``.npz`` files unless it is there already (every
    trainer may call this at once: ``dataset.build_once`` makes one complete copy appear,
    atomically)."""

    def generate(tmp: Path) -> None:
        shards, test, meta = synthetic()
        for shard, rows in enumerate(shards):
            np.savez(tmp / f"part-{shard:05d}.npz", **rows)
        np.savez(tmp / "test.npz", **test)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last

    dataset.build_once(root, generate, done="meta.json")


def write_text_dataset(directory: Path) -> None:
    """The same dataset as text, laid out as UCI housing's ``housing.data``: a row a line, its
    13 features then the target, separated by spaces. ``part-00000.txt`` … (the training set:
    a job's ``dataset``), ``test.txt`` and ``meta.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    shards, test, meta = synthetic()

    def write(path: Path, rows: dict[str, np.ndarray]) -> None:
        table = np.hstack([rows["x"], rows["y"]])
        path.write_text("".join(" ".join(f"{v:.4f}" for v in row) + "\n" for row in table))

    for shard, rows in enumerate(shards):
        write(directory / f"part-{shard:05d}.txt", rows)
    write(directory / "test.txt", test)
    (directory / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def parse_row(line: bytes) -> np.ndarray:
    """One line of the text dataset: 14 numbers (13 features, the target)."""
    row = np.array(line.split(), dtype="float32")
    if row.shape != (FEATURES + 1,):
        raise ValueError(f"a row has {FEATURES + 1} numbers (13 features, the target), not "
                         f"{row.size}: {line[:80]!r}")
    return row


def load_text(path: Path) -> tuple[np.ndarray, np.ndarray]:
    table = np.stack([parse_row(line) for line in path.read_bytes().splitlines() if line])
    return table[:, :FEATURES], table[:, FEATURES:]


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
    if "PADDLE_MASTER" not in environ and (rendezvous := env.master_endpoint()) is not None:
        environ["PADDLE_MASTER"] = rendezvous
    if use_gpu:
        environ.setdefault("FLAGS_selected_gpus", "0")
    else:
        environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")


FLAGS_BANNER = "Modified FLAGS detected"


def init_parallel_env(dist) -> None:
    """``dist.init_parallel_env()`` without the banner it prints of every FLAG that is not at
    its default: PaddlePaddle 3 switches FLAGS_enable_pir_in_executor on itself as it imports,
    so every trainer's log would open with a banner that says nothing about the job. Whatever
    else it prints still goes to stderr."""
    caught = io.StringIO()
    try:
        with contextlib.redirect_stderr(caught):
            dist.init_parallel_env()
    finally:
        sys.stderr.write(without_flags_banner(caught.getvalue()))


def without_flags_banner(text: str) -> str:
    """``text`` without PaddlePaddle's "Modified FLAGS detected" block (its lines, down to the
    closing row of ``=``)."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if FLAGS_BANNER in line:
            inside = True
        elif inside and line.startswith("====="):
            inside = False
        elif not inside:
            kept.append(line)
    return "".join(kept)


# --- checkpoints ------------------------------------------------------------------------------


class Saving:
    """The model's and the optimizer's state saved every ``every`` steps (every trainer calls,
    trainer 0 writes: ``paddlecloud_sdk.checkpoint``), and the step the run resumed from (0 on
    a first start)."""

    def __init__(self, model, optimizer, trainer_id: int, every: int):
        self.model, self.optimizer, self.every = model, optimizer, every
        self.step = 0
        # Before any task is asked for: the master goes back to where the checkpoint was.
        resumed = checkpoint.load()
        if resumed is not None:
            model.set_state_dict(resumed.state["model"])
            optimizer.set_state_dict(resumed.state["optimizer"])
            self.step = resumed.step
            log(f"trainer {trainer_id} resumed from the checkpoint of step {resumed.step} "
                f"(pass {resumed.pass_ + 1})")  # saved below with its pass

    def after(self, step: int, pass_id: int) -> None:
        if step % self.every == 0:
            checkpoint.save({"model": self.model.state_dict(),
                             "optimizer": self.optimizer.state_dict()}, step, pass_=pass_id)


# --- training: a trainer's own shards ----------------------------------------------------------


def train_shards(paddle, dist, net, optimizer, x: np.ndarray, y: np.ndarray, trainer_id: int,
                 trainers: int, passes: int, saving: Saving) -> tuple[int, int]:
    """``passes`` passes over this trainer's shards, ``BATCH_SIZE`` rows a step; (passes,
    steps). Resumed at ``saving.step``: the passes before it are skipped, and the rows of its
    pass taken in the order they had (the same random order, drawn again)."""
    # DataParallel needs every trainer to take the same number of steps.
    steps_per_pass = len(x) // BATCH_SIZE
    if dist is not None:
        count = paddle.to_tensor([steps_per_pass], dtype="int64")
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        steps_per_pass = int(count.item())
    if steps_per_pass == 0:
        raise SystemExit(f"trainer {trainer_id} has fewer than {BATCH_SIZE} rows")

    rng = np.random.default_rng(SEED + trainer_id)
    step = saving.step
    for pass_id in range(passes):
        order = rng.permutation(len(x))
        if step >= (pass_id + 1) * steps_per_pass:
            continue  # trained before the checkpoint it resumed from
        total = 0.0
        for i in range(step - pass_id * steps_per_pass, steps_per_pass):
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
            log(f"trainer {trainer_id} pass {pass_id + 1} step {step} {shown}")
            if trainer_id == 0:
                report(step=step, loss=mean)  # the job's page plots it
            saving.after(step, pass_id)
        log(f"trainer {trainer_id} pass {pass_id + 1} done: mean loss "
            f"{total / steps_per_pass:.6f}")
    return passes, step


# --- training: the job's dataset, through its master -------------------------------------------


class MasterRows:
    """This trainer's rows from the job's master, a batch at a time, never blocking.

    A batch holds rows of one task (the master hands a trainer one task at a time). A task is
    reported done once all its rows have been trained: when the batch after its last is asked
    for, i.e. after the step that trained them. Where the master says to wait (the pass's
    other tasks are all held by other trainers) the batch is empty, and the master is asked
    again after ``ASK_AGAIN_SECONDS``, or at once when another trainer has moved on to a newer
    pass or was told that every pass is over (``newest``). Each task done is written to
    ``node_N/tasks.jsonl`` in the output directory: its pass, index, spans and rows trained.
    """

    def __init__(self, trainer_id: int, output: Path):
        self.trainer_id = trainer_id
        self.finished = False  # the master said every pass is over
        self.task: master.Task | None = None
        self._tasks = master.tasks(decode=parse_row, auto_done=False, block=False)
        self._rows = iter(())
        self._given = 0  # rows of the task handed out so far
        self._ask_at = 0.0  # monotonic time: when to ask the master again
        self._waited_at = -1.0  # the newest pass when the master said to wait
        self._journal = output / f"node_{trainer_id}" / "tasks.jsonl"
        self._journal.parent.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> MasterRows:
        self._tasks.__enter__()
        return self

    def __exit__(self, *exc_info) -> bool:
        # An exception: the task held is reported failed (with the exception's text) and goes
        # to another trainer; otherwise there is none left to give back.
        return self._tasks.__exit__(*exc_info)

    def batch(self, size: int, newest: float) -> tuple[np.ndarray, int | None]:
        """Up to ``size`` rows (a ``(n, 14)`` array, ``n`` possibly 0) and their pass."""
        rows: list[np.ndarray] = []
        while len(rows) < size:
            if self.task is None and not self._next_task(newest):
                break
            try:
                rows.append(next(self._rows))
            except StopIteration:
                if rows:
                    break  # the task's last rows: it is done after the step that trains them
                self._done()  # every row of it was trained in the steps before
                continue
            self._given += 1
        pass_no = self.task.pass_no if rows else None
        return np.stack(rows) if rows else np.zeros((0, FEATURES + 1), "float32"), pass_no

    def _next_task(self, newest: float) -> bool:
        if self.finished or (time.monotonic() < self._ask_at and newest <= self._waited_at):
            return False
        try:
            task = next(self._tasks)
        except StopIteration:
            self.finished = True
            return False
        if task is None:  # wait: every task of this pass is someone else's
            self._ask_at = time.monotonic() + ASK_AGAIN_SECONDS
            self._waited_at = newest
            return False
        self.task, self._rows, self._given = task, iter(task), 0
        return True

    def _done(self) -> None:
        task = self.task
        done = task.done()  # False: its lease was lost, another trainer reads it again
        if not done:
            log(f"trainer {self.trainer_id}: task {task['index']} of pass {task['pass'] + 1} was "
                "taken back by the master (its lease was lost): another trainer trains it")
        with self._journal.open("a") as journal:
            journal.write(json.dumps({"pass": task["pass"], "index": task["index"],
                                      "spans": task["spans"], "rows": self._given,
                                      "done": done}) + "\n")
        self.task, self._rows = None, iter(())


def gather(paddle, dist, values: list[int]) -> list[list[int]]:
    """Every trainer's ``values``, in trainer order."""
    if dist is None:
        return [values]
    everyone: list = []
    dist.all_gather(everyone, paddle.to_tensor(values, dtype="int64"))
    return [[int(v) for v in t.numpy()] for t in everyone]


def train_from_master(paddle, dist, net, optimizer, trainer_id: int, trainers: int,
                      output: Path, saving: Saving) -> tuple[int, int]:
    """Train on what the job's master hands this trainer, pass after pass, until every pass is
    over; (passes, steps).

    Collective training runs in lockstep — every trainer must take every step, since each
    step's gradients are all-reduced — but the master hands out tasks as trainers ask, so the
    trainers hold different numbers of rows. Each step, therefore:

    1. each trainer takes up to ``BATCH_SIZE`` rows of its task (never blocking: a trainer the
       master told to wait has none);
    2. they all-gather (rows, pass, finished): everyone now knows the step's total ``N``;
    3. ``N == 0``: the run is over when every trainer was told so, else (all wait: a task's
       holder died, say) they pause and try again — all of them, as they all know it;
    4. else each computes the sum of its squared errors (0 without rows: a dummy row of weight
       0) times ``trainers / N``; ``DataParallel`` sums the gradients and divides by
       ``trainers``: the gradient of the mean squared error over the ``N`` rows read, however
       they are spread, as one trainer with all of them would compute it.

    A pass is the master's: it makes pass ``p + 1`` only once every task of ``p`` is done, and
    a trainer reports a task done only after the step that trained its last rows, so a step
    never mixes two passes, and every row of a pass is trained once (the master completes a
    task once a pass) — across a restart too: the master went back to where the checkpoint
    resumed from (``saving.step``) left the pass.
    """
    step = saving.step
    passes = 0
    current: int | None = None  # the pass being trained
    newest = -1.0  # the newest pass any trainer has trained rows of (inf: one was told done)
    sums = {"rows": 0, "mine": 0, "steps": 0, "idle": 0, "sse": 0.0}

    def end_of_pass() -> None:
        log(f"trainer {trainer_id} pass {current + 1} done: {sums['rows']} rows in "
            f"{sums['steps']} steps ({sums['idle']} with a trainer without rows), "
            f"{sums['mine']} of them here; mean loss {sums['sse'] / sums['rows']:.6f}")

    with MasterRows(trainer_id, output) as rows:
        while True:
            table, pass_no = rows.batch(BATCH_SIZE, newest)
            n = len(table)
            everyone = gather(paddle, dist, [n, -1 if pass_no is None else pass_no,
                                             int(rows.finished)])
            total = sum(e[0] for e in everyone)
            if any(e[2] for e in everyone):
                newest = math.inf  # one was told every pass is over: the others ask now
            if total == 0:
                if all(e[2] for e in everyone):
                    break
                time.sleep(IDLE_SECONDS)
                continue
            step_passes = {e[1] for e in everyone if e[0]}
            if len(step_passes) != 1:  # cannot be: see above
                raise RuntimeError(f"step {step + 1} holds rows of passes {step_passes}")
            (this_pass,) = step_passes
            newest = max(newest, this_pass)
            if this_pass != current:
                if current is not None:
                    end_of_pass()
                    passes += 1
                current = this_pass
                sums = dict.fromkeys(sums, 0)

            if n:
                x, y, weight = table[:, :FEATURES], table[:, FEATURES:], np.ones((n, 1))
            else:  # a step of weight 0: the same computation, no gradient
                x, y = np.zeros((1, FEATURES), "float32"), np.zeros((1, 1), "float32")
                weight = np.zeros((1, 1))
            errors = net(paddle.to_tensor(x)) - paddle.to_tensor(y)
            sse = (paddle.to_tensor(weight, dtype="float32") * errors * errors).sum()
            (sse * (trainers / total)).backward()  # DataParallel: the mean of the gradients
            optimizer.step()
            optimizer.clear_grad()
            mine = float(sse.item())
            summed = mine
            if dist is not None:
                reduced = sse.detach().clone()
                dist.all_reduce(reduced)
                summed = float(reduced.item())
            mean = summed / total

            step += 1
            idle = any(e[0] == 0 for e in everyone)
            sums["rows"] += total
            sums["mine"] += n
            sums["steps"] += 1
            sums["idle"] += idle
            sums["sse"] += summed
            held = (f"{n} rows, loss {mine / n:.6f}" if n else
                    "no rows (waiting for a task): weight 0")
            log(f"trainer {trainer_id} pass {this_pass + 1} step {step} {held}; "
                f"mean over the {total} rows of the trainers {mean:.6f}")
            if trainer_id == 0:
                report(step=step, loss=mean)  # the job's page plots it
            saving.after(step, this_pass)
    if current is not None:
        end_of_pass()
        passes += 1
    return passes, step


# --- the whole run -----------------------------------------------------------------------------


def main() -> int:
    if sys.argv[1:2] == ["--write-data"]:
        if len(sys.argv) != 3:
            raise SystemExit("usage: python train.py --write-data DIR")
        write_text_dataset(Path(sys.argv[2]))
        return 0
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

    from_master = bool(os.environ.get(master.URL_VAR, "").strip())  # the job has a dataset
    if from_master:
        log(f"trainer {trainer_id}/{trainers} reads the job's dataset through its master")
        test = load_text(DATA / "test.txt")
        truth = json.loads((DATA / "meta.json").read_text())
    else:
        root = env.dataset_dir("fit_a_line")
        ensure_dataset(root)
        shards = my_shards(root, trainer_id, trainers)
        log(f"trainer {trainer_id}/{trainers} reads {len(shards)} shards: "
            + " ".join(f.name for f in shards))
        x, y = load(shards)
        with np.load(root / "test.npz") as data:
            test = (data["x"], data["y"])
        truth = json.loads((root / "meta.json").read_text())

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
        init_parallel_env(dist)
        net = paddle.DataParallel(model)  # starts from trainer 0's parameters
    rate = float(os.environ.get("LEARNING_RATE", LEARNING_RATE))
    optimizer = paddle.optimizer.SGD(learning_rate=rate, parameters=model.parameters())
    every = int(os.environ.get("CHECKPOINT_EVERY", CHECKPOINT_EVERY))
    saving = Saving(model, optimizer, trainer_id, every)

    if from_master:
        passes, step = train_from_master(paddle, dist, net, optimizer, trainer_id, trainers,
                                         output, saving)
    else:
        passes, step = train_shards(paddle, dist, net, optimizer, x, y, trainer_id, trainers,
                                    passes, saving)

    if trainer_id == 0:
        save(paddle, model, test, truth, output / "model")
    if dist is not None:
        dist.barrier()  # trainer 0 hosts the rendezvous store: leave together
    log(f"trainer {trainer_id} finished {passes} passes, {step} steps "
        f"in {time.monotonic() - started:.1f}s")
    return 0


def save(paddle, model, test: tuple[np.ndarray, np.ndarray], truth: dict,
         model_dir: Path) -> None:
    """The parameters (``paddle.load`` them into a ``Linear(13, 1)``), an inference model
    (``paddle.jit.load``) and a summary with the test-set loss."""
    model_dir.mkdir(parents=True, exist_ok=True)
    paddle.save(model.state_dict(), str(model_dir / "fit_a_line.pdparams"))
    model.eval()
    spec = paddle.static.InputSpec(shape=[None, FEATURES], dtype="float32", name="x")
    paddle.jit.save(model, str(model_dir / "inference"), input_spec=[spec])
    with paddle.no_grad():
        test_loss = float(paddle.nn.functional.mse_loss(
            model(paddle.to_tensor(test[0])), paddle.to_tensor(test[1])).item())
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
