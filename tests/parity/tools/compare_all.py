"""Compare this appliance's ``--prompt-style medhelm`` prompts with HELM's for every item of the public files.

    /tmp/helm-venv/bin/python tests/parity/tools/helm_golden.py --all-items /tmp/helm-all.jsonl
    PYTHONPATH=. .venv/bin/python tests/parity/tools/compare_all.py /tmp/helm-all.jsonl

Prints, per benchmark, how many items HELM renders, how many this appliance loads, and how many prompts are
byte-identical; the first differing item of each benchmark is shown by id and offset (no text).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.loaders import load_dataset
from medhelm_local.prompts.build import build_request
from medhelm_local.prompts.styles import MEDHELM_STYLE, styled_spec
from medhelm_local.scoring.jury import judge_prompt
from tests.conftest import SHARED_DATA

JUDGE_RESPONSE = "<<model response>>"

SOURCES = {"pubmedqa": "pubmedqa", "medcalc_bench": "medcalc_bench", "medec": "medec", "ehrsql": "ehrsql",
           "medhallu": "medhallu", "medqa": "medqa", "aci_bench": "aci_bench",
           "mtsamples": "mtsamples_sample/mtsamples_processed",
           "mtsamples_procedures": "mtsamples_sample/mtsample_procedure"}


def main(path: Path) -> int:
    helm: dict[str, dict[str, str]] = defaultdict(dict)
    judges: dict[str, dict[str, str]] = defaultdict(dict)
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        helm[row["benchmark"]][row["instance_id"]] = row["prompt"]
        if "judge" in row:
            judges[row["benchmark"]][row["instance_id"]] = row["judge"]
    bad = 0
    for benchmark, prompts in helm.items():
        if benchmark not in SOURCES:  # a one-item fixture benchmark: its golden test is the check
            print(f"{benchmark}: fixture only, skipped")
            continue
        spec = styled_spec(shipped_spec(benchmark), MEDHELM_STYLE)
        ours = {i.id: i for i in load_dataset(spec, SHARED_DATA / SOURCES[benchmark]).instances}
        same = 0
        first_diff = None
        for instance_id, prompt in prompts.items():
            instance = ours.get(instance_id)
            rendered = build_request(spec, instance).messages[0].content if instance else None
            if rendered == prompt:
                same += 1
            elif first_diff is None:
                offset = next((k for k, (a, b) in enumerate(zip(rendered or "", prompt, strict=False)) if a != b),
                              min(len(rendered or ""), len(prompt)))
                first_diff = f"{instance_id} at char {offset}" if instance else f"{instance_id} not loaded"
        bad += len(prompts) - same
        judged = sum(judge_prompt(spec, ours[i], JUDGE_RESPONSE) == text
                     for i, text in judges[benchmark].items() if i in ours)
        bad += len(judges[benchmark]) - judged
        print(f"{benchmark}: HELM {len(prompts)}, loaded {len(ours)}, identical {same}"
              + (f", judge prompts identical {judged} of {len(judges[benchmark])}" if judges[benchmark] else "")
              + (f"; first difference {first_diff}" if first_diff else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
