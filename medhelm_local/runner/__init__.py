"""The evaluation runner: plan a run, send its requests, commit each response as it arrives.

The use cases that drive it (``evaluate``, ``merge shards``) are in ``application.evaluation``; here:

* ``options``: what one evaluation is asked: ``Selection`` (what to evaluate), ``Sending`` (how to send),
  ``Mode`` (new, resume, retry of errors, shard);
* ``plan``: the deterministic plan (sample, send order, plan key; the shard it sends, if any) and shard
  partitions;
* ``session``: the steps of one invocation: resolve the run and its model (the one place a model name is
  resolved), describe the servers, check the model identity, build a new run's manifest and store its plan, send;
* ``execute``: paged streaming of pending items, adaptive concurrency, group commits on one store thread;
* ``concurrency``: the adaptive limiter; ``progress``: bars on a terminal, structured lines otherwise;
* ``fitting``: prompts fitted into the model's context;
* ``manifest``: the reproducibility manifest and its sha256; ``shard``: shard store files (their SQL is in
  ``store.shards``).
"""
