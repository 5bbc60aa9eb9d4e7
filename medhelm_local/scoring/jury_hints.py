"""What a judgement's failure category means, for operators (``jury failures``).

A hint is fixed text chosen by the category alone: it never carries a reply, a prompt or a server's error body.
"""

from __future__ import annotations

_EXACT = {
    "format_rejected": "the judge's server rejected the structured-output format (response_format); check the "
                       "judge's `kind` in appliance.yaml (embedded, vllm or openai-compatible), then `jury rescore`",
    "timeout": "the judge did not answer in time: raise the judge model's timeout_s or lower --concurrency",
    "connect_error": "the judge's server could not be reached: is it running, and is its base URL right?",
    "connection_dropped": "the judge's server closed the connection mid-request: check that it is healthy",
    "invalid_json": "the judge's server answered with a body that is not an OpenAI chat completion",
    "http_error": "the HTTP request to the judge failed: check the judge's server and its base URL",
    "http_400": "the judge's server refused the request (often: the prompt is longer than its context); check "
                "its context length against the model's context_length in appliance.yaml",
    "http_401": "the judge's server refused the API key: check api_key_env / api_key_file",
    "http_403": "the judge's server refused the API key: check api_key_env / api_key_file",
    "http_404": "the judge's server does not serve this path or model: check its base URL (…/v1) and served_model",
    "http_413": "the judge prompt is too large for the judge's server",
    "http_422": "the judge's server refused the request as invalid (an unsupported parameter)",
    "http_429": "the judge's server is rate-limiting: lower --concurrency",
    "http_4xx_other": "the judge's server refused the request with a 4xx status the appliance does not tell apart "
                      "(only its class is recorded): check the server's own log",
    "http_other": "the judge's server answered with a status that is neither a completion nor an error (1xx, 3xx, "
                  "a 2xx other than 200, or none HTTP defines): check its base URL, or a proxy in front of it",
    "no_text": "the judge's server answered without any text",
    "invalid_encoding": "the judge's server sent its reply in a content coding the appliance cannot decode (it "
                        "asks for none): check the server, or a proxy in front of it",
    "response_too_large": "the judge's server sent a reply larger than any completion (16 MiB or more): check "
                          "the server, or a proxy in front of it",
    "not_json": "the judge's reply was not JSON: the model did not follow the output format (structured "
                "output off, or a model too small to judge)",
    "not_object": "the judge's reply was JSON but not an object with one entry per criterion",
    "cut_off": "the judge's reply stopped at its token limit before the rating was complete",
    "prompt_too_long": "the judge prompt does not fit the judge's context (with room for its reply) even with "
                       "its long fields truncated: raise the judge model's context_length (and its server's)",
}


def failure_hint(category: str) -> str:
    """A short, fixed, patient-data-free explanation of a failure category and what to do about it."""
    if category in _EXACT:
        return _EXACT[category]
    name, _, detail = category.partition(":")
    if name == "missing":
        return f"the judge's reply has no rating for criterion {detail!r}"
    if name == "bad_score":
        return f"the judge's rating for criterion {detail!r} is not an integer from 1 to 5"
    if name.startswith("tokenize_"):
        return "the judge's server could not count the judge prompt's tokens (its tokenize endpoint failed): " \
               "check the server's health, then `jury rescore`"
    if name.startswith("http_5"):
        return "the judge's server failed with a server error: check its health and log (if every request " \
               "fails, it may be refusing a request parameter)"
    return "unknown failure category"
