"""How many UTF-8 bytes a token of SmolLM2's tokenizer covers in the real prompts of the public benchmarks: the
measurement behind ``medhelm_local.inference.tokens.ESTIMATE_BYTES_PER_TOKEN`` (the fallback estimate when a server
has no tokenize endpoint must over-count).

Run: ``.venv/bin/python bench/token_estimate.py`` (needs the ``embedded`` extra; reads ../shared/data/public).
Loads only the GGUF's vocabulary (no weights in memory beyond it), tokenizes each prompt's message contents as the
embedded server's ``/extras/tokenize`` does, and prints per benchmark the prompts counted and the minimum, 1st
percentile and median bytes per token.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.inference.embedded import smollm2_gguf_path
from medhelm_local.inference.tokens import ESTIMATE_BYTES_PER_TOKEN
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts.build import build_request

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "public"
FILES = {
    "pubmedqa": "pubmedqa/ori_pqal.json",
    "medqa": "medqa/phrases_no_exclude_test.jsonl",
    "medcalc_bench": "medcalc_bench/test_data.csv",
    "medec": "medec/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
    "medhallu": "medhallu/medhallu_pqa_labeled.jsonl",
    "aci_bench": "aci_bench",
    "ehrsql": "ehrsql",
    "mtsamples": "mtsamples_sample/mtsamples_processed",
    "mtsamples_procedures": "mtsamples_sample/mtsample_procedure",
}


def main() -> int:
    from llama_cpp import Llama

    llm = Llama(model_path=str(smollm2_gguf_path()), vocab_only=True, verbose=False)
    report: dict[str, Any] = {}
    for benchmark, rel in FILES.items():
        spec = shipped_spec(benchmark)
        try:
            instances = load_dataset(spec, PUBLIC / rel).instances
        except Exception as exc:  # a loader that needs other files: say so, go on
            report[benchmark] = {"skipped": type(exc).__name__}
            continue
        ratios = []
        for instance in instances[:2000]:
            text = "\n".join(m.content for m in build_request(spec, instance).messages)
            tokens = len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
            ratios.append(len(text.encode("utf-8")) / max(1, tokens))
        ratios.sort()
        report[benchmark] = {"prompts": len(ratios), "min": round(ratios[0], 3),
                             "p01": round(ratios[len(ratios) // 100], 3), "median": round(statistics.median(ratios), 3)}
    report["ESTIMATE_BYTES_PER_TOKEN"] = ESTIMATE_BYTES_PER_TOKEN
    print(json.dumps(report, indent=1))
    worst = min(r["min"] for r in report.values() if isinstance(r, dict) and "min" in r)
    print(f"lowest bytes/token over all prompts: {worst} (the estimate assumes {ESTIMATE_BYTES_PER_TOKEN})")
    return 0 if worst >= ESTIMATE_BYTES_PER_TOKEN else 1


if __name__ == "__main__":
    sys.exit(main())
