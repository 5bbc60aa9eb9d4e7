"""What a failure category means, for operators: a judgement's (``jury failures``) and, for the categories a request
can fail with, a run's (``run``'s summary, worded for the model's server).

A hint is fixed text chosen by the category alone: it never carries a reply, a prompt or a server's error body.
"""

from __future__ import annotations

_EXACT = {
    "format_rejected": "{server} rejected the structured-output format (response_format); check "
                       "{who}'s `kind` in appliance.yaml (embedded, vllm or openai-compatible), then {rerun}",
    "timeout": "{who} did not answer in time: raise {whose_model} timeout_s or lower --concurrency",
    "connect_error": "{server} could not be reached: is it running, and is its base URL right?",
    "connection_dropped": "{server} closed the connection mid-request: check that it is healthy",
    "invalid_json": "{server} answered with a body that is not an OpenAI chat completion",
    "http_error": "the HTTP request to {who} failed: check {server} and its base URL",
    "http_400": "{server} refused the request (often: the prompt is longer than its context); check "
                "its context length against the model's context_length in appliance.yaml",
    "http_401": "{server} refused the API key: check api_key_env / api_key_file",
    "http_403": "{server} refused the API key: check api_key_env / api_key_file",
    "http_404": "{server} does not serve this path or model: check its base URL (…/v1) and served_model",
    "http_413": "{prompt} is too large for {server_short}",
    "http_422": "{server} refused the request as invalid (an unsupported parameter)",
    "http_429": "{server} is rate-limiting: lower --concurrency",
    "http_4xx_other": "{server} refused the request with a 4xx status the appliance does not tell apart "
                      "(only its class is recorded): check the server's own log",
    "http_other": "{server} answered with a status that is neither a completion nor an error (1xx, 3xx, "
                  "a 2xx other than 200, or none HTTP defines): check its base URL, or a proxy in front of it",
    "no_text": "{server} answered without any text",
    "invalid_encoding": "{server} sent its reply in a content coding the appliance cannot decode (it "
                        "asks for none): check the server, or a proxy in front of it",
    "response_too_large": "{server} sent a reply larger than any completion (16 MiB or more): check "
                          "the server, or a proxy in front of it",
    "not_json": "the judge's reply was not JSON: the model did not follow the output format (structured "
                "output off, or a model too small to judge)",
    "not_object": "the judge's reply was JSON but not an object with one entry per criterion",
    "cut_off": "the judge's reply stopped at its token limit before the rating was complete",
    "prompt_too_long": "{prompt} does not fit {who}'s context (with room for its reply) even with "
                       "its long fields truncated: raise {whose_model} context_length (and its server's)",
}


UNKNOWN_HINT = "unknown failure category"

# What a hint calls the one that failed: a judge (the default) or the model a run evaluates.
_WORDS = {
    "judge": {"who": "the judge", "whose_model": "the judge model's",
              "server": "the judge's server", "server_short": "the judge's server", "prompt": "the judge prompt",
              "rerun": "`jury rescore`"},
    "model": {"who": "the model", "whose_model": "the model's",
              "server": "the model's server", "server_short": "its server", "prompt": "the prompt",
              "rerun": "re-send them (`run --retry-errors RUN`)"},
}


def failure_hint(category: str, who: str = "judge") -> str:
    """A short, fixed, patient-data-free explanation of a failure category and what to do about it; ``who``: "judge"
    (a judgement's) or "model" (a run's request, for the categories a request can fail with)."""
    words = _WORDS[who]
    if category in _EXACT:
        return _EXACT[category].format(**words)
    name, _, detail = category.partition(":")
    if name == "missing":
        return f"the judge's reply has no rating for criterion {detail!r}"
    if name == "bad_score":
        return f"the judge's rating for criterion {detail!r} is not an integer from 1 to 5"
    if name.startswith("tokenize_"):
        return f"{words['server']} could not count {words['prompt']}'s tokens (its tokenize endpoint failed): " \
               f"check the server's health, then {words['rerun']}"
    if name.startswith("http_5"):
        return f"{words['server']} failed with a server error: check its health and log (if every request " \
               "fails, it may be refusing a request parameter)"
    return UNKNOWN_HINT
