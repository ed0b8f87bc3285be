"""A trainer: reads its shards of the training set, and for every mini-batch pulls the
parameters from all pservers, computes the gradient of the mean squared error, and pushes each
pserver its block of the gradient (a push returns when every trainer pushed for the round and
the pserver applied their mean). Trainer 0 records the metrics and, once the other trainers are
done, saves the final parameters.

Checkpoints: the model lives in the pservers, a step is a round of theirs. Every
``CHECKPOINT_EVERY`` steps trainer 0, its push of the step answered (the round applied, the
next one waiting for its own push), pulls the parameters and saves them
(``paddlecloud_sdk.checkpoint``): they are the model of exactly that step. A run that starts
goes on from the pservers' round: a trainer restarted alone finds its pservers where the
others are (nothing lost); pservers that are new (the whole job started again) are given back
the parameters of the latest checkpoint and its step by trainer 0 (``restore``), the other
trainers waiting for it. The data goes on at the same row: every pass's order is drawn again
from the trainer's seed."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
from protocol import (
    DIM,
    FEATURES,
    blocks,
    log,
    recv,
    send,
    split_endpoint,
)

from paddlecloud_sdk import checkpoint, dataset, env

SHARDS = 8  # training-set files: at most this many trainers
ROWS_PER_SHARD = 64
TEST_ROWS = 128
NOISE = 0.1
SEED = 1013
BATCH_SIZE = 16
DEFAULT_PASSES = 10
CONNECT_TIMEOUT = 300.0  # pservers start at the same time as the trainers
REPLY_TIMEOUT = 600.0  # a push waits for the slowest trainer
PEERS_TIMEOUT = 3600.0  # how long trainer 0 waits for the other trainers to finish
CHECKPOINT_EVERY = 20  # steps between trainer 0's checkpoints, unless the environment says


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
            return {"x": x, "y": x @ weight + bias + NOISE * rng.normal(size=n)}

        for shard in range(SHARDS):
            np.savez(tmp / f"part-{shard:05d}.npz", **rows(ROWS_PER_SHARD))
        np.savez(tmp / "test.npz", **rows(TEST_ROWS))
        meta = {"features": FEATURES, "shards": SHARDS, "rows_per_shard": ROWS_PER_SHARD,
                "noise": NOISE, "seed": SEED, "weight": weight.tolist(), "bias": bias}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last

    dataset.build_once(root, generate, done="meta.json")


def my_shards(root: Path, trainer_id: int, trainers: int) -> list[Path]:
    """Shard ``i`` for trainer ``i % trainers``, as the seeds' cluster_files_reader."""
    shards = len(list(root.glob("part-*.npz")))
    if shards < trainers:
        raise SystemExit(f"the dataset in {root} has {shards} shards, "
                         f"fewer than the {trainers} trainers")
    return [Path(f) for f in dataset.trainer_files(root / "part-*.npz", trainers, trainer_id)]


def load(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    parts = [np.load(f) for f in files]
    return (np.concatenate([p["x"] for p in parts]), np.concatenate([p["y"] for p in parts]))


def mse_and_gradient(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean squared error of ``x @ w + b`` (``theta = [w..., b]``) and its gradient."""
    error = x @ theta[:FEATURES] + theta[FEATURES] - y
    gradient = np.empty(DIM)
    gradient[:FEATURES] = 2.0 * (x.T @ error) / len(y)
    gradient[FEATURES] = 2.0 * error.mean()
    return float(np.mean(error**2)), gradient


# --- talking to the pservers -------------------------------------------------------------------


class Pserver:
    def __init__(self, endpoint: str, block: slice):
        self.endpoint = endpoint
        self.block = block
        self.sock: socket.socket | None = None

    def connect(self, deadline: float) -> None:
        """Retry until the pserver accepts: it starts at the same time as this trainer."""
        address = split_endpoint(self.endpoint)
        waited = False
        while True:
            try:
                sock = socket.create_connection(address, timeout=5)
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SystemExit(f"pserver {self.endpoint} did not accept connections "
                                     f"in {CONNECT_TIMEOUT:.0f}s: {exc}") from exc
                if not waited:
                    log(f"waiting for pserver {self.endpoint} ({exc})")
                    waited = True
                time.sleep(0.2)
                continue
            sock.settimeout(REPLY_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = sock
            return

    def call(self, header: dict, values: np.ndarray | None = None):
        assert self.sock is not None
        send(self.sock, header, values)
        message = recv(self.sock)
        if message is None:
            raise SystemExit(f"pserver {self.endpoint} closed the connection")
        reply, payload = message
        if not reply.get("ok"):
            raise SystemExit(f"pserver {self.endpoint} refused {header['op']}: "
                             f"{reply.get('error')}")
        return reply, payload

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def pull(pservers: list[Pserver]) -> np.ndarray:
    theta = np.empty(DIM)
    for ps in pservers:
        _, values = ps.call({"op": "pull"})
        size = ps.block.stop - ps.block.start
        if values is None or values.size != size:
            raise SystemExit(f"pserver {ps.endpoint} holds a different block of parameters "
                             f"(expected {size} values): is it the same job?")
        theta[ps.block] = values
    return theta


def rounds(pservers: list[Pserver]) -> int:
    """The round the pservers are at (the same on each while this trainer has no push under
    way: no round ends without it)."""
    return min(ps.call({"op": "pull"})[0]["round"] for ps in pservers)


def resume(pservers: list[Pserver], trainer_id: int) -> int:
    """The step this run goes on from (0: the start): the pservers' round, once trainer 0 has
    given new pservers the latest checkpoint's parameters (the others wait for that)."""
    found = checkpoint.load() if trainer_id == 0 else checkpoint.latest()
    saved = found.step if found is not None else 0
    at = rounds(pservers)
    if at == 0 and saved and trainer_id == 0:
        theta = np.load(io.BytesIO(found.state["params.npy"]))
        for ps in pservers:
            ps.call({"op": "restore", "trainer": trainer_id, "round": saved}, theta[ps.block])
        log(f"trainer 0 resumed from the checkpoint of step {saved} (pass {found.pass_ + 1}): "
            f"its parameters given back to the pservers")
        return saved
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while at < saved:  # new pservers: trainer 0 gives them the checkpoint
        if time.monotonic() > deadline:
            raise SystemExit(f"the pservers were not given the checkpoint of step {saved} in "
                             f"{CONNECT_TIMEOUT:.0f}s")
        time.sleep(0.2)
        at = rounds(pservers)
    if at:
        log(f"trainer {trainer_id} goes on from step {at}, where its pservers are "
            f"(latest checkpoint: step {saved})")
    return at


def params_file(theta: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, theta)
    return out.getvalue()


def wait_for_peers(pservers: list[Pserver], trainer_id: int, trainers: int) -> None:
    """Until every other trainer told every pserver that it is done."""
    others = set(range(trainers)) - {trainer_id}
    deadline = time.monotonic() + PEERS_TIMEOUT
    last_report = 0.0
    while True:
        missing = set()
        for ps in pservers:
            reply, _ = ps.call({"op": "status"})
            missing |= others - set(reply["done"])
        if not missing:
            return
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"trainers {sorted(missing)} did not finish in time")
        if now - last_report > 10:
            log(f"trainer {trainer_id} waits for trainers {sorted(missing)} to finish")
            last_report = now
        time.sleep(0.2)


# --- training ----------------------------------------------------------------------------------


def run() -> int:
    started = time.monotonic()
    trainer_id = env.trainer_id()
    trainers = env.trainer_count()
    passes = env.num_passes(default=DEFAULT_PASSES)
    output = env.output_dir().resolve()
    endpoints = env.pserver_endpoints()
    if not endpoints:
        raise SystemExit("ps_numpy needs pservers: PADDLE_PSERVERS_IP_PORT_LIST is empty")
    if not 0 <= trainer_id < trainers:
        raise SystemExit(f"trainer id {trainer_id} is not in 0..{trainers - 1}")

    root = env.dataset_dir("ps_numpy")
    ensure_dataset(root)
    shards = my_shards(root, trainer_id, trainers)
    log(f"trainer {trainer_id}/{trainers} reads {len(shards)} shards: "
        + " ".join(f.name for f in shards))
    x, y = load(shards)

    pservers = [Pserver(e, b) for e, b in zip(endpoints, blocks(DIM, len(endpoints)),
                                               strict=True)]
    deadline = time.monotonic() + CONNECT_TIMEOUT
    for ps in pservers:
        ps.connect(deadline)
    log(f"trainer {trainer_id} connected to {len(pservers)} pservers")

    metrics = output / "metrics.jsonl"
    if trainer_id == 0:
        output.mkdir(parents=True, exist_ok=True)
    every = int(os.environ.get("CHECKPOINT_EVERY", CHECKPOINT_EVERY))
    pause = float(os.environ.get("STEP_SECONDS", "0"))  # to watch it (or stop it) mid-run
    step = resume(pservers, trainer_id)
    rng = np.random.default_rng(SEED + trainer_id)
    steps_per_pass = max(1, len(y) // BATCH_SIZE)
    first_pass, first_step = divmod(step, steps_per_pass)
    for pass_id in range(passes):
        order = rng.permutation(len(y))  # drawn for the passes before too: the same orders
        if pass_id < first_pass:
            continue
        total, begin = 0.0, first_step if pass_id == first_pass else 0
        for i in range(begin, steps_per_pass):
            batch = order[i * BATCH_SIZE:(i + 1) * BATCH_SIZE]
            loss, gradient = mse_and_gradient(pull(pservers), x[batch], y[batch])
            for ps in pservers:  # the round: a pserver this step reached before a restart
                ps.call({"op": "push", "trainer": trainer_id, "round": step},
                        gradient[ps.block])
            step += 1
            total += loss
            log(f"trainer {trainer_id} pass {pass_id + 1} step {step} loss {loss:.6f}")
            if trainer_id == 0:
                line = {"step": step, "loss": loss, "trainer": trainer_id, "pass": pass_id}
                with metrics.open("a") as out:
                    out.write(json.dumps(line) + "\n")
                if step % every == 0:  # the round of this step applied, the next not begun
                    checkpoint.save({"params.npy": params_file(pull(pservers))}, step,
                                    pass_=pass_id)
            time.sleep(pause)
        if begin < steps_per_pass:
            log(f"trainer {trainer_id} pass {pass_id + 1} done: mean loss "
                f"{total / (steps_per_pass - begin):.6f}")

    if trainer_id == 0:
        # Leave the rounds (the others may have more steps), then wait until the others are
        # done too: the pservers stay up until trainer 0 says it is done, so it can save the
        # final parameters.
        for ps in pservers:
            ps.call({"op": "finish", "trainer": trainer_id})
        wait_for_peers(pservers, trainer_id, trainers)
        save(pull(pservers), root, output / "model")
    for ps in pservers:
        ps.call({"op": "done", "trainer": trainer_id})
        ps.close()
    log(f"trainer {trainer_id} finished {passes} passes, {step} steps "
        f"in {time.monotonic() - started:.1f}s")
    return 0


def save(theta: np.ndarray, root: Path, model_dir: Path) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    np.save(model_dir / "params.npy", theta)  # [w_0 .. w_12, b]
    test = np.load(root / "test.npz")
    test_loss, _ = mse_and_gradient(theta, test["x"], test["y"])
    truth = json.loads((root / "meta.json").read_text())
    summary = {"test_loss": test_loss, "weight": theta[:FEATURES].tolist(),
               "bias": float(theta[FEATURES]), "true_weight": truth["weight"],
               "true_bias": truth["bias"]}
    (model_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    log(f"saved the model in {model_dir}: test loss {test_loss:.6f}")
