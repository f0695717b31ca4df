"""Children of a test process that end with it, however it ends (a pytest stopped by a timeout or
SIGKILL too): util-linux's setpriv sets the kernel's parent-death signal, SIGTERM (each server's
clean stop), before it execs the command, as the TypeScript side does (``endingWithParent`` in
src/common/process.ts). Without it a killed pytest leaves its relays and servers running, holding
ports, shared memory and huge-page mounts. The signal follows the thread that starts the child:
start them from the test's own thread. Where setpriv is missing, the command as it is."""

from __future__ import annotations

import os
from typing import List, Sequence

SETPRIV = "/usr/bin/setpriv"


def ending_with_parent(argv: Sequence[str]) -> List[str]:
    """``argv`` run so that it gets SIGTERM when this process dies."""
    if os.path.exists(SETPRIV):
        return [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
    return list(argv)
