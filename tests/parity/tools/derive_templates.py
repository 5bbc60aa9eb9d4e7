"""Draft ``medhelm`` parity templates from the HELM golden prompts (a development aid; the golden tests decide).

Each golden prompt has its braces doubled and every instance field value (longest first) replaced by ``{field}``,
so that filling the template with the same instance gives HELM's prompt back. Prints YAML blocks to review.

    PYTHONPATH=. .venv/bin/python tests/parity/tools/derive_templates.py [benchmark ...]
"""

from __future__ import annotations

import json
import sys

import yaml

from tests.parity.helm_cases import GOLDEN_HELM, load_case_instance


def templatize(text: str, fields: dict[str, str]) -> tuple[str, list[str]]:
    out = text.replace("{", "{{").replace("}", "}}")
    used = []
    for name, value in sorted(fields.items(), key=lambda kv: -len(kv[1])):
        escaped = value.replace("{", "{{").replace("}", "}}")
        if value and escaped in out:
            out = out.replace(escaped, "{" + name + "}")
            used.append(name)
    return out, used


def main(names: list[str]) -> None:
    for file in sorted(GOLDEN_HELM.glob("*.json")):
        golden = json.loads(file.read_text(encoding="utf-8"))
        if names and golden["benchmark"] not in names:
            continue
        instance = load_case_instance(golden)
        template, used = templatize(golden["prompt"], instance.fields)
        block: dict[str, object] = {"helm_run_spec": golden["helm_run_spec"], "template": template,
                                    "max_tokens": golden["max_tokens"], "stop": golden["stop_sequences"]}
        if "judge" in golden:
            question, _ = templatize(golden["instance_input"], instance.fields)
            judge, _ = templatize(golden["judge"]["prompt"], {"question": golden["instance_input"],
                                                              "response": "<<model response>>",
                                                              "gold_response": instance.references[0]})
            block["judge_question"] = question
            block["judge_template"] = judge
        print(f"# {golden['benchmark']}: fields used {used}")
        print(yaml.safe_dump({"medhelm": block}, sort_keys=False, width=10_000, allow_unicode=True))


if __name__ == "__main__":
    main(sys.argv[1:])
