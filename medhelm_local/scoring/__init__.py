"""Scoring: every MedHELM metric, one abstraction (a scorer), one engine.

- :mod:`.scorer`: the abstraction: a :class:`~.scorer.Scorer` (async; may call models; emits one or several
  named values; declares the instance fields it needs) and :class:`~.scorer.InstanceScorer` for functions of one
  instance's output;
- :mod:`.registry`: the one list of metrics a spec's ``metrics:`` may name, each emitted by one scorer;
- :mod:`.details`: the typed details a scorer records beside a value;
- :mod:`.checks`: a spec checked against its scorers (judges, rubric, loader fields) before any inference;
- :mod:`.extract`: tolerant answer extraction (reasoning blocks dropped) with a strict-format flag;
- :mod:`.metrics`: exact match and micro-F1; :mod:`.medcalc`, :mod:`.medec`, :mod:`.ehrsql`, :mod:`.billing`: the
  benchmark-specific metrics; :mod:`.rouge`: ROUGE-L;
- :mod:`.jury`: the LLM jury (judges from ``appliance.yaml``), every judgement recorded, none defaulted;
- :mod:`.engine`: :func:`~.engine.score_benchmark` for a run, :func:`~.engine.score_items` for any outputs;
- :mod:`.summary`: a benchmark's score with parse / strict-format rates, secondary metrics and groups.

A failed request, an unrunnable gold query or an instance with no valid judgement has value None: it is
excluded from the score and counted, never scored 0 or 1.
"""
