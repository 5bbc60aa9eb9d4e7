"""The evaluation runner: plan a run, send its requests, commit each response as it arrives.

* ``plan``: the deterministic plan (sample, send order, plan key) and shard partitions;
* ``session``: one ``run`` invocation (new, resume, retry of errors, shard), the manifest check, audit records;
* ``execute``: paged streaming of pending items, adaptive concurrency, group commits on one store thread;
* ``concurrency``: the adaptive limiter; ``progress``: bars on a terminal, structured lines otherwise;
* ``manifest``: the reproducibility manifest and its sha256; ``shard``: sharded runs and their merge.
"""
