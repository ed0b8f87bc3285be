"""A parameter server: holds one contiguous block of the model's parameters, sends them to
trainers that pull, and applies synchronous SGD: a round ends when every trainer still training
pushed its gradient; the pserver then applies ``params -= learning_rate * mean(gradients)`` and
answers the pushes. It exits 0 when every trainer said it is done, or on SIGTERM/SIGINT.

A new pserver of a job that ran before (the whole job started again) starts at zero; trainer
0 gives it back the parameters of its latest checkpoint, and their round (``restore``)."""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import threading

import numpy as np
from protocol import (
    DIM,
    ProtocolError,
    blocks,
    log,
    recv,
    send,
    split_endpoint,
)

from paddlecloud_sdk import env

LEARNING_RATE = 0.05


class Shard:
    def __init__(self, size: int, trainers: int, stop: threading.Event):
        self.params = np.zeros(size)
        self.trainers = trainers
        self.round = 0  # rounds applied so far
        self.pending: dict[int, np.ndarray] = {}  # this round's gradients, by trainer
        self.finished: set[int] = set()  # trainers that push no more
        self.done: set[int] = set()  # trainers that need this pserver no more
        self.stop = stop
        self.cond = threading.Condition()

    def handle(self, header: dict, values: np.ndarray | None) -> tuple[dict, np.ndarray | None]:
        op = header.get("op")
        with self.cond:
            if op == "pull":
                return {"ok": True, "round": self.round}, self.params.copy()
            if op == "status":
                return {"ok": True, "round": self.round, "trainers": self.trainers,
                        "finished": sorted(self.finished), "done": sorted(self.done)}, None
            trainer = header.get("trainer")
            if not isinstance(trainer, int) or not 0 <= trainer < self.trainers:
                return {"ok": False, "error": f"no trainer {trainer!r}"}, None
            if op == "push":
                return self._push(trainer, values, header.get("round")), None
            if op == "restore":
                return self._restore(header.get("round"), values), None
            if op in ("finish", "done"):
                if trainer not in self.finished:
                    self.finished.add(trainer)
                    self._end_round_if_complete()
                if op == "done" and trainer not in self.done:
                    self.done.add(trainer)
                    log(f"trainer {trainer} is done ({len(self.done)}/{self.trainers})")
                    if len(self.done) == self.trainers:
                        self.stop.set()
                return {"ok": True}, None
        return {"ok": False, "error": f"unknown op {op!r}"}, None

    def _push(self, trainer: int, values: np.ndarray | None, round_: object = None) -> dict:
        """Add this trainer's gradient to the round, and wait for the round to end.

        ``round_`` (the rounds the trainer had pushed before this one) tells a trainer
        restarted mid-push apart: its run before may have pushed this step to some pservers
        and not to others. A pserver that applied that round already answers at once (the
        step is in its parameters); one that holds that run's gradient for its open round
        takes the new one instead."""
        if values is None or values.shape != self.params.shape:
            got = 0 if values is None else values.size
            return {"ok": False, "error": f"expected {self.params.size} values, got {got}"}
        if trainer in self.finished:
            return {"ok": False, "error": f"trainer {trainer} said it had finished"}
        if isinstance(round_, int) and not isinstance(round_, bool):
            if round_ < self.round:
                return {"ok": True, "round": self.round}
            if round_ > self.round:
                return {"ok": False, "error": f"trainer {trainer} pushed for round {round_ + 1}"
                                              f" but this pserver is at round {self.round}"}
        elif trainer in self.pending:
            return {"ok": False, "error": f"trainer {trainer} pushed twice in one round"}
        self.pending[trainer] = values
        mine = self.round
        self._end_round_if_complete()
        while self.round == mine and not self.stop.is_set():
            self.cond.wait(timeout=1.0)
        if self.round == mine:
            return {"ok": False, "error": "the pserver is stopping"}
        return {"ok": True, "round": self.round}

    def _restore(self, round_: object, values: np.ndarray | None) -> dict:
        """Take the parameters of a checkpoint (trainer 0's, of step ``round_``): only while
        this pserver is new (no round applied, no gradient pushed), so a model it trained is
        never thrown away."""
        if values is None or values.shape != self.params.shape:
            got = 0 if values is None else values.size
            return {"ok": False, "error": f"expected {self.params.size} values, got {got}"}
        if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 1:
            return {"ok": False, "error": f"round must be a whole number from 1, not {round_!r}"}
        if self.round or self.pending:
            return {"ok": False, "error": f"it has trained already (round {self.round})"}
        self.params = values.copy()
        self.round = round_
        log(f"restored the parameters of round {round_} from a checkpoint")
        self.cond.notify_all()
        return {"ok": True, "round": self.round}

    def _end_round_if_complete(self) -> None:
        training = set(range(self.trainers)) - self.finished
        if self.pending and training <= self.pending.keys():
            self.params -= LEARNING_RATE * np.mean(list(self.pending.values()), axis=0)
            self.pending.clear()
            self.round += 1
            self.cond.notify_all()


class Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            try:
                message = recv(sock)
                if message is None:
                    return
                reply, values = self.server.shard.handle(*message)
                send(sock, reply, values)
            except (OSError, ValueError, ProtocolError) as exc:
                log(f"dropping the connection from {self.client_address}: {exc}")
                return


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True  # open trainer connections do not hold up the exit

    def __init__(self, address: tuple[str, int], shard: Shard):
        self.shard = shard
        super().__init__(address, Handler)


def serve() -> int:
    endpoints = env.pserver_endpoints()
    index = env.pserver_id() or 0
    if not 0 <= index < len(endpoints):
        raise SystemExit(f"pserver {index} is not in PADDLE_PSERVERS_IP_PORT_LIST={endpoints}")
    own = env.current_endpoint() or endpoints[index]
    own_host, own_port = split_endpoint(own)
    host = os.environ.get("POD_IP") or own_host
    port = int(os.environ.get("PADDLE_PORT") or own_port)
    block = blocks(DIM, len(endpoints))[index]
    trainers = env.trainer_count()

    stop = threading.Event()  # set by the last "done", or by a signal
    shard = Shard(block.stop - block.start, trainers, stop)

    def on_signal(signum, frame):
        log(f"pserver {index} got signal {signum}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    server = Server((host, port), shard)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    log(f"pserver {index}/{len(endpoints)} listens on {host}:{port}, holds parameters "
        f"{block.start}..{block.stop - 1} of {DIM}, waits for {trainers} trainers")
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    log(f"pserver {index} exits after {shard.round} rounds; "
        f"trainers done: {sorted(shard.done)}")
    return 0
