"""Scoring: every MedHELM metric, one engine.

- :mod:`.extract`: tolerant answer extraction (reasoning blocks dropped) with a strict-format flag;
- :mod:`.metrics`: the registry (``spec.metric`` -> instance function + aggregation) and exact match / micro-F1;
- :mod:`.medcalc`, :mod:`.medec`, :mod:`.ehrsql`, :mod:`.billing`: the benchmark-specific metrics;
- :mod:`.jury`: the LLM jury (judges from ``appliance.yaml``), every judgement recorded, none defaulted;
- :mod:`.rouge`: ROUGE-L (and an optional local-model BERTScore helper);
- :mod:`.engine`: :func:`~.engine.score_benchmark` for a run, :func:`~.engine.score_items` for any outputs;
- :mod:`.summary`: a benchmark's score with parse / strict-format rates, secondary metrics and groups.

A failed request, an unrunnable gold query or an instance with no valid judgement has value None: it is
excluded from the score and counted, never scored 0 or 1.
"""
