"""``python -m phaseprof``: the ``phaseprof`` command (:func:`phaseprof.commands.main.entry`)."""

from phaseprof.commands.main import entry

entry()
