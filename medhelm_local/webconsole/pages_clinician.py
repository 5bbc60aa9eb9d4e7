"""Clinicians: blinded rating of sampled open-ended responses on the jury's own criteria (1-5). The page shows
the question and the response, never the model, run or instance id; forms carry an opaque item token. Showing
an item is a view of patient-level data and is audited; so is every rating."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from medhelm_local.home.config import ConsoleRole
from medhelm_local.store.ratings import ClinicianRating
from medhelm_local.store.store import utcnow
from medhelm_local.webconsole import data, rating
from medhelm_local.webconsole.app import Console, bad_form_token, check_csrf, console_of, identity_of, requires

CLINICIAN = ConsoleRole.CLINICIAN


def _state(console: Console, rater: str) -> tuple[list[data.RatableResponse], list[ClinicianRating]]:
    settings = console.home.config.console
    sample = rating.stratified_sample(data.ratable_responses(console.home), settings.sample_per_stratum)
    return sample, data.clinician_ratings(console.home)


@requires(CLINICIAN)
def rate(request: Request) -> Response:
    console = console_of(request)
    identity = identity_of(request)
    settings = console.home.config.console
    sample, ratings = _state(console, identity.user)
    todo = rating.queue(sample, ratings, identity.user, settings.raters_per_item)
    done = rating.progress(sample, ratings, identity.user, settings.raters_per_item)
    if not todo:
        return console.render(request, "rate_done.html", progress=done, raters_per_item=settings.raters_per_item)
    item = todo[0]
    text = data.item_text(console.home, item.run_id, item.benchmark, item.instance_id)
    console.audit(identity, "console.rating.view", role="clinician", run_id=item.run_id, benchmark=item.benchmark,
                  position=item.position)  # never the id: an id may be PHI (person and date)
    spec = console.specs.get(item.benchmark)
    return console.render(request, "rate.html", text=text, spec=spec, criteria=spec.judge.criteria if spec.judge
                          else [], token=console.csrf.opaque(rating.item_key(item)), progress=done,
                          remaining=len(todo), raters_per_item=settings.raters_per_item,
                          saved=request.query_params.get("saved") == "1")


@requires(CLINICIAN)
async def submit(request: Request) -> Response:
    console = console_of(request)
    identity = identity_of(request)
    form = await request.form()
    if not check_csrf(request, form):
        return bad_form_token(request, "/rate")

    def refused(reason: str, status: int, title: str, message: str, back: str,
                item: data.RatableResponse | None = None) -> Response:
        """A rating not saved: audited (by the item's position, never its id), and the page that says why."""
        where = {} if item is None else {"run_id": item.run_id, "benchmark": item.benchmark,
                                         "position": item.position}
        console.audit(identity, "console.rating.submit", outcome="refused", role="clinician", reason=reason, **where)
        return console.render(request, "error.html", status_code=status, title=title, message=message,
                              back=("/rate", back))

    def save() -> Response:
        sample, _ = _state(console, identity.user)
        token = str(form.get("item", ""))
        found = [i for i in sample if console.csrf.opaque(rating.item_key(i)) == token]
        if not found:
            return refused("not_offered", 409, "Item no longer offered",
                           "This item is no longer in your queue (the console restarted, or it was rated already). "
                           "Your rating was not saved; open the next item.", "Open the next response to rate")
        item = found[0]
        settings = console.home.config.console
        spec = console.specs.get(item.benchmark)
        criteria = [c.name for c in spec.judge.criteria] if spec.judge else []
        values: dict[str, int] = {}
        for name in criteria:
            raw = str(form.get(f"c_{name}", ""))
            if raw not in {"1", "2", "3", "4", "5"}:
                return refused("incomplete", 400, "Rating incomplete",
                               f"Rate every criterion from 1 to 5 (missing: {name}). Nothing was saved.",
                               "Back to rating", item)
            values[name] = int(raw)
        outcome = data.save_rating(console.home, ClinicianRating(
            run_id=item.run_id, benchmark=item.benchmark, instance_id=item.instance_id, rater=identity.user,
            ratings=values, rated_at=utcnow()), settings.raters_per_item)
        if outcome == "full":
            return refused("full", 409, "Item already rated",
                           f"{settings.raters_per_item} other clinicians rated this response while you were reading "
                           "it, as many as it needs. Your rating was not saved; open the next item.",
                           "Open the next response to rate", item)
        console.audit(identity, "console.rating.submit", outcome="success" if outcome == "saved" else outcome,
                      role="clinician", run_id=item.run_id, benchmark=item.benchmark, position=item.position)
        return RedirectResponse("/rate?saved=1", status_code=303)

    return await run_in_threadpool(save)


def routes() -> list[Route]:
    return [Route("/rate", rate), Route("/rate", submit, methods=["POST"])]
