"""Terminal rendering shared by every layer that prints a table (report, sol, scale): fitting wide tables to the
terminal's width (``fit``). Knows nothing of what the rows mean."""
