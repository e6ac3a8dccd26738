"""Analysis past one trace: many rank files in worker processes or on a Ray cluster, and who waits for whom.

Each rank file is analysed where it is (a worker process, or a Ray task pinned to the node that holds the file) into
a :class:`~phaseprof.scale.rank_task.RankResult`: the rank's breakdown plus the few arrays the cross-rank report
needs (collective kernel instances, compute and launch-call intervals). Only those travel; trace files never do.
"""
