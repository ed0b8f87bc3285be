"""What the jobs' lower layers announce, so they never call up into the layers that react.

``job_ended`` — jobs of one owner in one datacenter reached a final state (``succeeded``,
``failed``, ``killed``): sent by ``transitions`` inside the transaction that ended them, with
``owner_id``, ``datacenter_id`` and ``job_ids``. Admission listens: what they held (or their
places in the queue) is free, so the owner's waiting jobs may start.
"""

from django.dispatch import Signal

job_ended = Signal()
