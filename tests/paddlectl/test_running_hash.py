"""A large upload is hashed as it is sent: each byte once, whatever is sent again."""

from __future__ import annotations

import hashlib
import io

from paddlecloud_client.transfer import RunningHash, Window


class _Quiet:
    def rewind(self, position):
        pass

    def update(self, count):
        pass


def test_bytes_sent_again_after_a_broken_connection_are_hashed_once():
    data = bytes(range(256)) * 400
    file = io.BytesIO(data)
    running = RunningHash()
    Window(file, 0, 40_000, _Quiet(), running).read()
    # The connection broke after 40 000 bytes; the server had 30 000: send from there again.
    Window(file, 30_000, 40_000, _Quiet(), running).read()
    assert running.position == 70_000
    # Before the last chunk goes, the rest is hashed so its checksum can go with it.
    assert running.up_to(file, len(data)) == hashlib.sha256(data).hexdigest()
    Window(file, 70_000, len(data) - 70_000, _Quiet(), running).read()
    assert running.hash.hexdigest() == hashlib.sha256(data).hexdigest()
