"""A synthetic hospice-referral extract in MedHELM's private format (``prompt, context, label``).

Every patient and note is invented from the word lists below; no real patient data is involved.
Label A: the note documents hospice eligibility (terminal diagnosis, limited prognosis, goals of comfort).
Label B: it does not.
"""

from __future__ import annotations

import csv
import io
import random

QUESTION = (
    "Based on the clinical note, should this patient be referred to hospice care? "
    "A. Yes, refer to hospice. B. No, do not refer to hospice."
)
_FIRST = ["Alder", "Briar", "Cedar", "Dune", "Ember", "Fennel", "Garnet", "Hollis", "Indigo", "Juniper"]
_LAST = ["Testcase", "Synthson", "Mockwell", "Fauxley", "Demoford"]
_TERMINAL = [
    ("metastatic pancreatic adenocarcinoma", "progression despite second-line chemotherapy"),
    ("end-stage heart failure (NYHA class IV)", "recurrent admissions for decompensation"),
    ("advanced COPD on home oxygen", "dyspnea at rest and weight loss"),
    ("end-stage renal disease", "declining dialysis after shared decision-making"),
    ("glioblastoma", "progressive weakness and somnolence after completing radiotherapy"),
]
_STABLE = [
    ("type 2 diabetes", "HbA1c improved on current regimen"),
    ("community-acquired pneumonia", "afebrile and improving on oral antibiotics"),
    ("osteoarthritis of the knee", "pain controlled, walking with a cane"),
    ("hypertension", "blood pressure at goal"),
    ("early-stage breast cancer", "tolerating adjuvant therapy with curative intent"),
]


def _note(rng: random.Random, index: int, eligible: bool) -> str:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    age = rng.randint(48, 93)
    diagnosis, course = rng.choice(_TERMINAL if eligible else _STABLE)
    if eligible:
        plan = rng.choice([
            "Prognosis estimated at less than six months. Patient and family wish to focus on comfort.",
            "Palliative Performance Scale 30%. Goals of care discussion held; patient declines further "
            "disease-directed treatment.",
        ])
    else:
        plan = rng.choice([
            "Continue current management and follow up in clinic in three months.",
            "Patient remains independent in activities of daily living; no change in goals of care.",
        ])
    return (
        f"SYNTHETIC NOTE {index:03d} (demo data, not a real patient). Patient: {name}, {age} years old. "
        f"History: {diagnosis}. Course: {course}. Assessment and plan: {plan}"
    )


def hospice_extract_csv(n: int = 40, seed: int = 7) -> str:
    """``n`` synthetic rows, half eligible, as CSV text."""
    rng = random.Random(seed)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["prompt", "context", "label"])
    for index in range(n):
        eligible = index % 2 == 0
        writer.writerow([QUESTION, _note(rng, index, eligible), "A" if eligible else "B"])
    return out.getvalue()
