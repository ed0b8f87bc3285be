"""Signals other apps listen to, so accounts does not import them."""

from django.dispatch import Signal

# A quota changed (sent once the change is committed): ``user`` is None when it was the
# datacenter's default. The jobs app admits waiting jobs the new numbers have room for.
quota_changed = Signal()
