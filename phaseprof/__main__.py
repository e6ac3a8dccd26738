"""``python -m phaseprof``: the ``phaseprof`` command (:func:`phaseprof.commands.main.entry`), with its exit status."""

import sys

from phaseprof.commands.main import entry

sys.exit(entry())
