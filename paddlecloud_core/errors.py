"""What the clients (paddlectl, the SDK) share about the errors they meet."""

from __future__ import annotations

from collections.abc import Iterator


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception behind it, each once: its ``__cause__`` and
    ``__context__``, a ``reason`` (urllib's and urllib3's errors carry one) and the exceptions
    among its ``args`` (requests wraps urllib3's so), depth first."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cause = todo.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        yield cause
        todo += [c for c in (getattr(cause, "reason", None), cause.__cause__, cause.__context__,
                             *cause.args) if isinstance(c, BaseException)]
