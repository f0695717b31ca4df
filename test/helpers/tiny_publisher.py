"""One Python for every TinyLM publish of a test process (test/helpers/tiny-publisher.ts).

Each line on stdin is an argument list of ``python -m laminar.testing.publish`` as a JSON array;
it runs here, what that command prints goes to stdout as it would, then one line
``{"done": EXIT, "error": TEXT_OR_NULL}``. The command's own process would import torch again
for each publish, a few CPU seconds every time; this one imports it once. It exits at the end
of stdin, that is when the test process that started it ends, however it ends.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Optional

from laminar.testing.publish import main


def publish(argv: list[str]) -> tuple[int, Optional[str]]:
    """The command's exit status and, when it failed, why."""
    try:
        return main(argv), None
    except SystemExit as exit:  # argparse's usage errors (said on stderr) and --break's refusals
        if isinstance(exit.code, str):
            return 1, exit.code
        return exit.code or 0, None
    except Exception:  # a relay's refusal, a lost socket: the test reads why
        return 1, traceback.format_exc()


for line in sys.stdin:
    code, error = publish(json.loads(line))
    print(json.dumps({"done": code, "error": error}), flush=True)
