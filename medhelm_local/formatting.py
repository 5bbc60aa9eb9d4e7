"""How costs, prices and durations are written for people: the one formatter every front end uses (the CLI's
tables and lines, the console's pages, an export's report and CSV files, the figures' axes).

Honest numbers: a measured amount that is not zero never reads as zero (a local run's cost of 0.00004 is not
"0.00"), and an unknown one (None) reads as unknown, never as 0. ``--json`` outputs carry the numbers
themselves, unformatted.
"""

from __future__ import annotations

import math

# More decimals than this and a number is written in scientific notation (3.47e-05): a run of zeros is hard to
# read, and seven digits or more in a row look like a record number to an export's PHI scan (export/scan.py).
MAX_DECIMALS = 6


def significant(value: float, digits: int, min_decimals: int) -> str:
    """``value`` with at least ``min_decimals`` decimals and as many more as ``digits`` significant digits need
    (trailing zeros beyond ``min_decimals`` dropped): ``0.00347`` -> ``0.00347``, ``12.5`` -> ``12.50`` (2
    decimals), ``1234.5678`` -> ``1234.57``; beyond ``MAX_DECIMALS`` decimals, scientific: ``0.0000347`` ->
    ``3.47e-05``. A non-zero value never comes out as zero."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.{min_decimals}f}"
    decimals = max(min_decimals, digits - 1 - math.floor(math.log10(abs(value))))
    if decimals > MAX_DECIMALS:
        mantissa, _, exponent = f"{value:.{digits - 1}e}".partition("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"
    text = f"{value:.{decimals}f}"
    if decimals > min_decimals:
        text = text.rstrip("0")
        whole, _, fraction = text.partition(".")
        text = f"{whole}.{fraction.ljust(min_decimals, '0')}" if min_decimals else text.rstrip(".")
    return text


def money(value: float | None, *, decimals: int = 2, unknown: str = "-") -> str:
    """A cost or a price: ``decimals`` decimals (an export's policy's, so that "12.50" stands beside "3.25") and
    as many more as four significant digits need, so that a small evaluation cost never prints as 0.00;
    ``unknown`` when there is none (no pricing: never 0) or it is no number (NaN, infinite)."""
    return unknown if value is None or not math.isfinite(value) else significant(float(value), 4, decimals)


def duration(value: float | None, *, unknown: str = "-") -> str:
    """A time in seconds, without its unit: one decimal and as many more as three significant digits need
    (``0.04`` for a 40 ms run, not ``0.0``); ``unknown`` when there is none or it is no number."""
    return unknown if value is None or not math.isfinite(value) else significant(float(value), 3, 1)
