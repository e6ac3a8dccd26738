"""Every ``phaseprof`` command, the top layer: each module parses one command's options and calls the library
(``main`` dispatches to them). Nothing below this folder imports it."""
