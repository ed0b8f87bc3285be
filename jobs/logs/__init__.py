"""How a job's growing files — a replica's log, its metrics — reach a reader.

- ``lines``  — numbered lines of a growing file: where each line ends, reading and skipping
  them by number, the last lines (for the pages, the WebSockets and the metrics);
- ``stream`` — a log as a stream of bytes over HTTP: whole, its tail, or followed;
- ``pumps``  — following a file over WebSockets: one pump per followed file publishes its new
  lines to the channel layer, and each process's relay hands them to its followers
  (``jobs.consumers`` serves them).
- ``source`` — where a worker's log is read from (where it runs, or its file): the one place
  that decides, for the API and the pages.

The files themselves are reached the safe way through ``jobs.files``.
"""
