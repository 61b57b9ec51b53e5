"""The dashboard's actions (POST): sign in and out, and what an operator does to a queue. Each is
a plain form post checked against CSRF, allowed by the same Action as its API operation, one
JobQueues call, and a 303 back to the page it came from (so it works without JS)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.response import Redirect

from echomq_http.api.auth import Action, Unauthorized
from echomq_http.api.http import checked_name, path_queue, queues_of, schedules_of
from echomq_http.api.schemas.schedules import ScheduleRequest
from echomq_http.core.errors import InvalidRequest
from echomq_http.core.queue import JobQueues
from echomq_http.ui.access import SIGN_IN_PATH, Viewer, authenticator_of, sign_in, sign_out, viewer_of
from echomq_http.ui.forms import Form, back_to, checked_form, job_ids, queue_settings
from echomq_http.ui.pages import QUEUE_PAGE, UI
from echomq_http.ui.render import page
from echomq_http.ui.sessions import TooManySignIns


@dataclass(frozen=True, slots=True)
class Acting:
    queue: str
    viewer: Viewer
    form: Form
    queues: JobQueues

    def done(self, default: str, notice: str, count: int | None = None) -> Redirect:
        """See Other: back to the page, saying what was done."""
        target = back_to(self.form, default)
        target += ("&" if "?" in target else "?") + f"notice={notice}"
        if count is not None:
            target += f"&n={count}"
        return Redirect(target, status_code=303)


async def acting(request: Request[Any, Any, State], action: Action) -> Acting:
    """The checks every action makes, in this order: CSRF, the token's role on the queue."""
    queue = path_queue(request)
    form = await checked_form(request)
    viewer = await viewer_of(request)
    viewer.require(action, queue)
    return Acting(queue, viewer, form, queues_of(request))


def queue_url(queue: str, tab: str = "") -> str:
    return f"{UI}/queues/{quote(queue)}" + (f"/{tab}" if tab else "")


def safe_next(value: str) -> str:
    """Only a dashboard path, never another site's ("//evil.example")."""
    return value if value.startswith(UI) and not value.startswith("//") and "\\" not in value else UI


@get(SIGN_IN_PATH, include_in_schema=False)
async def sign_in_page(request: Request[Any, Any, State]) -> Response[Any]:
    if not authenticator_of(request).enabled:
        return Redirect(UI, status_code=303)
    context = {"title": "Sign in", "viewer": None, "feed": None, "error": None}
    context["next"] = safe_next(request.query_params.get("next", UI))
    return page(request, "sign_in.html", context)


@post(SIGN_IN_PATH, include_in_schema=False, status_code=303)
async def sign_in_submit(request: Request[Any, Any, State]) -> Response[Any]:
    form = await checked_form(request)
    target = safe_next(form.text("next") or UI)
    response: Response[Any] = Redirect(target, status_code=303)
    context = {"title": "Sign in", "viewer": None, "feed": None, "next": target}
    try:
        await sign_in(request, response, form.text("token"))
    except Unauthorized:
        context["error"] = "That token is not one this service knows."
        return page(request, "sign_in.html", context, status=401)
    except TooManySignIns as braked:
        wait_s = braked.retry_after_s
        context["error"] = f"Too many failed sign-ins from your address: try again in {wait_s} s."
        refused = page(request, "sign_in.html", context, status=429)
        refused.headers["Retry-After"] = str(wait_s)
        return refused
    return response


@post(UI + "/sign-out", include_in_schema=False, status_code=303)
async def sign_out_submit(request: Request[Any, Any, State]) -> Response[Any]:
    await checked_form(request)
    response: Response[Any] = Redirect(f"{SIGN_IN_PATH}?notice=signed-out", status_code=303)
    await sign_out(request, response)
    return response


@post(QUEUE_PAGE + "/pause", include_in_schema=False, status_code=303)
async def pause(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.ADMIN)
    await act.queues.set_paused(act.queue, True)
    return act.done(queue_url(act.queue), "paused")


@post(QUEUE_PAGE + "/resume", include_in_schema=False, status_code=303)
async def resume(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.ADMIN)
    await act.queues.set_paused(act.queue, False)
    return act.done(queue_url(act.queue), "resumed")


@post(QUEUE_PAGE + "/workers/{worker:str}/release", include_in_schema=False, status_code=303)
async def release_worker(request: Request[Any, Any, State]) -> Redirect:
    """Declare the worker dead: every job it holds goes back to waiting."""
    act = await acting(request, Action.ADMIN)
    worker = checked_name(request.path_params["worker"], "worker")
    released = await act.queues.release_worker(act.queue, worker)
    return act.done(queue_url(act.queue, "workers"), "released", len(released))


@post(QUEUE_PAGE + "/workers/{worker:str}/quiet", include_in_schema=False, status_code=303)
async def quiet_worker(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.ADMIN)
    worker = checked_name(request.path_params["worker"], "worker")
    await act.queues.quiet(act.queue, worker)
    return act.done(queue_url(act.queue, "workers"), "quiet")


@post(QUEUE_PAGE + "/settings", include_in_schema=False, status_code=303)
async def save_settings(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.ADMIN)
    await act.queues.put_settings(act.queue, queue_settings(act.form))
    return act.done(queue_url(act.queue, "settings"), "settings")


@post(QUEUE_PAGE + "/retry", include_in_schema=False, status_code=303)
async def retry_failed(request: Request[Any, Any, State]) -> Redirect:
    """Retry the selected dead letters, or all of them (the redrive operation)."""
    act = await acting(request, Action.ADMIN)
    if act.form.text("all") == "1":
        retried = await act.queues.redrive(act.queue, None)
    else:
        ids = job_ids(act.form)
        if not ids:
            raise InvalidRequest("select at least one job to retry")
        retried = await act.queues.redrive(act.queue, ids)
    return act.done(queue_url(act.queue, "failed"), "retried", len(retried))


@post(QUEUE_PAGE + "/jobs/{id:str}/delete", include_in_schema=False, status_code=303)
async def delete_job(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.ADMIN)
    job_id = checked_name(request.path_params["id"], "job id")
    await act.queues.delete(act.queue, job_id)
    back = back_to(act.form, queue_url(act.queue))
    if f"/jobs/{job_id}" in back:  # the job's own page is gone with it
        back = queue_url(act.queue)
    return Redirect(f"{back}{'&' if '?' in back else '?'}notice=deleted", status_code=303)


@post(QUEUE_PAGE + "/jobs/{id:str}/cancel", include_in_schema=False, status_code=303)
async def cancel_job(request: Request[Any, Any, State]) -> Redirect:
    act = await acting(request, Action.CANCEL)
    job_id = checked_name(request.path_params["id"], "job id")
    await act.queues.cancel(act.queue, job_id, "cancelled from the dashboard")
    return act.done(queue_url(act.queue) + f"/jobs/{quote(job_id)}", "cancelled")


@post(QUEUE_PAGE + "/jobs/{id:str}/promote", include_in_schema=False, status_code=303)
async def promote_job(request: Request[Any, Any, State]) -> Redirect:
    """Run a delayed job now: the API's promote, allowed to who may enqueue."""
    act = await acting(request, Action.ENQUEUE)
    job_id = checked_name(request.path_params["id"], "job id")
    await act.queues.promote(act.queue, job_id)
    return act.done(queue_url(act.queue, "delayed"), "promoted")


SCHEDULE = QUEUE_PAGE + "/schedules/{schedule:str}"


async def schedule_acting(request: Request[Any, Any, State]) -> tuple[Acting, str]:
    """A schedule's actions need what the schedules API needs: the enqueue action."""
    act = await acting(request, Action.ENQUEUE)
    return act, checked_name(request.path_params["schedule"], "schedule")


@post(SCHEDULE + "/trigger", include_in_schema=False, status_code=303)
async def trigger_schedule(request: Request[Any, Any, State]) -> Redirect:
    act, name = await schedule_acting(request)
    await schedules_of(request).trigger(act.queue, name)
    return act.done(queue_url(act.queue, "schedules"), "triggered")


async def _set_schedule_paused(request: Request[Any, Any, State], paused: bool) -> Redirect:
    """Put the schedule again as it is, paused or not (the API's way: PUT with paused)."""
    act, name = await schedule_acting(request)
    schedules = schedules_of(request)
    view = await schedules.get(act.queue, name)
    fields = {field: getattr(view, field) for field in ScheduleRequest.__struct_fields__}
    await schedules.put(act.queue, name, ScheduleRequest(**{**fields, "paused": paused}))
    return act.done(queue_url(act.queue, "schedules"), "schedule-paused" if paused else "schedule-resumed")


@post(SCHEDULE + "/pause", include_in_schema=False, status_code=303)
async def pause_schedule(request: Request[Any, Any, State]) -> Redirect:
    return await _set_schedule_paused(request, True)


@post(SCHEDULE + "/resume", include_in_schema=False, status_code=303)
async def resume_schedule(request: Request[Any, Any, State]) -> Redirect:
    return await _set_schedule_paused(request, False)


@post(SCHEDULE + "/delete", include_in_schema=False, status_code=303)
async def delete_schedule(request: Request[Any, Any, State]) -> Redirect:
    act, name = await schedule_acting(request)
    await schedules_of(request).delete(act.queue, name)
    return act.done(queue_url(act.queue, "schedules"), "schedule-deleted")


ACTION_HANDLERS = [
    trigger_schedule,
    pause_schedule,
    resume_schedule,
    delete_schedule,
    sign_in_page,
    sign_in_submit,
    sign_out_submit,
    pause,
    resume,
    release_worker,
    quiet_worker,
    save_settings,
    retry_failed,
    delete_job,
    cancel_job,
    promote_job,
]
