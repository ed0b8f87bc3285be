"""What an exec's ``Status`` (channel 3 of ``v4.channel.k8s.io``) says of how the command
ended, as the API server and the kubelet write it: literal Statuses."""

from __future__ import annotations

import pytest

from jobs.backends.kubernetes.streams import EXEC_FAILED, exit_code


@pytest.mark.parametrize(("status", "said"), [
    ({"metadata": {}, "status": "Success"}, (0, "")),
    ({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
      "message": "command terminated with non-zero exit code: exit status 7",
      "details": {"causes": [{"reason": "ExitCode", "message": "7"}]}}, (7, "")),
    # The runtime could not start it: its message, and a shell's status for that.
    ({"metadata": {}, "status": "Failure", "reason": "InternalError",
      "message": 'OCI runtime exec failed: exec: "nope": executable file not found in $PATH'},
     (EXEC_FAILED, 'OCI runtime exec failed: exec: "nope": executable file not found in $PATH')),
    ({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
      "details": {"causes": [{"reason": "ExitCode", "message": "not a number"}]}},
     (EXEC_FAILED, "the command could not be run")),
])
def test_an_exec_status_is_its_exit_code_or_why_it_did_not_run(status, said):
    assert exit_code(status) == said
