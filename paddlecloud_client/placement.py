"""``-datacenter auto`` on the client (paddlectl and the SDK): every datacenter of the config
is asked for a dry run of the same job, each with its own credentials (an API token is bound
to one datacenter), at the same time; the choice and its words are
``paddlecloud_core.placement``'s. The job is then submitted to the chosen one only, with the
words as its ``placement`` (the job's first event).

A local package is checked with the user's home standing in for it (``jobs.job_probe``) and
uploaded only where the job goes; a /pfs package or dataset is looked for at the same place
in each datacenter's PFS (``spec_in``: its dry run refuses it otherwise, naming the field).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from paddlecloud_client.api import datacenter_client
from paddlecloud_client.config import Config, Datacenter
from paddlecloud_client.errors import PaddlectlError, UsageError
from paddlecloud_client.jobs import job_probe
from paddlecloud_core.placement import (
    NowherePlaced,
    Option,
    admission_option,
    placement_choose,
    spec_in,
)

PROBE_WAIT = 30.0  # seconds a datacenter has to answer its dry run before it is passed over


def _option(datacenter: str, answer: dict | Exception | None, now: datetime) -> Option:
    """A dry run's answer (or its error, or no answer in time) as ``placement_choose`` reads
    it."""
    if answer is None:
        return Option(datacenter, refused=f"no answer within {PROBE_WAIT:g} s")
    if isinstance(answer, Exception):
        return Option(datacenter, refused=str(answer) or type(answer).__name__)
    return admission_option(datacenter, answer.get("admission"), now)


def datacenter_choose(config: Config, body: dict, local: Path | None,
                      agent: str = "paddlectl") -> tuple[Datacenter, str]:
    """The datacenter of ``config`` where the job ``body`` would start first, and why.
    ``local``: the job's package is this local directory (not yet in ``body``). Raises
    ``UsageError`` naming ``datacenter`` with each datacenter's reason when none can take it."""
    answers: dict[str, dict | Exception] = {}

    def ask(datacenter: Datacenter) -> None:
        try:
            client = datacenter_client(config, datacenter, agent=agent)
            there = spec_in(body, datacenter.name)
            answers[datacenter.name] = (
                job_probe(client, datacenter.home, there) or {} if local is not None
                else client.job_submit({**there, "dry_run": True}))
        except (PaddlectlError, OSError, ValueError) as exc:
            answers[datacenter.name] = exc

    # Daemon threads: one that does not answer in time is passed over, not waited for.
    threads = [threading.Thread(target=ask, args=(dc,), daemon=True, name=f"dry run {dc.name}")
               for dc in config.datacenters]
    for thread in threads:
        thread.start()
    until = datetime.now(UTC).timestamp() + PROBE_WAIT
    for thread in threads:
        thread.join(max(0.0, until - datetime.now(UTC).timestamp()))
    now = datetime.now(UTC)
    options = [_option(dc.name, answers.get(dc.name), now) for dc in config.datacenters]
    try:
        chosen, why = placement_choose(options, now)
    except NowherePlaced as exc:
        raise UsageError(f"datacenter: auto: {exc}") from None
    return config.datacenter(chosen), why
